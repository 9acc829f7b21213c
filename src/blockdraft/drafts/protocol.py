"""The `Drafter` protocol: what every draft source offers the decode loop, the offline
simulator and the combinators (input copy + heads).

A drafter is called once per BPD step (docs/definitions.md sec. 2, step 1) with that step's
sausage lattice (the heads' top-``k`` per slot; slot 1 is the certain token) and the committed
context, and returns ``p >= 1`` drafts of ``h`` tokens, best first, each starting with the
lattice's certain token. It never calls the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from blockdraft.core.batch import DraftBatch
from blockdraft.lattice.sausage import SausageLattice


@runtime_checkable
class Drafter(Protocol):
    """A draft source.

    Attributes:
        k: the lattice width (arcs per slot) the drafter reads; the caller builds a lattice at
            least this wide.
        name: a label for tables and reports.
    """

    @property
    def k(self) -> int: ...

    @property
    def name(self) -> str: ...

    def propose(
        self, lattice: SausageLattice, context: Sequence[int] | np.ndarray
    ) -> DraftBatch:
        """``p`` drafts ``[p, h]`` for this step; ``context`` is the committed prefix before
        the certain token (token ids, oldest first)."""
        ...
