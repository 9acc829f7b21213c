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
    write_files_atomic({path: data, ...}): files that belong together (a file and its record
        beside it), all written before any is renamed into place
    replace_together(moves, remove=(), replace=True): a group of finished files renamed into
        place (and old members deleted) with interrupts held back; with ``replace=False`` none
        is put in place if one of them appeared meanwhile
    move_new(src, dest): a finished file or folder renamed onto ``dest`` only if nothing is
        there, checked at the rename itself (atomic: a link for a file, a rename that refuses
        a non-empty folder for a folder)
    atomic_directory(path) -> context manager yielding a fresh temporary folder, swapped into
        place (replacing an existing folder) when the block exits
    new_temporary_directory(path), replace_directory(tmp, path, replace=True): the same in two
        steps, for writers that live longer than one ``with`` block
    folder_lock(folder), sweep_stale_temporaries(path): the lock around a swap, and the removal
        of temporaries whose writer was killed outright (``pid_alive(pid)`` tells)
    publish_modes(path): the modes of an ordinary new file or folder, for what a writer made
        private
    cache_dir(*parts) -> Path        ``$BLOCKDRAFT_CACHE`` (default ``~/.cache/blockdraft``)
    writable_cache_dir(*parts, error, what) -> Path   the same, created and checked writable
        before a slow build fills it (an error naming it and what to do otherwise)
    write_advice(e) -> str           what to do about an OSError of a cache write

Errors name the destination the caller asked for, never the hidden temporary.

Every file and folder appears with the modes of an ordinary new one (``0o666`` and ``0o777``
less the umask, so 0644 and 0755 under the usual umask 022), whatever the writer inside the
block chose: safetensors, ``mkstemp`` and ``mkdtemp`` create theirs private (0600, 0700), and a
rename keeps the mode.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO


def _temporary_sibling(dest: Path, suffix: str = ".tmp") -> Path:
    # The writer's pid is in the name, so a leftover of a process killed outright (SIGKILL,
    # power loss: no ``finally`` ran) can be told from one still being written.
    return dest.with_name(f".{dest.name}.{os.getpid()}-{secrets.token_hex(6)}{suffix}")


def _umask() -> int:
    """The process's umask, read without changing it where the system tells (Linux's
    ``/proc/self/status``); elsewhere set and restored at once."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def publish_modes(path: str | os.PathLike[str]) -> None:
    """Give ``path`` (a file, or a folder and everything in it) the modes of an ordinary new
    file or folder: ``0o666`` (``0o777`` for a folder, or a file its owner may execute) less
    the umask. Symbolic links are left alone (a mode change would reach their target)."""
    mask = _umask()

    def publish(item: str, folder: bool) -> None:
        if os.path.islink(item):
            return
        executable = folder or bool(os.stat(item).st_mode & 0o100)
        os.chmod(item, (0o777 if executable else 0o666) & ~mask)

    root = os.fspath(path)
    publish(root, os.path.isdir(root))
    if os.path.isdir(root) and not os.path.islink(root):
        for folder, dirs, names in os.walk(root):
            for name in dirs:
                publish(os.path.join(folder, name), True)
            for name in names:
                publish(os.path.join(folder, name), False)


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (on this machine's pid namespace)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: it exists, owned by someone else
        return True
    return True


def sweep_stale_temporaries(path: str | os.PathLike[str]) -> list[Path]:
    """Remove the hidden temporaries of ``path`` (``.NAME.<pid>-<hex>.{tmp,partial,old}``, and
    those of a writer inside one of them, ``..NAME.<pid>-...``) whose writing process no longer
    exists; returns what was removed. Every atomic writer calls it before it starts."""
    dest = Path(path)
    removed: list[Path] = []
    # a writer inside another's temporary leaves ``..NAME.<pid>-<hex>.partial.<pid>-...``:
    # it belongs to the outer writer, whose pid comes first
    prefixes = (f".{dest.name}.", f"..{dest.name}.")
    try:
        entries = list(os.scandir(dest.parent))
    except OSError:
        return removed
    for entry in entries:
        name = entry.name
        prefix = next((p for p in prefixes if name.startswith(p)), None)
        if prefix is None:
            continue
        pid, dash, rest = name[len(prefix):].partition("-")
        if not (dash and pid.isdigit() and rest.endswith((".tmp", ".partial", ".old"))):
            continue
        if pid_alive(int(pid)):
            continue
        stale = Path(entry.path)
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(stale, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                stale.unlink()
        removed.append(stale)
    return removed


@contextlib.contextmanager
def folder_lock(folder: str | os.PathLike[str]) -> Iterator[None]:
    """An exclusive ``flock`` on ``folder`` itself (no lock file is left behind): serialises
    the final swaps of concurrent writers into that folder, so the last complete one wins."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        # A file system without flock (some network mounts) still gets the swap, unlocked.
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _check_parent(dest: Path) -> None:
    parent = dest.parent
    if not parent.is_dir():
        raise FileNotFoundError(
            f"cannot write {str(dest)!r}: its folder {str(parent)!r} does not exist"
        )


