"""The model cache's manifest: what a cached folder held when it was built, checked before the
folder is trusted.

A GGUF file is dequantised once into ``$BLOCKDRAFT_CACHE/hf/<stem>-<key>/``
(:func:`blockdraft.models.hf.loading.dense_folder`); every later load reads that folder. Its
manifest, ``blockdraft-cache.json`` (written last, inside the folder before it is swapped into
place), records each file's size, modification time and SHA-256, and is sealed with its own
digest (:func:`blockdraft.core.digest.seal`), as the trace and checkpoint formats are.

What a load checks (:func:`cache_problem`): always the manifest and every file's size (a
``stat`` each: microseconds); a file's SHA-256 only when its modification time is not the
recorded one (the folder was copied, or something wrote into it) or when ``deep=True`` (a load
of the folder failed). Hashing all of SmolLM2's 540 MB on every load would cost about 1.2 s
(one thread); an unchanged time and size leave only damage that no write made (bit rot) to
the check after a failed load. A copied folder whose digests still match gets its times
recorded again, so the next load is quick again. The checks are the ones every cache of
blockdraft shares (:func:`blockdraft.core.digest.check_recorded_files`; the ONNX export cache
adds a sampled check of blocks).

Public surface:
    MANIFEST_FILE                                  "blockdraft-cache.json"
    write_manifest(folder, source)                 record what ``folder`` holds (at the build)
    cache_problem(folder, *, deep=False) -> str | None
        what is wrong with a cached folder (None: it holds what was built)
    cache_source(folder) -> dict | None            the GGUF file it was built from (path, size,
                                                   mtime_ns), or None for another folder
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path, PurePosixPath
from typing import Any

from blockdraft.core.digest import check_recorded_files, seal, sha256_file, unseal
from blockdraft.core.files import write_text_atomic
from blockdraft.models.errors import ModelError

MANIFEST_FILE = "blockdraft-cache.json"
"""The manifest inside a cached model folder."""
FORMAT = "blockdraft-model-cache"
FORMAT_VERSION = 1


def _files(folder: Path) -> list[str]:
    """The regular files under ``folder`` (the manifest aside), as relative POSIX paths."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                  if p.is_file() and not p.is_symlink() and p.name != MANIFEST_FILE)


def _stat(file: Path) -> dict[str, int]:
    st = file.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _document(records: dict[str, dict[str, int]], source: dict[str, Any],
              digests: dict[str, str]) -> dict[str, Any]:
    return seal({"format": FORMAT, "format_version": FORMAT_VERSION, "source": source,
                 "files": records}, digests)


def write_manifest(folder: str | os.PathLike[str], source: str | os.PathLike[str]) -> None:
    """Record the size, modification time and SHA-256 of every file of ``folder`` in its
    manifest, with ``source`` (the GGUF file it was built from), sealed.

    Raises:
        OSError: a file cannot be read, or the manifest cannot be written.
    """
    folder, src = Path(folder), Path(source)
    names = _files(folder)
    records = {name: _stat(folder / name) for name in names}
    digests = {name: sha256_file(folder / name) for name in names}
    st = src.stat()
    document = _document(records, {"path": str(src.resolve()), "size": st.st_size,
                                    "mtime_ns": st.st_mtime_ns}, digests)
    write_text_atomic(folder / MANIFEST_FILE, json.dumps(document, indent=2) + "\n")


def _read_manifest(folder: Path) -> dict[str, Any] | str:
    """The manifest (its records checked against its digests' names), or what is wrong with
    it."""
    file = folder / MANIFEST_FILE
    if not file.is_file():
        return (f"the model cache {folder} has no {MANIFEST_FILE} (it was built by an older "
                "blockdraft, or damaged)")
    try:
        document = json.loads(file.read_text(encoding="utf-8"))
        digests = unseal(document, file, ModelError) if isinstance(document, dict) else None
    except (OSError, ValueError) as e:  # ModelError is a ValueError
        return f"the manifest {file} is damaged ({e})"
    if not isinstance(document, dict):
        return f"the manifest {file} is damaged (not a JSON object)"
    records = document.get("files")
    if (document.get("format") != FORMAT or document.get("format_version") != FORMAT_VERSION
            or digests is None or not isinstance(records, dict) or set(records) != set(digests)
            or not all(_safe_name(n) and _is_record(r) for n, r in records.items())
            or not isinstance(document.get("source"), dict)):
        return f"{file} is not a manifest of this blockdraft's model cache"
    return document


def _safe_name(name: str) -> bool:
    """A relative path inside the folder (no ``..``, not absolute)."""
    path = PurePosixPath(name)
    return bool(name) and not path.is_absolute() and ".." not in path.parts


def _is_record(record: Any) -> bool:
    return (isinstance(record, dict) and set(record) == {"size", "mtime_ns"}
            and all(isinstance(v, int) and not isinstance(v, bool) for v in record.values()))


def cache_problem(folder: str | os.PathLike[str], *, deep: bool = False) -> str | None:
    """What is wrong with a cached model folder, or None when it holds what was built.

    Args:
        folder: the cached folder (it must exist).
        deep: check every file's SHA-256, not only those whose modification time changed.

    Returns:
        None, or one sentence naming the folder or file and what differs (a missing or
        damaged manifest, a missing file, another size, another SHA-256).
    """
    folder = Path(folder)
    manifest = _read_manifest(folder)
    if isinstance(manifest, str):
        return manifest
    records: dict[str, dict[str, int]] = manifest["files"]
    problem, moved = check_recorded_files(folder, records, manifest["integrity"]["files"],
                                          deep=deep, what="the model cache")
    if moved:  # a copy of the folder: record its times, so the next load need not hash
        document = _document({**records, **moved}, manifest["source"],
                             manifest["integrity"]["files"])
        with contextlib.suppress(OSError):  # read-only: the moved files are hashed next time
            write_text_atomic(folder / MANIFEST_FILE, json.dumps(document, indent=2) + "\n")
    return problem


def cache_source(folder: str | os.PathLike[str]) -> dict[str, Any] | None:
    """What the manifest of a cached model folder records of the GGUF file it was built from
    (``path``, ``size``, ``mtime_ns``), or None when ``folder`` is no cached model folder (or
    its manifest is damaged)."""
    manifest = _read_manifest(Path(folder))
    if isinstance(manifest, str):
        return None
    source: dict[str, Any] = manifest["source"]
    return source
