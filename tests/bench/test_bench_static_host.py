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


def test_null_forward_run_splits_every_drafters_step(tmp_path: Path) -> None:
    """``--null-forward``: the static runtime with a null body (issue 41's host time per step
    on a CPU); every drafter, the default included, decodes its null model's greedy output."""
    assert bench_static_host.main(["--tiny", "--null-forward", "--max-new-tokens", "10",
                                   "--repeats", "1", "--ngram", "none",
                                   "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "host.json").read_text())
    assert "forward:null" in report["signature"] and report["null_forward"] is True
    assert set(report["rows"]) == set(bench_static_host.strategies())
    assert "default" in report["rows"]
    for name, row in report["rows"].items():
        assert row["identical"] == row["prompts"] == 2
        s = row["split"]
        assert s["step"] >= s["outside"] >= s["host"] >= 0
        if name.endswith(bench_static_host.DEVICE):  # the heads, lattice and draft on the device
            assert s["heads"] == s["lattice"] == s["draft"] == 0 and s["outside"] == s["host"]
    assert "with a null forward" in (tmp_path / "host.md").read_text()
    with pytest.raises(SystemExit):
        bench_static_host.main(["--tiny", "--null-forward", "--runtime", "torch",
                                "--out", str(tmp_path / "x")])
    with pytest.raises(SystemExit):
        bench_static_host.main(["--tiny", "--strategy", "nonsense", "--out", str(tmp_path / "y")])


def test_one_strategy_in_bfloat16(tmp_path: Path) -> None:
    """What the GPU check runs per head kind and dtype: the default drafter alone."""
    assert bench_static_host.main(["--tiny", "--dtype", "bfloat16", "--strategy", "default",
                                   "--max-new-tokens", "8", "--repeats", "1", "--ngram", "none",
                                   "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "host.json").read_text())
    assert list(report["rows"]) == ["default"] and "precision:bfloat16" in report["signature"]


def test_the_null_body_replaces_the_forward_and_comes_back() -> None:
    import torch

    from benchmarks.common.stand_ins import tiny_model
    from blockdraft.models.runtimes.static import StaticKVModel

    model = StaticKVModel(tiny_model(), capacity=64, buckets=(1, 2, 4))
    ids = torch.tensor([[5, 9, 2]])
    real, _ = model.hidden(ids)
    model.use_body(bench_static_host.null_body(model))
    null, _ = model.hidden(ids)
    assert torch.equal(null, model.model.base.get_input_embeddings()(ids))
    model.use_body(None)
    assert torch.equal(model.hidden(ids)[0], real)
