"""Where a model's forward runs: a plug-in behind the model protocol.

The verifier, the decode loop, traces and the CLI see a model only through the protocol of
:mod:`blockdraft.models.protocol`; a runtime decides how its forward is computed. Adding one
(llama.cpp, a GPU server) is a new module here and an entry in :data:`RUNTIMES`, never a branch
in the verifier. A runtime takes one checked step record per forward
(:class:`~blockdraft.models.step.Step`: ids, positions, the tree's mask or bias, the rows it
writes), computes the heads through the heads' rule over its own backend
(:mod:`blockdraft.models.heads`; ONNX Runtime's: :mod:`.onnx_heads`), and shares the rest with
the model it wraps through one record (:mod:`.wrapped`). ONNX Runtime's sessions and the sealed
export cache are one module for every model blockdraft exports (:mod:`.onnx_store`).

    torch          PyTorch eager: the model as loaded (float32, bfloat16 or float16)
    onnxruntime    ONNX Runtime on the CPU (:class:`OrtBlockwiseModel`): the model exported
                   once, weights pre-packed, the cache in buffers bound in place; float32,
                   int8 (per-row activations, chunk-invariant) or q4 (a GGUF file's own 4- and
                   8-bit blocks through MatMulNBits)
    static         transformers' own forward on a static KV cache (:class:`StaticKVModel`):
                   buffers preallocated once, positions and the token-tree mask as inputs,
                   accepted rows moved within the buffer; float32 or bfloat16, on any device;
                   on a CUDA device one graph captured per bucket of new tokens (1 .. 64);
                   with ``device_steps`` a whole decode step on the device, one graph each
                   (:mod:`.device_step`: a static draft tree, :mod:`.device_tree`; its
                   verdict, :mod:`.device_accept`; its drafts, :mod:`.device_drafts`; the
                   strategies, :mod:`.device_drafters`: the rated tree, :mod:`.device_rates`,
                   with an n-gram LM's evidence, :mod:`.device_ngram`; prompt lookup)

A draft layer's heads (kind ``"draft-layer"``) run on every runtime: PyTorch eager; ONNX
Runtime (its ``draft_layer`` graph, :mod:`.onnx_eagle_graph`, fed the body's final hidden
states; fusion ``"top"`` only, a fused layer of ``"layers"`` is refused by name); the static
runtime (its forward hands the rule the final hidden states and the fused decoder layers'
outputs, both fusions; the layer runs eagerly on the model's device, in its dtype). On ONNX
Runtime every kind's heads run in their ``draft_precision`` (float32, int8 or q4 weights,
:mod:`.onnx_quantize`), whatever the base's precision: they draft, the base verifies.

Public surface:
    RUNTIMES, PRECISIONS                      the names, and the precisions each runtime takes
    REFUSED_HEADS                             runtime -> head kinds it does not take yet
    TORCH_ONLY_HEADS                          head kinds with a PyTorch backend only (none)
    on_runtime(model, runtime, precision, threads=None, log=None, gguf=None) -> model
    OrtBlockwiseModel, StaticKVModel, KVBuffer, BufferCache
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from blockdraft.models.errors import ModelError

RUNTIMES = ("torch", "onnxruntime", "static")
PRECISIONS: dict[str, tuple[str, ...]] = {
    "torch": ("float32", "bfloat16", "float16"),
    "onnxruntime": ("float32", "int8", "q4"),
    "static": ("float32", "bfloat16"),
}
"""The precisions each runtime computes in (torch's and static's are the parameters' dtype)."""
REFUSED_HEADS: dict[str, tuple[str, ...]] = {}
"""Head kinds a runtime does not take yet (runtime -> kinds): none now (the static runtime took
the EAGLE draft layer in issue 40; what a runtime refuses of a kind's variants, ONNX Runtime a
fused layer, its backend refuses by name)."""
TORCH_ONLY_HEADS: tuple[str, ...] = ()
"""Head kinds with a PyTorch backend only: none (every kind has ONNX graphs and an ONNX Runtime
backend; kept for its importers). What a runtime refuses is :data:`REFUSED_HEADS`."""


def check_runtime(runtime: str, precision: str) -> None:
    """Refuse an unknown runtime or a precision it does not compute in.

    Raises:
        ModelError: naming the runtime or precision and what exists.
    """
    if runtime not in RUNTIMES:
        raise ModelError(f"unknown runtime {runtime!r}; known: {', '.join(RUNTIMES)}")
    if precision not in PRECISIONS[runtime]:
        others = [r for r in RUNTIMES if precision in PRECISIONS[r]]
        hint = f" (precision {precision!r} needs runtime {others[0]!r})" if others else ""
        raise ModelError(
            f"runtime {runtime!r} computes in {', '.join(PRECISIONS[runtime])}, not "
            f"{precision!r}{hint}")


def on_runtime(model: Any, runtime: str, precision: str, threads: int | None = None,
               log: Callable[[str], None] | None = None,
               gguf: str | os.PathLike[str] | None = None) -> Any:
    """``model`` (a loaded :class:`~blockdraft.models.hf.HFBlockwiseModel`) on ``runtime``.

    ``torch`` returns the model itself (its dtype is set when it is loaded); ``onnxruntime``
    exports it once (cached) and returns an :class:`OrtBlockwiseModel`; ``static`` wraps it
    as a :class:`StaticKVModel` (on the model's device, in its dtype, which must be
    ``precision``; ``threads`` is torch's, set by the loader). Precision ``q4`` builds the
    ONNX graphs from the GGUF file ``gguf`` the model was loaded from (default: the file its
    folder was dequantised from).

    Raises:
        ModelError: an unknown runtime, a precision it does not take, or a model it cannot
            run (the message says which ones it can).
    """
    check_runtime(runtime, precision)
    if runtime == "torch":
        return model
    from blockdraft.models.capabilities import capabilities_of

    kind = capabilities_of(model).heads
    if kind in REFUSED_HEADS.get(runtime, ()):
        takes = [r for r in RUNTIMES if kind not in REFUSED_HEADS.get(r, ())]
        raise ModelError(f"heads of kind {kind!r} do not run on runtime {runtime!r} yet: load "
                         f"the model with runtime={' or '.join(repr(r) for r in takes)}")
    if runtime == "static":
        from blockdraft.models.runtimes.static import StaticKVModel

        dtype = getattr(getattr(model, "config", None), "dtype", None)
        if dtype is not None and dtype != precision:
            raise ModelError(f"runtime 'static' computes in the model's dtype ({dtype}), not "
                             f"{precision!r}: load the model with dtype={precision!r}")
        return StaticKVModel(model)
    from blockdraft.core.extras import import_optional
    from blockdraft.models.hf.adapter import HFBlockwiseModel

    import_optional("onnxruntime", "onnx", "the ONNX Runtime model", ModelError)
    import_optional("onnx", "onnx", "the ONNX Runtime model", ModelError)
    if not isinstance(model, HFBlockwiseModel):
        raise ModelError(
            f"runtime 'onnxruntime' runs Hugging Face models with Medusa heads; "
            f"{type(model).__name__} runs on runtime 'torch'")
    from blockdraft.models.runtimes.onnx_model import OrtBlockwiseModel

    return OrtBlockwiseModel(model, precision=precision, threads=threads, log=log, gguf=gguf)


def __getattr__(name: str) -> Any:  # the ONNX classes import onnxruntime only when used
    if name == "OrtBlockwiseModel":
        from blockdraft.models.runtimes.onnx_model import OrtBlockwiseModel

        return OrtBlockwiseModel
    if name == "StaticKVModel":
        from blockdraft.models.runtimes.static import StaticKVModel

        return StaticKVModel
    if name in ("KVBuffer", "BufferCache"):
        from blockdraft.models.runtimes import kv_buffer

        return getattr(kv_buffer, name)
    raise AttributeError(name)
