"""How likely each node of a step's trie is to be on the accepted path.

docs/definitions.md sec. 11. ``q(u)`` is the probability that node ``u`` is accepted given that
its parent is; ``a(u) = q(u) a(parent)`` (:func:`reach`) the probability that ``u`` is on the
accepted path, and ``1 + sum a(u)`` the tokens a step yields in expectation (the accepted nodes
form a path). A node's ``q`` combines the evidence about it as independent evidence,
``q = 1 - (1 - q_heads) prod (1 - q_copy)``:

- the heads' evidence, by the lattice the step drafts from:
  :class:`TableRates` (a sausage: the acceptance rate measured for the node's head
  log-probability in its slot, and the LM's log-probability of its token given the context and
  its root path, :class:`~blockdraft.drafts.calibration.AcceptanceTables`), or
  :class:`ArcRates` (a tree lattice: the probability of the node's arc where its parent was
  expanded, 0 where it was not: prefix heads are trained on the base's own greedy tokens, so an
  arc's probability estimates its acceptance);
- each prompt-lookup copy through the node (:meth:`Trie.note_copy
  <blockdraft.drafts.trie.Trie.note_copy>`): the rate measured for its match length, offset and
  rank (``AcceptanceTables.copy_q``).

Public surface:
    Rates                              the protocol: q(trie, view) -> float64 [M]
    TableRates(tables, lm=None)        sausage lattices, calibrated
    ArcRates(tables)                   tree lattices, the arcs' own probabilities
    reach(q, parents) -> float64 [M]   a(u), parents first
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from blockdraft.drafts.calibration import AcceptanceTables
from blockdraft.drafts.protocol import StepView
from blockdraft.drafts.trie import Trie
from blockdraft.rescorers.base import PathScorer


class Rates(Protocol):
    """Rates the nodes of a step's trie (see the module docstring)."""

    def q(self, trie: Trie, view: StepView) -> np.ndarray:
        """float64 ``[M]``: each node's acceptance given its parent's (the root's 1)."""
        ...


def _with_copies(q: np.ndarray, trie: Trie, tables: AcceptanceTables) -> np.ndarray:
    """``q`` with each copy's evidence combined in (independent evidence); root 1."""
    for nodes, match, rank in trie.copies:
        if nodes:
            at = np.asarray(nodes)
            qc = tables.copy_q(match, np.arange(1, at.size + 1), rank)
            q[at] = 1.0 - (1.0 - q[at]) * (1.0 - qc)
    q[0] = 1.0
    return q


@dataclass(frozen=True, eq=False)
class TableRates:
    """Calibrated rates over a sausage lattice (see the module docstring).

    Attributes:
        tables: the acceptance tables.
        lm: scores each node's token given the context and its root path (natural log: the
            LM evidence of ``tables``), or None (the tables' marginals).
    """

    tables: AcceptanceTables
    lm: PathScorer | None = None

    def q(self, trie: Trie, view: StepView) -> np.ndarray:
        lattice = view.lattice
        h = lattice.h
        slots = [dict(zip(lattice.tokens[d].tolist(), lattice.scores[d].tolist(), strict=True))
                 for d in range(h)]
        depths = trie.depth
        head_lp = np.array([-np.inf] + [slots[d].get(t, -np.inf) if d < h else -np.inf
                                        for d, t in zip(depths[1:], trie.tokens[1:],
                                                        strict=True)])
        lm_lp = None if self.lm is None else np.asarray(self.lm.score_tree(
            np.asarray(trie.tokens), np.asarray(trie.parents), view.context))
        q = self.tables.head_q(np.maximum(np.asarray(depths), 1), head_lp, lm_lp)
        return _with_copies(np.array(q, dtype=np.float64), trie, self.tables)


@dataclass(frozen=True, eq=False)
class ArcRates:
    """Rates over a tree lattice: each node's arc probability where its parent was expanded
    (peeked, never expanded here), else 0; copies by ``tables`` (see the module docstring)."""

    tables: AcceptanceTables

    def q(self, trie: Trie, view: StepView) -> np.ndarray:
        lattice = view.searchable
        q = np.zeros(trie.size)
        arcs_of: dict[int, dict[int, float] | None] = {}
        for u in range(1, trie.size):
            parent = trie.parents[u]
            if parent not in arcs_of:
                arcs = lattice.peek(trie.path(parent))
                arcs_of[parent] = (None if arcs is None else
                                   dict(zip(arcs[0].tolist(), arcs[1].tolist(), strict=True)))
            known = arcs_of[parent]
            lp = None if known is None else known.get(trie.tokens[u])
            q[u] = 0.0 if lp is None else math.exp(lp)
        return _with_copies(q, trie, self.tables)


def reach(q: np.ndarray, parents: list[int] | np.ndarray) -> np.ndarray:
    """float64 ``[M]``: ``a(u) = q(u) a(parent(u))``, the root's 1 (parents before children)."""
    a = np.ones(len(q))
    par = list(parents)
    for u in range(1, len(q)):
        a[u] = a[par[u]] * q[u]
    return a
