"""ONNX Runtime sessions and the sealed record of an ONNX export: one home for every model that
blockdraft exports and runs under ONNX Runtime (the base model with its heads,
:mod:`.onnx_export`; the rescoring LM, :mod:`blockdraft.rescorers.neural.onnx_export`).

**Sessions** (:func:`open_session`): sequential execution, one inter-op thread, every graph
optimisation, ONNX Runtime's own warnings off (log level 3: its notes on unused initializers are
not the user's), and worker threads that do not spin after a run (a decode's work between runs
(the lattice's top-k, acceptance, rescoring) runs on other threads, which a spinning pool
starves).

**Exports** (docs/architecture.md, "Integrity"): an export is a set of files in a folder and a
sealed JSON record beside them (``export.json`` for a folder of its own, ``<stem>.export.json``
for a file in a folder it shares, such as a model directory): the key the files were made from
(a digest of the weights and everything else that changes them), and each file's size,
modification time, SHA-256 and the digests of its 1 MiB blocks (:func:`blockdraft.core.digest
.seal`). The writer records them after the files are complete (:func:`seal_export`); a reader
checks the record before serving the files (:func:`export_problem`): the record's seal, every
file's size, the full SHA-256 of a file whose time is not the recorded one (a copy's new times
are then recorded again), and :data:`SAMPLE_BYTES` of blocks drawn at random (``deep``: every
file in full, after ONNX Runtime failed to load them or a forward gave NaN). A damaged export is
exported again, with one :class:`~blockdraft.core.errors.BlockdraftWarning` saying what was
wrong (:func:`rebuild_warning`).

Public surface:
    FORMAT, FORMAT_VERSION, META, SAMPLE_BYTES
    open_session(source, threads, *, providers=None, error=ModelError, advice) -> session
    versions() -> {"onnx", "onnxruntime"}
    record_name(file) -> str                       the record beside a file in a shared folder
    read_record(folder, name=META) -> dict | str   the sealed record, or what is wrong with it
    export_problem(folder, name=META, deep=False, sample_bytes=SAMPLE_BYTES) -> str | None
    seal_export(folder, files, meta, name=META)    record the files and write the record
    rebuild_warning(problem)                       the one warning of an export built again
"""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from blockdraft.core.digest import check_recorded_files, record_file, seal, unseal
from blockdraft.core.errors import BlockdraftWarning
from blockdraft.core.files import write_text_atomic
from blockdraft.models.errors import ModelError

FORMAT = "blockdraft-onnx-export"
FORMAT_VERSION = 2  # 2: each file's time and block digests (1: sizes only)
META = "export.json"
"""The record of an export that has a folder of its own."""
SAMPLE_BYTES = 16 << 20
"""Bytes of randomly drawn blocks a load checks against their digests (16 MiB: ~20 ms for
SmolLM2's 650 MB export on one core, against ~0.7 s to hash it all; an edit is always caught,
damage that kept both size and time with a probability that grows with every load)."""
WHAT = "the ONNX export"


