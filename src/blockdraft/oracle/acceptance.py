"""Exact acceptance and the oracle: how many drafted tokens a step accepts.

docs/definitions.md sec. 2 and 5. A step at position ``t`` (committed prefix
``x, y_1..y_t``; ``y_{t+1}`` is already certain) accepts, for a draft ``d = (d_1 .. d_h)``,
``n = #leading i >= 1 with d_{1+i} == y_{t+1+i}`` (a match past ``y_m`` is impossible). The
oracle of the top-``k`` lattice accepts the most any single draft from that lattice can.

Public surface:
    accept_lengths(drafts, greedy_ids, t) -> int64 [p]
        ``n`` of each draft at position ``t`` under exact acceptance.
    oracle_accept_lengths(example, k) -> int64 [m]
        ``n_oracle(t, k)`` at every position of one example (docs/definitions.md sec. 5).
    Oracle(k) -> Pipeline    the oracle drafter of the top-``k`` lattice (``p = 1``; offline)
"""

from __future__ import annotations

import numpy as np

from blockdraft.core.checks import check_positive_int
from blockdraft.drafts.oracle import Oracle as oracle_drafter
from blockdraft.drafts.pipeline import Pipeline
from blockdraft.oracle.errors import OracleError
from blockdraft.oracle.trace import TraceExample


def Oracle(k: int) -> Pipeline:  # noqa: N802
    """The oracle path of the top-``k`` lattice (docs/definitions.md sec. 5): at every step it
    accepts ``n_oracle(t, k)``, an upper bound on the ``n`` of any ``p = 1`` strategy drafting
    from that lattice *at that position* (the drafter :func:`blockdraft.drafts.Oracle`: it reads
    the reference, so it runs offline only).

    ``B_oracle(k)`` is, as in docs/definitions.md sec. 5 and Kim et al., ``B`` when every step
    uses that draft. It is not a strict upper bound on another strategy's ``B`` over a whole
    text: a strategy that accepts fewer tokens lands on a different position, which can happen
    to have a better lattice (random synthetic traces show this on about 2 in 1,000
    comparisons; see tests/oracle/test_oracle_simulate.py). Nor is ``B_oracle(k)`` monotone in
    ``k`` for the same reason, though ``n_oracle(t, k)`` is at every position.

    Raises:
        OracleError: ``k`` not a positive integer.
    """
    return oracle_drafter(check_positive_int(k, "Oracle.k", OracleError))


def accept_lengths(drafts: np.ndarray, greedy_ids: np.ndarray, t: int) -> np.ndarray:
    """Exact acceptance (docs/definitions.md sec. 2) of every draft at position ``t``.

    Args:
        drafts: int ``[p, h]``, column ``i`` is slot ``i + 1``.
        greedy_ids: int ``[m]``, ``y_1 .. y_m``.
        t: the position, ``0 <= t < m``.

    Returns:
        int64 ``[p]``: ``n = #leading i = 1..h-1 with d_{1+i} == y_{t+1+i}``; slots past
        ``y_m`` never match.
    """
    d = np.asarray(drafts)
    y = np.asarray(greedy_ids)
    span = min(d.shape[1] - 1, y.shape[0] - 1 - t)  # slots 2..1+span have a target in y
    if span <= 0:
        return np.zeros(d.shape[0], dtype=np.int64)
    eq = d[:, 1 : 1 + span] == y[t + 1 : t + 1 + span][None, :]  # (p, span)
    return np.cumprod(eq, axis=1).sum(axis=1).astype(np.int64)


def oracle_accept_lengths(example: TraceExample, k: int) -> np.ndarray:
    """``n_oracle(t, k)`` at every position of an example (docs/definitions.md sec. 5).

    Args:
        example: a trace example.
        k: lattice width, ``1 <= k <= K``.

    Returns:
        int64 ``[m]``: ``max{n : y_{t+1+i} in top-k of head 1+i at t, for all 1 <= i <= n}``.
    """
    m, h = example.m, example.h
    if h == 1:
        return np.zeros(m, dtype=np.int64)
    y = np.asarray(example.greedy_ids, dtype=np.int64)
    ypad = np.concatenate([y, np.full(h, -2, dtype=np.int64)])  # -2 never matches an id
    targets = ypad[np.arange(m)[:, None] + np.arange(1, h)[None, :]]  # (m, h-1): y_{t+1+i}
    topk = np.asarray(example.topk_ids[:, 1:, :k])  # (m, h-1, k)
    hit = (topk == targets[..., None]).any(axis=-1)  # (m, h-1)
    return np.cumprod(hit, axis=1).sum(axis=1).astype(np.int64)
