"""The drafting pipeline's parts (issue 38): the one trie (against ``DraftTree.from_drafts``, its
labels and scores those of the first proposer), the cuts by cost (against brute force over
every subtree and every root path), the tree lattice's memo and the one p-best search (its
sausage fast path against the general search and brute force)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockdraft.core.batch import DraftBatch, DraftError
from blockdraft.core.tree import PAD, DraftTree
from blockdraft.drafts import (
    ChainCut,
    CostCut,
    Feedback,
    FirstNodes,
    KeepAll,
    Needs,
    Pipeline,
    StepView,
    Trie,
)
from blockdraft.lattice.conditional import TreeLattice
from blockdraft.lattice.sausage import LatticeError, SausageLattice
from blockdraft.lattice.search import Searchable, pbest
from blockdraft.models.cost import CostCurve

ROOT = 7


def curve(slope: float, base: float = 10.0) -> CostCurve:
    nodes = (1, 2, 4, 8, 16, 32)
    return CostCurve(nodes=nodes, step_ms=tuple(base + slope * (n - 1) for n in nodes),
                     heads_ms=1.0, greedy_ms=base)


rows_strategy = st.lists(st.lists(st.integers(0, 3), min_size=0, max_size=4), min_size=1,
                         max_size=6)


def padded(rows: list[list[int]]) -> np.ndarray:
    """Rows ``[ROOT, *row]`` padded with PAD to one width."""
    width = 1 + max(len(r) for r in rows)
    out = np.full((len(rows), width), PAD, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : 1 + len(r)] = [ROOT, *r]
    return out


# ---------------------------------------------------------------------------------- the trie
@settings(max_examples=150, deadline=None)
@given(rows=rows_strategy, seed=st.integers(0, 1000))
def test_the_trie_of_drafts_is_from_drafts(rows: list[list[int]], seed: int) -> None:
    tokens = padded(rows)
    scores = np.random.default_rng(seed).normal(size=len(rows))
    batch = DraftBatch(tokens=tokens, scores=scores, head_scores=scores,
                       lm_scores=np.zeros(len(rows)), requested=len(rows))
    want = DraftTree.from_drafts(batch)
    trie = Trie(ROOT)
    labels = [f"source{i % 3}" for i in range(len(rows))]
    for row, score, label in zip(tokens, scores.tolist(), labels, strict=True):
        nodes = trie.add(row, score, label)
        assert len(nodes) == int((row[1:] != PAD).sum())
    got = trie.tree()
    assert got.tokens.tolist() == want.tokens.tolist()
    assert got.parents.tolist() == want.parents.tolist()
    assert got.scores.tolist() == want.scores.tolist()  # the first (best) draft's score
    # each node's label is the label of the first draft through it, the root's the first's
    paths = [tuple(got.path_tokens(u).tolist()) for u in range(got.num_nodes)]
    for u, path in enumerate(paths):
        first = next(i for i, r in enumerate(tokens.tolist())
                     if tuple(r[: len(path)]) == path)
        assert got.label(u) == labels[first]
        assert trie.path(u) == path and trie.child(trie.parents[u], trie.tokens[u]) == (
            u if u else None)
    assert trie.depths.tolist() == [len(p) - 1 for p in paths]
    # the trie of a tree: every node merged into its own (ids, scores and labels kept)
    again = Trie(ROOT)
    where = again.add_tree(got, "tree")
    assert where.tolist() == list(range(got.num_nodes))
    assert again.tree().tokens.tolist() == got.tokens.tolist()
    assert again.tree().scores.tolist() == got.scores.tolist()
    assert set(again.labels) == {"tree"}


def test_the_first_proposer_keeps_its_score_and_label() -> None:
    trie = Trie(ROOT)
    assert trie.add([ROOT, 1, 2], -1.0, "lattice") == [1, 2]
    assert trie.add([ROOT, 1, 3, PAD, 9], -0.5, "lookup") == [1, 3]  # ends at its first PAD
    assert trie.add([ROOT, 1, 2, 4], -0.1, "iad") == [1, 2, 4]
    tree = trie.tree(source="mine")
    assert tree.labels == ("lattice", "lattice", "lattice", "lookup", "iad")
    assert tree.scores.tolist() == [-1.0, -1.0, -1.0, -0.5, -0.1]
    assert tree.source == "mine"
    kept = trie.tree(np.array([True, True, True, False, False]))
    assert kept.tokens.tolist() == [ROOT, 1, 2] and kept.labels == ("lattice",) * 3
    with pytest.raises(DraftError, match=f"certain token d_1 = {ROOT}, got \\[8\\]"):
        trie.add([8, 1], 0.0, "x")
    with pytest.raises(DraftError, match=f"rooted at the certain token d_1 = {ROOT}, got 8"):
        trie.add_tree(DraftTree.chain([8, 1]), "x")
    scored = Trie(ROOT, score=-3.0, label="root")  # a root scored before any draft
    scored.add([ROOT, 5], -9.0, "lattice")
    assert scored.tree().scores.tolist() == [-3.0, -9.0] and scored.labels[0] == "root"


# ------------------------------------------------------------------------- the pipeline's cut
class Rows:
    """A source adding fixed drafts (the tokens after the root)."""

    label = "rows"
    needs = Needs()

    def __init__(self, rows: list[list[int]]) -> None:
        self.rows = rows

    def add(self, view: StepView, trie: Trie) -> None:
        for row in self.rows:
            trie.add([view.certain, *row], 0.0, self.label)

    def observe(self, feedback: Feedback) -> None:
        pass


def q_of(seed: int) -> Callable[[tuple[int, ...]], float]:
    """A node's acceptance given its parent's, a function of its root path."""
    return lambda path: float(np.random.default_rng([seed, *path]).uniform(0.02, 1.0))


class PathRates:
    """Rates every node by :func:`q_of` (the protocol ``q(trie, view)``)."""

    def __init__(self, seed: int) -> None:
        self.of_path = q_of(seed)

    def q(self, trie: Trie, view: StepView) -> np.ndarray:
        out = np.array([self.of_path(trie.path(u)) for u in range(trie.size)])
        out[0] = 1.0
        return out


def root_view() -> StepView:
    return StepView(lattice=SausageLattice(tokens=np.array([[ROOT]]), scores=np.zeros((1, 1))),
                    context=np.zeros(0, dtype=np.int64))


def all_paths(rows: list[list[int]]) -> list[tuple[int, ...]]:
    """Every node of the drafts' trie as its root path, the root first."""
    out: list[tuple[int, ...]] = [(ROOT,)]
    for row in rows:
        for i in range(1, len(row) + 1):
            if (ROOT, *row[:i]) not in out:
                out.append((ROOT, *row[:i]))
    return out


