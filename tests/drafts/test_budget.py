"""The cost-aware tree: the size it picks is the best expected tokens per unit of time (against
brute force over every subtree), it never exceeds its budget, a flat cost curve takes every
candidate and a steep one none, and its acceptance tables are measured as counted."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockdraft.core.batch import DraftError
from blockdraft.drafts import (
    AcceptanceTables,
    CostAwareTreeDrafter,
    CostCut,
    StepView,
    Trie,
    select_nodes,
)
from blockdraft.lattice import SausageLattice
from blockdraft.models.cost import CostCurve
from blockdraft.oracle import Trace, fit_acceptance


def curve(slope: float, base: float = 10.0, heads: float = 1.0) -> CostCurve:
    nodes = (1, 2, 4, 8, 16, 32)
    return CostCurve(nodes=nodes, step_ms=tuple(base + slope * (n - 1) for n in nodes),
                     heads_ms=heads, greedy_ms=base)


def random_lattice(rng: np.random.Generator, h: int = 4, k: int = 3, vocab: int = 12
                   ) -> SausageLattice:
    logits = rng.normal(size=(h, vocab)) * 2.0
    return SausageLattice.from_logits(logits, k)


def tables(h: int, rng: np.random.Generator | None = None) -> AcceptanceTables:
    base = AcceptanceTables.uniform(h)
    if rng is None:
        return base
    heads = rng.uniform(0.05, 0.95, size=base.heads.shape)
    return AcceptanceTables(heads=heads, marginal=heads.mean(-1),
                            copy=rng.uniform(0.05, 0.95, size=(3, 4, 16)))


def _ratio(reach: np.ndarray, keep: np.ndarray, cost: CostCurve) -> float:
    return float((1 + reach[1:][keep[1:]].sum()) / cost.step(int(keep.sum())))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=0, max_size=20), st.floats(0.0, 3.0),
       st.integers(1, 25))
def test_select_nodes_is_the_best_prefix(values: list[float], slope: float, budget: int) -> None:
    a = np.sort(np.asarray(values))[::-1]
    cost = curve(slope)
    n = select_nodes(a, cost, budget)
    assert 1 <= n <= min(budget, a.size + 1)
    ratios = [(1 + a[: m - 1].sum()) / cost.step(m) for m in range(1, min(budget, a.size + 1) + 1)]
    assert (1 + a[: n - 1].sum()) / cost.step(n) == pytest.approx(max(ratios))


def view(lat: SausageLattice, ctx: np.ndarray) -> StepView:
    return StepView(lattice=lat, context=np.asarray(ctx, dtype=np.int64))


@pytest.mark.parametrize("seed", range(6))
def test_the_tree_is_the_best_subtree_of_its_candidates(seed: int) -> None:
    """Every rooted subtree of the merged candidates, enumerated: none pays better."""
    rng = np.random.default_rng(seed)
    lat = random_lattice(rng)
    ctx = rng.integers(0, 12, 30)
    drafter = CostAwareTreeDrafter(cost=curve(float(rng.uniform(0.05, 1.5))),
                                   tables=tables(4, rng), k=3, p=3, copy_length=4)
    tree = drafter.draft(view(lat, ctx))
    stats = drafter.last
    assert stats is not None and stats.nodes == tree.num_nodes
    # the candidates again (every source's drafts, one trie), and their reach
    trie = Trie(int(lat.tokens[0, 0]))
    for source in drafter.sources:
        source.add(view(lat, ctx), trie)
    assert trie.size == stats.candidates
    assert drafter.rates is not None
    q = drafter.rates.q(trie, view(lat, ctx))
    reach = np.ones(trie.size)
    for u in range(1, trie.size):
        reach[u] = reach[trie.parents[u]] * q[u]
    assert isinstance(drafter.cut, CostCut)
    cost = drafter.cut.cost
    assert cost is not None
    best = 0.0
    others = range(1, trie.size)
    parents = np.asarray(trie.parents)
    for size in range(0, min(trie.size, 11)):
        for chosen in itertools.combinations(others, size):
            keep = np.zeros(trie.size, dtype=bool)
            keep[0] = True
            keep[list(chosen)] = True
            if (keep[1:] & ~keep[parents[1:]]).any():
                continue  # not closed under parents
            best = max(best, _ratio(reach, keep, cost))
    if trie.size <= 11:
        assert stats.expected / cost.step(stats.nodes) == pytest.approx(best)
    # the tree's scores are ln a(u) of the nodes it kept: they sum to the expected tokens
    assert 1 + np.exp(tree.scores[1:]).sum() == pytest.approx(stats.expected)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 12), st.floats(0.0, 2.0))
def test_never_exceeds_its_budget(seed: int, budget: int, slope: float) -> None:
    rng = np.random.default_rng(seed)
    lat = random_lattice(rng, h=5, k=4)
    ctx = rng.integers(0, 12, int(rng.integers(0, 40)))
    drafter = CostAwareTreeDrafter(cost=curve(slope), tables=tables(5, rng), k=4, p=4,
                                   max_nodes=budget)
    tree = drafter.draft(view(lat, ctx))
    assert 1 <= tree.num_nodes <= budget
    assert int(tree.tokens[0]) == int(lat.tokens[0, 0])


def test_flat_costs_take_everything_steep_ones_nothing() -> None:
    rng = np.random.default_rng(3)
    lat = random_lattice(rng, h=5, k=4)
    ctx = np.tile(rng.integers(0, 12, 6), 4)  # repeats: lookup finds a copy
    flat = CostAwareTreeDrafter(cost=curve(0.0), tables=tables(5), k=4, p=4, max_nodes=64)
    tree = flat.draft(view(lat, ctx))
    assert flat.last is not None and tree.num_nodes == flat.last.candidates
    steep = CostAwareTreeDrafter(cost=curve(50.0), tables=tables(5), k=4, p=4)
    assert steep.draft(view(lat, ctx)).num_nodes == 1


def test_bad_settings_are_refused() -> None:
    with pytest.raises(DraftError, match="CostCurve"):
        CostAwareTreeDrafter(cost=None, tables=tables(3))  # type: ignore[arg-type]
    with pytest.raises(DraftError, match="max_nodes"):
        CostAwareTreeDrafter(cost=curve(1.0), tables=tables(3), max_nodes=0)


def test_tables_roundtrip_and_refusals(tmp_path: Path) -> None:
    t = tables(4, np.random.default_rng(0))
    back = AcceptanceTables.load(t.save(tmp_path / "acc.json"))
    np.testing.assert_allclose(back.heads, t.heads, atol=1e-6)
    np.testing.assert_allclose(back.copy, t.copy, atol=1e-6)
    with pytest.raises(DraftError, match=r"\[0, 1\]"):
        AcceptanceTables(heads=t.heads * 2, marginal=t.marginal, copy=t.copy)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(DraftError, match="bad.json"):
        AcceptanceTables.load(tmp_path / "bad.json")
    assert t.head_q(1, -np.inf, -1.0) == 0.0  # a token outside the slot's arcs


def test_fit_acceptance_counts_what_it_should(tmp_path: Path) -> None:
    """Rates against direct counting on a random trace: one position, one depth at a time."""
    rng = np.random.default_rng(0)
    h, k, vocab = 3, 2, 6
    examples = []
    for _ in range(3):
        prompt = rng.integers(0, vocab, 8).tolist()
        y = rng.integers(0, vocab, 25).tolist()
        logits = rng.normal(size=(25, h, vocab)) * 3
        examples.append((prompt, y, logits))
    trace = Trace.from_head_logits(tmp_path / "t", examples, K=4)
    fitted = fit_acceptance(trace, k=k, prior=0.0 + 1e-9, copy_length=5)
    from blockdraft.drafts.calibration import HEAD_EDGES, bin_index
    from blockdraft.drafts.lookup import lookups
    hits = np.zeros((h - 1, len(HEAD_EDGES) + 1))
    counts = np.zeros_like(hits)
    copy_hits, copy_counts = np.zeros((3, 4, 5)), np.zeros((3, 4, 5))
    for e in range(trace.num_examples):
        ex = trace[e]
        y = np.asarray(ex.greedy_ids)
        text = np.concatenate([ex.prompt_ids, y]).astype(np.int64)
        for t in range(ex.m):
            for d in range(1, h):
                if t + d >= ex.m:
                    continue
                for r in range(k):
                    b = int(bin_index(ex.topk_logprobs[t, d, r], HEAD_EDGES))
                    counts[d - 1, b] += 1
                    hits[d - 1, b] += ex.topk_ids[t, d, r] == y[t + d]
            known = text[: len(ex.prompt_ids) + t + 1]  # never the future
            for rank, (start, m) in enumerate(lookups(known, 1, 4, 3)):
                for j in range(1, 6):
                    if t + j >= ex.m or start + j - 1 >= known.size:
                        break
                    copy_counts[rank, min(m, 4) - 1, j - 1] += 1
                    if known[start + j - 1] != y[t + j]:
                        break
                    copy_hits[rank, min(m, 4) - 1, j - 1] += 1
    seen = counts > 0
    np.testing.assert_allclose(fitted.marginal[seen], (hits / np.maximum(counts, 1))[seen],
                               atol=1e-6)
    seen = copy_counts > 0
    assert seen[1:].any()  # the lower ranks were counted too
    np.testing.assert_allclose(fitted.copy[seen],
                               (copy_hits / np.maximum(copy_counts, 1))[seen], atol=1e-6)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=2, max_size=40), st.integers(1, 4),
       st.integers(1, 4))
def test_lookups_are_ranked_matches_with_distinct_continuations(
        text: list[int], max_match: int, count: int) -> None:
    """Against brute force: every (start, n) is a real match of the suffix, continuations are
    distinct, the first is lookup's, longer matches (then more recent ones) come first."""
    from blockdraft.drafts.lookup import lookup, lookups

    arr = np.asarray(text, dtype=np.int64)
    got = lookups(arr, 1, max_match, count)
    first = lookup(arr, 1, max_match)
    assert (got[0] if got else None) == first
    assert len({int(arr[s]) for s, _ in got}) == len(got) <= count
    for start, n in got:
        assert 1 <= n <= max_match and n <= start < arr.size
        assert arr[start - n:start].tolist() == arr[arr.size - n:].tolist()
    keys = [(-n, -start) for start, n in got]
    assert keys == sorted(keys)
    # brute force: every candidate (start, longest n) with a new continuation, best first
    cands = []
    for end in range(1, arr.size):
        n = 0
        while n < min(max_match, end) and arr[end - 1 - n] == arr[arr.size - 1 - n] and (
                end - 1 - n >= 0):
            n += 1
        for m in range(n, 0, -1):
            cands.append((-m, -end))
    want, seen_next = [], set()
    for neg_n, neg_end in sorted(cands):
        if int(arr[-neg_end]) not in seen_next:
            seen_next.add(int(arr[-neg_end]))
            want.append((-neg_end, -neg_n))
    assert got == want[:count]
