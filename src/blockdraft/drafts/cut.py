"""The one cut of a step's tree to the size that is verified.

docs/definitions.md sec. 11. A step that verifies ``N`` nodes yields ``1 + sum a(u)`` tokens in
expectation (``a(u)``, the probability that node ``u`` is on the accepted path:
:mod:`~blockdraft.drafts.rates`) and costs ``cost(N)`` milliseconds on the runtime
(:class:`~blockdraft.models.cost.CostCurve`), plus, for a tree grown by evaluating heads on the
host, ``(N - 1) x node_ms``. Every cut that pays maximises one ratio, expected tokens per
millisecond::

    ratio(N) = (1 + sum of the N - 1 best a(u)) / (cost(N) + (N - 1) node_ms)

- :class:`CostCut` keeps the root and the ``N - 1`` nodes of highest ``a`` (a parent always
  before its children) for the ``N`` of highest ratio (:func:`select_nodes`), and stops a tree
  grown best first before the first node that no longer raises the ratio (:meth:`CostCut.stop`:
  every node taken raised it, so the grown tree is the best of its prefixes);
- :class:`ChainCut` keeps the one root path of highest ratio (a runtime that verifies chains
  losslessly but not trees: ONNX Runtime int8);
- :class:`FirstNodes` keeps the first ``N`` nodes in the order the sources added them (a fixed
  budget), :class:`KeepAll` every node.

Public surface:
    Cut                                the protocol: keep(trie, a) -> bool [M]
    KeepAll(), FirstNodes(budget), CostCut(cost, max_nodes), ChainCut(cost, max_nodes)
    select_nodes(expected, cost, max_nodes, node_ms=0.0) -> N
    keep_paying(reach, depths, cost, max_nodes) -> bool [M]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from blockdraft.core.batch import DraftError
from blockdraft.core.checks import check_positive_int
from blockdraft.drafts.trie import Trie
from blockdraft.models.cost import CostCurve


class Cut(Protocol):
    """Which nodes of a step's trie are verified."""

    def keep(self, trie: Trie, reach: np.ndarray | None) -> np.ndarray:
        """bool ``[M]``: the nodes kept (the root, and each kept node's parent); ``reach``:
        each node's ``a(u)`` when the drafter rates its nodes, else None."""
        ...


def _ms(cost: CostCurve, sizes: np.ndarray, node_ms: float) -> np.ndarray:
    """Milliseconds of steps over ``sizes`` nodes: the curve plus the host's node cost."""
    return np.asarray(cost.steps(sizes)) + (sizes - 1) * node_ms


def select_nodes(expected: np.ndarray, cost: CostCurve, max_nodes: int,
                 node_ms: float = 0.0) -> int:
    """How many nodes (root included) pay best: ``argmax_N ratio(N)`` (the module docstring)
    over ``1 <= N <= min(max_nodes, len(expected) + 1)``.

    Args:
        expected: float ``[M]``, the non-root nodes' ``a(u)`` in the order they would be
            added (descending, parents first).
        cost: the runtime's cost curve (the heads are projected at every step).
        max_nodes: the largest tree allowed.
        node_ms: the host's milliseconds per node beyond the root.
    """
    top = min(int(max_nodes), expected.size + 1)
    gain = 1.0 + np.concatenate([[0.0], np.cumsum(expected[: top - 1])])  # (top,)
    return int(np.argmax(gain / _ms(cost, np.arange(1, top + 1), node_ms))) + 1


def _ranked(reach: np.ndarray, depths: np.ndarray) -> np.ndarray:
    """The non-root nodes by ``a`` descending (ties: the shallower, then the earlier: a parent
    before its children)."""
    m = reach.size
    return np.lexsort((np.arange(1, m), depths[1:], -reach[1:])) + 1


