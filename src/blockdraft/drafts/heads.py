"""The heads' best paths: vanilla BPD, p-best 0-gram, rescored p-best; over a sausage or a tree
lattice.

docs/definitions.md sec. 2-4, 10. :class:`HeadPaths` adds the ``p`` best paths of the step's
sausage lattice cut to ``k`` arcs a slot: by the heads' scores alone (``p = 1``: the argmax of
every head, vanilla BPD), or ranked by a rescorer (an n-gram LM's exact p-best, a neural LM's
local rescoring). :class:`TreePaths` adds the ``p`` best paths of a tree lattice
(prefix-conditioned heads: each node expanded by the head reading its last token), exactly,
with or without an LM (:func:`~blockdraft.lattice.search.pbest`).

Public surface:
    HeadPaths(k=1, p=1, rescorer=None)             a source
    TreePaths(k=4, p=4, scorer=None, alpha=1.0, max_expansions=256)   a source
    HeadDrafter(k=1, p=1, rescorer=None, name="") -> Pipeline     the heads' p best, one trie
    vanilla() -> Pipeline                                          HeadDrafter(k=1, p=1)
    ConditionalDrafter(k=4, p=4, scorer=None, alpha=1.0, max_expansions=256, name="") -> Pipeline
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from blockdraft.core.batch import DraftBatch, DraftError
from blockdraft.core.checks import check_positive_int
from blockdraft.drafts.pipeline import Pipeline
from blockdraft.drafts.protocol import Feedback, Needs, StepView
from blockdraft.drafts.trie import Trie
from blockdraft.lattice.search import pbest
from blockdraft.rescorers.base import PathScorer, Rescorer


def _add_batch(trie: Trie, batch: DraftBatch, label: str) -> None:
    for row, score in zip(batch.tokens, batch.scores.tolist(), strict=True):
        trie.add(row, score, label)


@dataclass(frozen=True, eq=False)
class HeadPaths:
    """The ``p`` best paths of the sausage lattice's top-``k`` (see the module docstring).

    Attributes:
        k: arcs per slot read (slot 1 is always the certain token alone).
        p: paths added (fewer when the lattice has fewer).
        rescorer: ranks the paths (:class:`~blockdraft.rescorers.base.Rescorer`), or None: the
            heads' scores alone.
    """

    k: int = 1
    p: int = 1
    rescorer: Rescorer | None = None
    needs: Needs = field(init=False)

    def __post_init__(self) -> None:
        for name, value in (("k", self.k), ("p", self.p)):
            check_positive_int(value, f"HeadDrafter.{name}", DraftError)
        lms = () if self.rescorer is None else (self.rescorer,)
        object.__setattr__(self, "needs", Needs(k=self.k, lms=lms))

    @property
    def label(self) -> str:
        return "lattice" if self.rescorer is None else type(self.rescorer).__name__

    def paths(self, view: StepView) -> DraftBatch:
        """This step's paths, best first."""
        if self.p == 1 and self.rescorer is None:  # the heads' chain: every slot's top arc
            chain = view.lattice.vanilla()
            score = view.lattice.scores[:, 0].sum(keepdims=True)
            return DraftBatch(tokens=chain[None], scores=score, head_scores=score,
                              lm_scores=np.zeros(1), requested=1, source="lattice")
        lattice = view.sausage(self.k)
        if self.rescorer is None:
            return lattice.best_paths(self.p)
        return self.rescorer.rescore(lattice, view.context, self.p)

    def add(self, view: StepView, trie: Trie) -> None:
        batch = self.paths(view)
        _add_batch(trie, batch, batch.source)

    def observe(self, feedback: Feedback) -> None:
        """Nothing to learn (a rescorer's context LM follows the context it is given)."""


@dataclass(frozen=True, eq=False)
class TreePaths:
    """The ``p`` best paths of the step's tree lattice, ``k`` arcs a node (see the module
    docstring).

    Attributes:
        k: arcs per node (the top ``k`` of the head that expands it).
        p: paths added.
        scorer: an LM over paths (:class:`~blockdraft.rescorers.base.PathScorer`), or None.
        alpha: the LM's weight (``>= 0``).
        max_expansions: nodes expanded at most per step (each costs one head evaluation);
            None: no limit (exact).
    """

    k: int = 4
    p: int = 4
    scorer: PathScorer | None = None
    alpha: float = 1.0
    max_expansions: int | None = 256
    needs: Needs = field(init=False)

    def __post_init__(self) -> None:
        for name, value in (("k", self.k), ("p", self.p)):
            check_positive_int(value, f"ConditionalDrafter.{name}", DraftError)
        if self.max_expansions is not None:
            check_positive_int(self.max_expansions, "ConditionalDrafter.max_expansions",
                               DraftError)
        if not self.alpha >= 0:
            raise DraftError(f"ConditionalDrafter.alpha must be >= 0, got {self.alpha!r}")
        lms = () if self.scorer is None else (self.scorer,)
        object.__setattr__(self, "needs", Needs(k=self.k, tree_lattice=True, lms=lms,
                                                sausage=False))

    label = "conditional"

    def add(self, view: StepView, trie: Trie) -> None:
        batch = pbest(view.tree_lattice(self.k), self.p, scorer=self.scorer, alpha=self.alpha,
                      context=view.context, max_expansions=self.max_expansions)
        _add_batch(trie, batch, self.label)

    def observe(self, feedback: Feedback) -> None:
        """Nothing to learn."""


def HeadDrafter(k: int = 1, p: int = 1, rescorer: Rescorer | None = None,  # noqa: N802
                name: str = "") -> Pipeline:
    """The heads' ``p`` best drafts of the top-``k`` lattice, merged into one trie: vanilla BPD
    (``p = 1``, no rescorer), p-best 0-gram BPD (``p > 1``), rescored p-best (a rescorer).

    Raises:
        DraftError: ``k`` or ``p`` not a positive integer.
    """
    source = HeadPaths(k=k, p=p, rescorer=rescorer)
    if not name:
        if rescorer is None:
            name = "vanilla" if p == 1 else f"{p}-best 0-gram (k={k})"
        else:
            name = f"{p}-best {type(rescorer).__name__} (k={k})"
    return Pipeline([source], name=name, source="trie")


def vanilla() -> Pipeline:
    """Vanilla BPD: the argmax of every head."""
    return HeadDrafter(k=1, p=1)


def ConditionalDrafter(k: int = 4, p: int = 4, scorer: PathScorer | None = None,  # noqa: N802
                       alpha: float = 1.0, max_expansions: int | None = 256,
                       name: str = "") -> Pipeline:
    """The ``p`` best paths of prefix heads' tree lattice (exact, with or without an LM),
    verified as one trie; decodes with a model whose heads are prefix-conditioned."""
    source = TreePaths(k=k, p=p, scorer=scorer, alpha=alpha, max_expansions=max_expansions)
    lm = "" if scorer is None else f" + {type(scorer).__name__}"
    return Pipeline([source], name=name or f"{source.p}-best tree lattice{lm} (k={source.k})",
                    source="trie:conditional")
