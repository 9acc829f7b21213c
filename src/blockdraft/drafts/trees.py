"""Static token trees: a trie of drafts cut to a budget, and Medusa's rank-path trees.

See docs/definitions.md sec. 11. Every builder takes a budget ``N``: the nodes of the tree, the
root (the certain token, slot 1 of the lattice) included, i.e. the tokens one verification
forward processes; trees are compared at equal ``N``. Node scores are natural-log path scores.
The trees grown best first (EAGLE-2's confidence tree, the rescored tree, the tree lattice's)
live in :mod:`blockdraft.drafts.grow`.

Public surface:
    trie_tree(batch, budget) -> DraftTree           the p drafts of a batch merged, cut to N
    TrieDrafter(drafter, budget=None) -> Pipeline   any drafter's trie cut to its first N nodes
    medusa_tree(lattice, choices, budget) -> DraftTree
        a static Medusa tree: ``choices`` are rank paths (element ``d`` of a path is a rank in
        the top-k of the head guessing depth ``d + 1``), so a node's token depends only on its
        depth and rank; ``MC_SIM_7B_63`` is Medusa's published tree (63 paths + the root)
    calibrated_choices(accuracies, budget)
        the static tree Medusa calibrates: best-first by the expected accepted length, from a
        ``[h - 1, k]`` matrix of per-depth, per-rank acceptance probabilities measured on
        held-out data (``blockdraft.oracle.rank_accuracies``)
    RankPaths(choices, budget)                      a source: the static tree
    MedusaTreeDrafter(choices=MC_SIM_7B_63, budget=None, name="") -> Pipeline
    calibrated_tree_drafter(accuracies, budget) -> Pipeline
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any

import numpy as np

from blockdraft.core.batch import DraftBatch, DraftError
from blockdraft.core.checks import check_positive_int
from blockdraft.core.tree import DraftTree
from blockdraft.drafts.cut import FirstNodes
from blockdraft.drafts.pipeline import Pipeline
from blockdraft.drafts.protocol import Feedback, Needs, StepView
from blockdraft.drafts.trie import Trie
from blockdraft.lattice.sausage import SausageLattice

Choices = Sequence[Sequence[int]]
"""Medusa's ``medusa_choices``: rank paths, e.g. ``[[0], [0, 0], [1], ...]``."""

MC_SIM_7B_63: tuple[tuple[int, ...], ...] = tuple(tuple(c) for c in [
    [0], [0, 0], [1], [0, 1], [2], [0, 0, 0], [1, 0], [0, 2], [3], [0, 3], [4], [0, 4], [2, 0],
    [0, 5], [0, 0, 1], [5], [0, 6], [6], [0, 7], [0, 1, 0], [1, 1], [7], [0, 8], [0, 0, 2],
    [3, 0], [0, 9], [8], [9], [1, 0, 0], [0, 2, 0], [1, 2], [0, 0, 3], [4, 0], [2, 1],
    [0, 0, 4], [0, 0, 5], [0, 0, 0, 0], [0, 1, 1], [0, 0, 6], [0, 3, 0], [5, 0], [1, 3],
    [0, 0, 7], [0, 0, 8], [0, 0, 9], [6, 0], [0, 4, 0], [1, 4], [7, 0], [0, 1, 2], [2, 0, 0],
    [3, 1], [2, 2], [8, 0], [0, 5, 0], [1, 5], [1, 0, 1], [0, 2, 1], [9, 0], [0, 6, 0],
    [0, 0, 0, 1], [1, 6], [0, 7, 0],
])
"""Medusa's ``mc_sim_7b_63`` (FasterDecoding/Medusa, ``medusa/model/medusa_choices.py``): 63
rank paths, i.e. 63 nodes below the root (N = 64), depth 4, top-10 per head; 10, 28, 23 and 2
nodes at depths 1-4."""


def _budget(budget: Any, name: str) -> int:
    return check_positive_int(budget, f"{name} budget (nodes, the root included)", DraftError)


# ---- the trie of a batch -------------------------------------------------------------------------


