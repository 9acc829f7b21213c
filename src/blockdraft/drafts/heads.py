"""Drafting from the heads' lattice: vanilla BPD, p-best 0-gram, and rescored p-best.

A `HeadDrafter` is the strategy object that both the online decode loop and the offline
simulator call once per step: given the step's sausage lattice (top-``k`` per head) and the
committed context, it proposes ``p`` drafts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from blockdraft.core.batch import DraftBatch, DraftError
from blockdraft.core.checks import check_positive_int
from blockdraft.lattice.sausage import SausageLattice
from blockdraft.rescorers.base import Rescorer


@dataclass(frozen=True)
class HeadDrafter:
    """Propose ``p`` drafts from the top-``k`` lattice of the heads.

    Attributes:
        k: arcs per slot the strategy reads (slot 1 is always the certain token alone).
        p: drafts proposed per step (verified together in one batched call).
        rescorer: ``None`` ranks paths by head scores alone (``p = 1`` is vanilla BPD,
            ``p > 1`` is p-best 0-gram BPD); otherwise the rescorer ranks them.
        name: a label for tables; derived from the settings when empty.
    """

    k: int = 1
    p: int = 1
    rescorer: Rescorer | None = None
    name: str = ""

    def __post_init__(self) -> None:
        for field in ("k", "p"):
            value = check_positive_int(getattr(self, field), f"HeadDrafter.{field}", DraftError)
            object.__setattr__(self, field, value)
        if not self.name:
            if self.rescorer is None:
                label = "vanilla" if self.p == 1 else f"{self.p}-best 0-gram (k={self.k})"
            else:
                label = f"{self.p}-best {type(self.rescorer).__name__} (k={self.k})"
            object.__setattr__(self, "name", label)

    def propose(
        self, lattice: SausageLattice, context: Sequence[int] | np.ndarray
    ) -> DraftBatch:
        """The ``p`` best drafts of ``lattice`` (which must be at least ``k`` wide)."""
        if lattice.k < self.k:
            raise DraftError(
                f"{self.name} needs a lattice of width k >= {self.k}, got k = {lattice.k}"
            )
        lat = lattice if lattice.k == self.k else SausageLattice(
            tokens=lattice.tokens[:, : self.k], scores=lattice.scores[:, : self.k]
        )
        if self.rescorer is None:
            return lat.best_paths(self.p)
        return self.rescorer.rescore(lat, context, self.p)


def vanilla() -> HeadDrafter:
    """Vanilla BPD: the argmax of every head."""
    return HeadDrafter(k=1, p=1)
