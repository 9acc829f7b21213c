"""Timing a rescorer as a decode loop calls it: the median latency of one step's ``rescore``.

Public surface:
    time_step(rescorer, lattice, context, repeats=20, p=1, new_tokens=1) -> float   median ms
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

import numpy as np

from blockdraft.core.checks import check_int, check_positive_int
from blockdraft.lattice.sausage import SausageLattice
from blockdraft.rescorers.base import Rescorer, RescorerError, as_context


def time_step(
    rescorer: Rescorer,
    lattice: SausageLattice,
    context: Sequence[int] | np.ndarray,
    repeats: int = 20,
    p: int = 1,
    new_tokens: int = 1,
) -> float:
    """Median wall-clock milliseconds of one decode step's ``rescore`` call.

    Before every timed call, an untimed call on ``context`` without its last ``new_tokens``
    tokens primes a caching rescorer as the previous decode step would, so the timed call
    pays for ``new_tokens`` new context positions plus the draft, not for the whole prefix
    (``new_tokens = 0``: the cache already holds the context). One untimed warm-up call
    precedes everything.

    Args:
        rescorer: any :class:`~blockdraft.rescorers.base.Rescorer`.
        lattice: the step's lattice.
        context: the committed prefix's token ids.
        repeats: timed calls (>= 1).
        p: drafts asked for.
        new_tokens: context tokens that are new to each timed call (>= 0).

    Returns:
        The median over ``repeats`` calls, in milliseconds.
    """
    repeats = check_positive_int(repeats, "repeats", RescorerError)
    new_tokens = check_int(new_tokens, "new_tokens", RescorerError, minimum=0)
    ctx = as_context(context)
    prime = ctx[: ctx.size - new_tokens] if 0 < new_tokens < ctx.size else None
    rescorer.rescore(lattice, ctx, p)
    times: list[float] = []
    for _ in range(repeats):
        if prime is not None:
            rescorer.rescore(lattice, prime, p)
        t0 = time.perf_counter()
        rescorer.rescore(lattice, ctx, p)
        times.append((time.perf_counter() - t0) * 1e3)
    return float(statistics.median(times))
