"""Synthetic traces: random heads that find the truth at a controlled rank (tests, the demo).

Public surface:
    synthetic_trace(path, *, num_examples=8, h=4, K=8, V=64, ...) -> Trace
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from blockdraft.core.checks import check_positive_int
from blockdraft.oracle.errors import OracleError
from blockdraft.oracle.trace.reader import Trace
from blockdraft.oracle.trace.writer import TraceWriter


def synthetic_trace(
    path: str | os.PathLike[str],
    *,
    num_examples: int = 8,
    h: int = 4,
    K: int = 8,
    V: int = 64,
    prompt_len: tuple[int, int] = (1, 6),
    length: tuple[int, int] = (4, 40),
    accuracy: Sequence[float] | None = None,
    repeat: float = 0.0,
    seed: int = 0,
    signature: Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> Trace:
    """A random trace whose heads find the truth at a controlled rank (tests and the demo).

    Greedy tokens are uniform over ``[0, V)``. At position ``t`` head 1 ranks ``y_{t+1}`` first
    (it is the greedy head); head ``i >= 2`` ranks its target ``y_{t+i}`` at
    ``r = min(G - 1, V - 1)`` with ``G ~ Geometric(accuracy[i-1])``, so it is the top-1 with
    probability ``accuracy[i-1]`` and falls off geometrically below. Targets past ``y_m`` are
    ranked at random. Logits are sorted Gaussians scaled by ``4 / (1 + i/2)`` so later heads
    are flatter (higher entropy), as in Kim et al. Fig. 3.

    Args:
        path: the trace directory.
        num_examples: examples, ``>= 1``.
        h: heads; K: stored top-K; V: vocabulary size.
        prompt_len: inclusive range of prompt lengths.
        length: inclusive range of greedy lengths ``m`` (``>= 1``).
        accuracy: top-1 probability of heads ``2..h`` (``h - 1`` values in ``(0, 1]``);
            default ``0.8 * 0.8 ** (i - 2)`` for head ``i``.
        repeat: when head ``i >= 3`` misses, the probability that its top-1 copies head
            ``i - 1``'s top-1 (the heads' consecutive repetition, Kim Table 3).
        seed: random seed.
        signature: extra signature fields; ``data`` defaults to ``"synthetic(seed=...)"``.
        overwrite: see :class:`TraceWriter`.

    Returns:
        The opened trace.
    """
    num_examples = check_positive_int(num_examples, "num_examples", OracleError)
    if accuracy is None:
        acc = [0.8 * 0.8 ** (i - 2) for i in range(2, h + 1)]
    else:
        acc = [float(a) for a in accuracy]
        if len(acc) != h - 1 or not all(0.0 < a <= 1.0 for a in acc):
            raise OracleError(
                f"accuracy must give h - 1 = {h - 1} probabilities in (0, 1], got {accuracy!r}"
            )
    if not 0.0 <= repeat <= 1.0:
        raise OracleError(f"repeat must be a probability in [0, 1], got {repeat!r}")
    lo, hi = length
    if lo < 1 or hi < lo:
        raise OracleError(f"length must be an inclusive range with 1 <= lo <= hi, got {length}")
    plo, phi = prompt_len
    if plo < 0 or phi < plo:
        raise OracleError(f"prompt_len must be an inclusive range >= 0, got {prompt_len}")
    rng = np.random.default_rng(seed)
    sig = {"model": "synthetic", "data": f"synthetic(seed={seed})", **(signature or {})}
    with TraceWriter(path, h=h, K=K, V=V, signature=sig, overwrite=overwrite) as writer:
        for _ in range(num_examples):
            m = int(rng.integers(lo, hi + 1))
            prompt = rng.integers(0, V, size=int(rng.integers(plo, phi + 1)))
            greedy = rng.integers(0, V, size=m)
            logits = np.empty((m, h, V))  # (m, h, V)
            for t in range(m):
                prev_top: int | None = None
                for i in range(h):  # head i + 1 predicts y_{t+i+1} = greedy[t + i]
                    values = np.sort(rng.standard_normal(V))[::-1] * (4.0 / (1 + 0.5 * i))
                    target = int(greedy[t + i]) if t + i < m else None
                    if target is None:
                        order = rng.permutation(V)
                    else:
                        rank = 0 if i == 0 else min(int(rng.geometric(acc[i - 1])) - 1, V - 1)
                        others = rng.permutation(V)
                        others = others[others != target]
                        if (
                            rank > 0 and i >= 2 and prev_top is not None
                            and prev_top != target and rng.random() < repeat
                        ):
                            others = np.concatenate([[prev_top], others[others != prev_top]])
                        order = np.insert(others, rank, target)
                    logits[t, i, order] = values
                    prev_top = int(order[0])
            writer.add_logits(prompt, greedy, logits)
    return Trace.open(path)