def open_session(source: str | Path | bytes, threads: int, *,
                 providers: Sequence[Any] | None = None,
                 error: type[Exception] = ModelError, advice: str = "") -> Any:
    """An ONNX Runtime session over ``source`` (a file or the serialized model) with the
    options of every blockdraft session (see the module docstring).

    Args:
        source: the ``.onnx`` file, or its bytes.
        threads: intra-op threads (0: ONNX Runtime's default, every core).
        providers: execution providers, preferred first (default the CPU's).
        error: the caller's error class.
        advice: what to do when the file cannot be loaded (``"delete FOLDER to export the
            model again"``).

    Raises:
        error: onnxruntime cannot load ``source``.
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = int(threads)
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    where = "<bytes>" if isinstance(source, bytes) else str(source)
    try:
        return ort.InferenceSession(source if isinstance(source, bytes) else str(source),
                                    options,
                                    providers=list(providers or ["CPUExecutionProvider"]))
    except Exception as e:  # onnxruntime raises its own exception types
        raise error(f"ONNX Runtime cannot load {where} ({e})"
                    + (f"; {advice}" if advice else "")) from e


def versions() -> dict[str, str]:
    """The ``onnx`` and ``onnxruntime`` versions (part of every export's key)."""
    import onnx
    import onnxruntime

    return {"onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__}


def record_name(file: str | Path) -> str:
    """The record of an export that is one file in a folder it shares with others:
    ``rescorer.onnx`` -> ``rescorer.export.json``."""
    return f"{Path(file).stem}.export.json"


def read_record(folder: str | Path, name: str = META) -> dict[str, Any] | str:
    """The sealed record ``folder/name``, or one sentence saying what is wrong with it
    (missing, damaged, not an export's record, of another format)."""
    file = Path(folder) / name
    if not file.is_file():
        return f"{file} is missing (the export was interrupted, or damaged)"
    try:
        meta = json.loads(file.read_text(encoding="utf-8"))
        digests = unseal(meta, file, ModelError) if isinstance(meta, dict) else None
    except (OSError, ValueError) as e:  # ModelError is a ValueError
        return f"{file} is damaged ({e})"
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or digests is None:
        return f"{file} is not the record of an ONNX export"
    records = meta.get("files")
    if (meta.get("format_version") != FORMAT_VERSION or not isinstance(records, dict)
            or set(records) != set(digests) or not records
            or not all(_is_record(r) for r in records.values())):
        return f"{file} was written by another blockdraft (its export format differs)"
    return meta


def _is_record(record: Any) -> bool:
    if not isinstance(record, dict) or set(record) != {"size", "mtime_ns", "blocks"}:
        return False
    ints = all(isinstance(record[k], int) and not isinstance(record[k], bool)
               for k in ("size", "mtime_ns"))
    return ints and isinstance(record["blocks"], list) and all(
        isinstance(b, str) for b in record["blocks"])


def _write_record(folder: Path, name: str, meta: dict[str, Any],
                  digests: dict[str, str]) -> None:
    write_text_atomic(folder / name, json.dumps(seal(meta, digests), indent=1) + "\n")


def export_problem(folder: str | Path, name: str = META, deep: bool = False,
                   sample_bytes: int = SAMPLE_BYTES) -> str | None:
    """What is wrong with the export recorded in ``folder/name``, or None when its files are
    the ones recorded (see the module docstring).

    Args:
        folder: the folder of the export.
        name: its record.
        deep: hash every file in full, not only those whose time changed and a sample.
        sample_bytes: bytes of blocks drawn at random and checked.

    Returns:
        None, or one sentence naming the file and what differs.
    """
    root = Path(folder)
    meta = read_record(root, name)
    if isinstance(meta, str):
        return meta
    digests: dict[str, str] = meta["integrity"]["files"]
    records: dict[str, dict[str, Any]] = meta["files"]
    problem, moved = check_recorded_files(root, records, digests, deep=deep,
                                          sample_bytes=sample_bytes, what=WHAT)
    if moved:  # a copied folder: record its times, so the next load need not hash it
        body = {k: v for k, v in meta.items() if k != "integrity"}
        with contextlib.suppress(OSError):  # read-only: hashed again next time
            _write_record(root, name, {**body, "files": {**records, **moved}}, digests)
    return problem


def seal_export(folder: str | Path, files: Iterable[str], meta: dict[str, Any],
                name: str = META) -> dict[str, dict[str, Any]]:
    """Record ``files`` (names in ``folder``, complete) and write the sealed record
    ``folder/name``: ``meta`` (the key and what the export is) with the format and each file's
    record. Returns the files' records (``size``, ``mtime_ns``, ``blocks``)."""
    root = Path(folder)
    records: dict[str, dict[str, Any]] = {}
    digests: dict[str, str] = {}
    for file in sorted(files):
        records[file], digests[file] = record_file(root / file)
    _write_record(root, name, {"format": FORMAT, "format_version": FORMAT_VERSION, **meta,
                               "files": records}, digests)
    return records


def rebuild_warning(problem: str) -> None:
    """The one warning of a damaged export built again, naming what was wrong."""
    warnings.warn(f"{problem}: exporting the model to ONNX again", BlockdraftWarning,
                  stacklevel=4)
