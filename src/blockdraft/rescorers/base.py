"""The `Rescorer` protocol: anything that turns a lattice and a context into ranked drafts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from blockdraft.drafts.batch import DraftBatch
from blockdraft.errors import BlockdraftError
from blockdraft.lattice.sausage import SausageLattice


class RescorerError(BlockdraftError, ValueError):
    """A rescorer was misconfigured or given input it cannot score."""


@runtime_checkable
class Rescorer(Protocol):
    """Rescores a sausage lattice given the committed context.

    ``rescore(lattice, context, p)`` returns the ``p`` best distinct paths, best first, as a
    :class:`~blockdraft.drafts.batch.DraftBatch` (all paths, ``exhausted``, when the lattice
    has fewer). ``context`` is the committed prefix's token ids, oldest first (the rescorer
    uses as much of its end as it needs); an empty context means the start of a text.
    """

    def rescore(
        self, lattice: SausageLattice, context: Sequence[int] | np.ndarray, p: int = 1
    ) -> DraftBatch: ...


def as_context(context: Sequence[int] | np.ndarray | None) -> np.ndarray:
    """Validate a context of token ids: int64 ``[n]``, each id >= 0 (``n`` may be 0)."""
    if context is None:
        return np.zeros(0, dtype=np.int64)
    arr = np.asarray(context)
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.ndim != 1:
        raise RescorerError(f"context must be a 1-D sequence of token ids, got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise RescorerError(f"context must hold integer token ids, got dtype {arr.dtype}")
    if (arr < 0).any():
        raise RescorerError(f"context holds a negative token id: {int(arr[arr < 0][0])}")
    return arr.astype(np.int64)


def check_p(p: object) -> int:
    """``p`` as a positive int, or a RescorerError naming the value."""
    if not isinstance(p, (int, np.integer)) or isinstance(p, bool) or int(p) < 1:
        raise RescorerError(f"p must be a positive integer, got {p!r}")
    return int(p)
