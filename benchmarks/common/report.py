"""The one writer of the benchmarks' reports: ``<stem>.json`` (strict JSON) beside
``<stem>.md`` (and a ``<stem>.png`` where the benchmark draws one), each written atomically, each
carrying the command and the signature that made it.

    command_line(module, argv) -> str      "python -m <module> <argv...>" (shell-quoted)
    header(title, report) -> list[str]     a page's Markdown title, command and signature lines
    finite(report) -> report               every non-finite float as None (strict JSON)
    write_report(report, out, stem, markdown, plot=None) -> [paths]
    save_figure(fig, path, report, width=200, top=1.0)   a PNG captioned with the command and
                                                          signature
    cpu_busy(seconds=2.0) -> float | None  the share of the machine's CPU time in use now
    log(msg)                               a timestamped progress line on stderr
"""

from __future__ import annotations

import json
import math
import shlex
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def cpu_busy(seconds: float = 2.0, stat: Path = Path("/proc/stat")) -> float | None:
    """The share (0..1) of all cores' time spent busy over the next ``seconds`` (the caller
    idle meanwhile: what other processes use), from ``/proc/stat``; None where it does not
    exist. Unlike the load average, which decays over a minute, it says whether the machine is
    busy now (a job that ended seconds ago does not count)."""

    def sample() -> tuple[int, int] | None:
        try:
            fields = stat.read_text().splitlines()[0].split()[1:]
        except (OSError, IndexError):
            return None
        ticks = [int(v) for v in fields]
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
        return sum(ticks), idle

    first = sample()
    if first is None:
        return None
    time.sleep(seconds)
    second = sample()
    if second is None or second[0] <= first[0]:
        return None
    total, idle = second[0] - first[0], second[1] - first[1]
    return max(0.0, min(1.0, 1.0 - idle / total))


def command_line(module: str, argv: Sequence[str] | None) -> str:
    """How the benchmark was run: ``python -m <module>`` (``benchmarks.bench_real``, run from
    the repository root) and its arguments, quoted."""
    args = sys.argv[1:] if argv is None else list(argv)
    return " ".join(["python", "-m", module, *(shlex.quote(a) for a in args)])


def log(msg: str) -> None:
    """``msg`` as one progress line on stderr, after the wall-clock time (``[HH:MM:SS]``)."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def header(title: str, report: dict[str, Any]) -> list[str]:
    """The first lines of a report's Markdown page: its title, command and signature."""
    return [f"# {title}", "", f"Command: `{report['command']}`", "",
            f"Signature: `{report['signature']}`", ""]


def finite(x: Any) -> Any:
    """The report with every non-finite float as None and numpy scalars as Python's (strict
    JSON: no NaN or Infinity)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    if isinstance(x, np.generic):
        return finite(x.item())
    return x


def write_report(report: dict[str, Any], out: Path, stem: str,
                 markdown: str | Callable[[dict[str, Any]], str],
                 plot: Callable[[dict[str, Any], Path], None] | None = None) -> list[Path]:
    """Write ``<stem>.json`` (strict JSON of :func:`finite`), ``<stem>.md`` (``markdown``: the
    page, or a function of the report that makes it) and, with ``plot``, ``<stem>.png`` in
    ``out``, each atomically. Returns their paths."""
    from blockdraft.core.files import write_text_atomic

    report = finite(report)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.json", out / f"{stem}.md"]
    page = markdown if isinstance(markdown, str) else markdown(report)
    write_text_atomic(paths[0], json.dumps(report, indent=1, allow_nan=False) + "\n")
    write_text_atomic(paths[1], page if page.endswith("\n") else page + "\n")
    if plot is not None:
        paths.append(out / f"{stem}.png")
        plot(report, paths[2])
    return paths


def save_figure(fig: Any, path: Path, report: dict[str, Any], width: int = 200,
                top: float = 1.0) -> None:
    """Caption ``fig`` with the report's command and signature (wrapped at ``width``
    characters), lay it out below ``top`` (a title above) and write it as PNG atomically."""
    import matplotlib.pyplot as plt

    from blockdraft.core.files import atomic_path

    caption = "\n".join([report["command"], *textwrap.wrap(report["signature"], width,
                                                            break_on_hyphens=False)])
    fig.text(0.01, 0.005, caption, fontsize=5, family="monospace", va="bottom")
    fig.tight_layout(rect=(0, 0.02 * (caption.count("\n") + 2), 1, top))
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=130)
    plt.close(fig)
