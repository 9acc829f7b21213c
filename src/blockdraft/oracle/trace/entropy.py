"""Entropy of a head's next-token distribution, as stored in a trace (nats).

Public surface:
    head_entropy_from_logits(logits [..., V]) -> float64 [...]
"""

from __future__ import annotations

import numpy as np

from blockdraft.lattice.sausage import log_softmax


def head_entropy_from_logits(logits: np.ndarray) -> np.ndarray:
    """Entropy (nats, float64) of ``softmax(logits)`` over the last axis.

    Args:
        logits: float ``[..., V]``; ``-inf`` masks a token (it contributes 0).

    Returns:
        float64 ``[...]``.
    """
    logp = log_softmax(logits)
    p = np.exp(logp)
    with np.errstate(invalid="ignore"):
        terms = np.where(p > 0, p * logp, 0.0)
    return np.asarray(-np.sum(terms, axis=-1))