@contextlib.contextmanager
def _naming(dest: Path) -> Iterator[None]:
    """Re-raise an ``OSError`` about the hidden temporary as one naming ``dest`` (the path the
    user asked for), so no message points at a file the user never named."""
    try:
        yield
    except OSError as e:
        if e.filename is None or Path(e.filename).name == dest.name:
            raise
        reason = e.strerror or str(e)
        if isinstance(e, PermissionError):
            reason += f" (is the folder {str(dest.parent)!r} writable?)"
        raise type(e)(e.errno, f"cannot write {str(dest)!r}: {reason}") from e


@contextlib.contextmanager
def _renamed_into_place(tmp: Path, dest: Path) -> Iterator[None]:
    """The common tail of :func:`atomic_path` and :func:`atomic_writer`: when the block exits
    normally ``tmp`` is renamed onto ``dest`` (an ``OSError`` naming ``dest``); on any
    exception, the rename's included, ``tmp`` is removed and ``dest`` left as it was."""
    try:
        yield
        with _naming(dest):
            os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path beside ``path``; the file written there is renamed onto ``path`` when
    the block exits normally, and removed on an exception (``path`` is then untouched).

    The writer inside the block must create the file (a block that writes nothing raises
    ``FileNotFoundError`` naming ``path``). The file gets the permissions of any file created
    here (``0o666`` less the umask, as :func:`atomic_writer`'s), whatever mode the writer gave
    it: safetensors, for one, creates its files ``0o600``.
    """
    dest = Path(path)
    _check_parent(dest)
    sweep_stale_temporaries(dest)
    tmp = _temporary_sibling(dest, dest.suffix + ".tmp")
    with _renamed_into_place(tmp, dest):
        yield tmp
        if not tmp.exists():
            raise FileNotFoundError(f"nothing was written for {str(dest)!r}")
        publish_modes(tmp)  # the writer may have created it private (safetensors: 0600)


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike[str]) -> Iterator[IO[bytes]]:
    """Write ``path`` atomically: yields a binary file; renamed onto ``path`` on success.

    On an exception inside the ``with`` block the temporary file is removed and ``path`` is
    left as it was. ``path``'s folder must exist.
    """
    dest = Path(path)
    _check_parent(dest)
    sweep_stale_temporaries(dest)
    # Not mkstemp: its 0600 mode would survive the rename; "xb" honours the umask.
    tmp = _temporary_sibling(dest)
    with _renamed_into_place(tmp, dest):
        with _naming(dest):
            f = open(tmp, "xb")
        with f:
            yield f
            f.flush()
            os.fsync(f.fileno())


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """``path`` holds exactly ``data`` afterwards, or is untouched on failure."""
    with atomic_writer(path) as f:
        f.write(data)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """``path`` holds ``text`` (UTF-8) afterwards, or is untouched on failure."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_files_atomic(contents: Mapping[str | os.PathLike[str], bytes]) -> None:
    """Write files that belong together (a prompt file and its record beside it): each to its
    temporary sibling first, then all renamed into place one after the other with SIGINT and
    SIGTERM held back, so an interrupt never leaves a new file beside an old one. On a failure
    or an interrupt before the renames every destination is as it was."""
    temps: list[tuple[Path, Path]] = []
    try:
        for path, data in contents.items():
            dest = Path(path)
            _check_parent(dest)
            sweep_stale_temporaries(dest)
            tmp = _temporary_sibling(dest)
            with _naming(dest):
                f = open(tmp, "xb")
            temps.append((tmp, dest))
            with f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        replace_together(temps)
    except BaseException:
        for tmp, _ in temps:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise


def replace_together(moves: Sequence[tuple[Path, Path]], remove: Sequence[Path] = (),
                     replace: bool = True) -> None:
    """Rename each finished ``(source, destination)`` of a group of files into place and
    delete the ``remove`` files (an old member of the group the new one lacks), with SIGINT
    and SIGTERM held back, so an interrupt lands before or after the group, never inside.

    With ``replace=False`` (a new output) no destination may exist at the moment of the
    renames: each is linked in place (a link never replaces), and when one of them is
    already there (another writer put it there since the command started) the links made so
    far are removed again and :class:`FileExistsError` names it; the sources stay.
    """
    with _signals_held():
        if replace:
            for src, dest in moves:
                with _naming(dest):
                    os.replace(src, dest)
        else:
            linked: list[Path] = []
            try:
                for src, dest in moves:
                    _link_new(src, dest)
                    linked.append(dest)
            except BaseException:
                for dest in linked:
                    with contextlib.suppress(OSError):
                        os.unlink(dest)
                raise
            for src, _ in moves:
                with contextlib.suppress(OSError):
                    os.unlink(src)
        for stale in remove:
            with contextlib.suppress(FileNotFoundError), _naming(stale):
                os.unlink(stale)


def _appeared(dest: Path) -> FileExistsError:
    return FileExistsError(errno.EEXIST, f"{str(dest)!r} appeared while this output was "
                           "written", str(dest))


def _link_new(src: Path, dest: Path) -> None:
    """``dest`` becomes a second name of the file ``src``, atomically, only if nothing is
    there (a file system without links: checked, then renamed)."""
    try:
        os.link(src, dest)
    except FileExistsError:
        raise _appeared(dest) from None
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV,
                           errno.EMLINK):
            with _naming(dest):
                raise
        if dest.exists() or dest.is_symlink():  # no links here: the nearest check there is
            raise _appeared(dest) from None
        with _naming(dest):
            os.replace(src, dest)


