"""Tree verification (docs/definitions.md sec. 11) on the reference BlockwiseLM: the tree
forward equals the forwards of its paths, a trie's verdict equals the batch's for every
criterion, a chain equals chain verification, decoding with trees is lossless (hypothesis),
and the offline simulation of tree strategies equals the online decode step by step."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_offline_online import teacher_forced_logits

from blockdraft.drafts import (
    ConfidenceTreeDrafter,
    DraftBatch,
    DraftTree,
    HeadDrafter,
    MedusaTreeDrafter,
    RescoredTreeDrafter,
    TrieDrafter,
)
from blockdraft.models import greedy_generate
from blockdraft.oracle import Trace, simulate, tree_accept_length
from blockdraft.rescorers.neural import NeuralPathScorer
from blockdraft.verify import Verifier, VerifyError, decode


class BigramLM:
    """A toy LM with the path scorer's protocol (what the rescored tree needs)."""

    def __init__(self, vocab: int, seed: int = 0) -> None:
        z = np.random.default_rng(seed).normal(size=(vocab + 1, vocab)) * 2
        self.table = z - np.log(np.exp(z).sum(1, keepdims=True))
        self.vocab = vocab

    def next_scores(self, path: Any, context: Any, candidates: Any) -> np.ndarray:
        seq = [*np.asarray(context).tolist(), *list(path)]
        return self.table[seq[-1] if seq else -1, np.asarray(candidates)]

    def score_tree(self, tokens: Any, parents: Any, context: Any) -> np.ndarray:
        from blockdraft.rescorers.base import scores_by_parent

        return scores_by_parent(self, tokens, parents, context)

    def check_vocab(self, vocab_size: int) -> None:
        assert vocab_size == self.vocab

    def score(self, tokens: Any, context: Any = ()) -> np.ndarray:
        seq = [*np.asarray(context).tolist(), *np.asarray(tokens).tolist()]
        start = len(seq) - len(np.asarray(tokens))
        return np.array([self.table[seq[i - 1] if i > 0 else -1, seq[i]]
                         for i in range(start, len(seq))])


def prefix_cache(model: Any, prompt: list[int]) -> Any:
    _, past = model.heads_logits(torch.tensor([prompt]))
    return past


def random_drafts(rng: np.random.Generator, truth: list[int], p: int, h: int,
                  vocab: int) -> DraftBatch:
    """``p`` distinct drafts: truth prefixes continued at random (shared prefixes galore)."""
    rows: list[list[int]] = []
    while len(rows) < p:
        cut = int(rng.integers(1, h + 1))
        row = truth[:cut] + [int(rng.integers(0, vocab)) for _ in range(h - cut)]
        if rng.random() < 0.3 and h > 2:  # a near-duplicate sibling
            row[-1] = int(rng.integers(0, 3))
        if row not in rows:
            rows.append(row)
    scores = -np.arange(p, dtype=float) / 2
    return DraftBatch(tokens=np.array(rows), scores=scores, head_scores=scores,
                      lm_scores=np.zeros(p))


def test_tree_forward_equals_path_forwards(random_model) -> None:  # type: ignore[no-untyped-def]
    model = random_model(seed=1)
    past = prefix_cache(model, [3, 1, 4, 1, 5])
    tree = DraftTree(tokens=np.array([7, 8, 9, 10, 11, 12]),
                     parents=np.array([-1, 0, 0, 1, 1, 3]), scores=np.zeros(6))
    positions = torch.as_tensor(past.length + tree.position_offsets())
    mask = torch.as_tensor(tree.ancestor_mask())
    with torch.no_grad():
        logits, cache = model.heads_logits(torch.tensor(tree.tokens.tolist())[None], past,
                                           position_ids=positions, tree_mask=mask)
        for u in range(tree.num_nodes):
            ref, ref_cache = model.heads_logits(torch.as_tensor(tree.path_tokens(u))[None], past)
            torch.testing.assert_close(logits[0, u], ref[0, -1], atol=1e-4, rtol=1e-4)
            keep = list(range(past.length)) + [past.length + int(v) for v in tree.path(u)]
            kept = cache.gather(keep)
            for a, b in zip(kept.keys + kept.values, ref_cache.keys + ref_cache.values,
                            strict=True):
                torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_default_path_unchanged(random_model) -> None:  # type: ignore[no-untyped-def]
    """Explicit contiguous positions and a causal tree mask give the plain forward."""
    model = random_model(seed=2)
    past = prefix_cache(model, [1, 2, 3])
    ids = torch.tensor([[4, 5, 6, 7]])
    with torch.no_grad():
        plain, _ = model.heads_logits(ids, past)
        chain = DraftTree.chain([4, 5, 6, 7])
        tree, _ = model.heads_logits(ids, past,
                                     position_ids=torch.as_tensor(3 + chain.depths),
                                     tree_mask=torch.as_tensor(chain.ancestor_mask()))
    torch.testing.assert_close(plain, tree, atol=1e-5, rtol=1e-5)


