"""The ONNX export of a model with its heads, made once and cached, and checked every time it is
served.

``$BLOCKDRAFT_CACHE/onnx/<key>/`` holds the graphs (:func:`build_graphs`: the decoder and the
base head of :mod:`.onnx_graph`, the heads' graphs of their kind, :mod:`.onnx_head_graphs`;
``body.onnx`` with its weights in ``body.onnx.data``) and ``export.json``: the
:class:`~.onnx_graph.GraphSpec`, the precision, what the key was made of, and each file's size,
modification time, SHA-256 and the digests of its 1 MiB blocks (the sealed record every ONNX
export of blockdraft keeps, :mod:`.onnx_store`). The key is the digest of everything that
changes the graphs: the base's and the heads' weights (every tensor's bytes), the model's
configuration (without transformers' bookkeeping, such as the folder it was loaded from: a
copied cache is found under the same key), the heads' description (their ``extra_repr``: e.g.
a shortlist's digest, an EAGLE draft layer's ``draft_precision`` other than float32, so each
precision of the layer is an export of its own), the precision (in ``q4`` also the SHA-256 of
the GGUF file whose blocks the graphs hold, :mod:`.onnx_blocks`), the graph format version and
the ``onnx`` and ``onnxruntime`` versions. The folder is written beside its place and renamed into
it when complete.

**What a load checks** (:func:`export_problem`, :mod:`.onnx_store`'s rules, the checks every
blockdraft cache shares: :func:`blockdraft.core.digest.check_recorded_files`): the sealed
``export.json``, every file's
size, the full SHA-256 of a file whose modification time is not the recorded one (something
wrote into it, or the folder was copied: a copy's times are then recorded again), and 16 MiB
of 1 MiB blocks drawn at random over all files against their block digests. On this 2-core
machine (AMD EPYC, one thread, SHA-256 at ~0.95 GB/s) that costs about 20 ms a load for
SmolLM2's 650 MB export, against ~0.7 s to hash it all (and the 1-2 s ONNX Runtime takes to
pre-pack the weights): an edit of the files is always caught, damage that kept both size and
time (bit rot) with a probability that grows with every load (a 32 MB damaged stretch: about
half the loads each). After ONNX Runtime fails to load an export, or when a forward returns NaN
logits, every file is hashed in full (:func:`export_problem` with ``deep=True``).

A damaged export (a changed, missing or truncated file, a damaged or older ``export.json``) is
exported again, with one :class:`~blockdraft.core.errors.BlockdraftWarning` saying what was
wrong (``blockdraft: warning: ...`` on the command line); a cache that cannot be written is
refused before the slow build, naming the folder and what to do.

Public surface:
    build_graphs(model, precision, gguf=None) -> {name: onnx.ModelProto}   the body,
        projections, heads
    export_key(model, precision, gguf=None) -> str
    ensure_export(model, precision, log=None, rebuild=False, gguf=None) -> (folder, GraphSpec)
        builds when missing or damaged
    export_problem(folder, deep=False) -> str | None     what is wrong with an export folder
    nan_error(runtime, folder) -> ModelError   a forward's NaN logits, named with its cache
    read_spec(folder) -> GraphSpec
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from blockdraft.core.digest import sha256_arrays, sha256_file, sha256_json
from blockdraft.core.files import atomic_directory, cache_dir, writable_cache_dir, write_advice
from blockdraft.models.errors import ModelError
from blockdraft.models.runtimes.onnx_graph import (
    GRAPH_VERSION,
    PRECISIONS,
    GraphSpec,
    bias_of,
    body_graph,
    graph_spec,
    projection_graph,
)
from blockdraft.models.runtimes.onnx_head_graphs import head_graphs
from blockdraft.models.runtimes.onnx_store import (
    FORMAT,
    FORMAT_VERSION,
    META,
    SAMPLE_BYTES,
    read_record,
    rebuild_warning,
    seal_export,
    versions,
)
from blockdraft.models.runtimes.onnx_store import export_problem as _export_problem

__all__ = ["FORMAT", "FORMAT_VERSION", "META", "SAMPLE_BYTES", "build_graphs", "ensure_export",
           "export_key", "export_problem", "nan_error", "read_spec"]

def _versions() -> dict[str, str]:
    return {**versions(), "graph_version": str(GRAPH_VERSION)}


def build_graphs(model: Any, precision: str = "float32",
                 gguf: str | Path | None = None) -> dict[str, Any]:
    """The graphs of an :class:`~blockdraft.models.hf.HFBlockwiseModel`: ``"body"`` and
    ``"projection"`` (:mod:`.onnx_graph`; in ``q4`` from the GGUF file's blocks,
    :mod:`.onnx_blocks`) and its heads' (:func:`~.onnx_head_graphs.head_graphs`, by their
    kind; float32 in ``q4``, an EAGLE draft layer in its own ``draft_precision``)
    -> ``onnx.ModelProto``.

    Args:
        model: the model, float32 or any float dtype (weights are read as float32).
        precision: ``"float32"``, ``"int8"`` or ``"q4"``.
        gguf: in ``q4``, the GGUF file the model was loaded from (required).

    Raises:
        ModelError: an unsupported architecture or precision; in ``q4`` no GGUF file, or one
            that is damaged, holds blocks without an exact mapping, or is not the model's
            (:func:`~.onnx_blocks.gguf_linears`).
    """
    if precision not in PRECISIONS:
        raise ModelError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    spec = graph_spec(model)
    if precision != "q4":
        return {"body": body_graph(spec, model.base, precision),
                "projection": projection_graph(spec, model.lm_head),
                **head_graphs(spec, model, precision)}
    from blockdraft.models.runtimes.onnx_blocks import block_projection_graph, gguf_linears

    linears = gguf_linears(_required_gguf(gguf), spec, model)
    return {"body": body_graph(spec, model.base, precision, linears),
            "projection": block_projection_graph(spec, linears.head, bias_of(model.lm_head)),
            **head_graphs(spec, model, "float32")}


def _required_gguf(gguf: str | Path | None) -> Path:
    """The GGUF file of a ``q4`` export (a ModelError without one)."""
    if gguf is None:
        raise ModelError("precision 'q4' is built from the model's GGUF file: pass gguf=PATH, "
                         "the .gguf file the model was loaded from")
    return Path(gguf)


def _weights_digest(model: Any) -> str:
    """The SHA-256 of every base and head tensor (names, dtypes, shapes, bytes)."""
    import torch

    records = []
    for prefix, module in (("base", model.base), ("heads", model.heads)):
        for name, tensor in module.state_dict().items():
            t = tensor.detach().to("cpu").contiguous()
            raw = t.view(-1).view(dtype=torch.uint8).numpy()
            records.append((f"{prefix}.{name}", str(t.dtype), tuple(t.shape), raw))
    return sha256_arrays(records)


def export_key(model: Any, precision: str, gguf: str | Path | None = None) -> str:
    """The cache key of ``model``'s export at ``precision`` (16 hex digits; in ``q4`` with the
    SHA-256 of its GGUF file ``gguf``; with the heads' description, which names an EAGLE
    layer's draft precision); it does not depend on where the model, the GGUF file or the
    cache lies (transformers' ``_name_or_path`` and its other ``_``-prefixed bookkeeping
    are left out of the configuration)."""
    config = {k: v for k, v in model.base.config.to_dict().items() if not k.startswith("_")}
    blocks = {"gguf": _gguf_digest(_required_gguf(gguf))} if precision == "q4" else {}
    return sha256_json({"weights": _weights_digest(model), "precision": precision,
                        "config": json.loads(json.dumps(config, default=str)),
                        "heads": model.heads.extra_repr(), **blocks, **_versions()})[:16]


def _gguf_digest(gguf: Path) -> str:
    """The SHA-256 of a GGUF file (a ModelError naming it when it cannot be read)."""
    try:
        return sha256_file(gguf)
    except OSError as e:
        raise ModelError(f"cannot read the GGUF file {gguf}: {e.strerror or e}") from e


def export_problem(folder: str | Path, deep: bool = False) -> str | None:
    """What is wrong with an export folder, or None when it holds what was exported
    (:func:`.onnx_store.export_problem` on its ``export.json``, with this module's
    :data:`SAMPLE_BYTES`).

    Args:
        folder: the export folder (it must exist).
        deep: hash every file in full (after a failed load, or NaN logits), not only those
            whose time changed and a sample of blocks.

    Returns:
        None, or one sentence naming the file and what differs.
    """
    return _export_problem(folder, META, deep=deep, sample_bytes=SAMPLE_BYTES)


def ensure_export(
    model: Any, precision: str, log: Callable[[str], None] | None = None,
    rebuild: bool = False, gguf: str | Path | None = None,
) -> tuple[Path, GraphSpec]:
    """The folder holding ``model``'s graphs at ``precision``, checked (see the module
    docstring); built when missing, and built again, with a warning, when damaged.

    Args:
        model: an :class:`~blockdraft.models.hf.HFBlockwiseModel` (any float dtype).
        precision: ``"float32"``, ``"int8"`` or ``"q4"``.
        log: called with one line per stage of a build (None: silent).
        rebuild: the cached export failed to load: hash it in full to say why, and build it
            again.
        gguf: in ``q4``, the GGUF file the model was loaded from (its blocks are the graphs'
            weights; its digest is part of the key).

    Raises:
        ModelError: an unsupported model or precision (before anything is written); a cache
            that cannot be written (before the graphs are built).
    """
    spec = graph_spec(model)  # refuses unsupported models before any work
    say = log or (lambda _message: None)
    key = export_key(model, precision, gguf)
    folder = cache_dir("onnx", key)
    if folder.is_dir():
        problem = export_problem(folder, deep=rebuild)
        if problem is None and not rebuild:
            return folder, spec
        rebuild_warning(problem or f"ONNX Runtime could not load the export {folder}")
    writable_cache_dir("onnx", error=ModelError, what="the ONNX export")
    start = time.perf_counter()
    say(f"exporting {model.config.name} to ONNX ({precision}), once: cached in {folder}")
    graphs = build_graphs(model, precision, gguf)
    say(f"  graphs built in {time.perf_counter() - start:.1f} s; writing them")
    import onnx

    try:
        with atomic_directory(folder) as tmp:
            for name, proto in graphs.items():
                path = tmp / f"{name}.onnx"
                if name == "body":  # the weights beside the graph (protobuf's 2 GB limit)
                    onnx.save_model(proto, str(path), save_as_external_data=True,
                                    all_tensors_to_one_file=True,
                                    location=f"{name}.onnx.data", size_threshold=1024)
                else:
                    onnx.save_model(proto, str(path))
            records = seal_export(
                tmp, [path.name for path in tmp.iterdir()],
                {"precision": precision, "key": key, "model": model.config.name,
                 **({"gguf": str(gguf)} if precision == "q4" else {}),
                 "spec": spec.to_dict(), **_versions()})
    except OSError as e:
        raise ModelError(f"cannot write the ONNX export {folder} ({e.strerror or e}): "
                         f"{write_advice(e)}") from e
    total = sum(r["size"] for r in records.values()) / 2**20
    say(f"  exported {total:.0f} MB in {time.perf_counter() - start:.1f} s")
    return folder, spec


def nan_error(runtime: str, folder: Path) -> ModelError:
    """The error of a forward whose logits hold NaN, on ``runtime`` (``"ONNX Runtime
    (int8)"``) with the export in ``folder``: the export is hashed in full; a damaged one is
    removed, so the next load exports it again.
    """
    problem = export_problem(folder, deep=True) if folder.is_dir() else None
    if problem is not None:
        shutil.rmtree(folder, ignore_errors=True)
        return ModelError(f"{runtime} returned NaN logits: its export cache is damaged "
                          f"({problem}); it was removed, so the next run exports the model "
                          "again: run the command again")
    return ModelError(f"{runtime} returned NaN logits, and its export cache {folder} matches "
                      "its digests: the model's own weights give NaN (check them on --runtime "
                      "torch), or delete that folder to export the model again")


def read_spec(folder: Path) -> GraphSpec:
    """The :class:`GraphSpec` recorded in an export folder.

    Raises:
        ModelError: the folder is not a complete export.
    """
    meta = read_record(folder)
    if isinstance(meta, str):
        raise ModelError(f"{folder} is not a complete ONNX export ({meta}); delete it to "
                         "rebuild")
    return GraphSpec.from_dict(meta["spec"])
