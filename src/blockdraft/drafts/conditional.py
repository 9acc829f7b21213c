"""Drafting from the tree lattice of prefix-conditioned (Hydra-style) heads.

A :class:`ConditionalDrafter` proposes the ``p`` best paths of one step's conditional lattice
(:mod:`blockdraft.lattice.conditional`: each node expanded by the head that reads its last
token), ranked by the heads' log-probs alone or with an LM's (``alpha``), exactly; the decode
loop verifies them together as a trie. The n-gram rescoring and the heads' learned dependence
then compete on the same search: ``scorer=None`` is the heads' own p-best, a path scorer adds
the LM.

A :class:`ConditionalTreeDrafter` proposes EAGLE-2's tree over the same lattice instead: the
``budget`` nodes of highest cumulative head log-probability, at any depth (verified as one token
tree). With ``lookup`` it merges prompt-lookup copies into that tree (the copies cost no head
evaluation), each node rated as the cost-aware tree rates them: the head's arc probability and
the copy's measured acceptance rate combined as independent evidence; the merged tree is cut to
the size that pays on the cost curve.

The decode loop hands both the step's ``expand`` (the verifier builds it at the accepted node
when the model's heads are prefix-conditioned); the offline simulator has no heads to expand
with, so :meth:`ConditionalDrafter.propose` and :meth:`ConditionalTreeDrafter.propose_tree`
refuse by name.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from blockdraft.core.batch import DraftBatch, DraftError
from blockdraft.core.checks import check_positive_int
from blockdraft.core.tree import DraftTree
from blockdraft.drafts.budget import keep_paying, reach_tree
from blockdraft.drafts.calibration import AcceptanceTables
from blockdraft.drafts.lookup import lookups
from blockdraft.lattice.conditional import Expand, conditional_pbest, conditional_tree
from blockdraft.lattice.sausage import SausageLattice


@dataclass(frozen=True)
class ConditionalDrafter:
    """The ``p`` best paths of prefix heads' tree lattice, ``k`` arcs a node.

    Attributes:
        k: arcs per node (the top ``k`` of the head that expands it).
        p: drafts per step (one trie, one verification call).
        scorer: an LM path scorer (``next_scores(path, context, candidates)``:
            :class:`~blockdraft.rescorers.ngram.NgramPathScorer`), or None.
        alpha: the LM's weight (``>= 0``).
        max_expansions: nodes expanded at most per step (each costs one head evaluation);
            None: no limit (exact).
        name: a label for tables; derived from the settings when empty.
    """

    k: int = 4
    p: int = 4
    scorer: Any = None
    alpha: float = 1.0
    max_expansions: int | None = 256
    name: str = ""

    conditional = True  # the decode loop hands it the step's tree lattice

    def __post_init__(self) -> None:
        for name in ("k", "p"):
            value = check_positive_int(getattr(self, name), f"ConditionalDrafter.{name}",
                                       DraftError)
            object.__setattr__(self, name, value)
        if self.max_expansions is not None:
            check_positive_int(self.max_expansions, "ConditionalDrafter.max_expansions",
                               DraftError)
        if not self.alpha >= 0:
            raise DraftError(f"ConditionalDrafter.alpha must be >= 0, got {self.alpha!r}")
        if not self.name:
            lm = "" if self.scorer is None else f" + {type(self.scorer).__name__}"
            object.__setattr__(self, "name", f"{self.p}-best tree lattice{lm} (k={self.k})")

    def propose(self, lattice: SausageLattice, context: Sequence[int] | np.ndarray
                ) -> DraftBatch:
        """Refused: a sausage lattice holds no conditional arcs (the offline simulator)."""
        raise _refuse_sausage(self.name)

    def propose_conditional(self, expand: Expand, lattice: SausageLattice,
                            context: Sequence[int] | np.ndarray) -> DraftBatch:
        """The step's drafts: ``expand`` is its tree lattice (depth ``lattice.h``)."""
        return conditional_pbest(expand, lattice.h, self.p, scorer=self.scorer,
                                 context=context, alpha=self.alpha,
                                 max_expansions=self.max_expansions)


def _refuse_sausage(name: str) -> DraftError:
    return DraftError(f"{name} drafts from the tree lattice of prefix-conditioned heads, which "
                      "only a decode with such heads gives; a sausage lattice (a trace, Medusa "
                      "heads) takes a HeadDrafter or a sausage tree")


