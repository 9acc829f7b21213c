"""A conditional (tree) lattice: arcs whose scores depend on the path so far.

docs/definitions.md sec. 3. A sausage lattice holds one fixed top-``k`` per slot: the heads
guess independently. Prefix-conditioned (Hydra-style) heads score slot ``i``'s tokens given the
token chosen at slot ``i - 1``, so each prefix has its own children: the lattice is a tree of
depth ``h`` whose node ``(t_1 .. t_i)`` is expanded by ``expand(prefix) -> (ids [k'],
log-probs [k'])``, called lazily, once per node that the search reaches.

The ``p`` best paths under ``sum(arc log-probs) + alpha * sum(LM log-probs)`` are found
exactly by best-first search: every term is a log-probability (``<= 0``), so a partial path's
score bounds every completion from above and the first ``p`` complete paths popped are the
``p`` best (ties: the smaller token sequence first). A brute-force enumeration of the
``k^h`` paths gives the same list (tests).

Public surface:
    Expand                                     ``(prefix tuple) -> (ids int64 [k'], scores [k'])``
    conditional_pbest(expand, depth, p, *, scorer=None, context=(), alpha=1.0,
                      max_expansions=None) -> DraftBatch     best first
    conditional_tree(expand, depth, budget, stop=None) -> DraftTree   the ``budget`` most
                                               probable nodes (or fewer: ``stop``)

``conditional_tree`` is EAGLE-2's draft tree over the same lattice: the nodes of highest
cumulative log-probability, any depth up to ``h`` (a node's ancestors score at least as high,
so they form a tree); each node taken is expanded once, so ``budget`` nodes cost at most
``budget - 1`` expansions.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from blockdraft.core.batch import DraftBatch
from blockdraft.core.checks import check_positive_int
from blockdraft.core.tree import DraftTree
from blockdraft.lattice.sausage import LatticeError

Expand = Callable[[tuple[int, ...]], tuple[np.ndarray, np.ndarray]]


def _children(expand: Expand, prefix: tuple[int, ...]) -> tuple[list[int], list[float]]:
    """``expand(prefix)`` checked: distinct ids >= 0, finite log-probs <= 0 (``-inf`` arcs
    dropped)."""
    ids, scores = expand(prefix)
    ids = np.asarray(ids, dtype=np.int64).ravel()
    scores = np.asarray(scores, dtype=np.float64).ravel()
    if ids.shape != scores.shape:
        raise LatticeError(f"expand{prefix} gave {ids.size} ids and {scores.size} scores")
    keep = np.isfinite(scores)
    ids, scores = ids[keep], scores[keep]
    if ids.size and (ids.min() < 0 or np.unique(ids).size != ids.size):
        raise LatticeError(f"expand{prefix} gave ids that are negative or repeated: "
                           f"{ids.tolist()}")
    if scores.size and scores.max() > 1e-9:
        raise LatticeError(f"expand{prefix} gave a score above 0 ({scores.max():g}): arc "
                           "scores must be natural-log probabilities")
    return ids.tolist(), scores.tolist()


def conditional_pbest(
    expand: Expand,
    depth: int,
    p: int,
    *,
    scorer: Any = None,
    context: Sequence[int] | np.ndarray = (),
    alpha: float = 1.0,
    max_expansions: int | None = None,
) -> DraftBatch:
    """The ``p`` best full-depth paths of a conditional lattice, best first.

    Args:
        expand: a node's children (see the module docstring); called once per expanded node.
        depth: the lattice's depth ``h >= 1`` (every path has ``h`` tokens).
        p: paths wanted (fewer when the lattice has fewer: ``exhausted``).
        scorer: an LM with ``next_scores(path, context, candidates) -> float64 [c]``
            (``ln P``; :class:`~blockdraft.rescorers.ngram.NgramPathScorer`), or None for
            the arc scores alone.
        context: the committed tokens before the lattice, oldest first.
        alpha: the LM's weight (``>= 0``).
        max_expansions: expand at most this many nodes (the search is then exact only if
            it ended before the cap; when it stopped with no full path, the best partial
            path is completed along each node's best arc). None: no limit.

    Returns:
        A :class:`~blockdraft.core.batch.DraftBatch` of up to ``p`` paths of ``depth`` tokens
        (``source="conditional"``): total, arc and LM scores per path.

    Raises:
        LatticeError: a bad ``depth``, ``p``, ``alpha`` or expansion, or a lattice with no
            full-depth path.
    """
    depth = check_positive_int(depth, "depth", LatticeError)
    p = check_positive_int(p, "p", LatticeError)
    if not alpha >= 0:  # NaN too
        raise LatticeError(f"alpha must be >= 0, got {alpha!r}")
    ctx = np.asarray(context, dtype=np.int64)
    use_lm = scorer is not None and alpha > 0
    # entries: (-total, path, arc sum, LM sum); paths are distinct, so ties end at the path
    heap: list[tuple[float, tuple[int, ...], float, float]] = [(-0.0, (), 0.0, 0.0)]
    out: list[tuple[tuple[int, ...], float, float, float]] = []
    expanded = 0
    while heap and len(out) < p:
        neg, prefix, arcs, lm_sum = heapq.heappop(heap)
        if len(prefix) == depth:
            out.append((prefix, -neg, arcs, lm_sum))
            continue
        if max_expansions is not None and expanded >= max_expansions:
            if not out:  # no full path yet: the best partial one, completed greedily
                out.append(_complete(expand, prefix, depth, arcs, lm_sum, scorer, ctx,
                                     alpha if use_lm else 0.0))
            break
        expanded += 1
        ids, scores = _children(expand, prefix)
        lm = (np.asarray(scorer.next_scores(list(prefix), ctx, np.asarray(ids)),
                         dtype=np.float64) if use_lm and ids else np.zeros(len(ids)))
        for token, arc, lp in zip(ids, scores, lm.tolist(), strict=True):
            total = -neg + arc + alpha * lp if use_lm else -neg + arc
            if total > -np.inf:  # an LM that rules a token out drops its arc
                heapq.heappush(heap, (-total, (*prefix, token), arcs + arc,
                                      lm_sum + (lp if use_lm else 0.0)))
    if not out:
        raise LatticeError(f"the conditional lattice has no path of depth {depth}")
    return DraftBatch(
        tokens=np.asarray([path for path, _, _, _ in out], dtype=np.int64),
        scores=np.asarray([total for _, total, _, _ in out]),
        head_scores=np.asarray([arcs for _, _, arcs, _ in out]),
        lm_scores=np.asarray([lm for _, _, _, lm in out]),
        alpha=alpha if use_lm else 0.0, requested=p, source="conditional")


def _complete(expand: Expand, prefix: tuple[int, ...], depth: int, arcs: float, lm_sum: float,
              scorer: Any, ctx: np.ndarray, alpha: float
              ) -> tuple[tuple[int, ...], float, float, float]:
    """``prefix`` extended to ``depth`` along each node's best arc (by its arc score)."""
    while len(prefix) < depth:
        ids, scores = _children(expand, prefix)
        if not ids:
            raise LatticeError(f"the conditional lattice has no path of depth {depth}")
        best = int(np.argmax(scores))
        if alpha > 0:
            chosen = np.asarray(ids[best:best + 1])
            lm_sum += float(scorer.next_scores(list(prefix), ctx, chosen)[0])
        prefix, arcs = (*prefix, ids[best]), arcs + scores[best]
    return prefix, arcs + alpha * lm_sum, arcs, lm_sum


def conditional_tree(expand: Expand, depth: int, budget: int,
                     stop: Callable[[int, float], bool] | None = None) -> DraftTree:
    """The ``budget`` nodes of highest cumulative arc log-probability of a conditional lattice
    (EAGLE-2's tree; see the module docstring), the root (the certain token) included.

    Args:
        expand: a node's children; called once for each node taken above the last depth.
        depth: the lattice's depth ``h >= 1`` (the root is depth 1, a leaf at most ``h``).
        budget: ``N >= 1`` nodes wanted (fewer when the lattice has fewer).
        stop: ``(nodes taken, the next node's log-probability below the root) -> bool``:
            True ends the tree before that node (a tree that stops where the next node no
            longer pays its cost); the root is always taken.

    Returns:
        A :class:`~blockdraft.core.tree.DraftTree` (``source="conditional tree"``), nodes in
        the order taken (best first; ties: the smaller token path first), each scored by its
        path's log-probability.

    Raises:
        LatticeError: a bad ``depth``, ``budget`` or expansion, or no root.
    """
    depth = check_positive_int(depth, "depth", LatticeError)
    budget = check_positive_int(budget, "budget", LatticeError)
    ids, scores = _children(expand, ())
    if not ids:
        raise LatticeError("the conditional lattice has no root (the certain token)")
    # candidates: (-score, path, parent node); paths are distinct, so ties end at the path
    heap: list[tuple[float, tuple[int, ...], int]] = [
        (-s, (t,), -1) for t, s in zip(ids, scores, strict=True)]
    heapq.heapify(heap)
    tokens: list[int] = []
    parents: list[int] = []
    totals: list[float] = []
    while heap and len(tokens) < budget:
        neg, path, parent = heapq.heappop(heap)
        if parent < 0 and tokens:  # a second root candidate: the tree has one root
            continue
        if stop is not None and tokens and stop(len(tokens), -neg - totals[0]):
            break
        node = len(tokens)
        tokens.append(path[-1])
        parents.append(parent)
        totals.append(-neg)
        if len(path) < depth and len(tokens) < budget:
            for token, arc in zip(*_children(expand, path), strict=True):
                heapq.heappush(heap, (neg - arc, (*path, token), node))
    return DraftTree(tokens=np.asarray(tokens, dtype=np.int64),
                     parents=np.asarray(parents, dtype=np.int64),
                     scores=np.asarray(totals, dtype=np.float64), source="conditional tree")
