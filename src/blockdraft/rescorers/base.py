"""The `Rescorer` protocol: anything that turns a lattice and a context into ranked drafts; the
`PathScorer` protocol: an LM scoring the paths of a token tree as it grows; both say whether
they fit a model's vocabulary (`VocabChecked`).

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


class VocabChecked(Protocol):
    """An LM that can say whether it fits a model's vocabulary."""

    def check_vocab(self, vocab_size: int) -> None:
        """Raise a :class:`RescorerError` (naming both vocabularies) when the LM was trained on
        another tokenizer than a model of ``vocab_size`` tokens: scoring with it would be
        silently wrong."""
        ...


@runtime_checkable
class PathScorer(VocabChecked, Protocol):
    """An LM scoring the paths of a token tree as it grows (the rescored tree, the cost-aware
    tree's LM evidence), natural log. :class:`~blockdraft.rescorers.ngram.NgramPathScorer`,
    the n-gram rescorer's :meth:`~blockdraft.rescorers.ngram.NgramRescorer.path_scorer` and
    :class:`~blockdraft.rescorers.neural.NeuralPathScorer` are path scorers."""

    def next_scores(self, path: Sequence[int], context: Sequence[int] | np.ndarray,
                    candidates: np.ndarray) -> np.ndarray:
        """float64 ``[c]``: ``ln P(c | context, path)`` of every candidate."""
        ...

    def score_tree(self, tokens: np.ndarray, parents: np.ndarray,
                   context: Sequence[int] | np.ndarray) -> np.ndarray:
        """float64 ``[N]``: ``ln P(token_u | context, u's ancestors)`` of every node of a token
        tree (``parents[u] < u``, the root's ``-1``)."""
        ...


@runtime_checkable
class Rescorer(VocabChecked, Protocol):
    """Rescores a sausage lattice given the committed context.

    ``rescore(lattice, context, p)`` returns the ``p`` best distinct paths, best first, as a
    :class:`~blockdraft.core.batch.DraftBatch` (all paths, ``exhausted``, when the lattice
    has fewer). ``context`` is the committed prefix's token ids, oldest first (the rescorer
    uses as much of its end as it needs); an empty context means the start of a text.
    ``path_scorer()`` is its LM as a :class:`PathScorer` (the evidence a cost-aware tree rates
    its nodes by), or None when it has none.
    """

    def rescore(
        self, lattice: SausageLattice, context: Sequence[int] | np.ndarray, p: int = 1
    ) -> DraftBatch: ...

    def path_scorer(self) -> PathScorer | None: ...


def scores_by_parent(scorer: PathScorer, tokens: np.ndarray, parents: np.ndarray,
                     context: Sequence[int] | np.ndarray) -> np.ndarray:
    """:meth:`PathScorer.score_tree` through ``next_scores``: one call per parent for all its
    children (the root scored after the context alone)."""
    toks = np.asarray(tokens, dtype=np.int64)
    par = np.asarray(parents, dtype=np.int64)
    out = np.zeros(toks.size)
    by_parent: dict[int, list[int]] = {}
    for u in range(toks.size):
        by_parent.setdefault(int(par[u]), []).append(u)
    paths: dict[int, list[int]] = {-1: []}
    for u in range(toks.size):  # parents come first
        paths[u] = [*paths[int(par[u])], int(toks[u])]
    for parent, kids in by_parent.items():
        out[kids] = scorer.next_scores(paths[parent], context, toks[kids])
    return out


def check_same_vocab(lm_vocab: int, vocab_size: int) -> None:
    """A neural LM's check: its vocabulary of ``lm_vocab`` tokens must be the model's.

    Raises:
        RescorerError: naming both sizes and what to do.
    """
    if int(lm_vocab) != int(vocab_size):
        raise RescorerError(
            f"the neural rescorer's LM has a vocabulary of V = {lm_vocab} but the model has "
            f"V = {vocab_size}: it was trained on another tokenizer; train a rescorer on "
            "this model's tokenizer (blockdraft train --rescorer --tokenizer MODEL)")


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
