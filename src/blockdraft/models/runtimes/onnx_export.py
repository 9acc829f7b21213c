"""The ONNX export of a model, made once and cached.

``$BLOCKDRAFT_CACHE/onnx/<key>/`` holds the graphs of :mod:`.onnx_graph` (``body.onnx`` with its
weights in ``body.onnx.data``, ``resblocks.onnx``, ``projection.onnx``, ``own.onnx`` for heads
with their own projections) and ``export.json``: the :class:`~.onnx_graph.GraphSpec`, the
precision, what the key was made of, and each file's size and SHA-256 (sealed, as blockdraft's
other formats are). The key is the digest of everything that changes the graphs: the base's and
the heads' weights (every tensor's bytes), the precision, the graph format version and the
``onnx`` and ``onnxruntime`` versions. The folder is written beside its place and renamed into
it when complete; a folder whose ``export.json`` is missing, malformed or names files of other
sizes is rebuilt.

Public surface:
    export_key(model, precision) -> str
    ensure_export(model, precision, log=None) -> (folder, GraphSpec)   builds when missing
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from blockdraft.core.digest import seal, sha256_arrays, sha256_file, sha256_json, unseal
from blockdraft.core.files import atomic_directory, cache_dir, write_text_atomic
from blockdraft.models.errors import ModelError
from blockdraft.models.runtimes.onnx_graph import (
    GRAPH_VERSION,
    GraphSpec,
    build_graphs,
    graph_spec,
)

FORMAT = "blockdraft-onnx-export"
META = "export.json"


def _versions() -> dict[str, str]:
    import onnx
    import onnxruntime

    return {"onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__,
            "graph_version": str(GRAPH_VERSION)}


def _weights_digest(model: Any) -> str:
    """The SHA-256 of every base and head tensor (names, dtypes, shapes, bytes)."""
    records = []
    for prefix, module in (("base", model.base), ("heads", model.heads)):
        for name, tensor in module.state_dict().items():
            t = tensor.detach().to("cpu").contiguous()
            raw = t.view(-1).view(dtype=__import__("torch").uint8).numpy()
            records.append((f"{prefix}.{name}", str(t.dtype), tuple(t.shape), raw))
    return sha256_arrays(records)


def export_key(model: Any, precision: str) -> str:
    """The cache key of ``model``'s export at ``precision`` (16 hex digits)."""
    config = model.base.config.to_dict()
    return sha256_json({"weights": _weights_digest(model), "precision": precision,
                        "config": json.loads(json.dumps(config, default=str)),
                        "heads": model.heads.extra_repr(), **_versions()})[:16]


def _read_meta(folder: Path) -> dict[str, Any] | None:
    """The export's metadata when the folder is complete and sound, else None."""
    file = folder / META
    try:
        meta = json.loads(file.read_text(encoding="utf-8"))
        files = unseal(meta, file, ModelError)
    except (OSError, ValueError, ModelError):
        return None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or not files:
        return None
    sizes = meta.get("sizes", {})
    for name in files:
        path = folder / name
        if not path.is_file() or path.stat().st_size != sizes.get(name):
            return None
    return meta


def ensure_export(
    model: Any, precision: str, log: Callable[[str], None] | None = None,
    rebuild: bool = False,
) -> tuple[Path, GraphSpec]:
    """The folder holding ``model``'s graphs at ``precision``, built when missing.

    Args:
        model: an :class:`~blockdraft.models.hf.HFBlockwiseModel` (any float dtype).
        precision: ``"float32"`` or ``"int8"``.
        log: called with one line per stage of a build (None: silent).
        rebuild: build even when a complete export is cached (one that failed to load).

    Raises:
        ModelError: an unsupported model or precision (before anything is written).
    """
    spec = graph_spec(model)  # refuses unsupported models before any work
    say = log or (lambda _message: None)
    key = export_key(model, precision)
    folder = cache_dir("onnx", key)
    if not rebuild and _read_meta(folder) is not None:
        return folder, spec
    start = time.perf_counter()
    say(f"exporting {model.config.name} to ONNX ({precision}), once: cached in {folder}")
    graphs = build_graphs(model, precision)
    say(f"  graphs built in {time.perf_counter() - start:.1f} s; writing them")
    import onnx

    folder.parent.mkdir(parents=True, exist_ok=True)
    with atomic_directory(folder) as tmp:
        files: dict[str, str] = {}
        sizes: dict[str, int] = {}
        for name, proto in graphs.items():
            path = tmp / f"{name}.onnx"
            if name == "body":  # the weights beside the graph (protobuf's 2 GB limit)
                onnx.save_model(proto, str(path), save_as_external_data=True,
                                all_tensors_to_one_file=True, location=f"{name}.onnx.data",
                                size_threshold=1024)
            else:
                onnx.save_model(proto, str(path))
        for path in sorted(tmp.iterdir()):
            files[path.name] = sha256_file(path)
            sizes[path.name] = path.stat().st_size
        meta = seal({"format": FORMAT, "precision": precision, "key": key,
                     "model": model.config.name, "spec": spec.to_dict(), "sizes": sizes,
                     **_versions()}, files)
        write_text_atomic(tmp / META, json.dumps(meta, indent=1) + "\n")
    total = sum(sizes.values()) / 2**20
    say(f"  exported {total:.0f} MB in {time.perf_counter() - start:.1f} s")
    return folder, spec


def read_spec(folder: Path) -> GraphSpec:
    """The :class:`GraphSpec` recorded in an export folder.

    Raises:
        ModelError: the folder is not a complete export.
    """
    meta = _read_meta(folder)
    if meta is None:
        raise ModelError(f"{folder} is not a complete ONNX export (delete it to rebuild)")
    return GraphSpec(**meta["spec"])
