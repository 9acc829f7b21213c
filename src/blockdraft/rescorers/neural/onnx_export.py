"""ONNX export of the rescoring LM: the step graph (:mod:`.onnx_graph`) written to a file or
to bytes, stamped with the weights' fingerprint so an up-to-date file is reused.

A file export is kept under the rules of every ONNX export of blockdraft
(:mod:`blockdraft.models.runtimes.onnx_store`, docs/architecture.md "Integrity"): beside
``rescorer.onnx`` a sealed record, ``rescorer.export.json``, holds the stamp it was made from
(the key: weights, opset, graph format) and the file's size, time and digests. A file is
reused when its record is sound, names the same stamp, and the file is the one recorded (its
size; its SHA-256 when its time changed; a sample of its blocks); a file of other weights, or
one without a record (an older blockdraft's), is exported again, and a damaged one too, with
one warning saying what was wrong.

Public surface:
    export_rescorer_onnx(model, path, opset=18, force=False) -> Path
        write (or reuse) ``path``: the :class:`~blockdraft.models.RescorerLM`'s incremental
        forward as an ONNX graph (the step graph of :mod:`.onnx_graph`), sealed
    export_rescorer_bytes(model, opset=18, fingerprint=None) -> bytes   the same, in memory
    onnx_fingerprint(model) -> str     the weights' SHA-256 stamped into every exported file
    read_fingerprint(path) -> str | None

:mod:`.onnx_runtime` runs an export under ONNX Runtime. onnx imports lazily.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from blockdraft.core.checks import check_int
from blockdraft.core.files import write_bytes_atomic
from blockdraft.models.blockwise import RescorerLM
from blockdraft.models.runtimes.onnx_store import (
    export_problem,
    read_record,
    rebuild_warning,
    record_name,
    seal_export,
    versions,
)
from blockdraft.rescorers.base import RescorerError
from blockdraft.rescorers.neural.onnx_graph import (
    DEFAULT_OPSET,
    FINGERPRINT_KEY,
    GRAPH_FORMAT,
    INSTALL_HINT,
    MIN_OPSET,
    step_graph,
)

ONNX_FILE = "rescorer.onnx"
"""File name of the exported graph inside a model directory."""

__all__ = [
    "DEFAULT_OPSET",
    "GRAPH_FORMAT",
    "MIN_OPSET",
    "ONNX_FILE",
    "export_rescorer_bytes",
    "export_rescorer_onnx",
    "onnx_fingerprint",
    "read_fingerprint",
]


def onnx_fingerprint(model: RescorerLM) -> str:
    """Hex SHA-256 of the model's config and weights (stamped into the exported file's
    metadata, so a stale export of other weights is detected and redone)."""
    digest = hashlib.sha256(repr(sorted(model.config.to_dict().items())).encode())
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return digest.hexdigest()


def _stamp_of(model: RescorerLM, opset: int) -> str:
    return f"{onnx_fingerprint(model)}/opset{opset}/{GRAPH_FORMAT}"


def read_fingerprint(path: str | Path) -> str | None:
    """The fingerprint stamped into an exported file, or None (missing, unreadable, unstamped)."""
    try:
        import onnx

        proto = onnx.load(str(path), load_external_data=False)
    except ImportError as e:
        raise RescorerError(f"the ONNX backend needs the onnx package: {INSTALL_HINT}") from e
    except Exception:  # noqa: BLE001 - any unreadable file is simply re-exported
        return None
    for entry in proto.metadata_props:
        if entry.key == FINGERPRINT_KEY:
            return str(entry.value)
    return None


def export_rescorer_onnx(
    model: RescorerLM,
    path: str | Path,
    opset: int = DEFAULT_OPSET,
    force: bool = False,
) -> Path:
    """Export ``model``'s incremental forward to ONNX (the step graph of :mod:`.onnx_graph`).

    Args:
        model: the rescoring LM (``h = 1``).
        path: the ``.onnx`` file to write, or a directory (then ``directory/rescorer.onnx``;
            a model directory of :func:`~blockdraft.models.save_model` is the natural place).
        opset: ONNX opset version (>= 18; >= 20 writes GELU as one Gelu node, which needs
            onnxruntime >= 1.18).
        force: export even when ``path`` already holds an export of the same weights.

    Returns:
        The file written (with its sealed record beside it), or reused when it already holds an
        export of the same weights, opset and graph format that matches its record.

    Raises:
        RescorerError: when ``model`` is not a RescorerLM, onnx is not installed, the export
            fails, or ``path`` cannot be written.
    """
    opset = _check_export(model, opset)
    target = Path(path)
    if target.is_dir() or (not target.suffix and not target.exists()):
        target = target / ONNX_FILE
    stamp = _stamp_of(model, opset)
    if target.is_file() and not force and _reusable(target, stamp):
        return target
    data = export_rescorer_bytes(model, opset, stamp)
    folder, record = target.parent, record_name(target)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / record).unlink(missing_ok=True)  # the file changes: its record goes first
        write_bytes_atomic(target, data)
        seal_export(folder, [target.name], {
            "key": stamp, "model": "rescorer", **versions()}, record)
    except OSError as e:
        raise RescorerError(
            f"cannot write the ONNX export to {target}: {e}; pass a writable onnx_path"
        ) from e
    return target


def _reusable(target: Path, stamp: str) -> bool:
    """Whether ``target`` is a sound export made from ``stamp`` (its sealed record, the
    module docstring); a damaged one is named in a warning (it is exported again)."""
    folder, record = target.parent, record_name(target)
    meta = read_record(folder, record)
    if isinstance(meta, str):  # no record (an older export), or a damaged one
        if (folder / record).exists():
            rebuild_warning(meta)
        return False
    if meta.get("key") != stamp or set(meta["files"]) != {target.name}:
        return False  # made from other weights, opset or format
    problem = export_problem(folder, record)
    if problem is not None:
        rebuild_warning(problem)
    return problem is None


def export_rescorer_bytes(
    model: RescorerLM, opset: int = DEFAULT_OPSET, fingerprint: str | None = None
) -> bytes:
    """The serialized ONNX model of :func:`export_rescorer_onnx`, in memory (no file).

    ``fingerprint`` is the stamp to write into its metadata (default: the weights' SHA-256,
    the opset and the graph format).

    Raises:
        RescorerError: when ``model`` is not a RescorerLM, a bad opset, onnx is missing or
            the export fails.
    """
    opset = _check_export(model, opset)
    try:
        import onnx  # noqa: F401 - fail early with the hint
    except ImportError as e:
        raise RescorerError(f"the ONNX backend needs the onnx package: {INSTALL_HINT}") from e
    try:
        proto = step_graph(model, opset, fingerprint or _stamp_of(model, opset))
    except RescorerError:
        raise
    except Exception as e:  # noqa: BLE001 - onnx raises many kinds; chain them
        raise RescorerError(f"exporting the rescorer to ONNX failed: {e}") from e
    return proto.SerializeToString()  # type: ignore[no-any-return]


def _check_export(model: object, opset: object) -> int:
    """The opset as an int, after checking the model and the opset (a RescorerError else)."""
    if not isinstance(model, RescorerLM):
        raise RescorerError(
            f"the ONNX export expects a RescorerLM (h = 1), got {type(model).__name__}"
        )
    return check_int(opset, "opset", RescorerError, minimum=MIN_OPSET)
