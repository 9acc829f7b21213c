"""The data curve of trained Medusa heads (training/heads/data_curve): every held-out
position scored, the chain block efficiency equal to decoding and to the oracle simulation.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

from heads_testlib import EOS, TRAIN, tiny_llama, tiny_prompts  # noqa: E402

from blockdraft.models.hf import HFBlockwiseModel, read_heads  # noqa: E402
from blockdraft.training import TrainingError  # noqa: E402
from blockdraft.training.heads import (  # noqa: E402
    evaluate_heads,
    lm_head_weight,
    load_positions,
    train_heads,
    write_trained_heads,
)
from blockdraft.verify import decode  # noqa: E402


def test_the_data_curve_scores_every_heldout_position_of_each_run(
        dataset: Any, tmp_path: Path) -> None:
    from blockdraft.training.heads.data_curve import read_run, score_runs, write_data_curve

    lm_head = lm_head_weight(tiny_llama(init=0.1))
    result = train_heads(dataset, lm_head, tmp_path / "w", TRAIN, log=None, progress=False)
    folder = write_trained_heads(result, tmp_path / "heads", "tiny")
    trained, written = read_run(tmp_path / "w"), read_run(folder)
    held = load_positions(dataset, "heldout")
    train = load_positions(dataset, "train")
    for run, weights in ((trained, result.heads), (written, read_heads(folder).float())):
        assert run.prompts == train.prompts and run.step == result.best_step
        assert abs(run.tokens - train.tokens) <= 500  # the signature rounds to thousands
        direct = evaluate_heads(weights, lm_head, held, held.usable(), TRAIN)
        (row,) = score_runs([run], dataset, lm_head, log=None)
        assert row["top1"] == pytest.approx(direct["top1"], abs=1e-6)
        assert row["top5"] == pytest.approx(direct["top5"], abs=1e-6)
        assert row["positions"][0] == held.usable().numel()  # every usable position, not a sample
    rows = score_runs([written, trained], dataset, lm_head, log=None)
    out = write_data_curve(rows, tmp_path / "curve", command="make-it")
    written_rows = json.loads((out / "data_curve.json").read_text())["runs"]
    assert [r["path"] for r in written_rows] == [r["path"] for r in rows]
    assert "Command: `make-it`" in (out / "data_curve.md").read_text()
    assert (out / "data_curve.png").stat().st_size > 0
    assert f"{rows[0]['mean_top1']:.3f}" in (out / "data_curve.md").read_text()


def test_the_chain_block_efficiency_equals_decoding_the_heldout_prompts(
        dataset: Any, tmp_path: Path) -> None:
    from blockdraft.oracle import Oracle, simulate
    from blockdraft.oracle.record import record_trace
    from blockdraft.training.heads.data_curve import chain_block_efficiency, head_topk

    base = tiny_llama(init=0.1)
    result = train_heads(dataset, lm_head_weight(base), tmp_path / "w", TRAIN, log=None,
                         progress=False)
    held = load_positions(dataset, "heldout")
    topk = head_topk(result.heads, lm_head_weight(base), held, 5)
    model: Any = HFBlockwiseModel(base, result.heads)
    prompts = tiny_prompts(120, seed=5)
    heldout = [prompts[i] for i in dataset.plan["heldout"]]
    decoded = [decode(model, prompt, max_new_tokens=32, eos_id=EOS, k=1, p=1)
               for prompt in heldout]
    tokens = sum(len(r.tokens) for r in decoded)
    assert tokens == held.tokens  # the same greedy answers
    vanilla = tokens / sum(r.calls for r in decoded)
    assert chain_block_efficiency(topk, held, 1) == pytest.approx(vanilla, abs=1e-12)
    assert vanilla > 1.2  # the heads do accept tokens: the comparison is not 1 == 1
    trace = record_trace(model, heldout, tmp_path / "trace", max_new_tokens=32, eos_id=EOS, K=5)
    for k in (2, 5):
        oracle = simulate(trace, Oracle(k)).block_efficiency
        assert chain_block_efficiency(topk, held, k) == pytest.approx(oracle, abs=1e-12)
    with pytest.raises(TrainingError, match="k = 6"):
        chain_block_efficiency(topk, held, 6)


def test_the_data_curve_reads_rounded_counts_and_refuses_other_folders(tmp_path: Path) -> None:
    from blockdraft.core.signature import human_count
    from blockdraft.training.heads.data_curve import (
        _count,
        read_run,
        signature_fields,
        write_data_curve,
    )

    for n in (950, 53_412, 186_020, 1_234_567):
        assert abs(_count(human_count(n), tmp_path) - n) <= max(0.5, 0.051 * n)
    assert signature_fields("a:1|heldout:200p/21k|b:x:y") == {
        "a": "1", "heldout": "200p/21k", "b": "x:y"}
    with pytest.raises(TrainingError, match="neither trained heads"):
        read_run(tmp_path)
    with pytest.raises(TrainingError, match="no runs"):
        write_data_curve([], tmp_path / "out")
    assert not (tmp_path / "out").exists()


