"""Per-depth, per-rank head accuracies from a trace: the input of Medusa's calibrated tree.

See docs/definitions.md sec. 11 (builders) and ``blockdraft.drafts.calibrated_choices``.

Public surface:
    rank_accuracies(trace, k, examples=None) -> float64 [h - 1, k]
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from blockdraft.core.checks import check_positive_int
from blockdraft.oracle.errors import OracleError
from blockdraft.oracle.trace import Trace


def rank_accuracies(trace: Trace, k: int, examples: Iterable[int] | None = None) -> np.ndarray:
    """How often each rank of each extra head holds the greedy token (held-out data).

    Args:
        trace: a trace (measure on examples not used for the reported numbers).
        k: ranks per head, ``1 <= k <= trace.K``.
        examples: trace indices to count; all by default.

    Returns:
        float64 ``[h - 1, k]``: ``acc[d - 1, r]`` is the fraction of positions ``t`` (with
        ``y_{t+1+d}`` inside the example) where head ``d + 1``'s rank-``r`` token (0-based) at
        ``t`` is ``y_{t+1+d}``: the probability that a tree node of depth ``d`` and rank ``r``
        holds the right token, as Medusa measures it (every position counted, not only those
        where the shallower heads were right). Zeros for a head with no counted position.

    Raises:
        OracleError: on ``k`` outside ``[1, K]``, a trace with one head, or a bad index.
    """
    k = check_positive_int(k, "k", OracleError)
    if k > trace.K:
        raise OracleError(f"k = {k} exceeds the trace's K = {trace.K}; re-trace with K >= {k}")
    if trace.h < 2:
        raise OracleError("rank accuracies need a trace with h >= 2 heads")
    hits = np.zeros((trace.h - 1, k), dtype=np.int64)
    counts = np.zeros(trace.h - 1, dtype=np.int64)
    indices = range(trace.num_examples) if examples is None else examples
    for e in indices:
        if not 0 <= int(e) < trace.num_examples:
            raise OracleError(f"example index {e} is out of range for a trace of "
                              f"{trace.num_examples} examples")
        ex = trace[int(e)]
        y = np.asarray(ex.greedy_ids, dtype=np.int64)
        topk = np.asarray(ex.topk_ids[:, :, :k], dtype=np.int64)  # (m, h, k)
        for d in range(1, trace.h):  # depth d: head d + 1 guesses y_{t+1+d} = y[t + d]
            span = ex.m - d
            if span <= 0:
                continue
            target = y[d:]  # (span,)
            hits[d - 1] += (topk[:span, d, :] == target[:, None]).sum(axis=0)
            counts[d - 1] += span
    return hits / np.maximum(counts, 1)[:, None]