def reach_of(path: tuple[int, ...], q: Callable[[tuple[int, ...]], float]) -> float:
    """``a(u)``: the product of ``q`` along the path (the root's 1)."""
    return float(np.prod([q(path[:i]) for i in range(2, len(path) + 1)]))


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.lists(st.integers(0, 2), min_size=1, max_size=3), min_size=1,
                     max_size=4),
       seed=st.integers(0, 10_000), slope=st.floats(0.0, 4.0), max_nodes=st.integers(1, 12))
def test_rates_and_the_cost_cut_are_the_best_subtree(rows: list[list[int]], seed: int,
                                                     slope: float, max_nodes: int) -> None:
    """The kept tree maximises (1 + sum a) / cost(N) over every rooted subtree of every size
    N <= max_nodes, enumerated."""
    cost = curve(slope)
    drafter = Pipeline([Rows(rows)], rates=PathRates(seed), cut=CostCut(cost, max_nodes))
    tree = drafter.draft(root_view())
    q = q_of(seed)
    paths = all_paths(rows)
    a = {p: reach_of(p, q) for p in paths}
    best, best_set = -1.0, None
    for size in range(0, min(len(paths), max_nodes)):
        for chosen in itertools.combinations(paths[1:], size):
            kept = {(ROOT,), *chosen}
            if any(p[:-1] not in kept for p in chosen):
                continue  # not closed under parents
            ratio = (1 + sum(a[p] for p in chosen)) / cost.step(len(kept))
            if ratio > best + 1e-12:
                best, best_set = ratio, kept
    got = {tuple(tree.path_tokens(u).tolist()) for u in range(tree.num_nodes)}
    stats = drafter.last
    assert stats is not None and stats.candidates == len(paths)
    assert stats.nodes == tree.num_nodes <= max_nodes
    assert stats.expected / cost.step(stats.nodes) == pytest.approx(best)
    assert got == best_set
    # the tree's scores are ln a(u)
    for u in range(tree.num_nodes):
        assert tree.scores[u] == pytest.approx(np.log(a[tuple(tree.path_tokens(u).tolist())]))
    assert stats.relative_cost == pytest.approx(cost.relative(tree.num_nodes))


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.lists(st.integers(0, 2), min_size=1, max_size=5), min_size=1,
                     max_size=4),
       seed=st.integers(0, 10_000), slope=st.floats(0.0, 4.0), max_nodes=st.integers(1, 6))
