"""Decoding with a trained EAGLE draft layer (models/heads/eagle on the torch runtime): every
held-out answer is the base's greedy one with the chain, EAGLE-2's tree, the cost-aware tree
with lookup copies and the n-gram rescored tree; the chain's online B equals the offline chain
measure (score_eagle) on the same answers; EAGLE-2's tree of 16 nodes accepts at least as much
as the chain (the trees sized on a measured cost curve depend on timings: only their output is
held)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

from heads_testlib import EOS, tiny_llama  # noqa: E402

from blockdraft.drafts import DraftSpec  # noqa: E402
from blockdraft.drafts.grow import ConditionalTreeDrafter  # noqa: E402
from blockdraft.models.hf import HFBlockwiseModel  # noqa: E402
from blockdraft.models.hf.eagle_heads import EagleHeads  # noqa: E402
from blockdraft.training.heads import HeadsTrainSettings  # noqa: E402
from blockdraft.training.heads.eagle_data import FeatureMaker  # noqa: E402
from blockdraft.training.heads.eagle_train import (  # noqa: E402
    EAGLE_DEFAULTS,
    score_eagle,
    train_eagle,
)
from blockdraft.training.heads.shards import read_shard  # noqa: E402
from blockdraft.verify.decode import decode  # noqa: E402

DEPTH = 4


def heldout(dataset: Any) -> tuple[list[list[int]], list[list[int]]]:
    prompts, answers = [], []
    for name in dataset.shards("heldout"):
        shard = read_shard(dataset.shard_path(name))
        prompts += [shard.prompt(p) for p in range(shard.num_prompts)]
        answers += [shard.answer(p) for p in range(shard.num_prompts)]
    return prompts, answers


@pytest.fixture(scope="module")
def answers_lm(dataset: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A 3-gram LM of the training answers (the packaged recipe's kind of LM)."""
    from blockdraft.rescorers.ngram import NgramLM
    from blockdraft.training.ngram import train_ngram

    texts = []
    for name in dataset.shards("train"):
        shard = read_shard(dataset.shard_path(name))
        texts += [shard.answer(p) for p in range(shard.num_prompts)]
    r = train_ngram(texts, tmp_path_factory.mktemp("eagle-answers") / "lm3", order=3,
                    binary=False)
    return NgramLM(r.arpa)


@pytest.mark.parametrize("fusion", ["top", "layers"])
def test_decoding_is_lossless_and_the_chains_b_is_the_offline_one(
        dataset: Any, tmp_path: Path, answers_lm: Any, fusion: str) -> None:
    settings = HeadsTrainSettings(**{
        "arch": "eagle", "fusion": fusion, "heads": 3, "steps": 40, "batch": 8, "lr": 3e-3,
        "warmup": 5, "eval_every": 20, "eval_positions": 400, "vocab": "shortlist",
        "shortlist": 64, **EAGLE_DEFAULTS[fusion]})
    base = tiny_llama(init=0.1)
    layer = train_eagle(dataset, base, tmp_path / "w", settings, log=None,
                        progress=False).heads
    offline = score_eagle(layer, dataset, FeatureMaker(fusion, settings.context, base,
                                                       layer.config.fuse_layers), depth=DEPTH)
    model = HFBlockwiseModel(base, EagleHeads(layer, DEPTH, settings.context))
    prompts, answers = heldout(dataset)
    b = {}
    for label, spec in (
            ("chain", DraftSpec("heads")),
            ("tree", ConditionalTreeDrafter(k=3, budget=16)),  # no cost curve: deterministic
            ("sized", DraftSpec("tree-lattice", k=3, p=0, budget=16, lookup=True)),
            ("cost-aware", DraftSpec("cost-aware", k=4, p=2, lookup=True)),
            ("rescored", DraftSpec("tree-lattice", k=3, p=0, budget=16, rescorer="given",
                                   given=answers_lm, alpha=0.5))):
        outs = decode(model, prompts, drafter=spec, max_new_tokens=32, eos_id=EOS)
        assert [o.tokens for o in outs] == answers, label  # lossless
        b[label] = sum(len(o.tokens) for o in outs) / sum(o.calls for o in outs)
    assert offline["B_vanilla"] > 1.1  # the layer accepts drafts: the equality has teeth
    assert b["chain"] == pytest.approx(offline["B_vanilla"])
    assert b["tree"] >= b["chain"]
