"""The heads' shortlist: the draft vocabulary, counted on the base's own answers.

A Medusa head's projection onto all ``V`` tokens is most of its cost (``V x d`` multiply-adds
and the ``[V, d]`` matrix read per step); yet the tokens it must guess are the base's own next
tokens, whose distribution is very skewed. FR-Spec (Zhao et al. 2025) drafts over the most
frequent tokens only; EAGLE-3 over 32k of 128k. Here the frequencies are those of the base's
greedy answers in a distillation set (the text the heads are trained to predict), so the
shortlist covers what the model says, not what a corpus says.

Public surface:
    token_counts(answers, vocab_size) -> int64 [V]
    frequency_shortlist(counts, size, always=()) -> int64 [size] sorted ids
    coverage(counts, ids) -> float                 share of the counted tokens inside
    shortlist_record(...) -> dict                  what a heads folder records of it
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from blockdraft.training.errors import TrainingError


def token_counts(answers: Iterable[np.ndarray], vocab_size: int) -> np.ndarray:
    """How often each token id occurs in ``answers`` (int arrays): int64 ``[V]``.

    Raises:
        TrainingError: an id outside ``[0, vocab_size)``.
    """
    counts = np.zeros(vocab_size, dtype=np.int64)
    for answer in answers:
        ids = np.asarray(answer, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
            raise TrainingError(f"an answer holds token id {int(ids.max())} or "
                                f"{int(ids.min())}, outside the vocabulary [0, {vocab_size})")
        counts += np.bincount(ids, minlength=vocab_size)
    return counts


def frequency_shortlist(counts: np.ndarray, size: int, always: Sequence[int] = ()
                        ) -> np.ndarray:
    """The ``size`` most frequent ids (ties to the smaller id), ``always`` included (e.g. the
    end-of-sequence id), sorted ascending.

    Raises:
        TrainingError: ``size`` outside ``[len(always), V]``, or an ``always`` id outside the
            vocabulary.
    """
    counts = np.asarray(counts)
    v = counts.size
    must = sorted({int(t) for t in always})
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or not (
            max(1, len(must)) <= size <= v):
        raise TrainingError(f"a shortlist size must be an integer in [{max(1, len(must))}, {v}] "
                            f"(the vocabulary), got {size!r}")
    if must and (must[0] < 0 or must[-1] >= v):
        raise TrainingError(f"always-kept ids must lie in [0, {v}), got {must}")
    order = np.lexsort((np.arange(v), -counts))  # count desc, id asc
    rest = order[~np.isin(order, must)][: int(size) - len(must)]
    return np.sort(np.concatenate([np.asarray(must, dtype=np.int64), rest.astype(np.int64)]))


def coverage(counts: np.ndarray, ids: np.ndarray) -> float:
    """The share of the counted tokens whose id is in ``ids`` (1.0 when nothing was counted)."""
    total = int(np.asarray(counts).sum())
    return float(np.asarray(counts)[ids].sum() / total) if total else 1.0


def shortlist_record(counts: np.ndarray, ids: np.ndarray, counted_on: str,
                     **extra: Any) -> dict[str, Any]:
    """What a heads folder records of a shortlist: what it was counted on (a distillation
    set's folder key), the tokens counted, the coverage, and ``extra`` (e.g. the command)."""
    return {"counted_on": counted_on, "tokens": int(np.asarray(counts).sum()),
            "coverage": round(coverage(counts, ids), 6), **extra}