def test_the_chain_cut_is_the_best_root_path(rows: list[list[int]], seed: int, slope: float,
                                             max_nodes: int) -> None:
    cost = curve(slope)
    drafter = Pipeline([Rows(rows)], rates=PathRates(seed), cut=ChainCut(cost, max_nodes))
    tree = drafter.draft(root_view())
    q = q_of(seed)
    best, best_path = -1.0, None
    for path in all_paths(rows):  # the first best, in the order the nodes were added
        if len(path) > max_nodes:
            continue
        ratio = (1 + sum(reach_of(path[:i], q) for i in range(2, len(path) + 1))) / cost.step(
            len(path))
        if ratio > best + 1e-12:
            best, best_path = ratio, path
    assert tree.leaves().size == 1 and tree.num_nodes <= max_nodes
    assert tuple(tree.path_tokens(int(tree.leaves()[0])).tolist()) == best_path


def test_the_pipeline_refuses_what_cannot_work() -> None:
    with pytest.raises(DraftError, match="at least one source"):
        Pipeline([])
    with pytest.raises(DraftError, match="give the drafter rates"):
        Pipeline([Rows([[1]])], cut=CostCut(curve(1.0)))
    with pytest.raises(DraftError, match="give the drafter rates"):
        Pipeline([Rows([[1]])], cut=ChainCut(curve(1.0)))
    with pytest.raises(DraftError, match="cost must be a CostCurve, got str"):
        CostCut("fast")  # type: ignore[arg-type]
    with pytest.raises(DraftError, match="budget"):
        FirstNodes(0)
    rows = [[1, 2, 3], [4, 5]]
    whole = Pipeline([Rows(rows)], cut=KeepAll()).draft(root_view())
    first = Pipeline([Rows(rows)], cut=FirstNodes(4)).draft(root_view())
    assert whole.num_nodes == 6 and first.tokens.tolist() == whole.top(4).tokens.tolist()
    assert Pipeline([Rows(rows)]).last is None  # no rates: nothing rated


