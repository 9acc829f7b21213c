"""Atomic writes: every file or folder blockdraft writes appears complete or not at all.

The new content goes to a hidden temporary sibling (same folder, so the final ``os.replace``
is a rename on one file system); only once it is complete and flushed is it renamed over the
destination. On any exception (Ctrl-C included) the temporary is removed and whatever was at
the destination before is left as it was.

Public surface:
    atomic_writer(path) -> context manager yielding a binary file
    atomic_path(path) -> context manager yielding a temporary Path for writers that take a path
        (safetensors, ONNX, OpenFst, numpy); it is renamed onto ``path`` when the block exits
    write_bytes_atomic(path, data), write_text_atomic(path, text)
    atomic_directory(path) -> context manager yielding a fresh temporary folder, swapped into
        place (replacing an existing folder) when the block exits
    cache_dir(*parts) -> Path        ``$BLOCKDRAFT_CACHE`` (default ``~/.cache/blockdraft``)
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import IO


def _temporary_sibling(dest: Path, suffix: str = ".tmp") -> Path:
    return dest.with_name(f".{dest.name}.{secrets.token_hex(6)}{suffix}")


def _check_parent(dest: Path) -> None:
    parent = dest.parent
    if not parent.is_dir():
        raise FileNotFoundError(
            f"cannot write {str(dest)!r}: its folder {str(parent)!r} does not exist"
        )


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path beside ``path``; the file written there is renamed onto ``path`` when
    the block exits normally, and removed on an exception (``path`` is then untouched).

    The writer inside the block must create the file (a block that writes nothing raises
    ``FileNotFoundError`` naming ``path``).
    """
    dest = Path(path)
    _check_parent(dest)
    tmp = _temporary_sibling(dest, dest.suffix + ".tmp")
    try:
        yield tmp
        if not tmp.exists():
            raise FileNotFoundError(f"nothing was written for {str(dest)!r}")
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike[str]) -> Iterator[IO[bytes]]:
    """Write ``path`` atomically: yields a binary file; renamed onto ``path`` on success.

    On an exception inside the ``with`` block the temporary file is removed and ``path`` is
    left as it was. ``path``'s folder must exist.
    """
    dest = Path(path)
    _check_parent(dest)
    # Not mkstemp: its 0600 mode would survive the rename; "xb" honours the umask.
    tmp = _temporary_sibling(dest)
    try:
        with open(tmp, "xb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """``path`` holds exactly ``data`` afterwards, or is untouched on failure."""
    with atomic_writer(path) as f:
        f.write(data)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """``path`` holds ``text`` (UTF-8) afterwards, or is untouched on failure."""
    write_bytes_atomic(path, text.encode("utf-8"))


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Build a folder beside ``path`` and swap it into place when the block exits normally.

    Yields an empty temporary folder (a hidden sibling of ``path``). On success an existing
    ``path`` is first renamed aside, the new folder renamed onto ``path``, and the old one
    removed; on an exception the temporary folder is removed and ``path`` is untouched.
    """
    dest = Path(path)
    _check_parent(dest)
    tmp = _temporary_sibling(dest, ".partial")
    tmp.mkdir()
    try:
        yield tmp
        old = None
        if dest.exists() or dest.is_symlink():
            old = _temporary_sibling(dest, ".old")
            os.replace(dest, old)
        try:
            os.replace(tmp, dest)
        except BaseException:
            if old is not None:
                os.replace(old, dest)
            raise
        if old is not None:
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(old)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def cache_dir(*parts: str) -> Path:
    """blockdraft's cache folder ``$BLOCKDRAFT_CACHE/<parts>`` (default
    ``~/.cache/blockdraft/<parts>``); not created."""
    root = os.environ.get("BLOCKDRAFT_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "blockdraft"
    )
    return Path(root, *parts)
