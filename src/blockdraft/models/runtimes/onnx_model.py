"""`OrtBlockwiseModel`: a Hugging Face model with its heads, run by ONNX Runtime.

The same model protocol as :class:`~blockdraft.models.hf.HFBlockwiseModel`
(:class:`~blockdraft.models.FactoredHeadsModel`: ``hidden``, ``head_states``, ``project``, and
``heads_logits`` composed from them), so the verifier, the decode loop, tree verification,
``greedy_generate``, traces and every criterion run on it unchanged. Behind it:

- the graphs of :mod:`.onnx_graph` and :mod:`.onnx_head_graphs`, exported once
  (:mod:`.onnx_export`) and run by ONNX Runtime sessions (:mod:`.onnx_store`: the decoder, the
  vocabulary projection, and the heads' graphs, e.g. the next step's lattice slots of Medusa
  heads, ResBlocks, the projection onto the heads' shortlist and the top-k in one graph,
  :meth:`head_topk`), whose constant weights ORT pre-packs when the session starts;
- the key/value cache in pre-allocated buffers (:mod:`.kv_buffer`) that the decoder session
  reads and writes in place through IO binding: a forward copies no cache, and a verification
  keeps its accepted path by moving ``1 + n`` rows.

**Chunk invariance.** ONNX Runtime's ``GroupQueryAttention`` takes a separate code path for a
single new token; every other kernel here gives a row the same bits whatever the other rows of
its call. A one-token forward is therefore run as two rows (the token and a copy of it one
position later, whose cache row lies past the cache's length and is overwritten by the next
forward). With that, a token's logits are bit-identical whether it is decoded alone (the greedy
reference) or inside a chunk of draft tokens, in float32, int8 and q4 alike
(``chunk_invariant = True``; tested). A token tree whose nodes are not one chain reads its
ancestors' keys at other rows than a chain would, which can change the last bits of a sum
(like any runtime's batched or tree forward: lossless up to float rounding; measured, see the
README).

The heads are the wrapped model's kind of heads over the sessions of their graphs
(:mod:`.onnx_heads`: their rule, :mod:`blockdraft.models.heads`, is the PyTorch adapter's; every
forward hands it the final hidden states, which an EAGLE draft layer of fusion ``"top"`` reads,
and the verifier hands it each accepted path, ``accept_path``); what
the runtime shares with the wrapped model (sizes, tokenizer, drafting recipe, heads digest,
capabilities) is one record (:class:`~.wrapped.Shared`); a forward's inputs are one checked
:class:`~blockdraft.models.step.Step`.

Public surface:
    OrtBlockwiseModel(model, precision="float32", threads=None, log=None, pad_single=True,
                      gguf=None)
        the same attributes and methods as HFBlockwiseModel (h, device, max_seq_len, config,
        tokenizer, hidden, head_states, project, heads_logits, head_topk, expander,
        conditional_heads, heads_digest, drafting, capabilities), plus runtime, precision,
        threads, chunk_invariant, export_folder
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from blockdraft.models.errors import ModelError
from blockdraft.models.heads import HeadsRule, rule_class
from blockdraft.models.runtimes.kv_buffer import BufferCache, KVBuffer
from blockdraft.models.runtimes.onnx_export import ensure_export, nan_error
from blockdraft.models.runtimes.onnx_graph import EXTRA_ROWS
from blockdraft.models.runtimes.onnx_heads import ORT_BACKENDS
from blockdraft.models.runtimes.onnx_store import open_session
from blockdraft.models.runtimes.wrapped import RuntimeModel, Shared
from blockdraft.models.step import Step, check_step


class OrtBlockwiseModel(RuntimeModel):
    """A Hugging Face causal LM with its heads on ONNX Runtime (see the module docstring).

    Args:
        model: an :class:`~blockdraft.models.hf.HFBlockwiseModel` (its weights are exported
            once; it is not kept).
        precision: ``"float32"``, ``"int8"`` (per-row int8 activations, per-channel int8
            weights, float32 vocabulary projections: :mod:`.onnx_graph`) or ``"q4"`` (the
            decoder and the base head on the GGUF file's own Q4_1 and Q8_0 blocks, int8
            activations: :mod:`.onnx_blocks`). The heads' graphs (every kind's) are in the
            heads' ``draft_precision`` (float32 by default, ``int8`` or ``q4``:
            :mod:`.onnx_quantize`) whatever ``precision`` is (they draft; the base decides what
            is accepted); a draft precision other than float32 is part of ``heads_digest``
            (other weights draft other lattices: a trace records it).
        threads: ONNX Runtime's intra-op threads (default: torch's current thread count).
        log: called with a line per stage of a first export (None: silent).
        pad_single: run a one-token forward as two rows (default), so that every forward is
            bit-identical per token whatever its length (``chunk_invariant``); False runs it
            alone through the single-token kernel: about 10% faster greedy steps, but a
            decode is then lossless only up to float rounding (for speed comparisons).
        gguf: in ``q4``, the GGUF file the model was loaded from (default: the one its
            folder was dequantised from, when it was loaded from a GGUF file or a known name).

    Raises:
        ModelError: an architecture or precision the runtime does not build, heads it does
            not run (an EAGLE draft layer of fusion ``"layers"``), an export ONNX Runtime
            cannot load; in ``q4``, a model that was not loaded from a GGUF file
            (without ``gguf``), or a GGUF file whose blocks have no exact mapping.
    """

    kind: ClassVar[str] = "hf-medusa-onnxruntime"
    runtime: ClassVar[str] = "onnxruntime"

    def __init__(self, model: Any, precision: str = "float32", threads: int | None = None,
                 log: Callable[[str], None] | None = None, pad_single: bool = True,
                 gguf: str | os.PathLike[str] | None = None) -> None:
        self.pad_single = bool(pad_single)
        self.threads = int(threads) if threads else max(torch.get_num_threads(), 1)
        backend = ORT_BACKENDS.get(str(model.heads.kind))
        if backend is not None:  # heads this runtime cannot run: refused before the export
            backend.check(model)
        blocks = _gguf_of(model, gguf) if precision == "q4" else None
        self.export_folder, self.spec = ensure_export(model, precision, log, gguf=blocks)
        try:
            heads = self._open_sessions(model)
        except ModelError:  # a cached export ONNX Runtime cannot read: export it again, once
            self.export_folder, self.spec = ensure_export(model, precision, log, rebuild=True,
                                                          gguf=blocks)
            heads = self._open_sessions(model)
        shared = Shared.of(model, config=dataclasses.replace(model.config, dtype=precision),
                           runtime=self.runtime, precision=precision,
                           exact_trees=precision == "float32", device="cpu")
        draft = model.heads.draft_precision  # checked by the export (head_graphs)
        if draft != "float32":  # other weights, other drafts: a trace tells them apart
            shared = dataclasses.replace(shared, heads_digest=hashlib.sha256(
                f"{shared.heads_digest}|draft_precision={draft}".encode()).hexdigest()[:16])
        super().__init__(shared, heads)
        self._buffer = KVBuffer(self.spec.n_layer, self.spec.n_kv_head, self.spec.head_dim,
                                capacity=256)
        self._binding = self._body.io_binding()
        self._bound_storage: Any = None
        # the hidden states' output, bound by address to rows of one reused buffer: reading it
        # back costs no OrtValue per output (get_outputs wraps all 61 bound outputs, ~0.2 ms)
        self._hidden = np.empty((0, self.spec.d_model), np.float32)

    def _open_sessions(self, model: Any) -> HeadsRule:
        """Open the decoder's session and the heads' (their rule over them)."""
        folder = self.export_folder

        def session(name: str) -> Any:
            return open_session(folder / f"{name}.onnx", self.threads,
                                advice=f"delete {folder} to export the model again")

        self._body = session("body")
        backend = ORT_BACKENDS[self.spec.heads](session, self.spec, model, self._finite)
        return rule_class(self.spec.heads)(backend)

    @property
    def chunk_invariant(self) -> bool:
        """Whether a token's logits are bit-identical in a forward of any length (one-token
        forwards run as two rows)."""
        return self.pad_single

    @property
    def exact_trees(self) -> bool:
        """Whether a token tree (not a chain) verifies losslessly (declared in
        :attr:`capabilities`): in float32 up to float rounding, as on any runtime; not in
        int8 or q4, whose rounding of activations to integers turns the last-bit differences
        of a tree's attention sums into different tokens (int8, measured: 3 of 12 benchmark
        answers equal to int8 greedy's with two drafts a step, 12 of 12 with one; q4: an argmax
        flipped in about 1% of random tree rows), so the verifier refuses a tree with the exact
        criterion there."""
        return self.capabilities.exact_trees

    @property
    def device(self) -> torch.device:
        """Where inputs and outputs live (ONNX Runtime's CPU provider)."""
        return torch.device("cpu")

    def __repr__(self) -> str:
        return (f"OrtBlockwiseModel({self.config.name!r}, precision={self.precision!r}, "
                f"h={self.h}, threads={self.threads})")

    # ---- the decoder ------------------------------------------------------------------------

    def _bind_buffers(self) -> None:
        """Bind every layer's key and value buffer as both past and present (by address)."""
        buf, io = self._buffer, self._binding
        shape = [1, self.spec.n_kv_head, buf.capacity, self.spec.head_dim]
        for i in range(self.spec.n_layer):
            for kind, tensor in (("key", buf.keys(i)), ("value", buf.values(i))):
                for direction in ("past", "present"):
                    bind = io.bind_input if direction == "past" else io.bind_output
                    bind(f"{direction}_{kind}.{i}", "cpu", 0, np.float32, shape,
                         tensor.data_ptr())
        self._bound_storage = buf.storage

    def hidden(
        self,
        input_ids: torch.Tensor,
        past: BufferCache | None = None,
        position_ids: Any = None,
        tree_mask: Any = None,
    ) -> tuple[torch.Tensor, BufferCache]:
        """The final hidden states of ``T`` new tokens (after the final norm).

        Args:
            input_ids: int ``[1, T]`` token ids after the ``past`` positions.
            past: the cache of the preceding positions (from this model), or None.
            position_ids: ``[T]`` or ``[1, T]`` positions (default ``past.length + arange(T)``;
                a token tree passes ``past.length + depths``).
            tree_mask: bool ``[T, T]``, which new tokens each new token attends to (a token
                tree's ancestor mask, parents before children); default causal.

        Returns:
            ``x`` float32 ``[1, T, d]`` and the cache of ``past.length + T`` positions.

        Raises:
            ModelError: bad ids, more than one row, a cache from elsewhere or overwritten
                since it was made, a sequence longer than the model's context.
        """
        step = check_step(input_ids, past, position_ids, tree_mask, cache=BufferCache,
                          vocab_size=self.config.vocab_size, device=self.device,
                          max_seq_len=self.max_seq_len, one_row="the ONNX Runtime model")
        t = step.length
        if t == 1 and self.pad_single:  # two rows: the one-token kernel is not chunk-invariant
            position = int(step.positions[0, 0])
            copy = min(position + 1, self.spec.max_positions - 1)  # one position later
            step = dataclasses.replace(step, ids=step.ids.repeat(1, 2), tree_mask=None,
                                       positions=torch.tensor([[position, copy]]),
                                       span=max(position, copy) + 1)
        x = torch.from_numpy(self._run_body(step)[:t])[None]  # (1, T, d)
        self.heads_rule.saw(x)  # a draft layer reads its features (fusion "top": x itself)
        return x, BufferCache(self._buffer, step.t_past + t, self._buffer.epoch)

    def _run_body(self, step: Step) -> np.ndarray:
        """One decoder forward of the step's tokens at rows ``t_past ..`` of the buffers ->
        ``[T, d]``."""
        buf, io = self._buffer, self._binding
        if step.past is not None:
            buf.check(step.past)
        t, t_past = step.length, step.t_past
        if t_past + t > self.spec.max_positions + EXTRA_ROWS:
            raise ModelError(f"a forward of {t} tokens after {t_past} cached ones needs "
                             f"{t_past + t} rows; this model holds at most "
                             f"{self.spec.max_positions + EXTRA_ROWS}")
        buf.reserve(t_past + t, keep=t_past)
        if buf.storage is not self._bound_storage:
            self._bind_buffers()
        buf.begin_write(t_past)
        total = t_past + t
        io.bind_cpu_input("input_ids", np.ascontiguousarray(step.ids[0].numpy()))
        io.bind_cpu_input("position_ids", np.ascontiguousarray(step.positions.numpy()))
        io.bind_cpu_input("attention_bias", step.bias(
            torch.float32, window=self.spec.sliding_window).numpy())
        io.bind_cpu_input("seqlens_k", np.array([total - 1], dtype=np.int32))
        io.bind_cpu_input("total_sequence_length", np.array(total, dtype=np.int32))
        if self._hidden.shape[0] < t:
            self._hidden = np.empty((max(t, 2 * self._hidden.shape[0], 64), self.spec.d_model),
                                    np.float32)
        io.bind_output("hidden", "cpu", 0, np.float32, [t, self.spec.d_model],
                       self._hidden.ctypes.data)
        self._body.run_with_iobinding(io)
        return self._finite(self._hidden[:t].copy())  # the buffer is the next forward's

    def _finite(self, out: np.ndarray) -> np.ndarray:
        """``out``, unless it holds NaN (a damaged export, or weights that give NaN): then a
        ModelError naming this runtime and its cache (``nan_error``). One sum: microseconds."""
        if np.isnan(out.sum()):
            raise nan_error(f"ONNX Runtime ({self.precision})", self.export_folder)
        return out


def _gguf_of(model: Any, gguf: str | os.PathLike[str] | None) -> Path:
    """The GGUF file of a ``q4`` export: ``gguf``, or the file ``model``'s folder was
    dequantised from.

    Raises:
        ModelError: neither (naming the model's folder and what to pass).
    """
    if gguf is not None:
        return Path(gguf)
    from blockdraft.models.hf.loading import source_gguf

    found = source_gguf(model.config.name)
    if found is None:
        raise ModelError(
            f"precision 'q4' runs the GGUF file's own 4-bit blocks, and the model "
            f"{model.config.name!r} was not loaded from a GGUF file (or that file has moved or "
            "changed since): pass gguf=PATH, the .gguf file it was loaded from, load it from "
            "that file (load_model('model.gguf', heads=..., runtime='onnxruntime', "
            "precision='q4')), or use precision 'int8'")
    return found
