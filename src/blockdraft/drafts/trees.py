"""Token-tree builders: many candidate drafts verified in one forward pass.

See docs/definitions.md sec. 11. Every builder takes a budget ``N``: the nodes of the tree, the
root (the certain token, slot 1 of the lattice) included, i.e. the tokens one verification
forward processes; trees are compared at equal ``N``. Node scores are natural-log path scores.

Builders (functions) and the matching :class:`~blockdraft.drafts.protocol.TreeDrafter`
strategies (``propose_tree(lattice, context) -> DraftTree``):

    trie_tree(batch, budget)                         TrieDrafter(drafter, budget=None)
        the p drafts of any Drafter merged on their common prefixes
    medusa_tree(lattice, choices, budget)            MedusaTreeDrafter(choices, budget=None)
        a static Medusa tree: ``choices`` are rank paths (element ``d`` of a path is a rank in
        the top-k of the head guessing depth ``d + 1``), so a node's token depends only on its
        depth and rank; ``MC_SIM_7B_63`` is Medusa's published tree (63 paths + the root)
    calibrated_choices(accuracies, budget)           MedusaTreeDrafter.calibrated(acc, budget)
        the static tree Medusa calibrates: best-first by the expected accepted length, from a
        ``[h - 1, k]`` matrix of per-depth, per-rank acceptance probabilities measured on
        held-out data (``blockdraft.oracle.rank_accuracies``)
    confidence_tree(lattice, budget)                 ConfidenceTreeDrafter(k, budget)
        EAGLE-2 style: the N nodes of highest cumulative head log-probability
    rescored_tree(lattice, budget, lm, alpha, context)   RescoredTreeDrafter(lm, k, budget, alpha)
        best-first by head score + alpha * LM score of the path so far (an n-gram LM scored
        exactly per path, or a small neural LM: ``rescorers.neural.NeuralPathScorer``), so a
        node's children depend on its ancestors

Best-first over scores that never increase along a path (log-probabilities, products of
probabilities) keeps every kept node's parent and gives the N best nodes; ties go to the node
found first.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from blockdraft.core.batch import DraftBatch, DraftError
from blockdraft.core.checks import check_positive_int
from blockdraft.core.tree import DraftTree
from blockdraft.drafts.protocol import Drafter
from blockdraft.lattice.sausage import SausageLattice
from blockdraft.rescorers.base import PathScorer
from blockdraft.rescorers.ngram.lm import NgramLM
from blockdraft.rescorers.ngram.path_scorer import NgramPathScorer

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


# ---- best-first trees over the lattice -----------------------------------------------------------


def _best_first(
    lattice: SausageLattice, budget: int, child_scores: Any, source: str
) -> DraftTree:
    """Best-first growth: ``child_scores(path_tokens, parent_score) -> float [k]`` scores the
    next slot's arcs below a node (``-inf`` drops one); the ``budget`` best nodes are kept."""
    n = _budget(budget, source)
    root = int(lattice.tokens[0, 0])
    tokens, parents, scores = [root], [-1], [0.0]
    paths: list[list[int]] = [[root]]
    heap: list[tuple[float, int, int, int]] = []  # (-score, tiebreak, parent, arc)
    counter = 0

    def expand(node: int) -> None:
        nonlocal counter
        depth = len(paths[node]) - 1
        if depth + 1 >= lattice.h:
            return
        arcs = lattice.tokens[depth + 1]
        values = child_scores(paths[node], scores[node], depth + 1)
        for r in range(arcs.size):
            if arcs[r] >= 0 and np.isfinite(values[r]):
                heapq.heappush(heap, (-float(values[r]), counter, node, r))
                counter += 1

    scores[0] = float(child_scores([], 0.0, 0)[0])
    expand(0)
    while heap and len(tokens) < n:
        neg, _, parent, r = heapq.heappop(heap)
        tok = int(lattice.tokens[len(paths[parent]), r])
        tokens.append(tok)
        parents.append(parent)
        scores.append(-neg)
        paths.append([*paths[parent], tok])
        expand(len(tokens) - 1)
    return DraftTree(tokens=np.asarray(tokens), parents=np.asarray(parents),
                     scores=np.asarray(scores), source=source)


def confidence_tree(lattice: SausageLattice, budget: int) -> DraftTree:
    """The ``budget`` nodes of highest cumulative head log-probability (EAGLE-2's tree,
    with the lattice's top-``k`` per depth as the candidates), in the order found."""

    def head(path: list[int], parent_score: float, slot: int) -> np.ndarray:
        return parent_score + lattice.scores[slot]

    return _best_first(lattice, budget, head, "confidence")


