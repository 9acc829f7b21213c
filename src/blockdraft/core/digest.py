"""Integrity digests: SHA-256 over bytes, files, arrays and JSON documents, recorded when
blockdraft writes a file and checked when it reads it back.

A format blockdraft writes and nobody edits by hand (trace folders, model checkpoints, the
heads file of blockdraft's Medusa heads) records the digests of what it wrote; the reader
recomputes them and refuses any difference with the room's error class, so a flipped bit or an
edited value never loads as a silently different object (docs/architecture.md, "Integrity").

A JSON document seals itself: :func:`seal` adds an ``"integrity"`` member::

    "integrity": {"algorithm": "sha256", "self": "<hex>", "files": {"<name>": "<hex>", ...}}

``self`` is the digest of the document without that member in canonical form (sorted keys, no
whitespace, ASCII: :func:`canonical_json`), so re-indenting the file changes nothing but a
changed value does; ``files`` holds the digests of the document's companion files (their bytes).

Public surface:
    ALGORITHM                                   "sha256"
    sha256_bytes(data) -> hex; sha256_file(path) -> hex; sha256_json(obj) -> hex
    sha256_arrays(arrays) -> hex                 names, dtypes, shapes and bytes of arrays
    HashingWriter(file)                          a binary file wrapper hashing what it writes
    seal(document, files) -> document            add the "integrity" member
    unseal(document, where, error) -> files | None
        check the "integrity" member: its form and ``self``; the files' digests, or None when
        the document has none
    check_file(path, expected, error, fix)       refuse a file whose digest differs

A folder blockdraft builds once and reads many times (a cache) records each file's size,
modification time and block digests beside its SHA-256 (:func:`record_file`), so a load can
check it cheaply and still catch what changed (:func:`check_recorded_files`): the sizes always,
the full digest of a file whose time changed, and a random sample of blocks.

    BLOCK_BYTES                                  bytes per block digest (1 MiB)
    record_file(path) -> (record, hex)           size, mtime_ns, block digests; SHA-256
    check_recorded_files(folder, records, digests, *, deep=False, sample_bytes=0, what=...)
        -> (problem | None, re-timed records)    what differs, in one sentence
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np

ALGORITHM = "sha256"
"""The digest algorithm (the ``algorithm`` of an ``"integrity"`` member)."""
INTEGRITY_KEY = "integrity"
"""The member of a sealed JSON document that holds its digests."""
_CHUNK = 1 << 20  # bytes read at a time when hashing a file


def sha256_bytes(data: bytes | bytearray | memoryview) -> str:
    """The SHA-256 of ``data``, 64 lowercase hex digits."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a file's bytes (read in chunks: memory stays bounded).

    Raises:
        OSError: when the file cannot be read.
    """
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def canonical_json(obj: Any) -> bytes:
    """``obj`` as canonical JSON bytes: sorted keys, no whitespace, ASCII (``\\u`` escapes),
    non-finite floats as ``NaN``/``Infinity``. Equal JSON values give equal bytes; a value
    that differs in type (``1`` and ``1.0``) or in any digit gives other bytes.

    Raises:
        TypeError, ValueError: when ``obj`` is not a JSON value.
    """
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=True).encode("ascii")


def sha256_json(obj: Any) -> str:
    """The SHA-256 of :func:`canonical_json` of ``obj``."""
    return sha256_bytes(canonical_json(obj))


def _frame(h: Any, data: Any) -> None:
    """Feed ``data`` (bytes, or an array's raw bytes) with its length first, so that fields
    cannot run into each other."""
    if isinstance(data, np.ndarray):
        view: Any = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    else:
        view = memoryview(data).cast("B")
    h.update(int(view.nbytes).to_bytes(8, "little"))
    h.update(view)


def sha256_arrays(arrays: Mapping[str, Any] | Iterable[tuple[str, str, Any, Any]]) -> str:
    """The SHA-256 of named arrays: every name, dtype, shape and C-order byte, names sorted.

    Args:
        arrays: ``{name: numpy array}``; or ``(name, dtype name, shape, raw bytes)`` records,
            for arrays numpy cannot hold (a torch ``bfloat16`` tensor: the caller passes its
            dtype's name and its bytes, e.g. a ``uint8`` view).

    Returns:
        64 hex digits; the order of ``arrays`` does not matter.
    """
    records: list[tuple[str, str, tuple[int, ...], Any]]
    if isinstance(arrays, Mapping):
        records = []
        for name, value in arrays.items():
            arr = np.ascontiguousarray(value)
            records.append((str(name), arr.dtype.str, tuple(arr.shape), arr))
    else:
        records = [(str(n), str(d), tuple(int(x) for x in s), b) for n, d, s, b in arrays]
    h = hashlib.sha256()
    for name, dtype, shape, data in sorted(records, key=lambda r: r[0]):
        _frame(h, name.encode("utf-8", "surrogatepass"))
        _frame(h, dtype.encode("utf-8", "surrogatepass"))
        _frame(h, ",".join(map(str, shape)).encode("ascii"))
        _frame(h, data)
    return h.hexdigest()


class HashingWriter:
    """A binary file wrapper that hashes every byte written through it.

    Give it to writers that take a file object (``np.save``, ``shutil.copyfileobj``, an
    :func:`~blockdraft.core.files.atomic_writer`'s file) and read :meth:`hexdigest` at the
    end: the SHA-256 of exactly what reached the file, computed while it was written.
    """

    def __init__(self, file: IO[bytes]) -> None:
        self._file = file
        self._hash = hashlib.sha256()

    def write(self, data: bytes | bytearray | memoryview) -> int:
        """Write ``data`` to the file and to the digest; returns the bytes written."""
        view = memoryview(data).cast("B")
        self._hash.update(view)
        self._file.write(view)
        return view.nbytes

    def flush(self) -> None:
        """Flush the underlying file."""
        self._file.flush()

    def hexdigest(self) -> str:
        """The SHA-256 of everything written so far."""
        return self._hash.hexdigest()


def seal(document: Mapping[str, Any], files: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``document`` with an ``"integrity"`` member: the digest of the document itself (without
    that member, in canonical form) and ``files`` (``{file name: hex digest}``).

    Raises:
        ValueError: when ``document`` already has an ``"integrity"`` member.
    """
    if INTEGRITY_KEY in document:
        raise ValueError(f"the document already has an {INTEGRITY_KEY!r} member")
    body = dict(document)
    record = {"algorithm": ALGORITHM, "self": sha256_json(body), "files": dict(files or {})}
    return {**body, INTEGRITY_KEY: record}


def _is_hex_digest(value: Any) -> bool:
    return (isinstance(value, str) and len(value) == 64
            and all(c in "0123456789abcdef" for c in value))


def unseal(document: Mapping[str, Any], where: str | os.PathLike[str],
           error: type[Exception], fix: str = "") -> dict[str, str] | None:
    """Check a document's ``"integrity"`` member (see :func:`seal`).

    Args:
        document: the parsed JSON object.
        where: the file it was read from, for messages.
        error: the exception class to raise (the caller's room error).
        fix: what to do, appended to messages (e.g. ``"regenerate the trace"``).

    Returns:
        The companion files' digests ``{name: hex}``, or None when the document has no
        ``"integrity"`` member (the caller decides whether that is allowed).

    Raises:
        error: a malformed member, an unknown algorithm, or a document whose digest differs
            from the recorded one (it was changed or corrupted since it was written).
    """
    if INTEGRITY_KEY not in document:
        return None
    tail = f"; {fix}" if fix else ""
    record = document[INTEGRITY_KEY]
    if not isinstance(record, dict) or set(record) != {"algorithm", "self", "files"}:
        raise error(
            f"{where}: malformed {INTEGRITY_KEY!r} member {record!r} (expected algorithm, self "
            f"and files): the file was changed or corrupted since it was written{tail}"
        )
    if record["algorithm"] != ALGORITHM:
        raise error(
            f"{where}: digest algorithm {record['algorithm']!r} is not {ALGORITHM!r}: the file "
            f"was changed or corrupted since it was written, or comes from a newer "
            f"blockdraft{tail}"
        )
    files = record["files"]
    if (not _is_hex_digest(record["self"]) or not isinstance(files, dict)
            or not all(isinstance(k, str) and _is_hex_digest(v) for k, v in files.items())):
        raise error(
            f"{where}: malformed digests in its {INTEGRITY_KEY!r} member: the file was changed "
            f"or corrupted since it was written{tail}"
        )
    body = {k: v for k, v in document.items() if k != INTEGRITY_KEY}
    try:
        actual = sha256_json(body)
    except (TypeError, ValueError) as e:  # pragma: no cover - parsed JSON always dumps
        raise error(f"{where}: cannot compute its digest ({e}){tail}") from e
    if actual != record["self"]:
        raise error(
            f"{where}: its content does not match the SHA-256 recorded when it was written "
            f"({actual[:12]}... vs {record['self'][:12]}...): the file was changed or "
            f"corrupted since{tail}"
        )
    return dict(files)


def check_file(path: str | os.PathLike[str], expected: str, error: type[Exception],
               fix: str = "") -> None:
    """Refuse a file whose SHA-256 is not ``expected`` (the digest recorded when it was
    written).

    Raises:
        error: naming the file, on a different digest or an unreadable file.
    """
    tail = f"; {fix}" if fix else ""
    file = Path(path)
    try:
        actual = sha256_file(file)
    except OSError as e:
        raise error(f"{file}: cannot read it to check its digest ({e}){tail}") from e
    if actual != expected:
        raise error(
            f"{file}: its SHA-256 ({actual[:12]}...) is not the one recorded when it was "
            f"written ({expected[:12]}...): the file was changed or corrupted since{tail}"
        )


BLOCK_BYTES = 1 << 20
"""Bytes per block of a recorded file's block digests (the last block may be shorter)."""
_BLOCK_HEX = 16  # hex digits kept of each block's SHA-256: 64 bits against accidental damage


def record_file(path: str | os.PathLike[str]) -> tuple[dict[str, Any], str]:
    """A file's record and SHA-256, from one read: ``{"size", "mtime_ns", "blocks"}`` (the
    first 16 hex digits of the SHA-256 of each :data:`BLOCK_BYTES` block, in order).

    Raises:
        OSError: when the file cannot be read.
    """
    whole = hashlib.sha256()
    blocks: list[str] = []
    with open(path, "rb") as f:
        while block := f.read(BLOCK_BYTES):
            whole.update(block)
            blocks.append(hashlib.sha256(block).hexdigest()[:_BLOCK_HEX])
        st = os.fstat(f.fileno())
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "blocks": blocks}, whole.hexdigest()


def check_recorded_files(
    folder: str | os.PathLike[str],
    records: Mapping[str, Mapping[str, Any]],
    digests: Mapping[str, str],
    *,
    deep: bool = False,
    sample_bytes: int = 0,
    what: str = "the cache",
) -> tuple[str | None, dict[str, dict[str, Any]]]:
    """Check the files of a folder against what was recorded when it was built.

    Every file's size always (a ``stat``); its full SHA-256 when its modification time is not
    the recorded one (the folder was copied, or something wrote into it) or with ``deep``; and
    ``sample_bytes`` worth of blocks drawn at random over all files (each checked against its
    block digest: damage that kept size and time, bit rot, is found with a probability that
    grows with every load).

    Args:
        folder: the folder.
        records: ``{name: {"size", "mtime_ns"[, "blocks"]}}`` (relative POSIX names).
        digests: ``{name: SHA-256 hex}``, the same names.
        deep: hash every file in full.
        sample_bytes: bytes of blocks to check at random (0: none; files without ``blocks``
            are not sampled).
        what: the folder, for messages (``"the model cache"``).

    Returns:
        ``(problem, moved)``: one sentence naming the file and what differs (None when
        everything checked matches), and the new ``size``/``mtime_ns`` of files whose time
        changed but whose content is the recorded one (the caller records them, so the next
        load need not hash them).
    """
    root = Path(folder)
    moved: dict[str, dict[str, Any]] = {}
    for name, record in records.items():
        file = root / name
        try:
            st = file.stat() if file.is_file() else None
        except OSError:
            st = None
        if st is None:
            return f"{file} is missing from {what}", {}
        if st.st_size != record["size"]:
            return (f"{file} has {st.st_size:,} bytes, {record['size']:,} when {what} was built "
                    "(truncated or damaged)"), {}
        if deep or st.st_mtime_ns != record["mtime_ns"]:
            try:
                same = sha256_file(file) == digests[name]
            except OSError as e:
                return f"cannot read {file} to check its digest ({e})", {}
            if not same:
                return (f"{file} is not the file {what} was built with (its SHA-256 differs "
                        "from the recorded one)"), {}
            if st.st_mtime_ns != record["mtime_ns"]:
                moved[name] = {**record, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    problem = _sampled_problem(root, records, sample_bytes, what) if sample_bytes > 0 else None
    return problem, ({} if problem else moved)


def _sampled_problem(root: Path, records: Mapping[str, Mapping[str, Any]], sample_bytes: int,
                     what: str) -> str | None:
    """The first of ``sample_bytes // BLOCK_BYTES`` random blocks (at least one) whose digest
    is not the recorded one, named; None when all match."""
    pool = [(name, i) for name, record in records.items()
            for i in range(len(record.get("blocks") or ()))]
    if not pool:
        return None
    count = min(len(pool), max(1, sample_bytes // BLOCK_BYTES))
    for name, i in sorted(random.Random().sample(pool, count)):  # file order: sequential reads
        file = root / name
        try:
            with open(file, "rb") as f:
                f.seek(i * BLOCK_BYTES)
                block = f.read(BLOCK_BYTES)
        except OSError as e:
            return f"cannot read {file} to check its digest ({e})"
        if hashlib.sha256(block).hexdigest()[:_BLOCK_HEX] != records[name]["blocks"][i]:
            return (f"{file} is not the file {what} was built with (bytes {i * BLOCK_BYTES:,} "
                    f"to {i * BLOCK_BYTES + len(block):,} differ from the recorded digest)")
    return None
