"""Drafting from the tree lattice of prefix-conditioned (Hydra-style) heads.

A :class:`ConditionalDrafter` proposes the ``p`` best paths of one step's conditional lattice
(:mod:`blockdraft.lattice.conditional`: each node expanded by the head that reads its last
token), ranked by the heads' log-probs alone or with an LM's (``alpha``), exactly; the decode
loop verifies them together as a trie. The n-gram rescoring and the heads' learned dependence
then compete on the same search: ``scorer=None`` is the heads' own p-best, a path scorer adds
the LM.

A :class:`ConditionalTreeDrafter` proposes EAGLE-2's tree over the same lattice instead: the
``budget`` nodes of highest cumulative head log-probability, at any depth (verified as one token
tree).

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

    Attributes:
        k: arcs per node.
        budget: nodes per tree at most, the certain token included (one verification call).
        cost: the runtime's cost curve (:func:`~blockdraft.models.cost.measure_cost_curve`),
            or None: always ``budget`` nodes.
        name: a label for tables; derived from the settings when empty.
    """

    k: int = 4
    budget: int = 16
    cost: Any = None
    name: str = ""
    # expansions timed so far and their seconds (the host cost of a node), across steps
    _timing: list[float] = field(default_factory=lambda: [0.0, 0.0], init=False, repr=False,
                                 compare=False)

    conditional = True  # the decode loop hands it the step's tree lattice

    def __post_init__(self) -> None:
        for name in ("k", "budget"):
            value = check_positive_int(getattr(self, name), f"ConditionalTreeDrafter.{name}",
                                       DraftError)
            object.__setattr__(self, name, value)
        if self.cost is not None and not callable(getattr(self.cost, "steps", None)):
            raise DraftError(f"ConditionalTreeDrafter.cost must be a CostCurve, got "
                             f"{type(self.cost).__name__}")
        if not self.name:
            sized = "cost-aware " if self.cost is not None else ""
            object.__setattr__(self, "name", f"tree-lattice {sized}confidence tree "
                                             f"(k={self.k}, N={self.budget})")

    def propose_tree(self, lattice: SausageLattice, context: Sequence[int] | np.ndarray
                     ) -> DraftTree:
        """Refused: a sausage lattice holds no conditional arcs (the offline simulator)."""
        raise _refuse_sausage(self.name)

    def propose_conditional(self, expand: Expand, lattice: SausageLattice,
                            context: Sequence[int] | np.ndarray) -> DraftTree:
        """The step's tree: ``expand`` is its tree lattice (depth ``lattice.h``)."""
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
