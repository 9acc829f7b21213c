"""benchmarks/bench_sweep.py on a tiny trace: every engine it times gives the same rows, and its
page says so (the timed SmolLM2 run is `make bench-sweep`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("engines", [
    "serial,processes",
    pytest.param("serial,ray", marks=pytest.mark.slow),  # a local Ray starts: ~10 s
])
def test_the_sweep_benchmark_on_a_tiny_trace(tmp_path: Path, engines: str) -> None:
    from blockdraft.oracle import synthetic_trace

    if "ray" in engines:
        pytest.importorskip("ray", reason="Ray is the blockdraft[ray] extra; not installed")
    synthetic_trace(tmp_path / "trace", num_examples=4, h=4, K=8, V=30, seed=2,
                    length=(10, 30))
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_sweep", "--trace", str(tmp_path / "trace"),
         "--k", "2,4", "--p", "1,2", "--alpha", "1", "--engines", engines,
         "--out", str(tmp_path / "out")], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert report["identical"] is True and report["configurations"] == 3
    assert [r["engine"] for r in report["runs"]] == [
        {"processes": "processes:2", "ray": "ray:local:2"}.get(e, e) for e in engines.split(",")]
    assert all(r["wall_s"] > 0 for r in report["runs"])
    page = (tmp_path / "out" / "sweep.md").read_text()
    assert "bit for bit: **True**" in page and "| vanilla |" in page
    assert (tmp_path / "out" / "sweep.png").read_bytes()[:4] == b"\x89PNG"