def trie_tree(batch: DraftBatch, budget: int | None = None) -> DraftTree:
    """The drafts of ``batch`` merged into a trie (:meth:`DraftTree.from_drafts`), cut to the
    first ``budget`` nodes (order of first appearance: the best drafts stay whole)."""
    tree = DraftTree.from_drafts(batch)
    return tree if budget is None else tree.top(_budget(budget, "trie"))


# ---- Medusa static trees -------------------------------------------------------------------------


def sort_choices(choices: Choices) -> list[tuple[int, ...]]:
    """Rank paths in Medusa's node order: by depth, then lexicographically (a path's prefixes
    come first).

    Raises:
        DraftError: on an empty or negative path, a repeated path, or a missing prefix.
    """
    paths = [tuple(int(r) for r in c) for c in choices]
    if any(len(c) == 0 or min(c) < 0 for c in paths):
        raise DraftError("every Medusa choice must be a non-empty list of ranks >= 0")
    if len(set(paths)) != len(paths):
        raise DraftError("Medusa choices repeat a path")
    have = set(paths)
    for c in paths:
        if len(c) > 1 and c[:-1] not in have:
            raise DraftError(f"Medusa choice {list(c)} lacks its prefix {list(c[:-1])}")
    return sorted(paths, key=lambda c: (len(c), c))


def medusa_tree(
    lattice: SausageLattice, choices: Choices = MC_SIM_7B_63, budget: int | None = None
) -> DraftTree:
    """A static Medusa tree on one step's lattice.

    Args:
        lattice: ``[h, k]``; slot 1 (the certain token) is the root, slot ``d + 1`` gives the
            tokens at depth ``d``.
        choices: rank paths; the node of path ``c`` at depth ``len(c)`` holds
            ``lattice.tokens[len(c), c[-1]]`` (Medusa's head ``len(c) - 1``).
        budget: keep the first ``budget - 1`` paths in node order (``N = budget``); default
            all.

    Returns:
        The tree in Medusa's node order; scores are cumulative head log-probs. A path through
        a padding arc of the lattice (a slot with fewer real tokens) is dropped with its
        descendants.

    Raises:
        DraftError: on bad choices, a path deeper than ``h - 1`` or a rank ``>= lattice.k``.
    """
    paths = sort_choices(choices)
    if budget is not None:
        paths = paths[: _budget(budget, "Medusa tree") - 1]
    depth = max((len(c) for c in paths), default=0)
    if depth > lattice.h - 1:
        raise DraftError(f"Medusa choices reach depth {depth}; the lattice has only "
                         f"{lattice.h - 1} heads after the certain token")
    rank = max((max(c) for c in paths), default=0)
    if rank >= lattice.k:
        raise DraftError(f"Medusa choices use rank {rank}; build the lattice with k >= "
                         f"{rank + 1} (got k = {lattice.k})")
    node_of: dict[tuple[int, ...], int] = {(): 0}
    tokens = [int(lattice.tokens[0, 0])]
    parents = [-1]
    scores = [float(lattice.scores[0, 0])]
    for c in paths:
        parent = node_of.get(c[:-1])
        d, r = len(c), c[-1]
        if parent is None or int(lattice.tokens[d, r]) < 0:  # below a dropped node, or padding
            continue
        node_of[c] = len(tokens)
        tokens.append(int(lattice.tokens[d, r]))
        parents.append(parent)
        scores.append(scores[parent] + float(lattice.scores[d, r]))
    return DraftTree(tokens=np.asarray(tokens), parents=np.asarray(parents),
                     scores=np.asarray(scores), source="medusa")


