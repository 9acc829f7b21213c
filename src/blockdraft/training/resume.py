"""Where a run may start or go on, and what a resumed run must share with the run it
continues.

Every resumable writer of the training room (the blockwise checkpoints, the distillation
folders, the head-training checkpoints) works in a folder that is new, empty or its own (it
holds the writer's marker file), never among a user's files; and it refuses to continue work
made with other settings, naming each changed setting with its old and new value.

Public surface:
    check_run_folder(folder, marker, what) -> Path             new, empty, or holds ``marker``
    changed_settings(saved, now, may_change=()) -> list[str]   ``"name=old (now new)"``
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from blockdraft.training.errors import TrainingError


def check_run_folder(folder: str | os.PathLike[str], marker: str, what: str) -> Path:
    """``folder`` as a path, if a run can start there (nothing there, or an empty folder) or go
    on there (it holds ``marker``, the file that run writes first).

    Raises:
        TrainingError: a file, or a folder of other files (they are a user's, not a run's),
            naming ``what`` the folder would have to be.
    """
    root = Path(folder)
    if (root / marker).is_file() or not root.exists():
        return root
    if not root.is_dir() or any(root.iterdir()):
        raise TrainingError(f"{str(root)!r} is not {what} (it holds no {marker}) and is not an "
                            "empty folder; choose a new or empty folder")
    return root


def changed_settings(saved: Mapping[str, Any], now: Mapping[str, Any],
                     may_change: Collection[str] = ()) -> list[str]:
    """The settings of ``now`` whose value differs from ``saved``, sorted by name, each as
    ``"name=old (now new)"`` (``old`` is None when ``saved`` lacks it); names in
    ``may_change`` are left out."""
    return [f"{key}={saved.get(key)!r} (now {now[key]!r})"
            for key in sorted(now) if key not in may_change and saved.get(key) != now[key]]