def rescored_tree(
    lattice: SausageLattice, budget: int, lm: PathScorer, alpha: float = 1.0,
    context: Sequence[int] | np.ndarray = (),
) -> DraftTree:
    """Best-first by ``head score + alpha * LM score`` of the path so far (docs/definitions.md
    sec. 4 and 11): a child's score adds its head log-prob and ``alpha`` times
    ``ln P_LM(token | context, path)``, so the tree below a node depends on its ancestors.
    The root's score includes the certain token's LM score, as the n-gram rescorer's do.

    Args:
        lattice: the step's lattice.
        budget: ``N``, the nodes with the root.
        lm: an LM with ``score(tokens, context)``, or with ``next_scores`` (a
            :class:`~blockdraft.rescorers.neural.NeuralPathScorer`). An :class:`NgramLM`
            is scored through :class:`~blockdraft.rescorers.ngram.NgramPathScorer`: each
            child exactly on its whole path, the same numbers as KenLM's (its start-of-text
            convention for an empty context), one lookup from the parent's LM state.
        alpha: the LM weight, ``>= 0``.
        context: the committed prefix before the certain token.
    """
    if not alpha >= 0:
        raise DraftError(f"alpha must be >= 0, got {alpha}")
    ctx = np.asarray(context, dtype=np.int64).reshape(-1)
    if isinstance(lm, NgramLM):  # the same scores, one KenLM lookup per child
        lm = NgramPathScorer(lm)

    next_scores = getattr(lm, "next_scores", None)

    def combined(path: list[int], parent_score: float, slot: int) -> np.ndarray:
        arcs = lattice.tokens[slot]
        out = parent_score + lattice.scores[slot].copy()
        if alpha == 0:
            return out
        real = arcs >= 0
        if callable(next_scores):  # all children in one call (a neural LM: one forward)
            out[real] += alpha * np.asarray(next_scores(path, ctx, arcs[real]), dtype=float)
            return out
        for r in np.flatnonzero(real).tolist():
            seq = np.asarray([*path, int(arcs[r])], dtype=np.int64)
            out[r] += alpha * float(lm.score(seq, ctx)[-1])
        return out

    return _best_first(lattice, budget, combined, "rescored")


# ---- the strategies ------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrieDrafter:
    """Any :class:`Drafter`'s ``p`` drafts as one trie, cut to ``budget`` nodes (None: all)."""

    drafter: Drafter
    budget: int | None = None
    name: str = ""

    def __post_init__(self) -> None:
        if not self.name:
            cut = "" if self.budget is None else f", N<={self.budget}"
            object.__setattr__(self, "name", f"trie of {self.drafter.name}{cut}")

    @property
    def k(self) -> int:
        """The wrapped drafter's lattice width."""
        return int(self.drafter.k)

    def propose_tree(
        self, lattice: SausageLattice, context: Sequence[int] | np.ndarray
    ) -> DraftTree:
        """The trie of the drafter's drafts."""
        return trie_tree(self.drafter.propose(lattice, context), self.budget)


@dataclass(frozen=True)
class MedusaTreeDrafter:
    """A static Medusa tree (default :data:`MC_SIM_7B_63`) on every step's lattice."""

    choices: tuple[tuple[int, ...], ...] = MC_SIM_7B_63
    budget: int | None = None
    name: str = ""
    k: int = field(default=0)

    def __post_init__(self) -> None:
        paths = tuple(sort_choices(self.choices))
        object.__setattr__(self, "choices", paths)
        if not self.k:
            object.__setattr__(self, "k", 1 + max((max(c) for c in paths), default=0))
        if not self.name:
            n = 1 + len(paths) if self.budget is None else min(self.budget, 1 + len(paths))
            object.__setattr__(self, "name", f"medusa tree (N={n})")

    @classmethod
    def calibrated(cls, accuracies: Any, budget: int) -> MedusaTreeDrafter:
        """The tree :func:`calibrated_choices` builds from ``accuracies [h - 1, k]``."""
        return cls(choices=tuple(calibrated_choices(accuracies, budget)),
                   name=f"calibrated tree (N={budget})")

    def propose_tree(
        self, lattice: SausageLattice, context: Sequence[int] | np.ndarray
    ) -> DraftTree:
        """The static tree on ``lattice``."""
        return medusa_tree(lattice, self.choices, self.budget)


@dataclass(frozen=True)
class ConfidenceTreeDrafter:
    """EAGLE-2 style confidence tree of ``budget`` nodes over the top-``k`` lattice."""

    k: int = 4
    budget: int = 16
    name: str = ""

    def __post_init__(self) -> None:
        _budget(self.budget, "confidence tree")
        check_positive_int(self.k, "ConfidenceTreeDrafter.k", DraftError)
        if not self.name:
            object.__setattr__(self, "name", f"confidence tree (k={self.k}, N={self.budget})")

    def propose_tree(
        self, lattice: SausageLattice, context: Sequence[int] | np.ndarray
    ) -> DraftTree:
        """The ``budget`` most confident nodes."""
        return confidence_tree(_narrow(lattice, self.k), self.budget)


@dataclass(frozen=True)
class RescoredTreeDrafter:
    """Best-first tree of ``budget`` nodes by head + ``alpha`` x LM score (an n-gram LM)."""

    lm: PathScorer
    k: int = 4
    budget: int = 16
    alpha: float = 1.0
    name: str = ""
    # An NgramLM's NgramPathScorer, made once: its word and LM-state caches then live across
    # the steps instead of being rebuilt by every rescored_tree call.
    _scorer: PathScorer = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _budget(self.budget, "rescored tree")
        check_positive_int(self.k, "RescoredTreeDrafter.k", DraftError)
        if not self.name:
            object.__setattr__(self, "name", f"rescored tree (k={self.k}, N={self.budget}, "
                                             f"alpha={self.alpha:g})")
        object.__setattr__(self, "_scorer", NgramPathScorer(self.lm)
                           if isinstance(self.lm, NgramLM) else self.lm)

    def propose_tree(
        self, lattice: SausageLattice, context: Sequence[int] | np.ndarray
    ) -> DraftTree:
        """The ``budget`` best nodes under head + LM scores."""
        return rescored_tree(_narrow(lattice, self.k), self.budget, self._scorer, self.alpha,
                             context)


def _narrow(lattice: SausageLattice, k: int) -> SausageLattice:
    """The lattice's first ``k`` arcs per slot (it must be at least that wide)."""
    if lattice.k < k:
        raise DraftError(f"the tree needs a lattice of width k >= {k}, got k = {lattice.k}")
    if lattice.k == k:
        return lattice
    return SausageLattice(tokens=lattice.tokens[:, :k], scores=lattice.scores[:, :k])
