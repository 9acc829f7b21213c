"""The one rule every command that writes an output follows, from before it touches anything
until its output is in place.

1. **Nothing is replaced unless told.** An existing output, any file the command writes beside
   it (a sidecar: ``P.mix.json`` beside ``P``) or a non-empty output folder is refused unless
   the user passes ``--overwrite`` (replace it) or, where the command can continue earlier
   work, ``--resume``; checked before any work. A file where a folder is wanted (or the
   reverse) is always refused: it is never what the user meant.
2. **Only what the command writes is replaced.** A folder the command would replace or
   continue must hold nothing but the files that command writes there (``own``); anything else
   is the user's, and the command refuses, naming it (it is never deleted, never carried
   along).
3. **The old output stays complete until a complete new one replaces it.** Under
   ``--overwrite`` a folder is built beside the old one (:meth:`Output.writing`) and swapped
   into place only when the run ended and its output is complete: an error, an interrupt or a
   run stopped early by a limit (``--max-tokens``, ``--minutes``) leaves the old output as it
   was, and a partial output never replaces a complete one. A group of files (a file and its
   sidecars, or the files of a prefix) is built in a hidden folder beside it and renamed into
   place together, with interrupts held back, its old members that the new group lacks
   deleted; a single file is written atomically (:mod:`blockdraft.core.files`).
4. **A partial output says so.** A new or continued output that a limit stopped early is kept
   (it is sound, and ``--resume`` goes on from it) and :attr:`Writing.complete` is False: the
   command line exits with 3, not 0 (0 exactly when the output is complete).
5. **The check of rule 1 holds until the output is in place.** A new output (nothing there at
   the start) is built beside its path too and put in place by a rename that never replaces
   (:func:`~blockdraft.core.files.move_new`): a file or folder that appeared there meanwhile
   (another run of the same command) is not replaced without ``--overwrite``, and the command
   fails naming it. Only a folder the command fills as it goes (``in_place``: a distillation
   set, a training checkpoint, continued by ``--resume``) is written in place.

Public surface:
    claim_output(path, *, what, error, overwrite=False, resume=None, folder=True, flag="-o",
                 own=None, sidecars=(), prefix=False, in_place=None) -> Output
                                 the checks of rules 1 and 2
    Output.mode                  "new" | "resume" | "overwrite"
    Output.writing() -> context manager yielding a Writing    rules 3, 4 and 5
    Writing.path, Writing.stopped(reason), Writing.complete, Writing.final(path)
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from blockdraft.core.errors import BlockdraftError
from blockdraft.core.files import (
    new_temporary_directory,
    replace_directory,
    replace_together,
)

OutputMode = Literal["new", "resume", "overwrite"]

_SHOWN = 5  # foreign files named in a message


@dataclass(frozen=True)
class Output:
    """A command's output, claimed by :func:`claim_output` before any work.

    Attributes:
        path: the output (a folder when ``folder``, else a file).
        what: what the command writes there, for messages (``"a trace"``).
        mode: ``"new"`` (nothing there, or an empty folder), ``"resume"`` or ``"overwrite"``.
        folder: the output is a folder.
        flag: the option that names it (``"-o"``, ``"--folder"``, ``"--plot"``).
        error: the calling room's error class.
        sidecars: the files written beside a file output (``P.mix.json``), or, with
            ``prefix``, the files of the output (``lm.arpa``, ``lm.bin`` for ``lm``).
        resumable: the command can continue a partial output (it has ``--resume``).
        prefix: ``path`` only names the files (``sidecars``); it is not written itself.
        replace: the user allowed what is at ``path`` to be replaced (``--overwrite`` or
            ``--resume``), even what appears there while the command runs.
        in_place: a folder the command fills as it goes, written at ``path`` when new.
    """

    path: Path
    what: str
    mode: OutputMode
    folder: bool
    flag: str
    error: type[BlockdraftError]
    sidecars: tuple[Path, ...] = ()
    resumable: bool = False
    prefix: bool = False
    replace: bool = False
    in_place: bool = False

    @property
    def group(self) -> tuple[Path, ...]:
        """The files of a file output: the file (unless a prefix) and its sidecars."""
        return self.sidecars if self.prefix else (self.path, *self.sidecars)

    @contextlib.contextmanager
    def writing(self) -> Iterator[Writing]:
        """Where the command writes, and the swap of rules 3 and 5 when it is done.

        The output is built in a new hidden folder beside ``path`` (:attr:`Writing.path` is
        then that folder, or the file of that name in it) and put in place when the block
        exits normally, unless the command writes at ``path`` itself: a folder it continues
        (``--resume``) or fills as it goes (``in_place``), or a single file it replaces under
        ``--overwrite`` (its writers are atomic). A new output goes in place by a rename that
        never replaces (rule 5); an existing one is replaced only with a complete output. On
        an exception (Ctrl-C included) the hidden folder is removed and the exception goes
        on; when the run :meth:`Writing.stopped` early, a new output is still put in place
        (partial, rule 4) and a replacement is dropped, ``error`` saying that the old output
        was left as it was.

        Raises:
            error: a staged output that stopped early (the old one is kept); a new output
                whose path was taken while the command ran.
        """
        group = not self.folder and bool(self.sidecars)
        if self.mode == "new":
            staged = group or not (self.folder and self.in_place)
        else:
            staged = group or (self.folder and self.mode == "overwrite")
        new = self.mode == "new"
        root = None
        if staged:
            if self.folder or group:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            root = new_temporary_directory(self.path)
        where = self.path if root is None else root if self.folder else root / self.path.name
        handle = Writing(where, self, root)
        try:
            yield handle
            if root is not None and (handle.complete or new):
                self._put_in_place(root, replace=self.replace or not new)
        except BaseException:
            if root is not None:
                shutil.rmtree(root, ignore_errors=True)
            raise
        if root is not None and not handle.complete and not new:
            shutil.rmtree(root, ignore_errors=True)
            raise self.error(
                f"{handle.reason}: {self.flag} {self.path} was left as it was (under "
                f"--overwrite only a complete {_bare(self.what)} replaces the old one, and "
                "this run's partial one was dropped); run without the limit, or write to a "
                "new path" + (" and continue it with --resume" if self.resumable else ""))

    def _put_in_place(self, root: Path, replace: bool) -> None:
        """Move what was built in ``root`` to ``path`` (rules 3 and 5)."""
        try:
            if self.folder:
                replace_directory(root, self.path, replace=replace)
                return
            made = [(root / p.name, p) for p in self.group if (root / p.name).exists()]
            replace_together(made, [p for p in self.group if not (root / p.name).exists()]
                             if replace else [], replace=replace)
        except FileExistsError as e:
            taken = "it" if e.filename in (None, str(self.path)) else e.filename
            raise self.error(
                f"{self.flag} {self.path}: {taken} appeared while this command ran (another "
                f"run writing the same path?), and this run does not replace what was not "
                f"there when it started, so its {_bare(self.what)} was not written; pass "
                "--overwrite to replace it, or choose a new path") from None
        finally:
            shutil.rmtree(root, ignore_errors=True)


@dataclass
class Writing:
    """The handle :meth:`Output.writing` yields: where to write, and whether the run ended
    with its output complete.

    Attributes:
        path: where the command writes now (``output.path``, or in a hidden folder beside it;
            never shown to the user: see :meth:`final`).
        output: the claimed output.
        root: the hidden folder the output is built in (None: written in place).
        complete: False once :meth:`stopped` was called.
        reason: why the run stopped early (``""`` while complete).
    """

    path: Path
    output: Output
    root: Path | None = None
    complete: bool = True
    reason: str = ""

    def stopped(self, reason: str) -> None:
        """The run stopped early (a limit, before all its work was done): its output is
        partial. ``reason`` says where it stopped (``"stopped at --max-tokens 100 after 1 of 3
        shards"``)."""
        self.complete = False
        self.reason = reason

    def final(self, path: str | os.PathLike[str]) -> Path:
        """Where ``path`` (under :attr:`path`) lies once the output is in place: what the
        command reports and records, never the hidden folder it was built in."""
        p = Path(path)
        if self.root is None:
            return p
        base = self.output.path if self.output.folder else self.output.path.parent
        try:
            return base / p.relative_to(self.root)
        except ValueError:
            return p

    def partial_message(self) -> str:
        """One line for a partial output kept in place: where it stopped and how to go on."""
        go_on = ("the same command with --resume goes on from there" if self.output.resumable
                 else "run it again without the limit")
        return (f"{self.reason}: {self.output.flag} {self.output.path} holds a partial "
                f"{_bare(self.output.what)}; {go_on}")


def _bare(what: str) -> str:
    """``"a trace"`` -> ``"trace"`` (for "a partial trace")."""
    for article in ("a ", "an ", "the "):
        if what.startswith(article):
            return what[len(article):]
    return what


def claim_output(
    path: str | os.PathLike[str],
    *,
    what: str,
    error: type[BlockdraftError],
    overwrite: bool = False,
    resume: bool | None = None,
    folder: bool = True,
    flag: str = "-o",
    own: Sequence[str] | None = None,
    sidecars: Sequence[str] = (),
    prefix: bool = False,
    in_place: bool | None = None,
) -> Output:
    """Check that a command may write ``path`` (rules 1 and 2 of the module docstring).

    Args:
        path: the output (a folder when ``folder``, else a file).
        what: what the command writes there, for the messages (``"a trace"``, ``"heads"``).
        error: the calling room's error class.
        overwrite: the user passed ``--overwrite``.
        resume: the user passed ``--resume``; None when the command cannot resume.
        folder: the output is a folder (an empty folder counts as nothing there).
        flag: the option that names ``path``, for the messages (``"-o"``, ``"--plot"``).
        own: glob patterns of the names the command writes in a folder output; a folder it
            would replace or continue that holds anything else is refused, naming it (None:
            the command writes through a writer that checks this itself).
        sidecars: suffixes of the files a file output brings beside it (``".mix.json"``:
            ``P.mix.json`` beside ``P``); each is refused like the output itself.
        prefix: ``path`` is a prefix that only names the files (``sidecars``: ``ngram train
            -o lm`` writes ``lm.arpa``, ``lm.bin``, ...), not a file itself.
        in_place: the command fills the folder as it goes (a new one is written at ``path``,
            not built beside it and renamed in: rule 5); default: a folder it can continue.

    Returns:
        The :class:`Output`, with its mode.

    Raises:
        error: both flags given; a file where a folder is wanted or the reverse; an existing
            target (or sidecar) without a flag; a folder holding files the command does not
            write.
    """
    target = Path(path)
    if overwrite and resume:
        raise error("--overwrite starts afresh and --resume continues the earlier run; pass "
                    "one of them")
    if folder and target.exists() and not target.is_dir():
        raise error(f"{flag} {target} exists and is not a folder (it would be replaced by "
                    f"{what}); choose another path")
    beside = tuple(target.with_name(target.name + suffix) for suffix in sidecars)
    resumable = resume is not None
    fills = (folder and resumable) if in_place is None else (folder and in_place)
    allowed = bool(overwrite or resume)
    output = Output(target, what, "new", folder, flag, error, beside, resumable, prefix,
                    allowed, fills)
    for item in () if folder else output.group:
        if item.is_dir():
            raise error(f"{flag} {target}: {item} is a folder; give a file path for {what}")
    if folder:
        taken = [target] if target.is_dir() and any(target.iterdir()) else []
    else:
        taken = [item for item in output.group if item.exists()]
    if not taken:
        return output
    if not (resume or overwrite):
        flags = "--resume to continue it, " if resume is not None else ""
        there = (f"{target} already holds files" if folder
                 else f"{target} already exists" if taken[0] == target
                 else f"{target}: {taken[0]} already exists" if prefix
                 else f"{target} already has {taken[0].name} beside it")
        raise error(f"{flag} {there}; pass {flags}--overwrite to replace it with {what} (the "
                    "old content stays until the new one is complete), or choose a new path")
    if folder and own is not None:
        foreign = sorted(entry.name for entry in target.iterdir()
                         if not any(fnmatch.fnmatchcase(entry.name, p) for p in own))
        if foreign:
            shown = ", ".join(foreign[:_SHOWN]) + (", ..." if len(foreign) > _SHOWN else "")
            raise error(f"{flag} {target} holds files that are not part of {what} "
                        f"({shown}), and blockdraft never replaces what it did not write, not "
                        f"even with --{'resume' if resume else 'overwrite'}: move them away or "
                        "choose another folder")
    return Output(target, what, "resume" if resume else "overwrite", folder, flag, error,
                  beside, resumable, prefix, allowed, fills)
