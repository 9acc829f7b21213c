"""benchmarks/bench_static_host.py end to end on a tiny random Llama (``--tiny``): every
strategy decodes losslessly on the static runtime and the report splits each step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from benchmarks import bench_static_host  # noqa: E402


def test_tiny_run_writes_the_split_and_stays_lossless(tmp_path: Path, capsys: object) -> None:
    assert bench_static_host.main(["--tiny", "--max-new-tokens", "12", "--repeats", "1",
                                   "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "host.json").read_text())
    assert "runtime:static" in report["signature"]
    assert set(report["rows"]) == {*bench_static_host.strategies(), bench_static_host.NGRAM_ROW}
    assert "ngram:tiny4.bin" in report["signature"]
    for row in report["rows"].values():
        assert row["identical"] == row["prompts"] == 2 and row["B"] >= 1.0
        split = row["split"]
        assert all(split[k] >= 0 for k in ("forward", "heads", "host", "lattice", "draft"))
    assert report["rows"]["vanilla heads"]["budget_ms"] == 0.3
    assert report["rows"][bench_static_host.NGRAM_ROW]["budget_ms"] == 1.0
    assert "| vanilla heads |" in (tmp_path / "host.md").read_text()
