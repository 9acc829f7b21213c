"""The `Rescorer` protocol: anything that turns a lattice and a context into ranked drafts; and
the `PathScorer` protocol: an LM scoring the paths of a token tree as it grows.

Also what every rescorer shares: :class:`RescorerError`, the checks of a call's arguments
(:func:`as_context`, :func:`check_p`) and :func:`agreement` (do two rescorers return the same
drafts?).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from blockdraft.core.batch import DraftBatch
from blockdraft.core.checks import check_positive_int, check_token_ids
from blockdraft.core.errors import BlockdraftError
from blockdraft.lattice.sausage import SausageLattice


class RescorerError(BlockdraftError, ValueError):
    """A rescorer was misconfigured or given input it cannot score."""


@runtime_checkable
class Rescorer(Protocol):
    """Rescores a sausage lattice given the committed context.

    ``rescore(lattice, context, p)`` returns the ``p`` best distinct paths, best first, as a
    :class:`~blockdraft.core.batch.DraftBatch` (all paths, ``exhausted``, when the lattice
    has fewer). ``context`` is the committed prefix's token ids, oldest first (the rescorer
    uses as much of its end as it needs); an empty context means the start of a text.
    """

    def rescore(
        self, lattice: SausageLattice, context: Sequence[int] | np.ndarray, p: int = 1
    ) -> DraftBatch: ...


class PathScorer(Protocol):
    """What a rescored token tree (:func:`~blockdraft.drafts.trees.rescored_tree`) needs of an
    LM: ``score(tokens, context) -> float64 [n]``, ``ln P(token_i | context, tokens_<i)``
    (:class:`~blockdraft.rescorers.ngram.NgramLM`). A scorer that also has
    ``next_scores(path, context, candidates) -> float64 [c]`` (all children of a node in one
    call: :class:`~blockdraft.rescorers.ngram.NgramPathScorer`,
    :class:`~blockdraft.rescorers.neural.NeuralPathScorer`) is called through it instead."""

    def score(
        self, tokens: Sequence[int] | np.ndarray, context: Sequence[int] | np.ndarray = ...
    ) -> np.ndarray: ...


def as_context(context: Sequence[int] | np.ndarray | None) -> np.ndarray:
    """Validate a context of token ids: int64 ``[n]``, each id >= 0 (``n`` may be 0)."""
    if context is None:
        return np.zeros(0, dtype=np.int64)
    return check_token_ids(context, "context", RescorerError)


def check_p(p: object) -> int:
    """``p`` as a positive int, or a RescorerError naming the value."""
    return check_positive_int(p, "p", RescorerError)


def agreement(exact_batch: DraftBatch, wfst_batch: DraftBatch) -> bool:
    """Whether two rescorers agree: the same token rows, in the same order.

    Args:
        exact_batch: e.g. the exact n-gram backend's drafts (the reference).
        wfst_batch: e.g. the WFST backend's drafts for the same lattice, context and ``p``.

    Returns:
        True when both hold the same number of drafts and equal ``tokens`` row by row.
    """
    return exact_batch.tokens.shape == wfst_batch.tokens.shape and bool(
        np.array_equal(exact_batch.tokens, wfst_batch.tokens)
    )
