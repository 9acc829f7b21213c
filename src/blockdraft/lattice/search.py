"""The two searches of a step's lattice, for sausages and tree lattices alike.

docs/definitions.md sec. 3, 4 and 11. A lattice is searched through one protocol
(:class:`Searchable`): ``h`` slots, and ``expand(prefix) -> (ids, log-probs)``, the arcs after
a path's first tokens, best first. A :class:`~blockdraft.lattice.sausage.SausageLattice` gives
every prefix of one length the same arcs (its slot: the heads guess independently); a
:class:`~blockdraft.lattice.conditional.TreeLattice` (prefix-conditioned heads, a draft layer)
gives each prefix its own, computed lazily, once. The root (``prefix = ()``) is the certain
token.

A path's score is the sum of its arcs' log-probabilities plus, with a ``scorer`` (an LM's
``next_scores(path, context, candidates) -> ln P``, natural log), ``alpha`` times the LM's
log-probability of each token given the context and the path before it. Every term is at most
0, so a partial path's score bounds each of its completions from above; both searches are
exact best-first searches over that bound:

- :func:`pbest`: the ``p`` best full-depth paths, best first (ties: the smaller rank path,
  i.e. the arcs earlier in their expansions); a sausage without an LM takes its own rank-vector
  enumeration (:meth:`SausageLattice.best_paths`), the same list, as its fast path.
- :func:`grow`: the ``budget`` best nodes of any depth (EAGLE-2's draft tree, or with a scorer
  the rescored tree), parents first (a node's ancestors score at least as high), in the order
  taken (ties: the node found first); ``stop`` ends it before a node that no longer pays.

Public surface:
    Searchable                       the protocol (``h``, ``expand``, ``peek``)
    pbest(lattice, p, *, scorer=None, alpha=1.0, context=(), max_expansions=None) -> DraftBatch
    grow(lattice, budget, *, scorer=None, alpha=1.0, context=(), stop=None, source) -> DraftTree
    narrowed(lattice, k) -> Searchable        k arcs a node at most
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from blockdraft.core.batch import DraftBatch
from blockdraft.core.checks import check_positive_int
from blockdraft.core.tree import DraftTree
from blockdraft.lattice.sausage import LatticeError, SausageLattice

Arcs = tuple[np.ndarray, np.ndarray]
"""``(ids int64 [n], log-probs float64 [n])``: a node's arcs, best first."""


@runtime_checkable
class Searchable(Protocol):
    """A lattice the searches walk (see the module docstring)."""

    @property
    def h(self) -> int:
        """Slots: a full path has ``h`` tokens, the certain token first."""
        ...

    def expand(self, prefix: tuple[int, ...]) -> Arcs:
        """The arcs after ``prefix`` (``()``: the root, the certain token), best first."""
        ...

    def peek(self, prefix: tuple[int, ...]) -> Arcs | None:
        """:meth:`expand` when it costs nothing (already expanded), else None."""
        ...


class PathScorer(Protocol):
    """An LM over token paths (natural-log probabilities)."""

    def next_scores(self, path: Sequence[int], context: Sequence[int] | np.ndarray,
                    candidates: np.ndarray) -> np.ndarray:
        """``ln P(c | context, path)`` of each candidate ``c``, float ``[len(candidates)]``."""
        ...


def _children(lattice: Searchable, prefix: tuple[int, ...], scorer: PathScorer | None,
              alpha: float, ctx: np.ndarray) -> tuple[list[int], list[float], list[float]]:
    """The arcs after ``prefix``: ids, arc log-probs and (with a scorer) LM log-probs."""
    ids, scores = lattice.expand(prefix)
    ids_list, arc_list = ids.tolist(), scores.tolist()
    if scorer is None or alpha == 0 or not ids_list:
        return ids_list, arc_list, [0.0] * len(ids_list)
    lm = np.asarray(scorer.next_scores(list(prefix), ctx, np.asarray(ids)), dtype=np.float64)
    return ids_list, arc_list, lm.tolist()


