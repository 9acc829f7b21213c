"""Medusa head training on a distillation set (training/heads: positions, trainer).

Training lowers the held-out loss, returns the heads of the best evaluation and resumes to the
same heads as an uninterrupted run; a checkpoint of other settings is refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from heads_testlib import TRAIN, tiny_llama  # noqa: E402

from blockdraft.models.hf import MedusaHeads  # noqa: E402
from blockdraft.training import TrainingError  # noqa: E402
from blockdraft.training.heads import (  # noqa: E402
    HeadsTrainSettings,
    evaluate_heads,
    lm_head_weight,
    load_positions,
    train_heads,
)


def test_positions_line_up_with_the_answers(dataset: Any) -> None:
    data = load_positions(dataset, "train")
    shards = dataset.load("train")
    assert data.tokens == sum(s.num_tokens for s in shards)
    first = shards[0]
    m = first.answer_offsets[1]
    assert data.remaining[:m].tolist() == list(range(m - 1, -1, -1))
    assert data.targets[:m].tolist() == first.answer(0)


def test_training_lowers_the_heldout_loss(dataset: Any, tmp_path: Path) -> None:
    lm_head = lm_head_weight(tiny_llama(init=0.1))
    held = load_positions(dataset, "heldout")
    rows = held.usable()
    torch.manual_seed(0)
    fresh = MedusaHeads(32, None, 3)
    before = evaluate_heads(fresh, lm_head, held, rows, TRAIN)
    result = train_heads(dataset, lm_head, tmp_path / "w", TRAIN, log=None, progress=False)
    after = evaluate_heads(result.heads, lm_head, held, rows, TRAIN)
    assert result.finished and result.step == 40
    assert after["loss"] < 0.8 * before["loss"]
    assert [c["step"] for c in result.curve] == [10, 20, 30, 40]
    assert result.curve[-1]["positions"] == 40 * 64
    assert "heads:3" in result.signature and "lr:0.03" in result.signature
    curve = json.loads((tmp_path / "w" / "curve.json").read_text())
    assert curve["curve"][-1]["top1"] == result.curve[-1]["top1"]


def test_training_returns_the_heads_of_the_best_evaluation(dataset: Any, tmp_path: Path) -> None:
    lm_head = lm_head_weight(tiny_llama(init=0.1))
    held = load_positions(dataset, "heldout")
    run = HeadsTrainSettings(**{**TRAIN.__dict__, "eval_every": 5, "lr": 3.0, "warmup": 1,
                           "eval_positions": 10_000})
    result = train_heads(dataset, lm_head, tmp_path / "w", run, log=None, progress=False)
    means = [float(np.mean(c["top1"])) for c in result.curve]
    best = result.curve[int(np.argmax(means))]
    assert result.best_step == best["step"]
    scores = evaluate_heads(result.heads, lm_head, held, held.usable(), run)
    assert scores["top1"] == best["top1"]
    assert means[-1] < max(means)  # at this learning rate the last evaluation is not the best
    assert scores["top1"] != result.curve[-1]["top1"]


def test_resumed_training_equals_an_uninterrupted_run(dataset: Any, tmp_path: Path) -> None:
    lm_head = lm_head_weight(tiny_llama(init=0.1))
    whole = train_heads(dataset, lm_head, tmp_path / "a", TRAIN, log=None, progress=False)
    part = train_heads(dataset, lm_head, tmp_path / "b", TRAIN, stop_after=15, log=None,
                       progress=False)
    assert part.step == 15 and not part.finished
    resumed = train_heads(dataset, lm_head, tmp_path / "b", TRAIN, log=None, progress=False)
    assert resumed.step == 40
    for (name, a), (_, b) in zip(whole.heads.state_dict().items(),
                                 resumed.heads.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    assert resumed.curve[-1]["top1"] == whole.curve[-1]["top1"]
    with pytest.raises(TrainingError, match="other settings"):
        train_heads(dataset, lm_head, tmp_path / "b", HeadsTrainSettings(heads=2), log=None,
                    progress=False)


def test_the_seen_vocabulary_loss_trains_and_evaluation_ranks_the_full_one(
        dataset: Any, tmp_path: Path) -> None:
    lm_head = lm_head_weight(tiny_llama(init=0.1))
    train = load_positions(dataset, "train")
    assert torch.unique(train.targets).numel() < 100  # some tokens are never targets
    seen = HeadsTrainSettings(**{**TRAIN.__dict__, "vocab": "seen", "eval_positions": 10_000})
    result = train_heads(dataset, lm_head, tmp_path / "w", seen, log=None, progress=False)
    held = load_positions(dataset, "heldout")
    scores = evaluate_heads(result.heads, lm_head, held, held.usable(), seen)
    assert scores["top1"] == result.curve[-1]["top1"]
    assert result.curve[-1]["heldout_loss"] < result.curve[0]["heldout_loss"]
    assert "vocab:seen" in result.signature


def test_the_shortlist_loss_scores_the_heads_as_they_draft(dataset: Any, tmp_path: Path) -> None:
    """vocab="shortlist": held-out top-1/top-5 equal a brute-force ranking of the full
    logits with every token outside the shortlist (the most frequent training targets) at
    -inf, a target outside it counted as a miss; the size is in the signature."""
    from blockdraft.training.heads.positions import IGNORE, head_targets
    from blockdraft.training.heads.shortlist import frequency_shortlist

    lm_head = lm_head_weight(tiny_llama(init=0.1))
    train = load_positions(dataset, "train")
    size = 12
    assert torch.unique(train.targets).numel() > size  # some targets fall outside it
    short = HeadsTrainSettings(**{**TRAIN.__dict__, "vocab": "shortlist", "shortlist": size,
                                  "eval_positions": 10_000})
    result = train_heads(dataset, lm_head, tmp_path / "w", short, log=None, progress=False)
    assert "vocab:shortlist" in result.signature and f"shortlist:{size}" in result.signature
    ids = frequency_shortlist(np.bincount(train.targets.numpy(), minlength=100), size)
    held = load_positions(dataset, "heldout")
    rows = held.usable()
    with torch.no_grad():
        logits = result.heads(held.hidden[rows].float()) @ lm_head.T  # (B, n, V)
    outside = torch.ones(100, dtype=torch.bool)
    outside[torch.from_numpy(ids)] = False
    logits[..., outside] = -torch.inf
    targets = head_targets(held, rows, short.heads)
    valid = targets != IGNORE
    top5 = logits.topk(5, dim=-1).indices
    top1 = ((top5[..., 0] == targets) & valid).sum(0) / valid.sum(0)
    hit5 = ((top5 == targets[..., None]).any(-1) & valid).sum(0) / valid.sum(0)
    best = next(point for point in result.curve if point["step"] == result.best_step)
    assert best["top1"] == pytest.approx(top1.tolist())  # the heads returned are the best's
    assert best["top5"] == pytest.approx(hit5.tolist())
    assert torch.equal(result.heads.shortlist, torch.from_numpy(ids))  # they draft over it
    from blockdraft.training.heads.data_curve import head_topk

    assert torch.equal(head_topk(result.heads, lm_head, held, 5)[rows], top5)
    missed = valid & ~torch.isin(targets, torch.from_numpy(ids))
    assert bool(missed.any())  # the brute force above counted some misses by construction
    assert result.curve[-1]["heldout_loss"] < result.curve[0]["heldout_loss"]
    plain = train_heads(dataset, lm_head, tmp_path / "p", TRAIN, stop_after=1, log=None,
                        progress=False)
    assert "shortlist:" not in plain.signature  # recorded only where it is used


def test_kl_loss_trains_too(dataset: Any, tmp_path: Path) -> None:
    lm_head = lm_head_weight(tiny_llama(init=0.1))
    kl = HeadsTrainSettings(heads=2, steps=20, batch=64, lr=3e-3, warmup=5, eval_every=20,
                       loss="kl")
    result = train_heads(dataset, lm_head, tmp_path / "w", kl, log=None, progress=False)
    assert result.step == 20 and np.isfinite(result.curve[-1]["heldout_loss"])




def test_a_changed_training_setting_is_named(dataset: Any, tmp_path: Path) -> None:
    lm_head = lm_head_weight(tiny_llama(init=0.1))
    train_heads(dataset, lm_head, tmp_path / "w", TRAIN, stop_after=2, log=None, progress=False)
    other = HeadsTrainSettings(**{**TRAIN.__dict__, "heads": 2, "lr": 0.01})
    with pytest.raises(TrainingError, match=r"heads=3 \(now 2\), lr=0.03 \(now 0.01\)"):
        train_heads(dataset, lm_head, tmp_path / "w", other, log=None, progress=False)


def test_an_interrupt_before_the_first_checkpoint_leaves_no_folder(
        dataset: Any, tmp_path: Path, monkeypatch: Any) -> None:
    """Issue 23: an interrupt before the first checkpoint left an empty training folder
    (``medusa-train/<key>`` in the cache)."""
    import blockdraft.training.heads.trainer as trainer

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    lm_head = lm_head_weight(tiny_llama(init=0.1))
    monkeypatch.setattr(trainer, "heads_loss", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train_heads(dataset, lm_head, tmp_path / "cache" / "w", TRAIN, log=None,
                    progress=False)
    assert not (tmp_path / "cache" / "w").exists()
    monkeypatch.undo()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    with pytest.raises(TrainingError, match="not a head-training folder"):
        train_heads(dataset, lm_head, mine, TRAIN, log=None, progress=False)
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]


def test_a_warm_start_continues_from_given_heads(dataset: Any, tmp_path: Path) -> None:
    """``init``: the run starts from those heads' weights (its first evaluation is theirs,
    not a random start's), records them in its settings (a checkpoint of a cold run is not
    continued by a warm one), and refuses heads of another shape or architecture."""
    from blockdraft.models.hf.prefix_heads import PrefixHeads

    lm_head = lm_head_weight(tiny_llama(init=0.1))
    held = load_positions(dataset, "heldout")
    first = train_heads(dataset, lm_head, tmp_path / "a", TRAIN, log=None, progress=False)
    trained = evaluate_heads(first.heads, lm_head, held, held.usable(), TRAIN)
    warm = HeadsTrainSettings(**{**TRAIN.__dict__, "init": "first@x", "lr": 1e-9,
                                 "warmup": 1})
    again = train_heads(dataset, lm_head, tmp_path / "b", warm, log=None, progress=False,
                        init=first.heads)
    scores = evaluate_heads(again.heads, lm_head, held, held.usable(), warm)
    assert scores["loss"] == pytest.approx(trained["loss"], rel=1e-4)  # lr ~ 0: kept
    cold = train_heads(dataset, lm_head, tmp_path / "c", TRAIN, stop_after=5, log=None,
                       progress=False)
    assert cold.step == 5
    assert "init:first@x" in again.signature and "init" not in cold.signature
    with pytest.raises(TrainingError, match="other settings"):
        train_heads(dataset, lm_head, tmp_path / "c", warm, log=None, progress=False,
                    init=first.heads)
    with pytest.raises(TrainingError, match="pass both or neither"):
        train_heads(dataset, lm_head, tmp_path / "d", warm, log=None, progress=False)
    with pytest.raises(TrainingError, match="differ in shape"):
        train_heads(dataset, lm_head, tmp_path / "e", warm, log=None, progress=False,
                    init=MedusaHeads(32, None, 2))
    with pytest.raises(TrainingError, match="are prefix heads, the run's arch is medusa"):
        train_heads(dataset, lm_head, tmp_path / "f", warm, log=None, progress=False,
                    init=PrefixHeads(32, 3))