def calibrated_choices(accuracies: Any, budget: int) -> list[tuple[int, ...]]:
    """Medusa's calibrated static tree: the ``budget - 1`` rank paths of highest expected
    acceptance.

    A path ``c`` is accepted with probability ``prod_d accuracies[d, c[d]]`` (heads taken as
    independent, Medusa sec. 3.3.2), and the expected accepted length of a tree is the sum of
    its nodes' probabilities; the probability never grows along a path, so adding nodes
    best-first (Medusa's greedy expansion) maximises it for every budget.

    Args:
        accuracies: float ``[h - 1, k]``: ``accuracies[d, r]`` is the probability that rank
            ``r`` of the head guessing depth ``d + 1`` is the greedy token there (top-k
            accuracies per rank, measured on held-out data; see
            ``blockdraft.oracle.rank_accuracies``).
        budget: ``N``, the nodes with the root.

    Returns:
        Rank paths in the order chosen (best first); :func:`sort_choices` gives the node order.

    Raises:
        DraftError: on a matrix that is not 2-D, or values outside ``[0, 1]``.
    """
    acc = np.asarray(accuracies, dtype=np.float64)
    if acc.ndim != 2 or acc.size == 0 or np.isnan(acc).any() or (acc < 0).any() or (acc > 1).any():
        raise DraftError(f"accuracies must be a [h - 1, k] matrix of probabilities, got "
                         f"shape {acc.shape}")
    n = _budget(budget, "calibrated tree") - 1
    depth, k = acc.shape
    heap: list[tuple[float, tuple[int, ...]]] = [(-acc[0, r], (r,)) for r in range(k)]
    heapq.heapify(heap)
    chosen: list[tuple[int, ...]] = []
    while heap and len(chosen) < n:
        neg, path = heapq.heappop(heap)
        chosen.append(path)
        if len(path) < depth:
            for r in range(k):
                heapq.heappush(heap, (neg * acc[len(path), r], (*path, r)))
    return chosen


# ---- the strategies ------------------------------------------------------------------------------


def TrieDrafter(drafter: Pipeline, budget: int | None = None,  # noqa: N802
                name: str = "") -> Pipeline:
    """``drafter``'s sources (its drafts, one trie) cut to their first ``budget`` nodes (None:
    all): the best drafts stay whole.

    Raises:
        DraftError: not a drafter, or a bad budget.
    """
    if not isinstance(drafter, Pipeline):
        raise DraftError(f"TrieDrafter needs a drafter (HeadDrafter, LookupDrafter, ...), got "
                         f"{type(drafter).__name__}")
    cut = "" if budget is None else f", N<={budget}"
    return Pipeline(drafter.sources, rates=drafter.rates,
                    cut=drafter.cut if budget is None else FirstNodes(_budget(budget, "trie")),
                    name=name or f"trie of {drafter.name}{cut}", source=drafter.source)


class RankPaths:
    """Medusa's static tree over the step's lattice as a source (:func:`medusa_tree`).

    Args:
        choices: rank paths (sorted into Medusa's node order).
        budget: keep the first ``budget - 1`` paths (``N = budget``); None: all.
    """

    label = "medusa"

    def __init__(self, choices: Any = MC_SIM_7B_63, budget: int | None = None) -> None:
        self.choices = tuple(sort_choices(choices))
        self.budget = None if budget is None else _budget(budget, "Medusa tree")
        self.needs = Needs(k=1 + max((max(c) for c in self.choices), default=0))

    def add(self, view: StepView, trie: Trie) -> None:
        trie.add_tree(medusa_tree(view.lattice, self.choices, self.budget), self.label)

    def observe(self, feedback: Feedback) -> None:
        """Nothing to learn."""


def MedusaTreeDrafter(choices: Any = MC_SIM_7B_63, budget: int | None = None,  # noqa: N802
                      name: str = "") -> Pipeline:
    """A static Medusa tree (default :data:`MC_SIM_7B_63`) on every step's lattice."""
    source = RankPaths(choices, budget)
    n = 1 + len(source.choices) if budget is None else min(budget, 1 + len(source.choices))
    return Pipeline([source], name=name or f"medusa tree (N={n})", source="medusa")


def calibrated_tree_drafter(accuracies: Any, budget: int) -> Pipeline:
    """Medusa's calibrated tree: the static tree :func:`calibrated_choices` builds from
    ``accuracies [h - 1, k]``."""
    return MedusaTreeDrafter(choices=tuple(calibrated_choices(accuracies, budget)),
                             name=f"calibrated tree (N={budget})")
