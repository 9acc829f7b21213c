"""Prompt-lookup copies merged into the confidence tree of a tree lattice
(``ConditionalTreeDrafter(lookup=True)``: the pipeline's grown tree and copies in one trie,
``ArcRates``, ``CostCut``): every node rated from its definition (head arc where its parent was
expanded, copies as independent evidence), the cut equal to a brute-force search over sizes,
copies sharing the tree's nodes where they agree."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockdraft.core.batch import DraftError
from blockdraft.core.tree import DraftTree
from blockdraft.drafts import (
    ArcRates,
    ConditionalTreeDrafter,
    CostCut,
    Feedback,
    Grown,
    Needs,
    Pipeline,
    StepView,
    Trie,
)
from blockdraft.drafts.calibration import AcceptanceTables
from blockdraft.lattice.conditional import TreeLattice, conditional_tree
from blockdraft.lattice.sausage import SausageLattice, log_softmax
from blockdraft.models.cost import CostCurve

VOCAB, DEPTH = 8, 4


def _expand(seed: int, k: int = 3) -> Any:
    """A tree lattice rooted at token 0 whose children depend on the whole prefix."""

    def expand(prefix: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        if not prefix:
            return np.array([0]), np.zeros(1)
        rng = np.random.default_rng([seed, len(prefix), *prefix])
        ids = rng.choice(VOCAB, size=k, replace=False)
        return ids, log_softmax(rng.normal(0, 2, size=VOCAB))[ids]

    return expand


def _recording(expand: Any) -> tuple[Any, dict[tuple[int, ...], Any]]:
    seen: dict[tuple[int, ...], Any] = {}

    def wrapped(prefix: tuple[int, ...]) -> Any:
        seen[prefix] = out = expand(prefix)
        return out

    return wrapped, seen


class GivenCopies:
    """A source adding the given copies ``(tokens after the root, match, rank)`` as prompt
    lookup does: each noted on the trie (the rates read its match and rank)."""

    label = "lookup"
    needs = Needs()

    def __init__(self, copies: list[tuple[np.ndarray, int, int]]) -> None:
        self.copies = copies

    def add(self, view: StepView, trie: Trie) -> None:
        for row, match, rank in self.copies:
            trie.note_copy(trie.add([view.certain, *row.tolist()], -np.inf, self.label),
                           match, rank)

    def observe(self, feedback: Feedback) -> None:
        pass


def merge_copies(expand: Any, budget: int, copies: list[tuple[np.ndarray, int, int]],
                 tables: AcceptanceTables, cost: CostCurve | None, max_nodes: int
                 ) -> DraftTree:
    """The confidence tree of ``budget`` nodes over the tree lattice ``expand`` with the
    copies merged, rated by the arcs (and the copies' tables) and cut to what pays: the
    pipeline ``ConditionalTreeDrafter(lookup=True)`` composes, with given copies."""
    drafter = Pipeline([Grown(3, budget, tree_lattice=True, source="conditional tree"),
                        GivenCopies(copies)], rates=ArcRates(tables),
                       cut=CostCut(cost, max_nodes), source="conditional tree + lookup")
    lattice = SausageLattice(tokens=np.zeros((DEPTH, 1), dtype=np.int64),
                             scores=np.zeros((DEPTH, 1)))
    return drafter.draft(StepView(lattice=lattice, context=np.zeros(0, dtype=np.int64),
                                  tree=TreeLattice(DEPTH, expand)))


def _paths(tree: Any) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = []
    for u, (t, p) in enumerate(zip(tree.tokens.tolist(), tree.parents.tolist(), strict=True)):
        out.append((t,) if p < 0 else (*out[p], t))
        assert p < u
    return out


def _brute_reach(path: tuple[int, ...], grown: dict[tuple[int, ...], float],
                 seen: dict[tuple[int, ...], Any], copies: list[Any],
                 tables: AcceptanceTables) -> float:
    """``a(u)`` from the definition, node by node along ``path``."""
    a = 1.0
    for depth in range(2, len(path) + 1):
        node = path[:depth]
        if node in grown:
            q_head = math.exp(grown[node] - grown[node[:-1]])
        else:
            arcs = seen.get(node[:-1])
            hit = [] if arcs is None else [s for i, s in zip(*arcs, strict=True)
                                           if int(i) == node[-1]]
            q_head = math.exp(hit[0]) if hit else 0.0
        miss = 1.0
        for row, match, rank in copies:
            j = depth - 1  # the copy's offset of this node
            if len(row) >= j and tuple(row[:j].tolist()) == node[1:]:
                miss *= 1.0 - float(tables.copy_q(match, j, rank))
        a *= 1.0 - (1.0 - q_head) * miss
    return a


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), budget=st.integers(1, 12),
       lengths=st.lists(st.integers(1, 6), min_size=0, max_size=3))
def test_every_node_is_rated_from_its_definition(seed: int, budget: int,
                                                 lengths: list[int]) -> None:
    expand, seen = _recording(_expand(seed))  # what the drafter's tree lattice expanded
    grown_tree = conditional_tree(_expand(seed), DEPTH, budget)
    grown = dict(zip(_paths(grown_tree), grown_tree.scores.tolist(), strict=True))
    rng = np.random.default_rng(seed)
    copies = []
    for rank, n in enumerate(lengths, start=1):
        # half the copies follow a grown path first (shared nodes), then anything
        keys = list(grown)
        start = list(keys[int(rng.integers(len(keys)))])[1:] if rng.random() < 0.5 else []
        row = np.array((start + rng.integers(0, VOCAB, size=n).tolist())[:n], dtype=np.int64)
        copies.append((row, int(rng.integers(1, 5)), rank))
    tables = AcceptanceTables.uniform(DEPTH, head_q=0.5, copy_q=0.6)
    merged = merge_copies(expand, budget, copies, tables, None, 10_000)
    paths = _paths(merged)
    assert len(set(paths)) == len(paths)  # a trie: no node twice
    want = set(grown) | {(0, *row[:j].tolist()) for row, _, _ in copies
                         for j in range(1, len(row) + 1)}
    assert set(paths) == want
    for path, score in zip(paths, merged.scores.tolist(), strict=True):
        a = _brute_reach(path, grown, seen, copies, tables)
        assert score == pytest.approx(math.log(a) if a > 0 else -1e30, abs=1e-9)


@pytest.mark.parametrize("slope", [0.0, 0.5, 3.0, 40.0])
def test_the_cut_is_the_size_that_pays_best(slope: float) -> None:
    """Kept: the ``N - 1`` nodes of highest ``a``, ``N`` maximising (1 + sum a) / cost(N),
    found here by trying every size."""
    expand = _expand(3)
    copies = [(np.array([5, 1, 2, 6, 6, 1]), 3, 1), (np.array([2, 2, 7]), 1, 2)]
    tables = AcceptanceTables.uniform(DEPTH, copy_q=0.7)
    full = merge_copies(expand, 10, copies, tables, None, 10_000)
    nodes = (1, 2, 4, 8, 16, 32)
    cost = CostCurve(nodes=nodes, step_ms=tuple(10 + slope * (n - 1) for n in nodes),
                     heads_ms=0.0, greedy_ms=10.0)
    cut = merge_copies(expand, 10, copies, tables, cost, 12)
    a = np.sort(np.exp(full.scores[1:]))[::-1]
    ratios = [(1 + a[: n - 1].sum()) / cost.step(n) for n in range(1, min(12, a.size + 1) + 1)]
    best = int(np.argmax(ratios)) + 1
    assert len(cut.tokens) == best
    kept = sorted(np.exp(cut.scores[1:]).tolist(), reverse=True)
    np.testing.assert_allclose(kept, a[: best - 1])
    assert set(_paths(cut)) <= set(_paths(full))


def test_the_drafter_adds_the_copy_and_only_with_lookup() -> None:
    """A context whose last token was followed by ``9 9 9`` before: with lookup the tree
    holds that copy (tokens no head proposes); without, it does not."""
    expand = _expand(5)
    context = np.array([1, 0, 9, 9, 9, 4, 2, 3])  # the certain token 0 follows: copy 9 9 9 4 ...
    lattice = SausageLattice(tokens=np.zeros((DEPTH, 1), dtype=np.int64),
                             scores=np.zeros((DEPTH, 1)))

    def view() -> StepView:  # a step's tree lattice: a new memo each step
        return StepView(lattice=lattice, context=context, tree=TreeLattice(DEPTH, expand))

    plain = ConditionalTreeDrafter(k=3, budget=8).draft(view())
    drafter = ConditionalTreeDrafter(k=3, budget=16, lookup=True, copy_length=4)
    assert "lookup" in drafter.name and drafter.needs.tree_lattice
    tree = drafter.draft(view())
    assert (0, 9, 9, 9, 4) in set(_paths(tree)) and tree.source == "conditional tree + lookup"
    assert not any(p[1:3] == (9, 9) for p in _paths(plain))
    assert len(tree.tokens) <= 16


@pytest.mark.parametrize(("kwargs", "match"), [({"copies": 0}, "copies"),
                                               ({"copy_length": -1}, "copy_length"),
                                               ({"tables": "x"}, "AcceptanceTables")])
def test_bad_settings_are_refused(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(DraftError, match=match):
        ConditionalTreeDrafter(lookup=True, **kwargs)


def test_many_copies_of_one_path_combine() -> None:
    """Two copies through the same node: q = 1 - (1 - q_head)(1 - q1)(1 - q2)."""
    expand = _expand(8)
    tables = AcceptanceTables.uniform(DEPTH, copy_q=0.6)
    rows = [(np.array([3]), 1, 1), (np.array([3, 4]), 2, 2)]
    merged = merge_copies(expand, 1, rows, tables, None, 10)  # grown: the root alone
    arcs = dict(zip(*[a.tolist() for a in expand((0,))], strict=True))
    q_head = math.exp(arcs[3]) if 3 in arcs else 0.0
    q1, q2 = float(tables.copy_q(1, 1, 1)), float(tables.copy_q(2, 1, 2))
    assert q1 != q2  # the tables rate each copy by its own match and rank
    want = 1 - (1 - q_head) * (1 - q1) * (1 - q2)
    got = dict(zip(_paths(merged), np.exp(merged.scores).tolist(), strict=True))
    assert got[(0, 3)] == pytest.approx(want)
    assert list(itertools.islice(got, 1)) == [(0,)]
