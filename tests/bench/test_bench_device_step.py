"""benchmarks/bench_device_step.py end to end on a tiny random Llama (``--tiny``, CPU): every row
(greedy, vanilla heads and the 16-node Medusa tree, on the host path and with the whole step on
the device) decodes losslessly in float32, runs in bfloat16, and the report holds each row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from benchmarks import bench_device_step  # noqa: E402


def test_tiny_run_reports_every_row(tmp_path: Path) -> None:
    assert bench_device_step.main(["--tiny", "--dtype", "float32", "--dtype", "bfloat16",
                                   "--prompts", "2", "--max-new-tokens", "12",
                                   "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "device.json").read_text())
    assert "precisions:float32,bfloat16" in report["signature"]
    want = set(bench_device_step.rows_of(3))
    assert {"vanilla heads (device step)", "medusa tree N=16 (device step)"} <= want
    for precision in ("float32", "bfloat16"):
        part = report["precisions"][precision]
        assert set(part["rows"]) == want
        for name, row in part["rows"].items():
            assert row["B"] >= 1.0 and row["tokens"] == 24
            if precision == "float32":
                assert row["identical"] == 2, name
            if name.endswith(bench_device_step.DEVICE):
                assert row["host_ms"] >= 0 and row["device_ms"] > 0
    assert report["precisions"]["float32"]["rows"]["greedy (graph)"]["speedup"] == 1.0
    assert "| medusa tree N=16 (device step) |" in (tmp_path / "device.md").read_text()