def keep_paying(reach: np.ndarray, depths: np.ndarray, cost: CostCurve | None,
                max_nodes: int) -> np.ndarray:
    """bool ``[M]``: the root and the ``N - 1`` nodes of highest ``reach`` (``a(u)``), ``N``
    from :func:`select_nodes` on ``cost`` (None: ``min(max_nodes, M)``).

    Args:
        reach: float ``[M]``, each node's ``a(u)`` (node 0 the root, parents before children;
            a child's never above its parent's).
        depths: int ``[M]``, each node's depth.
        cost: the runtime's cost curve, or None.
        max_nodes: nodes at most, the root included.
    """
    order = _ranked(reach, depths)
    n = (min(max_nodes, reach.size) if cost is None
         else select_nodes(reach[order], cost, max_nodes))
    keep = np.zeros(reach.size, dtype=bool)
    keep[0] = True
    keep[order[: n - 1]] = True
    return keep


@dataclass(frozen=True)
class KeepAll:
    """Every node the sources proposed."""

    def keep(self, trie: Trie, reach: np.ndarray | None) -> np.ndarray:
        return np.ones(trie.size, dtype=bool)


@dataclass(frozen=True)
class FirstNodes:
    """The first ``budget`` nodes in the order the sources added them (a prefix of a
    topological order is a tree): the best drafts stay whole."""

    budget: int

    def __post_init__(self) -> None:
        check_positive_int(self.budget, "budget (nodes, the root included)", DraftError)

    def keep(self, trie: Trie, reach: np.ndarray | None) -> np.ndarray:
        keep = np.zeros(trie.size, dtype=bool)
        keep[: self.budget] = True
        return keep


@dataclass(frozen=True)
class CostCut:
    """The size that pays on ``cost``: the ``N`` best nodes by ``a`` (see the module
    docstring), at most ``max_nodes``; without a cost (None) the ``max_nodes`` best."""

    cost: CostCurve | None
    max_nodes: int = 32

    def __post_init__(self) -> None:
        if self.cost is not None and not isinstance(self.cost, CostCurve):
            raise DraftError(f"cost must be a CostCurve, got {type(self.cost).__name__}")
        check_positive_int(self.max_nodes, "max_nodes", DraftError)

    def keep(self, trie: Trie, reach: np.ndarray | None) -> np.ndarray:
        if reach is None:
            raise DraftError("a cut by cost needs the nodes' rates (a drafter with rates)")
        return keep_paying(reach, trie.depths, self.cost, self.max_nodes)

    def stop(self, gained: float, taken: int, a_next: float, node_ms: float = 0.0) -> bool:
        """Whether a tree grown best first ends before its next node: ``taken`` nodes
        (the root included) whose ``1 + sum a`` is ``gained``, the next node's ``a_next``;
        True when the next node would not raise the ratio (or the tree is full)."""
        if taken >= self.max_nodes:
            return True
        if self.cost is None:
            return False
        ms = _ms(self.cost, np.array([taken, taken + 1]), node_ms)
        return bool((gained + a_next) / ms[1] <= gained / ms[0])


@dataclass(frozen=True)
class ChainCut:
    """The one root path of highest ratio, at most ``max_nodes`` nodes (the root included)."""

    cost: CostCurve
    max_nodes: int = 32

    def __post_init__(self) -> None:
        if not isinstance(self.cost, CostCurve):
            raise DraftError(f"cost must be a CostCurve, got {type(self.cost).__name__}")
        check_positive_int(self.max_nodes, "max_nodes", DraftError)

    def keep(self, trie: Trie, reach: np.ndarray | None) -> np.ndarray:
        if reach is None:
            raise DraftError("a chain cut by cost needs the nodes' rates (a drafter with rates)")
        depth = trie.depths
        gained = np.ones(trie.size)  # 1 + sum of a along each node's root path
        for u in range(1, trie.size):
            gained[u] = gained[trie.parents[u]] + reach[u]
        ok = depth + 1 <= self.max_nodes
        ratio = np.where(ok, gained / np.asarray(self.cost.steps(depth + 1)), -np.inf)
        best = 0
        for u in range(1, trie.size):  # the first best (the earliest node on a tie)
            if ratio[u] > ratio[best]:
                best = u
        keep = np.zeros(trie.size, dtype=bool)
        u = best
        while u >= 0:
            keep[u] = True
            u = trie.parents[u]
        return keep