CRITERIA = ["exact", "topk:k=3", "distance:eps=2", "min_block:l=3", "gadpp:beta=3,tau=2.0",
            "typical:eps=0.3,delta=0.09"]


@pytest.mark.parametrize("criterion", CRITERIA)
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("with_eos", [False, True])
def test_trie_verdict_equals_batch_verdict(random_model, criterion: str, seed: int,  # type: ignore[no-untyped-def]
                                           with_eos: bool) -> None:
    h, vocab = 5, 40
    model = random_model(seed=seed, vocab=vocab, h=h, scale=10.0)
    prompt = [3, 1, 4, 1, 5]
    truth = greedy_generate(model, prompt, h + 1)
    past = prefix_cache(model, prompt)
    rng = np.random.default_rng(seed)
    eos = truth[2] if with_eos else None
    verifier = Verifier(model, criterion)
    for _ in range(3):
        drafts = random_drafts(rng, truth, int(rng.integers(1, 7)), h, vocab)
        tree = DraftTree.from_drafts(drafts)
        batch = verifier.verify(past, drafts, eos)
        out = verifier.verify_tree(past, tree, eos)
        # the batch verdict, independently: every draft alone (a chain: a causal forward)
        alone = [verifier.verify(past, DraftBatch(
            tokens=drafts.tokens[j:j + 1], scores=drafts.scores[j:j + 1],
            head_scores=drafts.head_scores[j:j + 1], lm_scores=drafts.lm_scores[j:j + 1]),
            eos).n for j in range(drafts.p)]
        assert batch.accept_lengths == tuple(alone)
        assert batch.winner == alone.index(max(alone))
        assert out.n == batch.n
        assert out.tokens == batch.tokens
        assert out.accept_lengths == batch.accept_lengths
        assert out.path == tuple(tree.path(out.winner).tolist())
        torch.testing.assert_close(out.next_logits, batch.next_logits, atol=1e-4, rtol=1e-4)
        assert out.past.length == batch.past.length == past.length + 1 + out.n
        for a, b in zip(out.past.keys + out.past.values, batch.past.keys + batch.past.values,
                        strict=True):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("seed", range(4))
def test_chain_equals_chain_verification(random_model, seed: int) -> None:  # type: ignore[no-untyped-def]
    model = random_model(seed=seed, vocab=64, h=4)
    prompt = [5, 6, 7]
    truth = greedy_generate(model, prompt, 6)
    past = prefix_cache(model, prompt)
    rng = np.random.default_rng(seed)
    verifier = Verifier(model)
    draft = random_drafts(rng, truth, 1, 4, 64)
    chain = DraftTree.chain(draft.tokens[0])
    one = Verifier(model).verify(past, draft)
    out = verifier.verify_tree(past, chain)
    assert (out.n, out.tokens) == (one.n, one.tokens)
    assert out.winner == out.n  # a chain's node index is its depth
    torch.testing.assert_close(out.next_logits, one.next_logits, atol=1e-4, rtol=1e-4)