@dataclass(frozen=True)
class ConditionalTreeDrafter:
    """EAGLE-2's confidence tree over prefix heads' tree lattice: the ``budget`` nodes of
    highest cumulative head log-probability (:func:`~blockdraft.lattice.conditional
    .conditional_tree`), ``k`` arcs a node; with a cost curve, cut to the size that pays.

    With ``cost``, a node's cumulative head probability ``a(u)`` (the product of its path's
    arc probabilities: the heads are trained on the base's own greedy tokens, so it estimates
    the chance that ``u`` is on the accepted path) is weighed against what it costs: its row
    in the verification forward (the runtime's measured curve) and its expansion, one head
    evaluation on the host, timed as the drafter runs (a mean over its expansions so far). The
    tree grows best first while the next node raises the expected tokens per millisecond,
    ``(1 + sum a) / (cost(N) + (N - 1) x expansion)``: on a runtime whose forward grows with
    its tokens (a CPU) the tree stays as small as pays, on one whose does not (a GPU's graph)
    it grows toward ``budget``.

    With ``lookup``, the ``copies`` prompt-lookup copies of the context
    (:func:`~blockdraft.drafts.lookup.lookups`, ``copy_length`` tokens each) join the grown
    tree as a trie. A node's ``q`` (its acceptance given its parent's) is its arc probability
    where the head that expands its parent was evaluated (else 0), combined with each copy
    through it as independent evidence, ``1 - (1 - q_head) prod (1 - q_copy)``, ``q_copy`` from
    ``tables.copy_q`` (measured on held-out answers of the same base; uniform stand-ins
    without tables). The merged nodes are ranked by ``a(u)``, the product of ``q`` along the
    path, and cut to the size that pays on ``cost`` (the expansions are spent by then), at
    most ``budget`` nodes.

    Attributes:
        k: arcs per node.
        budget: nodes per tree at most, the certain token included (one verification call).
        cost: the runtime's cost curve (:func:`~blockdraft.models.cost.measure_cost_curve`),
            or None: always ``budget`` nodes (the grown tree's, then the best merged ones).
        lookup: merge prompt-lookup copies into the tree.
        tables: :class:`~blockdraft.drafts.calibration.AcceptanceTables` whose ``copy_q``
            rates a copy's tokens, or None (:meth:`AcceptanceTables.uniform`'s).
        copies: copies per step (ranked; the tables rate each rank).
        copy_length: tokens a copy proposes (the cut keeps what pays).
        name: a label for tables; derived from the settings when empty.
    """

    k: int = 4
    budget: int = 16
    cost: Any = None
    lookup: bool = False
    tables: Any = field(default=None, repr=False)
    copies: int = 3
    copy_length: int = 16
    name: str = ""
    # expansions timed so far and their seconds (the host cost of a node), across steps
    _timing: list[float] = field(default_factory=lambda: [0.0, 0.0], init=False, repr=False,
                                 compare=False)

    conditional = True  # the decode loop hands it the step's tree lattice

    def __post_init__(self) -> None:
        for name in ("k", "budget", "copies", "copy_length"):
            value = check_positive_int(getattr(self, name), f"ConditionalTreeDrafter.{name}",
                                       DraftError)
            object.__setattr__(self, name, value)
        if self.cost is not None and not callable(getattr(self.cost, "steps", None)):
            raise DraftError(f"ConditionalTreeDrafter.cost must be a CostCurve, got "
                             f"{type(self.cost).__name__}")
        if self.tables is not None and not callable(getattr(self.tables, "copy_q", None)):
            raise DraftError(f"ConditionalTreeDrafter.tables must be AcceptanceTables, got "
                             f"{type(self.tables).__name__}")
        if not self.name:
            sized = "cost-aware " if self.cost is not None else ""
            copies = " + lookup" if self.lookup else ""
            object.__setattr__(self, "name", f"tree-lattice {sized}confidence tree{copies} "
                                             f"(k={self.k}, N={self.budget})")

    def propose_tree(self, lattice: SausageLattice, context: Sequence[int] | np.ndarray
                     ) -> DraftTree:
        """Refused: a sausage lattice holds no conditional arcs (the offline simulator)."""
        raise _refuse_sausage(self.name)

    def propose_conditional(self, expand: Expand, lattice: SausageLattice,
                            context: Sequence[int] | np.ndarray) -> DraftTree:
        """The step's tree: ``expand`` is its tree lattice (depth ``lattice.h``)."""
        if not self.lookup:
            return self._grow(expand, lattice)
        seen: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}

        def kept(prefix: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
            seen[prefix] = out = expand(prefix)
            return out

        tree = self._grow(kept, lattice)
        text = np.append(np.asarray(context, dtype=np.int64), tree.tokens[0])
        copies = [(text[start: start + self.copy_length], m, rank) for rank, (start, m)
                  in enumerate(lookups(text, 1, 4, self.copies), start=1)]
        tables = self.tables if self.tables is not None else AcceptanceTables.uniform(lattice.h)
        return merge_copies(tree, copies, seen, tables, self.cost, self.budget)

    def _grow(self, expand: Expand, lattice: SausageLattice) -> DraftTree:
        """The confidence tree over the tree lattice, cost-aware when there is a cost."""
        if self.cost is None:
            return conditional_tree(expand, lattice.h, self.budget)
        timing = self._timing
        node_ms = 1e3 * timing[1] / timing[0] if timing[0] else 0.0
        sizes = np.arange(1, self.budget + 1)
        ms = np.asarray(self.cost.steps(sizes)) + (sizes - 1) * node_ms  # (budget,)
        gained = [1.0]  # 1 + the sum of a(u) over the nodes taken after the root

        def timed(prefix: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
            start = time.perf_counter()
            out = expand(prefix)
            timing[0] += 1
            timing[1] += time.perf_counter() - start
            return out

        def stop(taken: int, below_root: float) -> bool:
            a = math.exp(below_root)
            now, nxt = gained[-1] / ms[taken - 1], (gained[-1] + a) / ms[taken]
            if nxt <= now:
                return True
            gained.append(gained[-1] + a)
            return False

        # every node taken raised the ratio, so the tree grown is the best of its prefixes
        return conditional_tree(timed, lattice.h, self.budget, stop=stop)


def merge_copies(tree: DraftTree, copies: Sequence[tuple[np.ndarray, int, int]],
                 expanded: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]],
                 tables: AcceptanceTables, cost: Any, max_nodes: int) -> DraftTree:
    """A confidence tree over the tree lattice with prompt-lookup copies merged in, cut to
    what pays (:class:`ConditionalTreeDrafter`, ``lookup``).

    Args:
        tree: the grown tree (node 0 the certain token; scores: path log-probabilities).
        copies: ``(tokens [L], match length, rank)`` of each copy, the tokens after the
            certain token.
        expanded: the step's expansions, ``prefix (from the certain token) -> (ids,
            log-probs)``: a copied token's head evidence where its parent was expanded.
        tables: rate a copy's tokens (``copy_q``).
        cost: the cost curve the cut maximises expected tokens per unit of time on, or None
            (the ``max_nodes`` best nodes).
        max_nodes: nodes at most, the root included.

    Returns:
        The merged tree (``source`` ``"conditional tree + lookup"``), each node scored by
        ``ln a(u)``, nodes ranked by ``a`` (parents first).
    """
    tokens = tree.tokens.tolist()
    parents = tree.parents.tolist()
    scores = tree.scores.tolist()
    q_head = [1.0] + [math.exp(scores[u] - scores[parents[u]]) for u in range(1, len(tokens))]
    paths: list[tuple[int, ...]] = [(tokens[0],)]
    for u in range(1, len(tokens)):
        paths.append((*paths[parents[u]], tokens[u]))
    child = {(parents[u], tokens[u]): u for u in range(1, len(tokens))}
    miss = [1.0] * len(tokens)  # prod (1 - q_copy) over the copies through each node
    for row, match, rank in copies:
        node = 0
        qc = tables.copy_q(match, np.arange(1, len(row) + 1), rank)
        for j, token in enumerate(row.tolist()):
            nxt = child.get((node, token))
            if nxt is None:
                arcs = expanded.get(paths[node])
                q = 0.0
                if arcs is not None:
                    hit = np.flatnonzero(np.asarray(arcs[0]) == token)
                    q = math.exp(float(arcs[1][hit[0]])) if hit.size else 0.0
                nxt = len(tokens)
                tokens.append(int(token))
                parents.append(node)
                q_head.append(q)
                miss.append(1.0)
                paths.append((*paths[node], int(token)))
                child[(node, int(token))] = nxt
            miss[nxt] *= 1.0 - float(qc[j])
            node = nxt
    n_all = len(tokens)
    reach = np.ones(n_all)
    for u in range(1, n_all):  # parents come first
        reach[u] = reach[parents[u]] * (1.0 - (1.0 - q_head[u]) * miss[u])
    keep = keep_paying(reach, np.array([len(p) for p in paths]), cost, max_nodes)
    return reach_tree(np.asarray(tokens), np.asarray(parents), reach,
                      "conditional tree + lookup").subset(keep)
