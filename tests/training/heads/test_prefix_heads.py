"""Prefix-conditioned (Hydra-style) heads (models/hf/prefix_heads, training/heads): new ones
are Medusa heads; teacher-forced scores equal a brute-force chain of 1-best drafts, each
conditioned on the draft before it; they learn a dependence Medusa heads cannot; files
round-trip and damage is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from heads_testlib import TRAIN, tiny_llama  # noqa: E402

from blockdraft.models import ModelError  # noqa: E402
from blockdraft.models.hf import MedusaHeads  # noqa: E402
from blockdraft.models.hf.prefix_heads import (  # noqa: E402
    PrefixHeads,
    read_prefix_heads,
    write_prefix_heads,
)
from blockdraft.training.heads import (  # noqa: E402
    HeadsTrainSettings,
    lm_head_weight,
    load_positions,
    train_heads,
)
from blockdraft.training.heads.data_curve import chain_block_efficiency, head_topk  # noqa: E402


def _random_prefix(d: int = 32, n: int = 3, seed: int = 0) -> PrefixHeads:
    torch.manual_seed(seed)
    heads = PrefixHeads(d, n, 2)
    with torch.no_grad():
        for p in heads.parameters():
            p.normal_(0, 0.3)
    return heads.eval()


def test_new_prefix_heads_are_medusa_heads() -> None:
    torch.manual_seed(0)
    prefix = PrefixHeads(16, 3, 2)
    medusa = MedusaHeads(16, None, 3, 2)
    medusa.load_state_dict({k: v for k, v in prefix.state_dict().items()
                            if not k.startswith("prefix.")})
    with torch.no_grad():
        for block in medusa.parameters():
            block.normal_(0, 0.2)
        prefix.load_state_dict({**prefix.state_dict(), **medusa.state_dict()})
    h, previous = torch.randn(5, 16), torch.randn(5, 3, 16)
    torch.testing.assert_close(prefix(h, previous=previous), medusa(h))  # P_j = 0
    with pytest.raises(ModelError, match="previous of shape"):
        prefix(h)


def test_teacher_forced_chain_b_equals_a_brute_force_chain_of_drafts(dataset: Any) -> None:
    """chain_block_efficiency over teacher-forced top-1 equals decoding each held-out answer
    with a chain whose head j reads the draft of head j - 1 (head 0 the base's next token)."""
    lm_head = lm_head_weight(tiny_llama(init=0.1))
    held = load_positions(dataset, "heldout")
    heads = _random_prefix()
    heads.set_shortlist(torch.arange(0, 100, 2))  # even ids only: misses happen both ways
    topk = head_topk(heads, lm_head, held, 1)
    fast = chain_block_efficiency(topk, held, 1)
    ids = held.token_ids.tolist()
    remaining = held.remaining.tolist()
    outside = torch.ones(100, dtype=torch.bool)
    outside[heads.shortlist] = False
    tokens = calls = row = 0
    accepted_any = False
    with torch.no_grad():
        while row < held.tokens:
            m = remaining[row] + 1
            answer = ids[row:row + m]  # y_1 .. y_m
            s, calls = 0, calls + 1  # the prefill gives y_1
            while s + 1 < m:
                prev, a = answer[s], 0  # y_{s+1}, the base's next token
                h = held.hidden[row + s].float()
                for j in range(heads.num_heads):
                    e = lm_head[prev].repeat(heads.num_heads, 1)  # every head reads it
                    logits = heads(h, previous=e)[j] @ lm_head.T
                    logits[outside] = -torch.inf
                    draft = int(logits.argmax())
                    if s + j + 1 > m - 1 or draft != answer[s + j + 1]:  # y_{s+2+j}
                        break
                    a, prev = a + 1, draft
                accepted_any |= a > 0
                s += a + 1
                calls += 1
            tokens += m
            row += m
    assert fast == pytest.approx(tokens / calls)
    assert accepted_any  # the brute force accepted some drafts: the comparison has teeth


def test_prefix_heads_learn_a_dependence_medusa_heads_cannot(dataset: Any,
                                                             tmp_path: Path) -> None:
    """On answers where a token is a function of the one before it, trained prefix heads
    beat Medusa heads of the same depth on held-out top-1 (teacher-forced)."""
    lm_head = lm_head_weight(tiny_llama(init=0.1))
    common = {**TRAIN.__dict__, "steps": 120, "eval_every": 40, "eval_positions": 10_000}
    medusa = train_heads(dataset, lm_head, tmp_path / "m", HeadsTrainSettings(**common),
                         log=None, progress=False)
    prefix = train_heads(dataset, lm_head, tmp_path / "p",
                         HeadsTrainSettings(**{**common, "arch": "prefix"}), log=None,
                         progress=False)
    assert isinstance(prefix.heads, PrefixHeads) and "arch:prefix" in prefix.signature
    assert "arch:" not in medusa.signature
    best = {r: max(np.mean(c["top1"]) for c in res.curve) for r, res in
            (("medusa", medusa), ("prefix", prefix))}
    assert best["prefix"] > best["medusa"]


def test_prefix_heads_files_round_trip_and_damage_is_refused(tmp_path: Path) -> None:
    from blockdraft.models.hf.formats import read_heads

    heads = _random_prefix()
    heads.set_shortlist(torch.tensor([1, 5, 9, 30]), info={"counted_on": "test"})
    folder = write_prefix_heads(heads, tmp_path / "p", base_model="tiny")
    back = read_prefix_heads(folder)
    h, previous = torch.randn(4, 32), torch.randn(4, 3, 32)
    torch.testing.assert_close(back(h, previous=previous), heads(h, previous=previous))
    assert torch.equal(back.shortlist, heads.shortlist)
    with pytest.raises(ModelError):
        read_heads(folder)  # the decoders take Medusa layouts only, and say so
    raw = bytearray((folder / "prefix_heads.safetensors").read_bytes())
    raw[-3] ^= 0xFF
    (folder / "prefix_heads.safetensors").write_bytes(bytes(raw))
    with pytest.raises(ModelError, match="damaged|cannot read"):
        read_prefix_heads(folder)


def test_the_expanders_greedy_walk_is_the_chain_of_drafts_and_pbest_is_exact() -> None:
    """One step's tree lattice from prefix heads: following each node's best arc is the
    greedy chain (each head reading the draft before it), and the p-best equals a
    brute-force enumeration of the k^h paths of the same expander."""
    import itertools

    from blockdraft.lattice.conditional import conditional_pbest

    lm_head = lm_head_weight(tiny_llama(init=0.1))
    heads = _random_prefix()
    heads.set_shortlist(torch.arange(0, 100, 3))
    h, certain, k = torch.randn(32), 7, 3
    expand = heads.expander(h, certain, lm_head, lm_head, k)
    chain, prev = [certain], certain
    with torch.no_grad():
        for j in range(heads.num_heads):
            e = lm_head[prev].repeat(heads.num_heads, 1)
            logits = heads(h, previous=e)[j] @ lm_head[heads.shortlist].T
            prev = int(heads.shortlist[logits.argmax()])
            chain.append(prev)
    walk, score = (certain,), 0.0  # the expander's first arc at each node: the argmax
    for _ in range(heads.num_heads):
        ids, scores = expand(walk)
        walk, score = (*walk, int(ids[0])), score + float(scores[0])
    assert list(walk) == chain
    best = conditional_pbest(expand, 1 + heads.num_heads, 1)
    assert best.scores[0] >= score - 1e-9  # the 1-best path scores at least the greedy chain
    every = []
    for choice in itertools.product(range(k), repeat=heads.num_heads):
        path, score = (certain,), 0.0
        for c in choice:
            ids, scores = expand(path)
            path, score = (*path, int(ids[c])), score + float(scores[c])
        every.append((path, score))
    every.sort(key=lambda x: (-x[1], x[0]))
    got = conditional_pbest(expand, 1 + heads.num_heads, 10)
    assert [tuple(int(t) for t in row) for row in got.tokens] == [p for p, _ in every[:10]]
    assert all(int(t) % 3 == 0 for row in got.tokens for t in row[1:])  # the shortlist only


def test_decoding_with_prefix_heads_is_lossless_and_its_b_is_the_offline_one(
        dataset: Any, tmp_path: Path) -> None:
    """Trained prefix heads on the torch runtime: vanilla decoding (each head reading the
    draft before it) gives the base's greedy answers, and its pooled B equals the offline
    chain B of the same heads on the same answers (teacher-forced, chain_block_efficiency)."""
    from blockdraft.drafts import HeadDrafter
    from blockdraft.models.hf import HFBlockwiseModel
    from blockdraft.training.heads.shards import read_shard
    from blockdraft.verify.decode import decode

    base = tiny_llama(init=0.1)
    lm_head = lm_head_weight(base)
    trained = train_heads(dataset, lm_head, tmp_path / "p",
                          HeadsTrainSettings(**{**TRAIN.__dict__, "arch": "prefix",
                                                "steps": 80}), log=None, progress=False)
    heads = trained.heads
    held = load_positions(dataset, "heldout")
    offline = chain_block_efficiency(head_topk(heads, lm_head, held, 1), held, 1)
    model = HFBlockwiseModel(base, heads)
    tokens = calls = 0
    for name in dataset.shards("heldout"):
        shard = read_shard(dataset.shard_path(name))
        for p in range(shard.num_prompts):
            answer = shard.answer(p)
            out = decode(model, shard.prompt(p), drafter=HeadDrafter(k=1, p=1),
                         max_new_tokens=32, eos_id=1)
            assert out.tokens == answer  # lossless
            tokens, calls = tokens + len(out.tokens), calls + out.calls
    assert offline > 1.05  # the heads accept drafts: the equality below has teeth
    assert tokens / calls == pytest.approx(offline)


def test_the_tree_lattice_drafter_decodes_losslessly_and_accepts_more(
        dataset: Any, tmp_path: Path) -> None:
    """ConditionalDrafter in a decode with prefix heads: the base's greedy answers; with
    p = 1, k = 1 it is the vanilla chain (same B); p-best over the tree lattice accepts at
    least as many tokens per call in all; Medusa heads and the offline path refuse it."""
    from blockdraft.drafts import ConditionalDrafter, HeadDrafter
    from blockdraft.models.hf import HFBlockwiseModel
    from blockdraft.training.heads.shards import read_shard
    from blockdraft.verify.decode import decode
    from blockdraft.verify.errors import VerifyError

    base = tiny_llama(init=0.1)
    lm_head = lm_head_weight(base)
    trained = train_heads(dataset, lm_head, tmp_path / "p",
                          HeadsTrainSettings(**{**TRAIN.__dict__, "arch": "prefix",
                                                "steps": 80}), log=None, progress=False)
    model = HFBlockwiseModel(base, trained.heads)
    prompts, answers = [], []
    for name in dataset.shards("heldout"):
        shard = read_shard(dataset.shard_path(name))
        prompts += [shard.prompt(p) for p in range(shard.num_prompts)]
        answers += [shard.answer(p) for p in range(shard.num_prompts)]
    b = {}
    for label, drafter in (("vanilla", HeadDrafter(k=1, p=1)),
                           ("chain", ConditionalDrafter(k=1, p=1)),
                           ("tree", ConditionalDrafter(k=3, p=6, max_expansions=None))):
        outs = decode(model, prompts, drafter=drafter, max_new_tokens=32, eos_id=1)
        assert [o.tokens for o in outs] == answers, label  # lossless
        b[label] = sum(len(o.tokens) for o in outs) / sum(o.calls for o in outs)
    assert b["chain"] == b["vanilla"]
    assert b["tree"] >= b["vanilla"] and b["tree"] > 1.05
    medusa = HFBlockwiseModel(tiny_llama(init=0.1), MedusaHeads(32, None, 3))
    with pytest.raises(VerifyError, match="Medusa heads"):
        decode(medusa, prompts[0], drafter=ConditionalDrafter(), max_new_tokens=8, eos_id=1)
    assert ConditionalDrafter().needs.tree_lattice  # declared: what the refusal above reads
