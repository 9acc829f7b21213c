"""The one drafting pipeline: sources -> trie -> rates -> cut.

docs/definitions.md sec. 11. Every drafter of blockdraft is a :class:`Pipeline`:

1. **sources** add their drafts to the step's one :class:`~blockdraft.drafts.trie.Trie`: the
   heads' p best paths (:mod:`~blockdraft.drafts.heads`: the chain, p-best 0-gram, rescored;
   over a sausage or a tree lattice), a tree grown best first over the lattice's ``expand``
   (:mod:`~blockdraft.drafts.grow`: EAGLE-2's tree, the rescored tree), Medusa's static rank
   paths (:mod:`~blockdraft.drafts.medusa`), prompt-lookup copies
   (:mod:`~blockdraft.drafts.lookup`), an input copy (:mod:`~blockdraft.drafts.iad`), the
   oracle's path (:mod:`~blockdraft.drafts.oracle`, offline);
2. **rates** (optional, :mod:`~blockdraft.drafts.rates`) give each node its probability of
   being on the accepted path, from the acceptance tables or the arcs' own probabilities;
3. **the cut** (:mod:`~blockdraft.drafts.cut`) keeps what is verified: every node, the first
   ``N``, the ``N`` that pay on the runtime's cost curve, or the one chain that pays.

The named strategies (``HeadDrafter``, ``LookupDrafter``, ``CostAwareTreeDrafter``,
``ConditionalTreeDrafter``, ...) are functions that compose these parts; a declarative
:class:`~blockdraft.drafts.spec.DraftSpec` names them for the one factory.

A pipeline keeps what changes between steps in objects it owns and that say they are mutable:
its sources' state (a lookup index, a timer) and :class:`PipelineState` (what the last tree
held). :meth:`Pipeline.observe` passes each model call's :class:`Feedback` to its sources.

Public surface:
    Source                       the protocol: label, needs, add(view, trie), observe(feedback)
    Pipeline(sources, rates=None, cut=KeepAll(), name, source, needs=None, wants_heads=None)
                                 a Drafter (.draft(view), .observe(feedback), .wants_heads)
    PipelineState, TreeStats     mutable state; what one rated tree held
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Protocol

import numpy as np

from blockdraft.core.batch import DraftError
from blockdraft.core.tree import DraftTree
from blockdraft.drafts.cut import ChainCut, CostCut, Cut, KeepAll
from blockdraft.drafts.protocol import Feedback, Needs, StepView
from blockdraft.drafts.rates import Rates, reach
from blockdraft.drafts.trie import Trie


class Source(Protocol):
    """A draft source of the pipeline (see the module docstring).

    Attributes:
        label: what its nodes are labelled (``DraftTree.labels``): which source a step's
            accepted path came from.
        needs: what it needs of a step.
    """

    @property
    def label(self) -> str: ...

    @property
    def needs(self) -> Needs: ...

    def add(self, view: StepView, trie: Trie) -> None:
        """Add this step's drafts to ``trie``."""
        ...

    def observe(self, feedback: Feedback) -> None:
        """A model call's outcome (a source that learns updates its state; others ignore it)."""
        ...


@dataclass(frozen=True)
class TreeStats:
    """What one rated tree held.

    Attributes:
        candidates: nodes of the merged trie (root included) before the cut.
        nodes: nodes kept (``N``).
        expected: expected tokens of the step, ``1 + sum a(u)`` over the kept nodes.
        relative_cost: the step's cost in greedy steps (0 without a cost curve).
    """

    candidates: int
    nodes: int
    expected: float
    relative_cost: float


class PipelineState:
    """What a pipeline keeps between steps (mutable): the last rated tree's :class:`TreeStats`
    (None before the first, or without rates)."""

    def __init__(self) -> None:
        self.last: TreeStats | None = None


class Pipeline:
    """A drafter composed of sources, rates and a cut (see the module docstring).

    Args:
        sources: the draft sources, in the order their drafts are merged (the first proposer of
            a node labels it and gives it its score: put the best drafts first).
        rates: rate every node (:mod:`~blockdraft.drafts.rates`; the tree's scores are then
            ``ln a(u)``), or None (each node keeps its source's path score).
        cut: which nodes are verified (:mod:`~blockdraft.drafts.cut`).
        name: a label for tables.
        source: the trees' ``DraftTree.source``.
        needs: what the drafter needs beyond its sources' needs (the rates' LM, a wider
            lattice), joined with theirs.
        wants_heads: heads on demand: ``(context, certain) -> bool``, whether the next step's
            drafts read the heads (False: the step sees the certain token alone and the Medusa
            heads are not computed; :class:`~blockdraft.drafts.lookup.HeadsOnDemand`), or None
            (every step reads them).

    Raises:
        DraftError: no source, or a cut by cost without rates.
    """

    def __init__(self, sources: Sequence[Source], rates: Rates | None = None,
                 cut: Cut | None = None, name: str = "", source: str = "trie",
                 needs: Needs | None = None,
                 wants_heads: Callable[[np.ndarray, int], bool] | None = None) -> None:
        self.sources = tuple(sources)
        if not self.sources:
            raise DraftError("a drafter needs at least one source of drafts")
        self.rates = rates
        self.cut: Cut = KeepAll() if cut is None else cut
        if rates is None and isinstance(self.cut, CostCut | ChainCut):
            raise DraftError("a cut by cost weighs each node's rate: give the drafter rates")
        self.name = name or " + ".join(s.label for s in self.sources)
        self.source = source
        declared = [s.needs for s in self.sources] + ([] if needs is None else [needs])
        if wants_heads is not None:
            declared.append(Needs(on_demand=True))
        self.needs: Needs = reduce(Needs.joined, declared)
        self._wants_heads = wants_heads
        self.state = PipelineState()

    @property
    def k(self) -> int:
        """The lattice width it reads (``needs.k``)."""
        return self.needs.k

    @property
    def last(self) -> TreeStats | None:
        """What the last rated tree held (:class:`TreeStats`; None without rates)."""
        return self.state.last

    def wants_heads(self, context: np.ndarray, certain: int) -> bool:
        """Whether the step after ``context`` (the committed text before the certain token
        ``certain``) drafts from the heads (heads on demand; always True without a gate)."""
        return True if self._wants_heads is None else bool(self._wants_heads(context, certain))

    def draft(self, view: StepView) -> DraftTree:
        """The step's tree: every source's drafts merged, rated and cut."""
        trie = Trie(view.certain)
        for source in self.sources:
            source.add(view, trie)
        if self.rates is None:
            keep = self.cut.keep(trie, None)
            return trie.tree(None if keep.all() else keep, source=self.source)
        a = reach(self.rates.q(trie, view), trie.parents)
        keep = self.cut.keep(trie, a)
        n = int(keep.sum())
        cost = self.cut.cost if isinstance(self.cut, CostCut | ChainCut) else None
        self.state.last = TreeStats(
            candidates=trie.size, nodes=n, expected=float(1.0 + a[1:][keep[1:]].sum()),
            relative_cost=0.0 if cost is None else cost.relative(n))
        with np.errstate(divide="ignore"):
            scores = np.maximum(np.log(a), -1e30)
        return trie.tree(None if keep.all() else keep, scores, source=self.source)

    def observe(self, feedback: Feedback) -> None:
        """Pass a model call's outcome to the sources."""
        for source in self.sources:
            source.observe(feedback)

    def __repr__(self) -> str:
        return f"Pipeline({self.name!r})"
