"""The benchmarks' one report writer (benchmarks/common/report.py): strict JSON beside Markdown."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from benchmarks.common import report as report_module


def test_a_report_pair_is_strict_json_and_markdown(tmp_path: Path) -> None:
    report = report_module
    doc = {"command": report.command_line("benchmarks.bench_x", ["--out", "a b"]),
           "signature": "s:1", "rows": [{"B": 1.5, "speedup": math.nan}, {"B": math.inf}]}
    lines = [*report.header("A title", doc), "| B |", "|---|", "| 1.5 |"]
    paths = report.write_report(doc, tmp_path / "out", "x", "\n".join(lines))
    assert [p.name for p in paths] == ["x.json", "x.md"]
    back = json.loads(paths[0].read_text(), parse_constant=lambda c: 1 / 0)  # no NaN allowed
    assert back["rows"] == [{"B": 1.5, "speedup": None}, {"B": None}]
    assert back["command"] == "python -m benchmarks.bench_x --out 'a b'"
    page = paths[1].read_text()
    assert page.startswith("# A title\n\nCommand: `python -m benchmarks.bench_x --out 'a b'`")
    assert "Signature: `s:1`" in page and page.endswith("| 1.5 |\n")
    drawn: list[Path] = []
    paths = report.write_report(doc, tmp_path / "out", "y", lambda r: f"{r['rows'][0]}",
                                plot=lambda r, p: drawn.append(p))
    assert drawn == [tmp_path / "out" / "y.png"] and paths[-1] == drawn[0]
    assert paths[1].read_text() == "{'B': 1.5, 'speedup': None}\n"  # the page sees finite()


def test_cpu_busy_reads_the_share_of_cpu_time_in_use(tmp_path: Path) -> None:
    """From two samples of ``/proc/stat``: busy = 1 - (idle + iowait) / total over the window;
    None without the file."""
    import threading

    report = report_module
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq
    stat.write_text("cpu  100 0 50 800 50 0 0\ncpu0 1 2 3 4\n")

    def later() -> None:
        time.sleep(0.05)  # during the window: 60 more busy ticks, 40 more idle
        stat.write_text("cpu  140 0 70 830 60 0 0\n")

    thread = threading.Thread(target=later)
    thread.start()
    got = report.cpu_busy(0.3, stat)
    thread.join()
    assert got == pytest.approx(60 / 100)
    assert report.cpu_busy(0.01, tmp_path / "absent") is None
    real = report.cpu_busy(0.05)
    assert real is None or 0.0 <= real <= 1.0
