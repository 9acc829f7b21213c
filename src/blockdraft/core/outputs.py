"""The one rule every command that writes an output follows before it touches anything.

A command never replaces what is already at its output path unless told to: an existing
non-empty target is refused unless the user passes ``--overwrite`` (replace it, once the new
output is complete: the writers are atomic, :mod:`blockdraft.core.files`) or, where the command
can continue earlier work, ``--resume``. A file where a folder is wanted (or the reverse) is
always refused: it is never what the user meant.

Public surface:
    output_mode(path, *, what, error, overwrite=False, resume=None, folder=True, flag="-o")
        -> "new" | "resume" | "overwrite", or ``error`` naming the path and the flags
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from blockdraft.core.errors import BlockdraftError

OutputMode = Literal["new", "resume", "overwrite"]


def output_mode(
    path: str | os.PathLike[str],
    *,
    what: str,
    error: type[BlockdraftError],
    overwrite: bool = False,
    resume: bool | None = None,
    folder: bool = True,
    flag: str = "-o",
) -> OutputMode:
    """How a command may write ``path``.

    Args:
        path: the output (a folder when ``folder``, else a file).
        what: what the command writes there, for the messages (``"a trace"``, ``"heads"``).
        error: the calling room's error class.
        overwrite: the user passed ``--overwrite``.
        resume: the user passed ``--resume``; None when the command cannot resume.
        folder: the output is a folder (an empty folder counts as nothing there).
        flag: the option that names ``path``, for the messages (``"-o"``, ``"--plot"``).

    Returns:
        ``"new"`` (nothing there, or an empty folder), ``"resume"`` or ``"overwrite"``.

    Raises:
        error: both flags given; a file where a folder is wanted or the reverse; an existing
            target without a flag.
    """
    target = Path(path)
    if overwrite and resume:
        raise error("--overwrite starts afresh and --resume continues the earlier run; pass "
                    "one of them")
    if folder and target.exists() and not target.is_dir():
        raise error(f"{flag} {target} exists and is not a folder (it would be replaced by "
                    f"{what}); choose another path")
    if not folder and target.is_dir():
        raise error(f"{flag} {target} is a folder; give a file path for {what}")
    taken = (target.is_dir() and any(target.iterdir())) if folder else target.exists()
    if not taken:
        return "new"
    if resume:
        return "resume"
    if overwrite:
        return "overwrite"
    flags = "--resume to continue it, " if resume is not None else ""
    there = "already holds files" if folder else "already exists"
    raise error(f"{flag} {target} {there}; pass {flags}--overwrite to replace it with {what} "
                "(the old content stays until the new one is complete), or choose a new path")
