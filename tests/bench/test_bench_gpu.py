"""benchmarks/bench_gpu.py and benchmarks/common/replay.py end to end on a CPU (``--tiny``): a
replay file recorded from a tiny decode, replayed on random weights at the recorded B with
outputs equal to greedy, the CUDA-graph runtime skipped with its reason, transformers' generate
beside it (about 12 s)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from benchmarks import bench_gpu  # noqa: E402
from benchmarks.common import replay  # noqa: E402


def test_tiny_cpu_run_replays_the_recorded_steps(tmp_path: Path) -> None:
    trace = tmp_path / "replay.json"
    assert replay.main(["--tiny", "--max-new-tokens", "12", "--out", str(trace)]) == 0
    data = replay.load_replay(trace)
    assert set(data["strategies"]) == set(replay.strategies())
    assert bench_gpu.main(["--device", "cpu", "--tiny", "--precisions", "float32",
                           "--replay", str(trace), "--out", str(tmp_path / "out")]) == 0
    report = json.loads((tmp_path / "out" / "gpu.json").read_text())
    assert not report["pending"] and "gpu:none" in report["signature"]
    cost = report["costs"][0]
    assert set(cost["ms"]) == {"eager", "static"} and "CUDA" in cost["skipped"]["graph"]
    assert all(t["met"] is None for t in cost["targets"].values())
    e2e = report["e2e"][0]
    assert e2e["mode"] == "replay" and e2e["runtime"] == "static"
    for name in replay.strategies():
        row = e2e["rows"][name]
        assert row["identical"] == e2e["prompts"] == 2
        assert row["B"] == pytest.approx(row["recorded_B"])  # the exact shapes replayed
    peers = report["peers"][0]["rows"]
    assert {"HF generate greedy, dynamic cache", "HF generate greedy, static cache",
            "HF generate prompt lookup (n=10)"} <= set(peers)
    page = (tmp_path / "out" / "gpu.md").read_text()
    assert "vanilla heads (replay)" in page and "skipped: CUDA graphs need a CUDA device" in page
    assert (tmp_path / "out" / "gpu.png").is_file()