def pbest(lattice: Searchable, p: int, *, scorer: PathScorer | None = None, alpha: float = 1.0,
          context: Sequence[int] | np.ndarray = (), max_expansions: int | None = None
          ) -> DraftBatch:
    """The ``p`` best full-depth paths of ``lattice``, best first (see the module docstring).

    Args:
        lattice: a sausage or a tree lattice (:class:`Searchable`).
        p: paths wanted (fewer when the lattice has fewer: the batch is ``exhausted``).
        scorer: an LM over paths, or None for the arc scores alone.
        alpha: the LM's weight (``>= 0``).
        context: the committed tokens before the certain token, oldest first.
        max_expansions: expand at most this many nodes (exact only if the search ended before
            the cap; when it stopped with no full path, the best partial one is completed
            along each node's best arc). None: no limit.

    Returns:
        A :class:`~blockdraft.core.batch.DraftBatch` ``[<= p, h]`` (source ``"lattice"`` for a
        sausage's own p-best, else ``"conditional"``): total, arc and LM scores per path.

    Raises:
        LatticeError: a bad ``p`` or ``alpha``, or a lattice with no full-depth path.
    """
    p = check_positive_int(p, "p", LatticeError)
    if not alpha >= 0:  # NaN too
        raise LatticeError(f"alpha must be >= 0, got {alpha!r}")
    use_lm = scorer is not None and alpha > 0
    if isinstance(lattice, SausageLattice) and not use_lm:
        return lattice.best_paths(p)  # the fast path: rank vectors, the same list
    ctx = np.asarray(context, dtype=np.int64)
    depth = lattice.h
    # entries: (-total, rank path, token path, arc sum, LM sum); rank paths are distinct
    heap: list[tuple[float, tuple[int, ...], tuple[int, ...], float, float]] = [
        (-0.0, (), (), 0.0, 0.0)]
    out: list[tuple[tuple[int, ...], float, float, float]] = []
    expanded = 0
    while heap and len(out) < p:
        neg, ranks, prefix, arcs, lm_sum = heapq.heappop(heap)
        if len(prefix) == depth:
            out.append((prefix, -neg, arcs, lm_sum))
            continue
        if max_expansions is not None and expanded >= max_expansions:
            if not out:  # no full path yet: the best partial one, completed greedily
                out.append(_complete(lattice, prefix, depth, arcs, lm_sum, scorer, ctx,
                                     alpha if use_lm else 0.0))
            break
        expanded += 1
        ids, scores, lm = _children(lattice, prefix, scorer if use_lm else None, alpha, ctx)
        for r, (token, arc, lp) in enumerate(zip(ids, scores, lm, strict=True)):
            total = -neg + arc + alpha * lp if use_lm else -neg + arc
            if total > -np.inf:  # an LM that rules a token out drops its arc
                heapq.heappush(heap, (-total, (*ranks, r), (*prefix, token), arcs + arc,
                                      lm_sum + (lp if use_lm else 0.0)))
    if not out:
        raise LatticeError(f"the lattice has no path of depth {depth}")
    return DraftBatch(
        tokens=np.asarray([path for path, _, _, _ in out], dtype=np.int64),
        scores=np.asarray([total for _, total, _, _ in out]),
        head_scores=np.asarray([arcs for _, _, arcs, _ in out]),
        lm_scores=np.asarray([lm for _, _, _, lm in out]),
        alpha=alpha if use_lm else 0.0, requested=p, source="conditional")


def _complete(lattice: Searchable, prefix: tuple[int, ...], depth: int, arcs: float,
              lm_sum: float, scorer: PathScorer | None, ctx: np.ndarray, alpha: float
              ) -> tuple[tuple[int, ...], float, float, float]:
    """``prefix`` extended to ``depth`` along each node's best arc (by its arc score)."""
    while len(prefix) < depth:
        ids, scores = lattice.expand(prefix)
        if not ids.size:
            raise LatticeError(f"the lattice has no path of depth {depth}")
        best = int(np.argmax(scores))
        if alpha > 0 and scorer is not None:
            lm_sum += float(scorer.next_scores(list(prefix), ctx, ids[best:best + 1])[0])
        prefix, arcs = (*prefix, int(ids[best])), arcs + float(scores[best])
    return prefix, arcs + alpha * lm_sum, arcs, lm_sum


Stop = Callable[[int, float], bool]
"""``(nodes taken, the next node's score below the root's) -> True`` to end the tree there."""


