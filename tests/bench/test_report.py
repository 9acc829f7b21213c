"""The benchmarks' one report writer (benchmarks/report.py): strict JSON beside Markdown."""

from __future__ import annotations

import json
import math
from pathlib import Path

from test_bench_real import _module  # noqa: E402  (beside this test)


def test_a_report_pair_is_strict_json_and_markdown(tmp_path: Path) -> None:
    report = _module("report")
    doc = {"command": report.command_line("bench_x.py", ["--out", "a b"]), "signature": "s:1",
           "rows": [{"B": 1.5, "speedup": math.nan}, {"B": math.inf}]}
    lines = [*report.header("A title", doc), "| B |", "|---|", "| 1.5 |"]
    paths = report.write_report(doc, tmp_path / "out", "x", "\n".join(lines))
    assert [p.name for p in paths] == ["x.json", "x.md"]
    back = json.loads(paths[0].read_text(), parse_constant=lambda c: 1 / 0)  # no NaN allowed
    assert back["rows"] == [{"B": 1.5, "speedup": None}, {"B": None}]
    assert back["command"] == "python benchmarks/bench_x.py --out 'a b'"
    page = paths[1].read_text()
    assert page.startswith("# A title\n\nCommand: `python benchmarks/bench_x.py --out 'a b'`")
    assert "Signature: `s:1`" in page and page.endswith("| 1.5 |\n")
    drawn: list[Path] = []
    paths = report.write_report(doc, tmp_path / "out", "y", lambda r: f"{r['rows'][0]}",
                                plot=lambda r, p: drawn.append(p))
    assert drawn == [tmp_path / "out" / "y.png"] and paths[-1] == drawn[0]
    assert paths[1].read_text() == "{'B': 1.5, 'speedup': None}\n"  # the page sees finite()
