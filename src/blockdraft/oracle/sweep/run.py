"""A sweep: every configuration of a grid simulated over one trace, on any engine, its results
cached per configuration key.

Public surface:
    sweep(trace, settings, *, engine=Engine(), cache=None, examples=None, shards=None,
          threads=1, progress=None) -> SweepResult
    check_settings(trace, settings) -> {lm path: digest}   what :func:`sweep` checks first
"""

from __future__ import annotations

import math
import os
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np

from blockdraft.oracle.errors import OracleError
from blockdraft.oracle.simulate import TraceMismatchWarning
from blockdraft.oracle.sweep.cache import ResultCache, config_key, file_digest, trace_digest
from blockdraft.oracle.sweep.engines import Engine, run_tasks
from blockdraft.oracle.sweep.results import SweepResult, SweepRow, row_of
from blockdraft.oracle.sweep.settings import Setting
from blockdraft.oracle.sweep.tasks import ShardOutcome, Task, merge, plan_shards
from blockdraft.oracle.trace import Trace

POSITIONS_PER_SHARD = 1000
"""A configuration is split into shards of about this many trace positions (8 at most)."""
MAX_SHARDS = 8


def check_settings(trace: Trace, settings: Sequence[Setting]) -> dict[str, str]:
    """Check every setting against the trace before any work: the lattice widths against its
    ``K``, each rescorer's file against its vocabulary (an n-gram LM's tokenizer record or
    largest id, a RescorerLM's ``V``). Returns each rescorer file's digest, by path.

    Raises:
        OracleError: naming the setting and what is wrong.
    """
    if not settings:
        raise OracleError("a sweep needs at least one setting")
    digests: dict[str, str] = {}
    for s in settings:
        if s.tree == "medusa" and max(map(len, s.medusa_choices())) > trace.h - 1:
            raise OracleError(f"{s.label!r}: its first {s.budget - 1} Medusa paths reach depth "
                              f"{max(map(len, s.medusa_choices()))}, but the trace has "
                              f"{trace.h - 1} heads after the certain token; use a smaller "
                              "budget")
        if s.k > trace.K:
            raise OracleError(f"{s.label!r} reads k = {s.k} arcs per slot, but the trace keeps "
                              f"the top K = {trace.K}; use k <= {trace.K} or re-trace with a "
                              "larger --K")
        if not s.rescorer or s.lm in digests:
            continue
        digests[s.lm] = file_digest(s.lm)
        if s.rescorer == "ngram":
            from blockdraft.rescorers.ngram import NgramLM

            NgramLM(s.lm).check_vocab(trace.V)
        else:
            from blockdraft.models import read_model_config

            _, config, _ = read_model_config(Path(s.lm))
            if config.vocab_size != trace.V or config.h != 1:
                raise OracleError(f"the neural LM {s.lm} (V = {config.vocab_size}, h = "
                                  f"{config.h}) is not a RescorerLM over the "
                                  f"trace's vocabulary (V = {trace.V})")
    return digests


def _examples(trace: Trace, examples: Iterable[int] | None) -> np.ndarray:
    n = trace.num_examples
    idx = np.arange(n, dtype=np.int64) if examples is None else np.asarray(list(examples))
    if idx.ndim != 1 or idx.size == 0 or idx.dtype.kind not in "iu":
        raise OracleError(f"examples must be a non-empty list of trace indices, got {examples!r}")
    bad = (idx < 0) | (idx >= n)
    if bad.any():
        raise OracleError(f"example {int(idx[bad][0])} is out of range for a trace of {n} "
                          "examples")
    return np.unique(idx.astype(np.int64))


def _show(outcome: ShardOutcome, shown: set[object]) -> None:
    """What a worker would have shown (its warnings, its native code's stderr), here, each
    once per sweep: the same lines whichever engine ran the task."""
    import sys

    if outcome.stderr and outcome.stderr not in shown:
        shown.add(outcome.stderr)
        sys.stderr.write(outcome.stderr)
        sys.stderr.flush()
    for category, message in outcome.warnings:
        if (category, message) not in shown:
            shown.add((category, message))
            warnings.warn(message, category, stacklevel=4)


def _cost_estimate(s: Setting) -> float:
    """A rough relative cost of a configuration: the dearest go first, so the last tasks of a
    parallel sweep are short ones."""
    lm = {"": 1.0, "ngram": 4.0, "neural": 40.0}[s.rescorer]
    if s.strategy == "tree":
        return s.budget / 4 * lm
    if s.strategy in ("heads", "combined"):
        return s.p * lm + (1.0 if s.strategy == "combined" else 0.0)
    return 1.0


