"""Latency of p-best lattice rescoring, backends side by side (Kim et al. Tables 12 and 13).

One run times every backend on the same lattices and contexts, so the columns compare like
with like, and counts how often the approximate backends return exactly the exact backend's
drafts (same strings in the same order).

Times are wall-clock medians (and 90th percentiles) of single ``rescore`` calls, in
milliseconds, after a few warm-up calls; lattices are generated before timing starts.

The harness of ``blockdraft bench rescore`` and ``benchmarks/bench_rescore.py``; its lattices
come from :mod:`blockdraft.lattice.synthetic`.

Public surface:
    LatencyRow                                 one backend's timings at one (h, k, p)
    bench_rescore(backends, source, kind=..., hs=..., ks=..., ps=..., n=100) -> [LatencyRow]
    LatticeSource                              ``(rng, h, k) -> (lattice, context)``
    hits_source(heldout, unigram), random_source(vocab_size)   two lattice sources
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from blockdraft.core.batch import DraftBatch
from blockdraft.lattice.sausage import SausageLattice
from blockdraft.rescorers.base import Rescorer, RescorerError, agreement

WARMUP = 3


@dataclass(frozen=True)
class LatencyRow:
    """Timings of one backend at one (h, k, p).

    Attributes:
        kind: lattice kind (``"hits"``, ``"random"``, ...).
        h, k, p: slots, arcs per slot, drafts asked for.
        backend: backend name.
        n: lattices timed.
        median_ms, p90_ms, mean_ms: latency of one ``rescore`` call (ms).
        agreement: fraction of lattices whose drafts equal the reference backend's (same rows,
            same order); 1.0 for the reference itself; None when no reference ran.
        states_per_slot: mean LM states kept per slot (exact backend only, else None).
        lookups: mean LM lookups per lattice (exact backend only, else None).
    """

    kind: str
    h: int
    k: int
    p: int
    backend: str
    n: int
    median_ms: float
    p90_ms: float
    mean_ms: float
    agreement: float | None
    states_per_slot: float | None
    lookups: float | None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


LatticeSource = Callable[[np.random.Generator, int, int], tuple[SausageLattice, np.ndarray]]
"""``(rng, h, k) -> (lattice, context)``: one benchmark lattice and its LM context."""


def bench_rescore(
    backends: Mapping[str, Rescorer],
    source: LatticeSource,
    *,
    kind: str,
    hs: Sequence[int],
    ks: Sequence[int],
    ps: Sequence[int],
    n: int = 100,
    seed: int = 0,
    reference: str | None = "exact",
    progress: Callable[[Iterable[object]], Iterable[object]] | None = None,
) -> list[LatencyRow]:
    """Time every backend on the same ``n`` lattices for every (h, k) and p.

    Args:
        backends: name -> rescorer (e.g. ``{"exact": ..., "wfst": ...}``).
        source: makes one lattice and its context.
        kind: the lattice kind, recorded in each row.
        hs, ks, ps: the grid.
        n: lattices per (h, k).
        seed: the generator seed (lattices depend on nothing else).
        reference: the backend others are compared with (None: no agreement column).
        progress: wraps the (h, k) loop, e.g. a rich/tqdm progress bar.
    """
    rows: list[LatencyRow] = []
    grid: list[tuple[int, int]] = [(int(h), int(k)) for h in hs for k in ks]
    it: Iterable[Any] = progress(grid) if progress else grid
    for h, k in it:
        rng = np.random.default_rng([seed, h, k])
        cases = [source(rng, h, k) for _ in range(n)]
        for p in ps:
            ref_out: list[DraftBatch] | None = None
            order = sorted(backends, key=lambda b: b != reference)
            for name in order:
                r = backends[name]
                for lat, ctx in cases[:WARMUP]:
                    r.rescore(lat, ctx, p)
                times, outs, states, lookups = [], [], [], []
                for lat, ctx in cases:
                    t0 = time.perf_counter()
                    out = r.rescore(lat, ctx, p)
                    times.append(time.perf_counter() - t0)
                    outs.append(out)
                    stats = getattr(r, "last_stats", None)
                    if stats is not None:
                        states.append(float(np.mean(stats.states)))
                        lookups.append(float(np.sum(stats.lookups)))
                agree: float | None = None
                if name == reference:
                    ref_out = outs
                    agree = 1.0
                elif ref_out is not None:
                    agree = float(np.mean([agreement(a, b) for a, b in
                                           zip(ref_out, outs, strict=True)]))
                ms = np.array(times) * 1e3
                rows.append(LatencyRow(
                    kind=kind, h=h, k=k, p=p, backend=name, n=n,
                    median_ms=float(np.median(ms)), p90_ms=float(np.percentile(ms, 90)),
                    mean_ms=float(np.mean(ms)), agreement=agree,
                    states_per_slot=float(np.mean(states)) if states else None,
                    lookups=float(np.mean(lookups)) if lookups else None,
                ))
    return rows


def hits_source(heldout: np.ndarray, unigram: np.ndarray, context_len: int = 16) -> LatticeSource:
    """Hits-heavy lattices at random positions of held-out token ids (slot 1 certain)."""
    from blockdraft.lattice.synthetic import hits_heavy

    heldout = np.asarray(heldout, dtype=np.int64)

    def make(rng: np.random.Generator, h: int, k: int) -> tuple[SausageLattice, np.ndarray]:
        if heldout.size < context_len + h + 1:
            raise RescorerError(f"held-out text has {heldout.size} tokens; need more than "
                                f"{context_len + h} (a context and a lattice of h = {h})")
        pos = int(rng.integers(context_len, heldout.size - h))
        lat = hits_heavy(rng, heldout[pos:pos + h], k, unigram, certain_first=True)
        return lat, heldout[pos - context_len:pos]

    return make


def random_source(vocab_size: int, context_len: int = 16) -> LatticeSource:
    """Lattices of uniformly random token ids with random contexts (slot 1 certain)."""
    from blockdraft.lattice.synthetic import random_tokens

    def make(rng: np.random.Generator, h: int, k: int) -> tuple[SausageLattice, np.ndarray]:
        lat = random_tokens(rng, h, k, vocab_size, certain_first=True)
        return lat, rng.integers(0, vocab_size, size=context_len)

    return make
