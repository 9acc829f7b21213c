"""The `Drafter` protocol: what every draft source offers the decode loop, the offline
simulator and the combinators (input copy + heads).

A drafter is called once per BPD step (docs/definitions.md sec. 2, step 1) with that step's
sausage lattice (the heads' top-``k`` per slot; slot 1 is the certain token) and the committed
context, and returns ``p >= 1`` drafts of ``h`` tokens, best first, each starting with the
lattice's certain token. It never calls the model. A :class:`TreeDrafter` returns a token tree
instead (docs/definitions.md sec. 11), verified in one forward pass with tree attention.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from blockdraft.core.batch import DraftBatch
from blockdraft.core.tree import DraftTree
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


@runtime_checkable
class TreeDrafter(Protocol):
    """A token-tree source (docs/definitions.md sec. 11): one :class:`DraftTree` per step.

    Attributes:
        k: the lattice width (arcs per slot) the builder reads.
        name: a label for tables and reports.
    """

    @property
    def k(self) -> int: ...

    @property
    def name(self) -> str: ...

    def propose_tree(
        self, lattice: SausageLattice, context: Sequence[int] | np.ndarray
    ) -> DraftTree:
        """The tree of this step: its root is the lattice's certain token (slot 1), node
        ``u`` at depth ``d`` guesses the token at ``t + 1 + d``; ``context`` as in
        :meth:`Drafter.propose`."""
        ...