def move_new(src: str | os.PathLike[str], dest: str | os.PathLike[str]) -> None:
    """Rename the finished file or folder ``src`` onto ``dest`` only if nothing is there (an
    empty folder counts as nothing), checked by the rename itself: a file is linked (a link
    never replaces) and its source removed; a folder is renamed, which fails on a folder that
    holds anything or on a file.

    Raises:
        FileExistsError: ``dest`` exists (naming it); ``src`` is left as it was.
    """
    src, dest = Path(src), Path(dest)
    if src.is_dir() and not src.is_symlink():
        publish_modes(src)
        try:
            os.rename(src, dest)
        except OSError as e:
            if e.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                raise _appeared(dest) from None
            with _naming(dest):
                raise
        return
    _link_new(src, dest)
    with contextlib.suppress(OSError):
        os.unlink(src)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM held back (delivered when the block ends), where this thread can
    hold them (POSIX, the main thread)."""
    import signal
    import threading

    held = {signal.SIGINT, signal.SIGTERM}
    if (threading.current_thread() is not threading.main_thread()
            or not hasattr(signal, "pthread_sigmask")):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Build a folder beside ``path`` and swap it into place when the block exits normally.

    Yields an empty temporary folder (a hidden sibling of ``path``). On success an existing
    ``path`` is first renamed aside, the new folder renamed onto ``path``, and the old one
    removed (under :func:`folder_lock` on the parent, so concurrent writers swap one after the
    other and the last complete one wins); on an exception the temporary folder is removed
    and ``path`` is untouched.
    """
    dest = Path(path)
    tmp = new_temporary_directory(dest)
    try:
        yield tmp
        replace_directory(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def new_temporary_directory(path: str | os.PathLike[str]) -> Path:
    """A new empty hidden sibling folder of ``path`` to build a replacement in (stale ones of
    killed writers are swept first); move it into place with :func:`replace_directory`."""
    dest = Path(path)
    _check_parent(dest)
    sweep_stale_temporaries(dest)
    tmp = _temporary_sibling(dest, ".partial")
    with _naming(dest):
        tmp.mkdir()
    return tmp


def replace_directory(tmp: str | os.PathLike[str], path: str | os.PathLike[str],
                      replace: bool = True) -> None:
    """Move the finished folder ``tmp`` onto ``path`` (replacing what is there) under a lock
    on the parent folder; on failure ``path`` is as it was and ``tmp`` still exists.

    With ``replace=False`` (a new output) nothing at ``path`` is replaced
    (:func:`move_new`: :class:`FileExistsError` when a folder of files or a file appeared
    there since the command started).
    """
    tmp, dest = Path(tmp), Path(path)
    with _naming(dest):
        publish_modes(tmp)  # what writers inside created private (safetensors: 0600)
    if not replace:
        with folder_lock(dest.parent):
            move_new(tmp, dest)
        return
    with folder_lock(dest.parent):
        old = None
        if dest.exists() or dest.is_symlink():
            old = _temporary_sibling(dest, ".old")
            with _naming(dest):
                os.replace(dest, old)
        try:
            with _naming(dest):
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


def cache_dir(*parts: str) -> Path:
    """blockdraft's cache folder ``$BLOCKDRAFT_CACHE/<parts>`` (default
    ``~/.cache/blockdraft/<parts>``); not created."""
    root = os.environ.get("BLOCKDRAFT_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "blockdraft"
    )
    return Path(root, *parts)


def write_advice(e: OSError) -> str:
    """What to do about ``e``, a failed write into blockdraft's cache: free space when the disk
    is full, else point ``BLOCKDRAFT_CACHE`` at a writable folder."""
    if e.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        return "free some space, or point BLOCKDRAFT_CACHE at a folder on another disk"
    return "point BLOCKDRAFT_CACHE at a writable folder"


def writable_cache_dir(*parts: str, error: type[Exception], what: str) -> Path:
    """:func:`cache_dir` of ``parts``, created, once a file could be made in it: checked before
    a slow build (dequantising, exporting) that would fail only when it writes.

    Raises:
        error: the folder cannot be made or written (``BLOCKDRAFT_CACHE`` names a file, a
            read-only folder, a full disk), naming it, the reason and what to do.
    """
    folder = cache_dir(*parts)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = _temporary_sibling(folder / ".write-check")
        with open(probe, "xb"):
            pass
        probe.unlink()
    except OSError as e:
        env = os.environ.get("BLOCKDRAFT_CACHE")
        where = f" (BLOCKDRAFT_CACHE={env})" if env else ""
        raise error(f"cannot write {what} in {folder}{where}: {e.strerror or e}; "
                    f"{write_advice(e)}") from e
    return folder