def test_verify_tree_refuses(random_model) -> None:  # type: ignore[no-untyped-def]
    model = random_model(seed=0, vocab=64, h=4, max_seq_len=8)
    past = prefix_cache(model, [1, 2, 3, 4, 5])
    verifier = Verifier(model)
    with pytest.raises(VerifyError, match="DraftTree"):
        verifier.verify_tree(past, np.array([1, 2]))  # type: ignore[arg-type]
    with pytest.raises(VerifyError, match="vocabulary"):
        verifier.verify_tree(past, DraftTree.chain([1, 99]))
    with pytest.raises(VerifyError, match=r"verify_tree: 4 new positions after 5 cached ones "
                                          r"need 9 > max_seq_len = 8; truncate it "
                                          r"\(tree.truncate\(2\)\)"):
        verifier.verify_tree(past, DraftTree.chain([1, 2, 3, 4]))
    # the cache checks are Verifier.verify's, in the same words
    with pytest.raises(VerifyError, match="verify_tree needs the prefix cache as past"):
        verifier.verify_tree(None, DraftTree.chain([1, 2]))
    with pytest.raises(VerifyError, match=r"past must hold one row .*select_row"):
        verifier.verify_tree(past.expand(2), DraftTree.chain([1, 2]))
    wide = DraftTree(tokens=np.arange(1, 8), parents=np.array([-1, 0, 0, 0, 0, 0, 0]),
                     scores=np.zeros(7))  # 7 nodes after 5 cached > 8, but depth 1 fits
    assert verifier.verify_tree(past, wide).past.length in (6, 7)


def test_decode_tree_arguments(random_model) -> None:  # type: ignore[no-untyped-def]
    model = random_model(seed=0)
    with pytest.raises(VerifyError, match="tree must be"):
        decode(model, [1, 2], tree="yes", max_new_tokens=4)  # type: ignore[arg-type]
    with pytest.raises(VerifyError, match="without drafter"):
        decode(model, [1, 2], tree=ConfidenceTreeDrafter(k=2, budget=4),
               drafter=HeadDrafter(k=2), max_new_tokens=4)


def tiny_rescorer_lm(vocab: int) -> Any:
    from blockdraft.models import BlockwiseConfig, RescorerLM

    torch.manual_seed(0)
    return RescorerLM(BlockwiseConfig.tiny(vocab_size=vocab, h=1, max_seq_len=64)).eval()


def tree_strategies(vocab: int, h: int) -> dict[str, Any]:
    return {
        "trie": True,
        "neural": RescoredTreeDrafter(NeuralPathScorer(tiny_rescorer_lm(vocab), max_depth=h),
                                      k=2, budget=7, alpha=1.0),
        "confidence": ConfidenceTreeDrafter(k=3, budget=9),
        "medusa": MedusaTreeDrafter(choices=((0,), (1,), (0, 0), (1, 0), (0, 1), (0, 0, 0)),
                                    budget=None),
        "rescored": RescoredTreeDrafter(BigramLM(vocab), k=3, budget=8, alpha=0.5),
        "trie-budget": TrieDrafter(HeadDrafter(k=3, p=4), budget=5),
    }


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10**6), h=st.integers(2, 5), scale=st.sampled_from([1.0, 10.0, 30.0]),
    head_scale=st.sampled_from([0.0, 0.5, 2.0]),
    strategy=st.sampled_from(["trie", "confidence", "medusa", "rescored", "trie-budget",
                              "neural", "trie-iad"]),
    prompt=st.lists(st.integers(0, 49), min_size=1, max_size=10),
    max_new=st.integers(1, 30), data=st.data(),
)
def test_tree_decode_is_lossless(random_model, seed: int, h: int, scale: float,  # type: ignore[no-untyped-def]
                                 head_scale: float, strategy: str, prompt: list[int],
                                 max_new: int, data: st.DataObject) -> None:
    vocab = 50
    model = random_model(seed=seed, vocab=vocab, h=h, scale=scale, head_scale=head_scale)
    full = greedy_generate(model, prompt, max_new)
    eos = data.draw(st.one_of(st.none(), st.sampled_from(full)), label="eos")
    want = full if eos is None else full[: full.index(eos) + 1]
    tree = True if strategy == "trie-iad" else tree_strategies(vocab, h)[strategy]
    if strategy == "medusa" and h < 4:
        tree = MedusaTreeDrafter(choices=((0,), (1,)))
    kw: dict[str, Any] = {"k": 3, "p": 3} if tree is True else {}
    if strategy == "trie-iad":
        kw["iad"] = True
    res = decode(model, prompt, tree=tree, max_new_tokens=max_new, eos_id=eos, **kw)
    assert res.tokens == want
    assert all(s.tree is not None for s in res.steps)
    if tree is True:  # the same drafts as a batch: the same n at every step
        batch = decode(model, prompt, max_new_tokens=max_new, eos_id=eos, **kw)
        assert res.accept_lengths == batch.accept_lengths


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("strategy", ["confidence", "medusa", "rescored", "trie-budget",
                                      "neural"])
