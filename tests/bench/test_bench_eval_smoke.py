"""The evaluation harness end to end on tiny models (benchmarks/bench_eval.py --smoke)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.mark.slow
@pytest.mark.needs_data
@pytest.mark.skipif(not (SHARED_DATA / "corpus").is_dir(),
                    reason="../shared/data is absent (the harness reads the real tasks)")
def test_smoke_run_writes_every_table_and_stays_lossless(tmp_path: Path) -> None:
    env = {**os.environ, "BLOCKDRAFT_CACHE": str(tmp_path / "cache")}
    out = tmp_path / "results"
    subprocess.run([sys.executable, "-m", "benchmarks.bench_eval", "--smoke",
                    "--out", str(out)], check=True, env=env, cwd=REPO, timeout=1500)
    report = json.loads((out / "eval.json").read_text())
    assert set(report["tasks"]) == {"llm-wikitext", "squad"}
    for task in report["tasks"].values():
        b = task["B"]
        assert 1.0 <= b["vanilla-h3"] <= 3.0 and 1.0 <= b["vanilla-h6"] <= 6.0
        assert all(1.0 <= v <= 9.0 for v in b.values())
        assert task["pcurve"]["0-gram"]["1"] == pytest.approx(b["vanilla"])
    assert all(row["lossless"] for row in report["e2e"]["rows"])
    md = (out / "eval.md").read_text()
    for title in ("Kim Table 1", "Kim Table 4", "Kim Table 3", "Kim Table 5", "Kim Fig. 3",
                  "Kim Fig. 6", "Kim Fig. 7", "Kim Table 8", "Table 12", "Table 13",
                  "End to end"):
        assert title in md
    for png in ("eval_entropy.png", "eval_hmax_vs_B.png", "eval_oracle.png", "eval_pbest.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