# ------------------------------------------------------------------------ the tree lattice
def test_the_tree_lattice_memoises_and_peeks() -> None:
    calls: list[tuple[int, ...]] = []

    def expand(prefix: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        calls.append(prefix)
        if not prefix:
            return np.array([ROOT]), np.zeros(1)
        return np.array([3, 1, 2]), np.array([np.log(0.2), np.log(0.5), -np.inf])  # dropped

    lattice = TreeLattice(3, expand)
    assert isinstance(lattice, Searchable)
    assert lattice.peek(()) is None and lattice.expanded == 0
    assert lattice.certain == ROOT and calls == [()]
    assert lattice.peek((ROOT,)) is None
    ids, scores = lattice.expand((ROOT,))
    assert ids.tolist() == [1, 3]  # best first, the -inf arc gone
    np.testing.assert_allclose(scores, np.log([0.5, 0.2]))
    again = lattice.expand((ROOT,))
    assert again[0] is ids and calls == [(), (ROOT,)]  # expanded once
    peeked = lattice.peek((ROOT,))
    assert peeked is not None and peeked[0].tolist() == [1, 3]
    assert lattice.expanded == 2 and lattice.peek((ROOT, 1)) is None


@pytest.mark.parametrize(("ids", "scores", "match"), [
    ([1, 1], [-1.0, -2.0], r"expand\(7,\) gave ids that are negative or repeated"),
    ([1, -2], [-1.0, -2.0], "negative or repeated"),
    ([1, 2], [0.5, -2.0], "score above 0"),
    ([1, 2], [-1.0], "gave 2 ids and 1 scores"),
])
def test_the_tree_lattice_checks_each_expansion(ids: list[int], scores: list[float],
                                                match: str) -> None:
    lattice = TreeLattice(2, lambda prefix: (np.array(ids), np.array(scores)))
    with pytest.raises(LatticeError, match=match):
        lattice.expand((ROOT,))
    with pytest.raises(LatticeError, match="depth"):
        TreeLattice(0, lambda prefix: (np.array([1]), np.zeros(1)))


# ------------------------------------------------------------------------ the one p-best
def brute_pbest(lattice: SausageLattice) -> list[tuple[float, tuple[int, ...]]]:
    slots = [lattice.slot(d) for d in range(lattice.h)]
    out = []
    for arcs in itertools.product(*(range(ids.size) for ids, _ in slots)):
        toks = tuple(int(slots[d][0][r]) for d, r in enumerate(arcs))
        out.append((float(sum(slots[d][1][r] for d, r in enumerate(arcs))), toks))
    return sorted(out, key=lambda s: -s[0])


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10_000), h=st.integers(1, 4), k=st.integers(1, 3),
       p=st.integers(1, 12))
def test_the_sausage_fast_path_equals_the_general_search(seed: int, h: int, k: int,
                                                         p: int) -> None:
    """pbest on a sausage (its rank-vector enumeration) and on the same lattice seen as a tree
    lattice (the general best-first search): the same paths and scores, the true p best (ties
    aside: paths whose scores tie may come in either order)."""
    logits = np.random.default_rng(seed).normal(size=(h, 6)) * 2
    if seed % 4 == 0:  # ties: two tokens of equal logit in every slot
        logits[:, 1] = logits[:, 0]
    lattice = SausageLattice.from_logits(logits, k)
    fast = pbest(lattice, p)
    general = pbest(TreeLattice(lattice.h, lattice.expand), p)
    truth = brute_pbest(lattice)
    want = min(p, len(truth))
    assert fast.p == general.p == want
    np.testing.assert_allclose(fast.scores, general.scores, atol=1e-12)
    np.testing.assert_allclose(fast.scores, [s for s, _ in truth[:want]], atol=1e-12)
    for batch in (fast, general):
        for row, score in zip(batch.tokens.tolist(), batch.scores.tolist(), strict=True):
            assert lattice.path_score(row) == pytest.approx(score)
        assert len({tuple(r) for r in batch.tokens.tolist()}) == want  # distinct paths
    tied = any(abs(a - b) < 1e-9 for (a, _), (b, _) in itertools.pairwise(truth[: want + 1]))
    if not tied:
        assert fast.tokens.tolist() == general.tokens.tolist() == [
            list(t) for _, t in truth[:want]]
