"""One draft tree from every source, as large as pays on the runtime: the cost-aware tree.

Three sources guess the next tokens in different ways: the heads' top-1 chain (vanilla BPD),
the ``p`` best paths of the heads' lattice under an LM (rescored p-best: the heads' guesses made
coherent, the context's n-grams included when the rescorer has a context LM), and prompt lookup
(a copy of what followed the text's last n-gram). :class:`CostAwareTreeDrafter` merges them into
one trie and keeps the part that pays:

1. every node ``u`` gets ``q(u)``, its probability of acceptance given its parent's, from
   :class:`~blockdraft.drafts.calibration.AcceptanceTables` (measured on held-out training
   answers: the node's head log-probability and LM log-probability, its place in a lookup
   copy; several sources combined as independent evidence);
2. ``a(u) = q(u) a(parent)`` is the probability that ``u`` is on the accepted path, and the
   tokens a step yields are ``1 + sum a(u)`` in expectation (the accepted nodes form a path);
3. the nodes are ranked by ``a`` (a child never before its parent) and the tree keeps the
   ``N`` best, ``N`` the size that maximises expected tokens per unit of time,
   ``(1 + sum_{first N - 1} a) / cost(N)``, on the runtime's measured cost curve
   (:class:`~blockdraft.models.cost.CostCurve`): a node is verified only while what it is
   expected to add pays for its row in the forward.

The tree is verified in one forward with tree attention (docs/definitions.md sec. 11), so the
output is greedy's, whatever the sources propose.

Public surface:
    CostAwareTreeDrafter(cost, tables, k=8, p=4, rescorer=None, lm=None, lookup=True,
                         copy_length=16, max_nodes=32, name="")
        .propose_tree(lattice, context) -> DraftTree
        .last -> TreeStats            what the last tree held (sizes, expected tokens)
    select_nodes(expected, cost, max_nodes) -> int     the N that pays best
    keep_paying(reach, depths, cost, max_nodes) -> bool [M]   the root, the N - 1 best nodes
    reach_tree(tokens, parents, reach, source) -> DraftTree  nodes scored by ln a(u)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from blockdraft.core.batch import DraftBatch, DraftError
from blockdraft.core.checks import check_int, check_positive_int
from blockdraft.core.tree import PAD, DraftTree
from blockdraft.drafts.calibration import AcceptanceTables
from blockdraft.drafts.lookup import lookups
from blockdraft.lattice.sausage import SausageLattice
from blockdraft.models.cost import CostCurve

SOURCE = "cost-aware"
"""``DraftTree.source`` of its trees."""


@dataclass(frozen=True)
class TreeStats:
    """What one cost-aware tree held.

    Attributes:
        candidates: nodes of the merged trie (root included) before the cut.
        nodes: nodes kept (``N``).
        expected: expected tokens of the step, ``1 + sum a(u)`` over the kept nodes.
        relative_cost: the step's cost in greedy steps.
    """

    candidates: int
    nodes: int
    expected: float
    relative_cost: float


def keep_paying(reach: np.ndarray, depths: np.ndarray, cost: CostCurve | None,
                max_nodes: int) -> np.ndarray:
    """bool ``[M]``: the root and the ``N - 1`` nodes of highest ``reach`` (``a(u)``; ties
    to the shallower, then the earlier node, so a parent comes before its children), ``N``
    from :func:`select_nodes` on ``cost`` (None: ``min(max_nodes, M)``).

    Args:
        reach: float ``[M]``, each node's probability of being on the accepted path (node 0 the
            root, every parent before its children; a child's never above its parent's).
        depths: int ``[M]``, each node's depth.
        cost: the runtime's cost curve, or None.
        max_nodes: nodes at most, the root included.
    """
    m = reach.size
    order = np.lexsort((np.arange(1, m), depths[1:], -reach[1:])) + 1
    n = min(max_nodes, m) if cost is None else select_nodes(reach[order], cost, max_nodes)
    keep = np.zeros(m, dtype=bool)
    keep[0] = True
    keep[order[: n - 1]] = True
    return keep


def reach_tree(tokens: np.ndarray, parents: np.ndarray, reach: np.ndarray,
               source: str) -> DraftTree:
    """The tree of ``tokens``/``parents`` scored by ``ln reach`` (0 as ``-1e30``)."""
    with np.errstate(divide="ignore"):
        scores = np.maximum(np.log(reach), -1e30)
    return DraftTree(tokens=np.asarray(tokens, dtype=np.int64),
                     parents=np.asarray(parents, dtype=np.int64), scores=scores, source=source)


def select_nodes(expected: np.ndarray, cost: CostCurve, max_nodes: int) -> int:
    """How many nodes (root included) pay best: ``argmax_N (1 + sum(expected[:N - 1])) /
    cost(N)`` over ``1 <= N <= min(max_nodes, len(expected) + 1)``.

    Args:
        expected: float ``[M]``, the non-root nodes' ``a(u)`` in the order they would be
            added (descending, parents first).
        cost: the runtime's cost curve (the heads are projected at every step).
        max_nodes: the largest tree allowed.
    """
    top = min(int(max_nodes), expected.size + 1)
    gain = 1.0 + np.concatenate([[0.0], np.cumsum(expected[: top - 1])])  # (top,)
    return int(np.argmax(gain / cost.steps(np.arange(1, top + 1)))) + 1


@dataclass(frozen=True, eq=False)
class CostAwareTreeDrafter:
    """The cost-aware tree of the heads' chain, rescored p-best paths and prompt lookup (see
    the module docstring).

    Attributes:
        cost: the runtime's cost curve (:func:`~blockdraft.models.cost.measure_cost_curve`).
        tables: acceptance rates (:func:`~blockdraft.oracle.fit_acceptance`, or
            :meth:`AcceptanceTables.uniform` uncalibrated).
        k: lattice arcs per slot the p-best search and the head evidence read.
        p: rescored (or 0-gram, without a rescorer) paths added; 0 for none.
        rescorer: ranks the lattice's paths (an :class:`~blockdraft.rescorers.NgramRescorer`,
            its context LM included); None: head scores alone.
        lm: scores each node's token given the context and its root path
            (``next_scores(path, context, candidates)``, natural log), the LM evidence of
            ``tables``; default: the rescorer's own, when it offers ``path_scorer()``.
        lookup: add prompt-lookup copies (the longest recent match of the text's last 1-4
            tokens, then other matches with other continuations:
            :func:`~blockdraft.drafts.lookup.lookups`).
        copies: how many copies (ranked; the tables rate each rank).
        copy_length: tokens a copy proposes (the cut keeps what pays).
        max_nodes: the largest tree (root included).
        chain: keep one path only (the root path whose expected tokens per unit of time is
            best): for runtimes that verify chains losslessly but not trees (ONNX Runtime
            int8).
        name: a label for tables.
    """

    cost: CostCurve
    tables: AcceptanceTables
    k: int = 8
    p: int = 4
    rescorer: Any = None
    lm: Any = None
    lookup: bool = True
    copies: int = 3
    copy_length: int = 16
    max_nodes: int = 32
    chain: bool = False
    name: str = ""
    _state: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.cost, CostCurve):
            raise DraftError(f"cost must be a CostCurve, got {type(self.cost).__name__}")
        if not isinstance(self.tables, AcceptanceTables):
            raise DraftError(f"tables must be AcceptanceTables, got "
                             f"{type(self.tables).__name__}")
        check_positive_int(self.k, "CostAwareTreeDrafter.k", DraftError)
        check_int(self.p, "CostAwareTreeDrafter.p", DraftError, minimum=0)
        check_positive_int(self.copy_length, "CostAwareTreeDrafter.copy_length", DraftError)
        check_positive_int(self.copies, "CostAwareTreeDrafter.copies", DraftError)
        check_positive_int(self.max_nodes, "CostAwareTreeDrafter.max_nodes", DraftError)
        if self.lm is None and callable(getattr(self.rescorer, "path_scorer", None)):
            object.__setattr__(self, "lm", self.rescorer.path_scorer())
        if not self.name:
            parts = ["chain"]
            if self.p:
                parts.append(f"{self.p}-best " + ("0-gram" if self.rescorer is None
                                                  else type(self.rescorer).__name__))
            if self.lookup:
                parts.append("lookup")
            kind = "chain" if self.chain else "tree"
            object.__setattr__(self, "name", f"cost-aware {kind} ({' + '.join(parts)}, "
                                             f"k={self.k}, N<={self.max_nodes})")

    @property
    def last(self) -> TreeStats | None:
        """What the last :meth:`propose_tree` kept (None before the first)."""
        return self._state.get("last")

    # ---- the candidates ----------------------------------------------------------------------

    def _candidates(self, lattice: SausageLattice, context: np.ndarray
                    ) -> tuple[list[np.ndarray], list[tuple[int, int, int]]]:
        """The candidate rows (each starting with the certain token) and, for each lookup
        copy among them, ``(row index, match length, rank)``."""
        rows = [lattice.vanilla()]
        lat = lattice if lattice.k <= self.k else SausageLattice(
            tokens=lattice.tokens[:, : self.k], scores=lattice.scores[:, : self.k])
        if self.p:
            batch: DraftBatch = (lat.best_paths(self.p) if self.rescorer is None
                                 else self.rescorer.rescore(lat, context, self.p))
            rows.extend(batch.tokens)
        copies = []
        if self.lookup:
            text = np.append(context, lattice.tokens[0, 0])
            for rank, (start, m) in enumerate(lookups(text, 1, 4, self.copies), start=1):
                copies.append((len(rows), m, rank))
                rows.append(np.concatenate(([text[-1]], text[start: start + self.copy_length])))
        return rows, copies

    # ---- the tree ----------------------------------------------------------------------------

    def propose_tree(self, lattice: SausageLattice, context: Sequence[int] | np.ndarray
                     ) -> DraftTree:
        """The step's tree (see the module docstring)."""
        ctx = np.asarray(context, dtype=np.int64)
        rows, copies = self._candidates(lattice, ctx)
        width = max(r.size for r in rows)
        tokens = np.full((len(rows), width), PAD, dtype=np.int64)
        for i, r in enumerate(rows):
            tokens[i, : r.size] = r
        n_rows = len(rows)
        trie = DraftTree.from_drafts(DraftBatch(
            tokens=tokens, scores=np.zeros(n_rows), head_scores=np.zeros(n_rows),
            lm_scores=np.zeros(n_rows), requested=n_rows, source=SOURCE))
        q = self._node_q(trie, lattice, ctx, tokens, copies)
        reach = np.ones(trie.num_nodes)
        for u in range(1, trie.num_nodes):  # parents come first
            reach[u] = reach[trie.parents[u]] * q[u]
        if self.chain:  # the one root path that pays best
            best, end = 1.0 / self.cost.step(1), 0
            for u in range(1, trie.num_nodes):
                path = trie.path(u)
                if path.size <= self.max_nodes:
                    ratio = (1.0 + reach[path[1:]].sum()) / self.cost.step(int(path.size))
                    if ratio > best:
                        best, end = ratio, u
            keep = np.zeros(trie.num_nodes, dtype=bool)
            keep[trie.path(end)] = True  # the root included
        else:
            keep = keep_paying(reach, np.asarray(trie.depths), self.cost, self.max_nodes)
        n = int(keep.sum())
        tree = reach_tree(trie.tokens, trie.parents, reach, SOURCE).subset(keep)
        self._state["last"] = TreeStats(
            candidates=trie.num_nodes, nodes=n,
            expected=float(1.0 + reach[1:][keep[1:]].sum()),
            relative_cost=self.cost.relative(n))
        return tree

    def _node_q(self, trie: DraftTree, lattice: SausageLattice, ctx: np.ndarray,
                rows: np.ndarray, copies: list[tuple[int, int, int]]) -> np.ndarray:
        """``q(u)`` of every node (root: 1): the heads' and LM's evidence, each copy's
        combined with it as independent evidence."""
        depths = np.asarray(trie.depths)
        tokens = trie.tokens.tolist()
        h = lattice.h
        slots = [dict(zip(lattice.tokens[d].tolist(), lattice.scores[d].tolist(), strict=True))
                 for d in range(h)]
        depth_list = depths.tolist()
        head_lp = np.array([-np.inf] + [slots[d].get(t, -np.inf) if d < h else -np.inf
                                        for d, t in zip(depth_list[1:], tokens[1:],
                                                        strict=True)])
        lm_lp = self._lm_scores(trie, ctx) if self.lm is not None else None
        q = self.tables.head_q(np.maximum(depths, 1), head_lp, lm_lp)
        if copies:
            children = {(p, t): u for u, (p, t) in enumerate(
                zip(trie.parents.tolist(), tokens, strict=True)) if u}
            for row, match, rank in copies:
                nodes, node = [], 0
                for tok in rows[row, 1:].tolist():
                    if tok == PAD:
                        break
                    node = children[(node, tok)]
                    nodes.append(node)
                if nodes:
                    qc = self.tables.copy_q(match, np.arange(1, len(nodes) + 1), rank)
                    at = np.asarray(nodes)
                    q[at] = 1.0 - (1.0 - q[at]) * (1.0 - qc)
        q[0] = 1.0
        return q

    def _lm_scores(self, trie: DraftTree, ctx: np.ndarray) -> np.ndarray:
        """Each node's LM log-prob given the context and its root path (the root's own is not
        read): in one walk of the tree when the scorer has ``score_tree``, else one
        ``next_scores`` call per parent."""
        if callable(getattr(self.lm, "score_tree", None)):
            return np.asarray(self.lm.score_tree(trie.tokens, trie.parents, ctx))
        out = np.zeros(trie.num_nodes)
        by_parent: dict[int, list[int]] = {}
        for u in range(1, trie.num_nodes):
            by_parent.setdefault(int(trie.parents[u]), []).append(u)
        for parent, kids in by_parent.items():
            path = trie.path_tokens(parent)
            out[kids] = self.lm.next_scores(path, ctx, trie.tokens[kids])
        return out
