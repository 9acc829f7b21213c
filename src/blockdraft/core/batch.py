"""`DraftBatch`: p candidate drafts of h tokens with their scores.

A leaf type (numpy only), produced by every draft source (the lattice's own p-best, the n-gram
and neural rescorers, input-guided drafting) and consumed by the verifier, so the verifier
never needs to know where a draft came from.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from blockdraft.core.arrays import readonly
from blockdraft.core.errors import BlockdraftError


class DraftError(BlockdraftError, ValueError):
    """A draft batch or draft source was given inconsistent input."""


@dataclass(frozen=True, eq=False)
class DraftBatch:
    """p drafts of h tokens each, best first.

    Attributes:
        tokens: int64 ``[p, h]``; row ``j`` is draft ``j``, column ``i`` the token for slot
            ``i + 1`` (slot 1 is the certain token). Drafts of different lengths share one
            array: a row ends at its first ``-1`` (padding, never a token; :attr:`lengths`).
        scores: float64 ``[p]``, the total score, natural log:
            ``head_scores + alpha * lm_scores`` (docs/definitions.md sec. 4). Non-increasing.
        head_scores: float64 ``[p]``, the sum of the head log-probs of the chosen tokens.
        lm_scores: float64 ``[p]``, the unweighted LM log-prob of the draft given the context
            (zeros when no LM was used).
        alpha: the LM weight that produced ``scores``.
        requested: the ``p`` the caller asked for. A lattice with fewer paths than that
            returns all of them: then ``len(batch) < requested`` and ``exhausted`` is True.
        source: what produced the drafts (``"lattice"``, ``"ngram-exact"``, ``"ngram-wfst"``,
            ``"neural"``, ``"iad"``, ...), for reports only.
    """

    tokens: np.ndarray
    scores: np.ndarray
    head_scores: np.ndarray
    lm_scores: np.ndarray
    alpha: float = 0.0
    requested: int = 0
    source: str = "lattice"

    def __post_init__(self) -> None:
        tokens = np.asarray(self.tokens)
        if tokens.ndim != 2 or tokens.shape[0] == 0 or tokens.shape[1] == 0:
            raise DraftError(
                f"DraftBatch.tokens must be a non-empty [p, h] array, got shape {tokens.shape}"
            )
        if not np.issubdtype(tokens.dtype, np.integer):
            raise DraftError(f"DraftBatch.tokens must be integers, got dtype {tokens.dtype}")
        p = tokens.shape[0]
        fields = {}
        for name in ("scores", "head_scores", "lm_scores"):
            arr = np.asarray(getattr(self, name), dtype=np.float64)
            if arr.shape != (p,):
                raise DraftError(f"DraftBatch.{name} must have shape ({p},), got {arr.shape}")
            if np.isnan(arr).any():
                raise DraftError(f"DraftBatch.{name} contains NaN: {arr}")
            fields[name] = arr
        object.__setattr__(self, "tokens", readonly(tokens.astype(np.int64)))
        for name, arr in fields.items():
            object.__setattr__(self, name, readonly(arr))
        object.__setattr__(self, "alpha", float(self.alpha))
        object.__setattr__(self, "requested", int(self.requested) if self.requested else p)

    @property
    def p(self) -> int:
        """Number of drafts actually held."""
        return int(self.tokens.shape[0])

    @property
    def h(self) -> int:
        """Tokens per draft (block size)."""
        return int(self.tokens.shape[1])

    @property
    def lengths(self) -> np.ndarray:
        """int64 ``[p]``: tokens of each draft, up to its first ``-1`` (padding)."""
        pad = self.tokens < 0
        return np.where(pad.any(axis=1), pad.argmax(axis=1), self.h).astype(np.int64)

    @property
    def exhausted(self) -> bool:
        """True when the source had fewer than ``requested`` distinct drafts."""
        return self.p < self.requested

    def __len__(self) -> int:
        return self.p

    def top(self, p: int) -> DraftBatch:
        """The first ``p`` drafts (all of them if ``p`` is larger)."""
        return DraftBatch(
            tokens=self.tokens[:p],
            scores=self.scores[:p],
            head_scores=self.head_scores[:p],
            lm_scores=self.lm_scores[:p],
            alpha=self.alpha,
            requested=p,
            source=self.source,
        )
