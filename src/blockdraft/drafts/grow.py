"""Trees grown best first over a step's lattice: EAGLE-2's confidence tree, the rescored tree,
and the tree lattice's cost-aware tree with prompt-lookup copies.

docs/definitions.md sec. 4 and 11. One growth (:func:`~blockdraft.lattice.search.grow`) runs
over the lattice's ``expand``, for sausages (Medusa heads: every node's children are the next
slot's arcs) and tree lattices (prefix-conditioned heads: each node expanded by the head reading
its last token) alike: the ``budget`` nodes of highest cumulative score, by the heads'
log-probabilities (EAGLE-2's confidence tree) or with ``alpha`` times an LM's (the rescored
tree).

On a cost curve (:class:`~blockdraft.drafts.cut.CostCut`) the growth stops before the first
node that no longer raises the expected tokens per millisecond, a node's ``a(u)`` being its
path's probability and its cost its row in the forward plus its expansion on the host (timed
as the drafter runs, a mean over its expansions so far: :class:`ExpansionClock`).

Public surface:
    Grown(k, budget, scorer=None, alpha=1.0, tree_lattice=False, cut=None)   a source
    ExpansionClock                                    mutable: host ms per expansion
    confidence_tree(lattice, budget) -> DraftTree     EAGLE-2's tree over a sausage
    rescored_tree(lattice, budget, lm, alpha=1.0, context=()) -> DraftTree
    ConfidenceTreeDrafter(k=4, budget=16, name="") -> Pipeline
    RescoredTreeDrafter(lm, k=4, budget=16, alpha=1.0, name="") -> Pipeline
    ConditionalTreeDrafter(k=4, budget=16, cost=None, lookup=False, tables=None, copies=3,
                           copy_length=16, scorer=None, alpha=1.0, chain=False, name="")
        -> Pipeline   the tree lattice's tree (prefix heads', a draft layer's default), rescored
        by an LM, or cut to one path
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from blockdraft.core.batch import DraftError
from blockdraft.core.checks import check_positive_int
from blockdraft.core.tree import DraftTree
from blockdraft.drafts.calibration import AcceptanceTables
from blockdraft.drafts.cut import ChainCut, CostCut
from blockdraft.drafts.lookup import Copies
from blockdraft.drafts.pipeline import Pipeline
from blockdraft.drafts.protocol import Feedback, Needs, StepView
from blockdraft.drafts.rates import ArcRates
from blockdraft.drafts.trie import Trie
from blockdraft.lattice.sausage import SausageLattice
from blockdraft.lattice.search import Searchable, grow
from blockdraft.models.cost import CostCurve
from blockdraft.rescorers.base import PathScorer
from blockdraft.rescorers.ngram.lm import NgramLM
from blockdraft.rescorers.ngram.path_scorer import NgramPathScorer


def confidence_tree(lattice: SausageLattice, budget: int) -> DraftTree:
    """The ``budget`` nodes of highest cumulative head log-probability (EAGLE-2's tree, with
    the lattice's top-``k`` per depth as the candidates), in the order found."""
    return grow(lattice, _check_budget(budget, "confidence tree"), source="confidence")


def rescored_tree(lattice: SausageLattice, budget: int, lm: PathScorer | NgramLM,
                  alpha: float = 1.0, context: Sequence[int] | np.ndarray = ()) -> DraftTree:
    """Best first by ``head score + alpha * LM score`` of the path so far (docs/definitions.md
    sec. 4 and 11): a child's score adds its head log-prob and ``alpha`` times
    ``ln P_LM(token | context, path)``, so the tree below a node depends on its ancestors.
    The root's score includes the certain token's LM score, as the n-gram rescorer's do.

    Args:
        lattice: the step's lattice.
        budget: ``N``, the nodes with the root.
        lm: a :class:`~blockdraft.rescorers.base.PathScorer` (an n-gram LM is scored through
            :class:`~blockdraft.rescorers.ngram.NgramPathScorer`: each child exactly on its
            whole path, the same numbers as KenLM's, one lookup from the parent's LM state; a
            small neural LM through ``rescorers.neural.NeuralPathScorer``).
        alpha: the LM weight, ``>= 0``.
        context: the committed prefix before the certain token.
    """
    if not alpha >= 0:
        raise DraftError(f"alpha must be >= 0, got {alpha}")
    scorer = NgramPathScorer(lm) if isinstance(lm, NgramLM) else lm
    return grow(lattice, _check_budget(budget, "rescored tree"), scorer=scorer, alpha=alpha,
                context=np.asarray(context, dtype=np.int64).reshape(-1), source="rescored")


def _check_budget(budget: Any, name: str) -> int:
    return check_positive_int(budget, f"{name} budget (nodes, the root included)", DraftError)


class ExpansionClock:
    """Host milliseconds per expansion of a tree lattice, a mean over every expansion timed so
    far (mutable: it learns as the drafter runs)."""

    def __init__(self) -> None:
        self.count = 0
        self.seconds = 0.0

    @property
    def node_ms(self) -> float:
        """The mean milliseconds of one expansion (0 before the first)."""
        return 1e3 * self.seconds / self.count if self.count else 0.0

    def timed(self, lattice: Searchable) -> Searchable:
        """``lattice`` with every expansion that computes timed into this clock."""
        return _TimedLattice(lattice, self)


class _TimedLattice:
    """A lattice whose expansions (those not already known: ``peek``) are timed."""

    def __init__(self, lattice: Searchable, clock: ExpansionClock) -> None:
        self._lattice, self._clock = lattice, clock
        self.h = lattice.h

    def expand(self, prefix: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        known = self._lattice.peek(prefix)
        if known is not None:
            return known
        start = time.perf_counter()
        out = self._lattice.expand(prefix)
        self._clock.count += 1
        self._clock.seconds += time.perf_counter() - start
        return out

    def peek(self, prefix: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray] | None:
        return self._lattice.peek(prefix)


class Grown:
    """A tree grown best first over the step's lattice (see the module docstring) as a source.

    Args:
        k: arcs per slot (a sausage: its top ``k``; a tree lattice: each node's ``k``).
        budget: nodes at most, the root included.
        scorer: an LM over paths (the rescored tree), or None.
        alpha: the LM's weight.
        tree_lattice: grow over the step's tree lattice (prefix heads, a draft layer), not its
            sausage.
        cut: stop the growth where the next node no longer pays on this cut's cost curve, its
            expansion's host time counted (an :class:`ExpansionClock` this source owns).
        source: the label of its nodes.
    """

    def __init__(self, k: int, budget: int, scorer: PathScorer | None = None,
                 alpha: float = 1.0, tree_lattice: bool = False, cut: CostCut | None = None,
                 source: str = "confidence") -> None:
        self.k = check_positive_int(k, "k", DraftError)
        self.budget = _check_budget(budget, source)
        if not alpha >= 0:
            raise DraftError(f"alpha must be >= 0, got {alpha!r}")
        self.scorer, self.alpha, self.cut, self.label = scorer, float(alpha), cut, source
        self.tree_lattice = bool(tree_lattice)
        lms = () if scorer is None else (scorer,)
        self.needs = Needs(k=self.k, tree_lattice=self.tree_lattice, lms=lms,
                           sausage=not self.tree_lattice)
        self.clock = ExpansionClock()

    def tree(self, view: StepView) -> DraftTree:
        """This step's grown tree."""
        lattice = view.tree_lattice(self.k) if self.tree_lattice else view.sausage(self.k)
        cut = self.cut
        if cut is None or cut.cost is None:
            return grow(lattice, self.budget, scorer=self.scorer, alpha=self.alpha,
                        context=view.context, source=self.label)
        clock = self.clock
        node_ms = clock.node_ms
        gained = [1.0]  # 1 + the sum of a(u) over the nodes taken after the root

        def stop(taken: int, below_root: float) -> bool:
            a = math.exp(below_root)
            if cut.stop(gained[0], taken, a, node_ms):
                return True
            gained[0] += a
            return False

        # every node taken raised the ratio, so the tree grown is the best of its prefixes
        return grow(clock.timed(lattice), self.budget, scorer=self.scorer, alpha=self.alpha,
                    context=view.context, stop=stop, source=self.label)

    def add(self, view: StepView, trie: Trie) -> None:
        trie.add_tree(self.tree(view), self.label)

    def observe(self, feedback: Feedback) -> None:
        """Nothing to learn from the verdict (the clock learns as the tree grows)."""


def ConfidenceTreeDrafter(k: int = 4, budget: int = 16, name: str = "") -> Pipeline:  # noqa: N802
    """EAGLE-2 style confidence tree of ``budget`` nodes over the top-``k`` lattice."""
    source = Grown(k, budget, source="confidence")
    return Pipeline([source], name=name or f"confidence tree (k={k}, N={budget})",
                    source="confidence")


def RescoredTreeDrafter(lm: PathScorer | NgramLM, k: int = 4, budget: int = 16,  # noqa: N802
                        alpha: float = 1.0, name: str = "") -> Pipeline:
    """Best-first tree of ``budget`` nodes by head + ``alpha`` x LM score (an n-gram LM, scored
    through one :class:`~blockdraft.rescorers.ngram.NgramPathScorer` kept across the steps, or a
    path scorer)."""
    scorer = NgramPathScorer(lm) if isinstance(lm, NgramLM) else lm
    source = Grown(k, budget, scorer=scorer, alpha=alpha, source="rescored")
    return Pipeline([source], name=name or f"rescored tree (k={k}, N={budget}, alpha={alpha:g})",
                    source="rescored")


def ConditionalTreeDrafter(k: int = 4, budget: int = 16,  # noqa: N802
                           cost: CostCurve | None = None, lookup: bool = False,
                           tables: AcceptanceTables | None = None, copies: int = 3,
                           copy_length: int = 16, scorer: PathScorer | NgramLM | None = None,
                           alpha: float = 1.0, chain: bool = False,
                           name: str = "") -> Pipeline:
    """EAGLE-2's confidence tree over the tree lattice of prefix heads or a draft layer, ``k``
    arcs a node; with ``scorer`` (an LM over paths, an n-gram LM through
    :class:`~blockdraft.rescorers.ngram.NgramPathScorer`), grown best first by arc + ``alpha``
    x LM log-probability instead (the rescored tree: grown to ``budget``, then cut to what
    pays with each node rated by its arc's probability, as the copies are merged below); with
    a cost curve, grown while each node pays for its row and its expansion; with ``lookup``,
    prompt lookup's ``copies`` copies (``copy_length`` tokens) merged in, each node rated as
    independent evidence (its arc's probability where its parent was expanded, each copy's rate
    from ``tables``, uniform stand-ins without) and the merged tree cut to what pays on
    ``cost`` (at most ``budget`` nodes). With ``chain`` (a runtime that verifies one path a
    step losslessly but not a tree), the merged tree is cut to its one root path whose expected
    tokens per unit of ``cost`` is best (:class:`~blockdraft.drafts.cut.ChainCut`): the heads'
    path or a copy, whichever pays.

    Raises:
        DraftError: a bad setting, ``cost``/``tables`` of the wrong type, or ``chain`` without
            a cost curve.
    """
    for label, value in (("k", k), ("budget", budget), ("copies", copies),
                         ("copy_length", copy_length)):
        check_positive_int(value, f"ConditionalTreeDrafter.{label}", DraftError)
    if cost is not None and not isinstance(cost, CostCurve):
        raise DraftError(f"ConditionalTreeDrafter.cost must be a CostCurve, got "
                         f"{type(cost).__name__}")
    if tables is not None and not isinstance(tables, AcceptanceTables):
        raise DraftError(f"ConditionalTreeDrafter.tables must be AcceptanceTables, got "
                         f"{type(tables).__name__}")
    if chain and cost is None:
        raise DraftError("ConditionalTreeDrafter(chain=True) picks the path that pays best on "
                         "the runtime's cost curve: pass cost=cost_curve_of(model)")
    cut = CostCut(cost, budget)
    if isinstance(scorer, NgramLM):
        scorer = NgramPathScorer(scorer)
    # a rescored tree grows to the budget in its own order; the cut then rates its nodes by
    # their arcs (an LM's log-probability is evidence for the order, not an acceptance rate)
    grown = Grown(k, budget, scorer=scorer, alpha=alpha, tree_lattice=True,
                  cut=cut if scorer is None else None, source="conditional tree")
    sized = "cost-aware " if cost is not None else ""
    kind = "confidence" if scorer is None else f"rescored (alpha={alpha:g})"
    label = name or (f"tree-lattice {sized}{kind} {'chain' if chain else 'tree'}"
                     f"{' + lookup' if lookup else ''} (k={k}, N={budget})")
    if not lookup and scorer is None and not chain:
        return Pipeline([grown], name=label, source="conditional tree")
    rates = ArcRates(tables if tables is not None else AcceptanceTables.uniform(2))
    sources: list[Any] = [grown]
    if lookup:
        sources.append(Copies(copies=copies, lengths=(copy_length,)))
    final = ChainCut(cost, budget) if cost is not None and chain else cut
    return Pipeline(sources, rates=rates, cut=final, name=label,
                    source="conditional tree + lookup" if lookup else "conditional tree")