def grow(lattice: Searchable, budget: int, *, scorer: PathScorer | None = None,
         alpha: float = 1.0, context: Sequence[int] | np.ndarray = (), stop: Stop | None = None,
         source: str = "grown") -> DraftTree:
    """The ``budget`` best nodes of ``lattice`` at any depth, the root included (EAGLE-2's
    draft tree by arc scores; with a scorer, the tree rescored best first by ``arc + alpha x
    LM``). Each node taken below the last slot is expanded once, when it is taken, so a tree
    of ``N`` nodes costs at most ``N - 1`` expansions past the root.

    Args:
        lattice: a sausage or a tree lattice (:class:`Searchable`).
        budget: ``N >= 1`` nodes wanted (fewer when the lattice has fewer).
        scorer, alpha, context: an LM over paths, its weight and the committed tokens (as in
            :func:`pbest`); the root's score includes the certain token's LM score.
        stop: ``(nodes taken, the next node's score minus the root's) -> bool``: True ends the
            tree before that node (a tree that stops where the next node no longer pays); the
            root is always taken.
        source: the tree's ``source`` label.

    Returns:
        A :class:`~blockdraft.core.tree.DraftTree`, nodes in the order taken (best first; ties:
        the node found first), each scored by its path's score.

    Raises:
        LatticeError: a bad ``budget`` or ``alpha``, or a lattice without a root.
    """
    budget = check_positive_int(budget, "budget", LatticeError)
    if not alpha >= 0:
        raise LatticeError(f"alpha must be >= 0, got {alpha!r}")
    use_lm = scorer is not None and alpha > 0
    ctx = np.asarray(context, dtype=np.int64)
    depth = lattice.h
    root_ids, root_arcs, root_lm = _children(lattice, (), scorer if use_lm else None, alpha, ctx)
    if not root_ids:
        raise LatticeError("the lattice has no root (the certain token)")
    tokens = [root_ids[0]]
    parents = [-1]
    totals = [root_arcs[0] + alpha * root_lm[0] if use_lm else root_arcs[0]]
    paths: list[tuple[int, ...]] = [(root_ids[0],)]
    order = itertools.count()
    heap: list[tuple[float, int, int, int]] = []  # (-score, found, parent node, token)

    def expand(node: int) -> None:
        if len(paths[node]) >= depth or len(tokens) >= budget:
            return
        ids, arcs, lm = _children(lattice, paths[node], scorer if use_lm else None, alpha, ctx)
        for token, arc, lp in zip(ids, arcs, lm, strict=True):
            total = totals[node] + arc + (alpha * lp if use_lm else 0.0)
            if total > -np.inf:
                heapq.heappush(heap, (-total, next(order), node, token))

    expand(0)
    while heap and len(tokens) < budget:
        neg, _, parent, token = heapq.heappop(heap)
        if stop is not None and stop(len(tokens), -neg - totals[0]):
            break
        tokens.append(token)
        parents.append(parent)
        totals.append(-neg)
        paths.append((*paths[parent], token))
        expand(len(tokens) - 1)
    return DraftTree(tokens=np.asarray(tokens, dtype=np.int64),
                     parents=np.asarray(parents, dtype=np.int64),
                     scores=np.asarray(totals, dtype=np.float64), source=source)


class _Narrowed:
    """A lattice whose every node keeps its first ``k`` arcs (``expand`` gives them best first)."""

    def __init__(self, lattice: Searchable, k: int) -> None:
        self._lattice, self._k = lattice, k
        self.h = lattice.h

    def expand(self, prefix: tuple[int, ...]) -> Arcs:
        ids, scores = self._lattice.expand(prefix)
        return ids[: self._k], scores[: self._k]

    def peek(self, prefix: tuple[int, ...]) -> Arcs | None:
        arcs = self._lattice.peek(prefix)
        return None if arcs is None else (arcs[0][: self._k], arcs[1][: self._k])


def narrowed(lattice: Searchable, k: int) -> Searchable:
    """``lattice`` with ``k`` arcs a node at most: a sausage's first ``k`` arcs a slot (it must
    be at least that wide: a narrower one is refused), a tree lattice's first ``k`` arcs of
    every expansion.

    Raises:
        LatticeError: a sausage narrower than ``k``.
    """
    if isinstance(lattice, SausageLattice):
        if lattice.k < k:
            raise LatticeError(f"the drafter needs a lattice of width k >= {k}, got "
                               f"k = {lattice.k}")
        if lattice.k == k:
            return lattice
        return SausageLattice(tokens=lattice.tokens[:, :k], scores=lattice.scores[:, :k])
    return _Narrowed(lattice, k)


def as_searchable(lattice: Any) -> Searchable:
    """``lattice`` when it is :class:`Searchable`, else a :class:`LatticeError` naming it."""
    if not isinstance(lattice, Searchable):
        raise LatticeError(f"a search needs a sausage or a tree lattice (h, expand, peek), got "
                           f"{type(lattice).__name__}")
    return lattice
