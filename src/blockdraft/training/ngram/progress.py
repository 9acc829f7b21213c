"""Progress bars of the long n-gram jobs: one rich bar per stage on standard error.

Public surface:
    StageBars(enabled)      .stage(description, total) -> done(n); .close()
    stage_bars(enabled)     a context manager around StageBars that closes it
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class StageBars:
    """Rich progress bars on standard error, one per stage (drawn only when enabled and
    standard error is a terminal)."""

    def __init__(self, enabled: bool) -> None:
        self._progress: Any = None
        if enabled and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TimeElapsedColumn(), console=Console(stderr=True))
            self._progress.start()

    def stage(self, description: str, total: int | None) -> Callable[[int], None]:
        """A new bar; returns ``done(n)``, which sets how much of ``total`` is done."""
        if self._progress is None:
            return lambda n: None
        task = self._progress.add_task(description, total=total)
        return lambda n: self._progress.update(task, completed=n)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()


@contextmanager
def stage_bars(enabled: bool) -> Iterator[StageBars]:
    bars = StageBars(enabled)
    try:
        yield bars
    finally:
        bars.close()
