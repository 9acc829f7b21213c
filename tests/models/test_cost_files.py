"""read_cost_curve: the two kinds of file in benchmarks/results/costs, and what it refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from blockdraft.models.cost import CostCurve, read_cost_curve
from blockdraft.models.errors import ModelError


def test_a_curve_file_and_a_runtime_comparison(tmp_path: Path) -> None:
    curve = CostCurve(nodes=(1, 2, 8), step_ms=(10.0, 11.0, 20.0), heads_ms=1.0, greedy_ms=9.0)
    (tmp_path / "curve.json").write_text(json.dumps({**curve.to_dict(), "command": "x"}))
    assert read_cost_curve(tmp_path / "curve.json") == curve
    rows = [{"variant": v, "greedy_ms": g, "verify_ms": {"1": g + 1, "4": g + 3, "2": g + 5}}
            for v, g in (("torch:float32", 60.0), ("onnxruntime:float32", 35.0))]
    (tmp_path / "costs.json").write_text(json.dumps({"rows": rows}))
    got = read_cost_curve(tmp_path / "costs.json", "onnxruntime:float32")
    assert got.nodes == (1, 2, 4) and got.greedy_ms == 35.0 and got.heads_ms == 0.0
    assert got.step_ms == (36.0, 39.0, 39.0)  # 40 then 38 pooled: non-decreasing in N
    with pytest.raises(ModelError, match="name one"):
        read_cost_curve(tmp_path / "costs.json")
    with pytest.raises(ModelError, match="no variant 'gpu'"):
        read_cost_curve(tmp_path / "costs.json", "gpu")
    with pytest.raises(ModelError, match="holds one curve"):
        read_cost_curve(tmp_path / "curve.json", "torch:float32")
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(ModelError, match="not a cost curve"):
        read_cost_curve(tmp_path / "bad.json")


def test_the_committed_curves_read() -> None:
    costs = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "costs"
    if not (costs / "costs.json").is_file():
        pytest.skip("benchmarks/results/costs is not in this checkout")
    curve = read_cost_curve(costs / "curve-ort32.json")
    assert curve.relative(1, heads=False) == 1.0
    ort = read_cost_curve(costs / "costs.json", "onnxruntime:float32")
    steps = ort.step_ms
    assert ort.nodes[0] == 1 and all(b >= a for a, b in zip(steps, steps[1:], strict=False))
