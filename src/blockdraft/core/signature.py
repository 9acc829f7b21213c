"""Reproducibility signatures: every reported number carries the settings that produced it.

In the style of sacrebleu, a signature is ``key:value`` pairs joined by ``|``, e.g.
``lm:lm4.bin|ngrams:6.6M|order:4|kind:hits|h:8|k:16|p:16|alpha:1.0|backend:exact|n:200|
device:cpu(2)|version:0.1.0|commit:42ce341``. The machine fields are added by
:func:`environment`.
"""

from __future__ import annotations

import os
import subprocess
from functools import lru_cache
from pathlib import Path

from blockdraft.core.version import __version__


@lru_cache(maxsize=1)
def git_commit() -> str:
    """Short commit of the blockdraft checkout (``"unknown"`` outside a git checkout); a
    ``+dirty`` suffix marks uncommitted changes to tracked files other than benchmark results
    (which a benchmark run itself rewrites)."""
    root = Path(__file__).resolve().parents[3]
    try:
        sha = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, check=True, timeout=5,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--",
             ".", ":!benchmarks/results"],
            capture_output=True, text=True, check=True, timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return sha + ("+dirty" if dirty else "")


def environment(device: str = "cpu") -> dict[str, str]:
    """Machine and code fields of a signature."""
    cores = os.cpu_count() or 0
    dev = f"cpu({cores})" if device == "cpu" else device
    return {"device": dev, "version": __version__, "commit": git_commit()}


def format_signature(fields: dict[str, object]) -> str:
    """``key:value|key:value`` in the given order (values stringified, ``|`` escaped)."""
    return "|".join(f"{k}:{str(v).replace('|', '/')}" for k, v in fields.items())


def human_count(n: int) -> str:
    """``6559809 -> '6.6M'``, ``12000 -> '12k'``."""
    if n >= 1_000_000:
        return f"{n / 1e6:.1f}M"
    if n >= 1_000:
        return f"{n / 1e3:.0f}k"
    return str(n)
