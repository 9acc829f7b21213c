"""Per-depth, per-rank head accuracies from a trace: the input of Medusa's calibrated tree.

See docs/definitions.md sec. 11 (builders) and ``blockdraft.drafts.calibrated_choices``.

Public surface:
    rank_accuracies(trace, k, examples=None) -> float64 [h - 1, k]
    fit_acceptance(trace, k=8, lm=None, ...) -> AcceptanceTables   the cost-aware tree's
                                                 acceptance rates by evidence
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from blockdraft.core.checks import check_positive_int
from blockdraft.drafts.calibration import HEAD_EDGES, LM_EDGES, AcceptanceTables, bin_index
from blockdraft.drafts.lookup import lookups
from blockdraft.oracle.errors import OracleError
from blockdraft.oracle.trace import Trace


def _indices(trace: Trace, examples: Iterable[int] | None) -> list[int]:
    """The trace indices to count (all by default), each checked.

    Raises:
        OracleError: an index outside the trace.
    """
    out = list(range(trace.num_examples)) if examples is None else [int(e) for e in examples]
    for e in out:
        if not 0 <= e < trace.num_examples:
            raise OracleError(f"example index {e} is out of range for a trace of "
                              f"{trace.num_examples} examples")
    return out


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
    for e in _indices(trace, examples):
        ex = trace[e]
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


def _smooth(hits: np.ndarray, counts: np.ndarray, base: np.ndarray, prior: float
            ) -> np.ndarray:
    """``(hits + prior * base) / (counts + prior)``: a rate shrunk towards ``base`` where few
    were counted (a Beta prior of strength ``prior``)."""
    return (hits + prior * base) / (counts + prior)


def fit_acceptance(trace: Trace, k: int = 8, lm: Any = None, copy_length: int = 16,
                   max_match: int = 4, copies: int = 3, prior: float = 20.0,
                   examples: Iterable[int] | None = None, signature: str = "",
                   progress: Any = None) -> AcceptanceTables:
    """Acceptance tables (:class:`~blockdraft.drafts.calibration.AcceptanceTables`) measured on
    a trace of held-out training answers (never the evaluation prompts).

    At every position ``t`` and depth ``d`` the parent path is the greedy one (``y_{t+1} ..
    y_{t+d}``), so each of slot ``d + 1``'s top-``k`` tokens is counted as accepted when it
    is ``y_{t+1+d}``: the rate a tree node of that evidence has once its parent is accepted.
    The LM log-prob of a token is ``lm.next_scores(parent path, context, tokens)``. Each of
    the ``copies`` prompt-lookup copies (:func:`~blockdraft.drafts.lookup.lookups`: ranked
    matches of 1..``max_match`` tokens with distinct continuations, their next
    ``copy_length`` tokens) counts its offset ``j`` only while offsets ``< j`` were right.
    Rates are shrunk towards their coarser margin (the LM bins' towards the head bin's, that
    towards the depth's) with a Beta prior of strength ``prior``.

    Args:
        trace: a trace whose ``K >= k``.
        k: lattice arcs per slot counted (the drafter's ``k``).
        lm: a path scorer (``next_scores``); None fills the LM table with the marginal.
        copy_length, max_match, copies: the lookup copies' shape (the drafter's).
        prior: the shrinkage strength (pseudo-counts).
        examples: trace indices to count (default all).
        signature: recorded with the tables.
        progress: called with ``(done, total)`` positions now and then (None: silent).

    Raises:
        OracleError: ``k`` outside ``[1, K]``, a trace with one head, a bad index.
    """
    k = check_positive_int(k, "k", OracleError)
    if k > trace.K:
        raise OracleError(f"k = {k} exceeds the trace's K = {trace.K}; re-trace with K >= {k}")
    if trace.h < 2:
        raise OracleError("acceptance tables need a trace with h >= 2 heads")
    depths = trace.h - 1
    nb_h, nb_l = len(HEAD_EDGES) + 1, len(LM_EDGES) + 1
    hits = np.zeros((depths, nb_h, nb_l))
    counts = np.zeros((depths, nb_h, nb_l))
    copy_hits = np.zeros((copies, max_match, copy_length))
    copy_counts = np.zeros((copies, max_match, copy_length))
    indices = _indices(trace, examples)
    total = sum(trace[e].m for e in indices)
    done = 0
    for e in indices:
        ex = trace[e]
        y = np.asarray(ex.greedy_ids, dtype=np.int64)
        text = np.concatenate([np.asarray(ex.prompt_ids, dtype=np.int64), y])
        n_prompt = int(ex.prompt_ids.shape[0])
        ids = np.asarray(ex.topk_ids[:, :, :k], dtype=np.int64)
        lps = np.asarray(ex.topk_logprobs[:, :, :k], dtype=np.float64)
        for t in range(ex.m):
            ctx = text[: n_prompt + t]
            for d in range(1, min(trace.h, ex.m - t)):
                cands, lp = ids[t, d], lps[t, d]
                real = cands >= 0
                cands, lp = cands[real], lp[real]
                hb = bin_index(lp, HEAD_EDGES)
                lb = (np.zeros(hb.shape, dtype=np.int64) if lm is None else
                      bin_index(lm.next_scores(y[t: t + d], ctx, cands), LM_EDGES))
                np.add.at(counts[d - 1], (hb, lb), 1.0)
                np.add.at(hits[d - 1], (hb, lb), (cands == y[t + d]).astype(np.float64))
            known = text[: n_prompt + t + 1]  # the committed text and the certain token
            for rank, (start, m) in enumerate(lookups(known, 1, max_match, copies)):
                row = min(m, max_match) - 1
                for j, tok in enumerate(known[start: start + copy_length].tolist(), start=1):
                    if t + j >= ex.m:
                        break
                    copy_counts[rank, row, j - 1] += 1
                    if tok != y[t + j]:
                        break
                    copy_hits[rank, row, j - 1] += 1
        done += ex.m
        if progress is not None:
            progress(done, total)
    by_depth = hits.sum(axis=(1, 2)) / np.maximum(counts.sum(axis=(1, 2)), 1)  # (depths,)
    marginal = _smooth(hits.sum(-1), counts.sum(-1), by_depth[:, None], prior)
    heads = (np.broadcast_to(marginal[..., None], hits.shape).copy() if lm is None
             else _smooth(hits, counts, marginal[..., None], prior))
    by_rank = copy_hits.sum(axis=(1, 2)) / np.maximum(copy_counts.sum(axis=(1, 2)), 1)
    copy = _smooth(copy_hits, copy_counts, np.broadcast_to(by_rank[:, None, None],
                                                            copy_hits.shape), prior)
    return AcceptanceTables(heads=heads, marginal=marginal, copy=copy, signature=signature)