@pytest.mark.parametrize("with_eos", [False, True])
def test_tree_online_equals_offline(random_model, tmp_path, seed: int, strategy: str,  # type: ignore[no-untyped-def]
                                    with_eos: bool) -> None:
    model = random_model(seed=seed, vocab=64, h=4, scale=1.0 if seed == 0 else 10.0,
                         head_scale=0.0 if seed == 2 else 0.5)
    prompt = [3, 1, 4, 1, 5]
    eos = greedy_generate(model, prompt, 40)[-6] if with_eos else None
    tree = tree_strategies(64, 4)[strategy]
    max_new = 40
    y = greedy_generate(model, prompt, max_new, eos_id=eos)
    online = decode(model, prompt, tree=tree, max_new_tokens=max_new, eos_id=eos)
    assert online.tokens == y
    trace = Trace.from_head_logits(tmp_path / "trace",
                                   [(prompt, y, teacher_forced_logits(model, prompt, y))], K=8)
    offline = simulate(trace, tree)
    steps = offline.steps
    assert [s.position for s in online.steps] == steps.t.tolist()
    assert online.accept_lengths == steps.n.tolist()
    # the same accepted path; with EOS the last steps' trees are cut to different depths
    # (online to max_new_tokens, offline to y's end), so their node numbers may differ
    assert [s.tree.path_tokens(s.winner).tolist() for s in online.steps] == [
        row[: n + 1].tolist() for row, n in zip(steps.drafts, steps.n, strict=True)]
    assert [len(s.tokens) for s in online.steps] == steps.tokens.tolist()
    if eos is None:
        assert [s.winner for s in online.steps] == steps.winner.tolist()
        assert [s.tree.leaves().size for s in online.steps] == steps.num_drafts.tolist()
    assert online.calls == int(offline.calls[0])
    assert online.block_efficiency == pytest.approx(offline.block_efficiency)


def test_tree_accept_length() -> None:
    tree = DraftTree(tokens=np.array([7, 8, 9, 10, 11, 12]),
                     parents=np.array([-1, 0, 0, 1, 1, 3]), scores=np.zeros(6))
    y = np.array([7, 8, 10, 12, 1])
    assert tree_accept_length(tree, y, 0) == (3, 5)
    assert tree_accept_length(tree, y[:3], 0) == (2, 3)  # y ends: deeper nodes cannot match
    assert tree_accept_length(tree, np.array([7, 9, 0]), 0) == (1, 2)
    assert tree_accept_length(tree, np.array([7, 5]), 0) == (0, 0)


class Unfactored:
    """A model offering ``heads_logits`` only (the verifier's non-factored path)."""

    def __init__(self, model: Any) -> None:
        self.inner, self.h, self.config = model, model.h, model.config

    @property
    def device(self) -> torch.device:
        return self.inner.device

    def heads_logits(self, input_ids: Any, past: Any = None, position_ids: Any = None,
                     tree_mask: Any = None) -> Any:
        return self.inner.heads_logits(input_ids, past, position_ids=position_ids,
                                       tree_mask=tree_mask)


def test_unfactored_model_tree_verification(random_model) -> None:  # type: ignore[no-untyped-def]
    model = random_model(seed=5, vocab=64, h=4)
    prompt = [2, 7, 1, 8]
    tree = ConfidenceTreeDrafter(k=3, budget=10)
    want = greedy_generate(model, prompt, 25)
    res = decode(Unfactored(model), prompt, tree=tree, max_new_tokens=25)
    assert res.tokens == want
    assert res.accept_lengths == decode(model, prompt, tree=tree,
                                        max_new_tokens=25).accept_lengths


@pytest.mark.parametrize("criterion", ["topk:k=2", "min_block:l=2", "distance:eps=3"])
def test_trie_decode_equals_batch_decode_for_lossy_criteria(random_model,  # type: ignore[no-untyped-def]
                                                            criterion: str) -> None:
    model = random_model(seed=6, vocab=64, h=4, scale=10.0)
    prompt = [9, 8, 7]
    batch = decode(model, prompt, k=3, p=3, criterion=criterion, max_new_tokens=30)
    trie = decode(model, prompt, k=3, p=3, criterion=criterion, max_new_tokens=30, tree=True)
    assert trie.tokens == batch.tokens
    assert trie.accept_lengths == batch.accept_lengths
