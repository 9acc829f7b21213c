"""SIMULATED head outputs, for demos and tests when no trained model is at hand.

These are not a model's heads: at every position the true next tokens of a text are placed at
random ranks of otherwise random logits. Head 1 always ranks the true token first (it stands for
the base model, whose greedy output the text is taken to be); head ``i >= 2`` ranks it first
with probability ``top1[i]``, else at a uniformly random rank in ``2..K`` with probability
``in_top_k``, else somewhere below the top ``K``. The other logits are the log unigram
frequencies plus Gumbel noise, so distractors look like frequent tokens (as in the
"hits-heavy" lattices of the benchmarks). Everything reporting on such data must say
"simulated heads".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SimulatedHeads:
    """Settings of the simulated heads.

    Attributes:
        h: number of heads.
        top1: probability that head i (1-based, i >= 2) ranks the true token first; one value
            per extra head (length h - 1). Default: ``0.8 * 0.85**(i - 2)``.
        in_top_k: probability that a head that misses rank 1 still holds the true token within
            its top ``k``.
        k: the top-k the ranks refer to.
        noise: scale of the Gumbel noise on the distractor logits (nats).
    """

    h: int = 8
    top1: Sequence[float] | None = None
    in_top_k: float = 0.7
    k: int = 16
    noise: float = 1.0

    def top1_probs(self) -> np.ndarray:
        if self.top1 is not None:
            t = np.asarray(self.top1, dtype=np.float64)
            if t.shape != (self.h - 1,):
                raise ValueError(f"top1 needs {self.h - 1} values (heads 2..h), got {t.shape}")
            return t
        return 0.8 * 0.85 ** np.arange(self.h - 1)


def simulate_head_logits(
    rng: np.random.Generator,
    tokens: np.ndarray,
    unigram: np.ndarray,
    sim: SimulatedHeads,
) -> np.ndarray:
    """Simulated head logits at every position of a token sequence.

    Args:
        rng: the only source of randomness.
        tokens: int ``[m]``, the "greedy" continuation ``y_1..y_m``.
        unigram: float ``[V]``, token frequencies (sums to 1; zeros allowed).
        sim: the settings.

    Returns:
        float32 ``[m, h, V]``: row ``t`` (0-based) holds the heads' logits after ``y_1..y_t``
        (``t = 0``: after the prompt), head ``i`` targeting ``y_{t+i}``; targets past the end
        are random tokens.
    """
    tokens = np.asarray(tokens, dtype=np.int64)
    m, v, h = tokens.size, unigram.size, sim.h
    log_uni = np.log(np.maximum(unigram, 1e-12))
    top1 = sim.top1_probs()
    out = np.empty((m, h, v), dtype=np.float32)
    for t in range(m):
        base = log_uni[None, :] + sim.noise * rng.gumbel(size=(h, v))
        for i in range(h):
            target = int(tokens[t + i]) if t + i < m else int(rng.integers(v))
            row = base[i]
            if i == 0 or rng.random() < top1[i - 1]:
                rank = 0
            elif rng.random() < sim.in_top_k:
                rank = int(rng.integers(1, min(sim.k, v)))
            else:
                rank = int(rng.integers(min(sim.k, v), v))
            row[target] = -np.inf
            order = np.sort(row)[::-1]
            if rank == 0:
                row[target] = order[0] + 1.0
            else:
                row[target] = 0.5 * (order[rank - 1] + order[rank])
            out[t, i] = row
    return out
