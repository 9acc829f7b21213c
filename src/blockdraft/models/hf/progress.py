"""Progress lines of the long head-training jobs (the data step and the training loop).

    log_line(message)       one line on standard error, flushed (the jobs' default ``log``)
"""

from __future__ import annotations

import sys


def log_line(message: str) -> None:
    """Write ``message`` as one line to standard error and flush it (a long job's log stays
    current even when redirected to a file)."""
    print(message, file=sys.stderr, flush=True)
