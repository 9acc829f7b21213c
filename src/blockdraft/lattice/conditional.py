"""A conditional (tree) lattice: arcs whose scores depend on the path so far.

docs/definitions.md sec. 3. A sausage lattice holds one fixed top-``k`` per slot: the heads
guess independently. Prefix-conditioned (Hydra-style) heads, or a draft layer, score slot
``i``'s tokens given the tokens chosen before it, so each prefix has its own children: the
lattice is a tree of depth ``h`` whose node ``(t_1 .. t_i)`` is expanded by a callback
``expand(prefix) -> (ids [k'], log-probs [k'])``, called lazily, once per node a search reaches.

:class:`TreeLattice` holds one step's callback and what it has expanded (a mutable memo, one
step long): it is :class:`~blockdraft.lattice.search.Searchable`, so the searches of
:mod:`blockdraft.lattice.search` (the exact p-best, the best-first tree) walk it exactly as
they walk a sausage, and :meth:`TreeLattice.peek` tells a drafter which nodes' arcs are known
without paying for an expansion.

Public surface:
    Expand                            ``(prefix tuple) -> (ids int64 [k'], scores [k'])``
    TreeLattice(h, expand)            .h, .certain, .expand(prefix), .peek(prefix), .expanded
    conditional_pbest(expand, depth, p, ...) -> DraftBatch   search.pbest over a TreeLattice
    conditional_tree(expand, depth, budget, stop=None) -> DraftTree   search.grow over one
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from blockdraft.core.batch import DraftBatch
from blockdraft.core.checks import check_positive_int
from blockdraft.core.tree import DraftTree
from blockdraft.lattice.sausage import LatticeError

Expand = Callable[[tuple[int, ...]], tuple[np.ndarray, np.ndarray]]


class TreeLattice:
    """One step's tree lattice: ``expand`` checked and memoised per prefix (mutable: it
    remembers what the step has expanded).

    Args:
        h: slots (a full path has ``h`` tokens, the certain token first).
        expand: a node's children, best first (called once per prefix).

    Raises:
        LatticeError: a bad ``h``; later, an expansion with repeated or negative ids, a score
            above 0 (arc scores are natural-log probabilities) or ids and scores of other sizes.
    """

    def __init__(self, h: int, expand: Expand) -> None:
        self.h = check_positive_int(h, "depth", LatticeError)
        self._expand = expand
        self._seen: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}

    @property
    def expanded(self) -> int:
        """Nodes expanded so far (each one call of the callback)."""
        return len(self._seen)

    @property
    def certain(self) -> int:
        """The root: the certain token ``d_1``."""
        ids = self.expand(())[0]
        if not ids.size:
            raise LatticeError("the tree lattice has no root (the certain token)")
        return int(ids[0])

    def expand(self, prefix: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """The arcs after ``prefix``: ``(ids int64 [k'], log-probs float64 [k'])``, best
        first, ``-inf`` arcs dropped; expanded at the first call, remembered after."""
        arcs = self._seen.get(prefix)
        if arcs is None:
            arcs = self._seen[prefix] = _checked(prefix, *self._expand(prefix))
        return arcs

    def peek(self, prefix: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray] | None:
        """The arcs after ``prefix`` when they were expanded already, else None (free)."""
        return self._seen.get(prefix)

    def __repr__(self) -> str:
        return f"TreeLattice(h={self.h}, expanded={self.expanded})"


def _checked(prefix: tuple[int, ...], ids: Any, scores: Any
             ) -> tuple[np.ndarray, np.ndarray]:
    """``expand(prefix)`` checked: distinct ids >= 0, log-probs <= 0 (``-inf`` arcs dropped),
    ordered best first."""
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
    order = np.lexsort((ids, -scores))  # best first, ties to the smaller id
    return ids[order], scores[order]


def conditional_pbest(expand: Expand, depth: int, p: int, *, scorer: Any = None,
                      context: Sequence[int] | np.ndarray = (), alpha: float = 1.0,
                      max_expansions: int | None = None) -> DraftBatch:
    """The ``p`` best full-depth paths of the tree lattice ``expand`` (depth ``h``), best
    first: :func:`blockdraft.lattice.search.pbest` over a :class:`TreeLattice` (its arguments
    and errors)."""
    from blockdraft.lattice.search import pbest

    return pbest(TreeLattice(depth, expand), p, scorer=scorer, alpha=alpha, context=context,
                 max_expansions=max_expansions)


def conditional_tree(expand: Expand, depth: int, budget: int,
                     stop: Callable[[int, float], bool] | None = None) -> DraftTree:
    """The ``budget`` most probable nodes of the tree lattice ``expand`` (EAGLE-2's tree):
    :func:`blockdraft.lattice.search.grow` over a :class:`TreeLattice` (source ``"conditional
    tree"``)."""
    from blockdraft.lattice.search import grow

    return grow(TreeLattice(depth, expand), budget, stop=stop, source="conditional tree")
