"""The context LM on the WFST backend: n-best re-ranking (approximate).

The context LM (:mod:`blockdraft.rescorers.ngram.context`) is interpolated with the static LM
as probabilities, ``lam * P_ctx + (1 - lam) * P_kenlm``: a sum, which a tropical-semiring WFST
search cannot take inside its shortest-path search (it keeps the best derivation, a max). So
the WFST backend does the next best thing: its top :func:`nbest_size` ``(p)`` distinct
strings under the static LM alone are re-scored exactly with the interpolated LM (KenLM's own
per-token scores, the context LM's estimates) and re-ranked, and the best ``p`` returned.

Approximate, like the WFST backend itself: a draft outside the WFST's n-best list (one that
the context LM lifts from far down the static ranking) is never found. When the exact answer
is in that list, the result equals the exact backend's (up to ties). Scores of the returned
drafts are exact (``head + alpha * ln P_interpolated``).

Public surface:
    nbest_size(p) -> int       ``max(4 p, 16)``: candidates taken from the WFST
    rerank_nbest(wfst, lattice, ctx, p, lm_scores) -> DraftBatch
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from blockdraft.core.batch import DraftBatch
from blockdraft.lattice.sausage import SausageLattice
from blockdraft.rescorers.ngram.wfst.rescorer import WfstRescorer

NBEST_FACTOR = 4
NBEST_MIN = 16


def nbest_size(p: int) -> int:
    """Candidates the WFST search returns for ``p`` re-ranked drafts: ``max(4 p, 16)``."""
    return max(NBEST_FACTOR * p, NBEST_MIN)


def rerank_nbest(
    wfst: WfstRescorer,
    lattice: SausageLattice,
    ctx: np.ndarray,
    p: int,
    lm_scores: Callable[[np.ndarray], np.ndarray],
) -> DraftBatch:
    """The ``p`` best of the WFST's :func:`nbest_size` ``(p)`` distinct drafts, re-ranked.

    Args:
        wfst: the WFST rescorer (its ``alpha`` weights the LM).
        lattice: the step's lattice.
        ctx: the committed prefix, validated (int64 ids).
        p: drafts wanted, ``>= 1``.
        lm_scores: ``tokens [n, h] -> float64 [n]``, the exact LM log-prob (nats) of each
            draft given the context (the interpolated LM).

    Returns:
        A :class:`DraftBatch` (``source="ngram-wfst"``, ``requested=p``): ``head_scores`` from
        the lattice, ``lm_scores`` from ``lm_scores``, ``scores = head + alpha * lm`` (just
        ``head`` when ``alpha = 0``), best first; among equal scores the WFST's order.
    """
    cands = wfst.rescore_checked(lattice, ctx, nbest_size(p))
    lm = np.asarray(lm_scores(cands.tokens), dtype=np.float64)
    head = cands.head_scores
    alpha = wfst.alpha
    total = head + alpha * lm if alpha else head.copy()  # never 0 * -inf
    order = np.argsort(-total, kind="stable")[:p]
    return DraftBatch(
        tokens=cands.tokens[order], scores=total[order], head_scores=head[order],
        lm_scores=lm[order], alpha=alpha, requested=p, source="ngram-wfst",
    )
