"""Progress of the long head-training jobs (the data step and the training loop).

    log_line(message)       one line on standard error, flushed (the jobs' default ``log``)
    ProgressBar(label, total, done=0, enabled=True)
        .advance(n=1, info="") / .close()   a rich bar on a terminal, nothing elsewhere
"""

from __future__ import annotations

import sys
from typing import Any


def log_line(message: str) -> None:
    """Write ``message`` as one line to standard error and flush it (a long job's log stays
    current even when redirected to a file)."""
    print(message, file=sys.stderr, flush=True)


class ProgressBar:
    """A rich progress bar on standard error: ``label``, the bar, ``done/total``, a free
    ``info`` field (a rate, a loss) and the elapsed time. Drawn only when ``enabled`` and
    standard error is a terminal; elsewhere the jobs' log lines carry the progress."""

    def __init__(self, label: str, total: int, done: int = 0, enabled: bool = True) -> None:
        self.progress: Any = None
        if enabled and sys.stderr.isatty():
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.progress = Progress(
                TextColumn(label), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                TextColumn("{task.fields[info]}"), TimeElapsedColumn())
            self.progress.start()
            self.task = self.progress.add_task(label, total=total, completed=done, info="")

    def advance(self, n: int = 1, info: str = "") -> None:
        """Count ``n`` more done and show ``info``."""
        if self.progress is not None:
            self.progress.update(self.task, advance=n, info=info)

    def close(self) -> None:
        """Stop drawing (the last state stays on the terminal)."""
        if self.progress is not None:
            self.progress.stop()
