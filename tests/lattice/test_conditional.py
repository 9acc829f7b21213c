"""The conditional (tree) lattice's exact p-best (lattice/conditional): equal to a brute-force
enumeration of every path, with and without an n-gram LM; a sausage (children independent of
the prefix) gives the sausage's own p-best; each node is expanded at most once; bad input is
refused."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockdraft.lattice.conditional import conditional_pbest
from blockdraft.lattice.sausage import LatticeError, SausageLattice, log_softmax


def _random_tree(seed: int, k: int, vocab: int = 9) -> Any:
    """A tree lattice whose children depend on the whole prefix (a hash of it seeds them)."""

    def expand(prefix: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng([seed, len(prefix), *prefix])
        ids = rng.choice(vocab, size=k, replace=False)
        return ids, log_softmax(rng.normal(0, 2, size=vocab))[ids]

    return expand


class _BigramScorer:
    """A random bigram LM over ids 0..vocab-1 with ``next_scores`` (and a start row)."""

    def __init__(self, seed: int, vocab: int = 9) -> None:
        rng = np.random.default_rng(seed)
        self.table = log_softmax(rng.normal(0, 1.5, size=(vocab + 1, vocab)))
        self.calls = 0

    def next_scores(self, path: list[int], context: np.ndarray, candidates: np.ndarray
                    ) -> np.ndarray:
        self.calls += 1
        last = path[-1] if path else (int(context[-1]) if context.size else -1)
        return self.table[last][np.asarray(candidates)]


def _brute(expand: Any, depth: int, scorer: Any, context: list[int], alpha: float
           ) -> list[tuple[tuple[int, ...], float]]:
    paths: list[tuple[tuple[int, ...], float]] = []

    def walk(prefix: tuple[int, ...], score: float) -> None:
        if len(prefix) == depth:
            paths.append((prefix, score))
            return
        ids, scores = expand(prefix)
        lm = (scorer.next_scores(list(prefix), np.asarray(context), ids) if scorer is not None
              else np.zeros(len(ids)))
        for t, s, m in zip(ids.tolist(), scores.tolist(), lm.tolist(), strict=True):
            walk((*prefix, t), score + s + alpha * m)

    walk((), 0.0)
    return sorted(paths, key=lambda x: (-x[1], x[0]))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), k=st.integers(1, 4), depth=st.integers(1, 4),
       p=st.integers(1, 30), alpha=st.sampled_from([0.0, 0.5, 1.0, 2.0]),
       with_lm=st.booleans())
def test_pbest_equals_brute_force(seed: int, k: int, depth: int, p: int, alpha: float,
                                  with_lm: bool) -> None:
    expand = _random_tree(seed, k)
    scorer = _BigramScorer(seed + 1) if with_lm else None
    got = conditional_pbest(expand, depth, p, scorer=scorer, context=[3], alpha=alpha)
    want = _brute(expand, depth, scorer, [3], alpha)[:p]
    assert _paths(got) == [path for path, _ in want]
    np.testing.assert_allclose(got.scores, [s for _, s in want], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got.scores, got.head_scores + got.alpha * got.lm_scores)
    assert len(got) == min(p, k ** depth) and got.exhausted == (p > k ** depth)


def test_a_sausage_gives_the_sausages_own_pbest() -> None:
    rng = np.random.default_rng(0)
    lattice = SausageLattice.from_logits(rng.normal(0, 2, size=(4, 30)), k=5,
                                         certain_first=False)

    def expand(prefix: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        return lattice.tokens[len(prefix)], lattice.scores[len(prefix)]

    got = conditional_pbest(expand, 4, 12)
    want = lattice.best_paths(12)
    assert _paths(got) == _paths(want)
    np.testing.assert_allclose(got.scores, want.scores)


def test_each_node_is_expanded_once_and_a_cap_stops_the_search() -> None:
    seen: list[tuple[int, ...]] = []
    base = _random_tree(7, 3)

    def counting(prefix: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        seen.append(prefix)
        return base(prefix)

    full = conditional_pbest(counting, 4, 81)  # every path: every internal node once
    assert len(full) == 81 and len(seen) == len(set(seen)) == 1 + 3 + 9 + 27
    seen.clear()
    first = conditional_pbest(counting, 4, 1)
    assert _paths(first) == _paths(full)[:1] and len(seen) < 40  # few expansions needed
    capped = conditional_pbest(counting, 4, 5, max_expansions=1)
    walk: tuple[int, ...] = ()  # no full path by the cap: the best partial one, completed
    for _ in range(4):
        ids, scores = base(walk)
        walk = (*walk, int(ids[int(np.argmax(scores))]))
    assert _paths(capped) == [walk]


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"depth": 0}, "depth"), ({"p": 0}, "p"), ({"alpha": -1.0}, "alpha"),
    ({"alpha": float("nan")}, "alpha")])
def test_bad_arguments_are_refused(kwargs: dict[str, Any], match: str) -> None:
    args = {"depth": 2, "p": 1, **kwargs}
    with pytest.raises(LatticeError, match=match):
        conditional_pbest(_random_tree(0, 2), args.pop("depth"), args.pop("p"), **args)


@pytest.mark.parametrize(("ids", "scores", "match"), [
    ([1, 1], [-1.0, -2.0], "repeated"), ([1, 2], [0.5, -1.0], "above 0"),
    ([1, 2], [-1.0], "ids and")])
def test_bad_expansions_are_refused(ids: list[int], scores: list[float], match: str) -> None:
    def expand(prefix: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(ids), np.asarray(scores)

    with pytest.raises(LatticeError, match=match):
        conditional_pbest(expand, 2, 3)


def test_an_arc_the_lm_rules_out_is_dropped() -> None:
    class Forbid:
        def next_scores(self, path: list[int], context: np.ndarray, cands: np.ndarray
                        ) -> np.ndarray:
            return np.where(np.asarray(cands) == 0, -np.inf, -0.1)

    expand = _random_tree(3, 4, vocab=5)
    got = conditional_pbest(expand, 3, 100, scorer=Forbid())
    assert len(got) and all(0 not in path for path in _paths(got))
    assert len(got) == sum(1 for path in itertools.product(range(5), repeat=3)
                           if 0 not in path and _in_tree(expand, path))


def _paths(batch: Any) -> list[tuple[int, ...]]:
    return [tuple(int(t) for t in row) for row in batch.tokens]


def _in_tree(expand: Any, path: tuple[int, ...]) -> bool:
    for i in range(len(path)):
        if path[i] not in expand(path[:i])[0].tolist():
            return False
    return True


def _brute_nodes(expand: Any, depth: int) -> list[tuple[tuple[int, ...], float]]:
    """Every node under the best root, by (score desc, path asc)."""
    ids, scores = expand(())
    root = min(zip(ids.tolist(), scores.tolist(), strict=True), key=lambda x: (-x[1], x[0]))
    nodes: list[tuple[tuple[int, ...], float]] = []

    def walk(prefix: tuple[int, ...], score: float) -> None:
        nodes.append((prefix, score))
        if len(prefix) == depth:
            return
        ids, scores = expand(prefix)
        for t, s in zip(ids.tolist(), scores.tolist(), strict=True):
            walk((*prefix, t), score + s)

    walk((root[0],), root[1])
    return sorted(nodes, key=lambda x: (-x[1], x[0]))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), k=st.integers(1, 4), depth=st.integers(1, 4),
       budget=st.integers(1, 40))
def test_conditional_tree_equals_brute_force(seed: int, k: int, depth: int,
                                             budget: int) -> None:
    """The tree's nodes are the ``budget`` most probable nodes under the root, in order, each
    expanded at most once, and each node's parent is its path's prefix."""
    from blockdraft.lattice.conditional import conditional_tree

    base = _random_tree(seed, k)
    calls: list[tuple[int, ...]] = []

    def expand(prefix: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        calls.append(prefix)
        return base(prefix)

    tree = conditional_tree(expand, depth, budget)
    want = _brute_nodes(base, depth)[:budget]
    paths: list[tuple[int, ...]] = []
    for u in range(len(tree.tokens)):
        parent = int(tree.parents[u])
        paths.append((int(tree.tokens[u]),) if parent < 0 else (*paths[parent],
                                                                  int(tree.tokens[u])))
    assert paths == [p for p, _ in want]
    np.testing.assert_allclose(tree.scores, [s for _, s in want])
    assert len(calls) == len(set(calls)) <= len(paths)  # each node at most once


def test_conditional_tree_of_a_sausage_is_the_confidence_tree() -> None:
    """Children that ignore the prefix make a sausage: its conditional tree is the sausage's
    own confidence tree (EAGLE-2's), node for node."""
    from blockdraft.drafts import confidence_tree
    from blockdraft.lattice.conditional import conditional_tree

    rng = np.random.default_rng(3)
    lattice = SausageLattice.from_logits(rng.normal(0, 2, size=(5, 30)), k=4)

    def expand(prefix: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        slot = len(prefix)
        if slot == 0:  # the certain token, scored as the sausage scores it
            return lattice.tokens[0, :1], lattice.scores[0, :1]
        return lattice.tokens[slot], lattice.scores[slot]

    for budget in (1, 5, 16, 40):
        got = conditional_tree(expand, 5, budget)
        want = confidence_tree(lattice, budget)
        def nodes(tree: Any) -> list[tuple[int, int, float]]:
            return sorted(zip(tree.depths.tolist(), tree.tokens.tolist(),
                              tree.scores.round(9).tolist(), strict=True))

        assert nodes(got) == nodes(want)


def test_a_stopped_conditional_tree_is_a_prefix_of_the_full_one() -> None:
    """``stop`` ends the tree before the first node it refuses: the nodes kept are the full
    tree's first ones, and it sees each next node's log-probability below the root."""
    from blockdraft.lattice.conditional import conditional_tree

    expand = _random_tree(11, 3)
    full = conditional_tree(expand, 4, 30)
    seen: list[tuple[int, float]] = []

    def stop(taken: int, below_root: float) -> bool:
        seen.append((taken, below_root))
        return below_root < -2.0

    cut = conditional_tree(expand, 4, 30, stop=stop)
    n = len(cut.tokens)
    assert 1 <= n < len(full.tokens)
    np.testing.assert_array_equal(cut.tokens, full.tokens[:n])
    np.testing.assert_array_equal(cut.parents, full.parents[:n])
    assert all(s >= -2.0 for s in cut.scores[1:] - cut.scores[0])
    assert seen[-1][0] == n and seen[-1][1] == pytest.approx(full.scores[n] - full.scores[0])