def sweep(
    trace: str | os.PathLike[str],
    settings: Sequence[Setting],
    *,
    engine: Engine | None = None,
    cache: ResultCache | None = None,
    examples: Iterable[int] | None = None,
    shards: int | None = None,
    threads: int = 1,
    progress: Callable[[int], None] | None = None,
) -> SweepResult:
    """Simulate every setting over the trace (exact verification, docs/definitions.md sec. 6).

    Args:
        trace: the trace folder (opened and checked here, once).
        settings: the configurations (:meth:`~blockdraft.oracle.sweep.settings.Grid.expand`).
        engine: where the tasks run (default: serially, here).
        cache: where results are kept by configuration key (read first, written as each
            configuration completes, so an interrupted sweep goes on where it stopped); None
            keeps nothing.
        examples: trace indices to simulate (default all).
        shards: pieces each configuration is split into (default: one per
            :data:`POSITIONS_PER_SHARD` positions, at most :data:`MAX_SHARDS`); the results
            do not depend on it.
        threads: torch threads of a neural rescorer, per worker.
        progress: called with the positions each finished piece covered (a configuration
            covers every simulated position once; cached ones count at the start).

    Returns:
        One row per setting, in order.

    Raises:
        OracleError: a bad input (checked before any work), or a failed task.
        KeyboardInterrupt: passed on; what completed is in the cache.
    """
    start = time.perf_counter()
    engine = engine or Engine()
    path = str(trace)
    tr = Trace.open(path)
    digest = trace_digest(path)
    lm_digests = check_settings(tr, settings)
    idx = _examples(tr, examples)
    lengths = tr.lengths
    positions = int(lengths[idx].sum())
    count = shards or min(MAX_SHARDS, max(1, math.ceil(positions / POSITIONS_PER_SHARD)))
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise OracleError(f"shards must be an integer >= 1, got {shards!r}")
    keys = [config_key(digest, s, lm_digests.get(s.lm), idx.tolist()) for s in settings]
    rows: list[SweepRow | None] = [None] * len(settings)
    for i, key in enumerate(keys):
        entry = cache.get(key) if cache is not None else None
        if entry is not None:
            row = SweepRow.from_dict(entry["row"], cached=True)
            if row.setting == settings[i] or row.setting.to_dict() == settings[i].to_dict():
                rows[i] = row
                if progress:
                    progress(positions)
    pieces = plan_shards(lengths, idx, count)
    order = sorted((i for i, r in enumerate(rows) if r is None),
                   key=lambda i: -_cost_estimate(settings[i]))
    tasks: list[Task] = []
    for i in order:
        for piece in pieces:
            tasks.append(Task(index=len(tasks), config=i, setting=settings[i], trace=path,
                              trace_digest=digest, examples=tuple(piece.tolist()),
                              lm_digest=lm_digests.get(settings[i].lm), threads=threads))
    mis_e, mis_t = tr.head1_mismatches()
    keep = np.isin(mis_e, idx)
    mismatches = (mis_e[keep], mis_t[keep])
    parts: dict[int, dict[int, ShardOutcome]] = {}
    shown: set[object] = set()

    def done(outcome: ShardOutcome) -> None:
        _show(outcome, shown)
        task = tasks[outcome.index]
        mine = parts.setdefault(task.config, {})
        mine[outcome.index] = outcome
        if progress:
            progress(int(lengths[np.asarray(task.examples)].sum()))
        if len(mine) < len(pieces):
            return
        s = settings[task.config]
        ordered = [mine[j] for j in sorted(mine)]  # tasks of a config: in example order
        result = merge(ordered, s.label, s.k, tr.h, tr.signature, mismatches)
        row = row_of(s, keys[task.config], result, sum(o.work_s for o in ordered))
        if cache is not None:
            cache.put(keys[task.config], {"trace": digest, "row": row.to_dict()})
        rows[task.config] = row
        del parts[task.config]

    run_tasks(engine, tasks, done)
    if mismatches[0].size:
        warnings.warn(
            f"trace {path}: head 1's stored top-1 differs from the greedy token at "
            f"{mismatches[0].size} simulated position(s) (numerical ties); the simulation "
            "follows y there", TraceMismatchWarning, stacklevel=2)
    final = tuple(r for r in rows if r is not None)
    if len(final) != len(settings):  # pragma: no cover - every task reports or raises
        raise OracleError("the engine finished without every configuration's results")
    return SweepResult(trace=path, trace_digest=digest, signature=dict(tr.signature),
                       engine=engine.name, rows=final, wall_s=time.perf_counter() - start)
