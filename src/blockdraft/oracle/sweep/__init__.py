"""Sweeps: every drafting strategy of a grid simulated from one trace, on one core, on local
worker processes or on a Ray cluster, with results cached per configuration key.

A researcher traces a model once and then asks for ``B``, acceptance and repetition over a
grid (``k`` x ``p`` x ``alpha`` x LMs x trees x lookup). Each configuration is split into
shards of the trace's examples; an engine runs the shards (the same function everywhere, so
every engine gives the same results bit for bit) and the sweep merges them into one simulation
per configuration, equal to :func:`~blockdraft.oracle.simulate.simulate` over all its
examples.

Public surface (details in each module):
    Setting, Grid, Resources, STRATEGIES, TREES                         (settings)
    sweep(trace, settings, *, engine, cache, examples, shards, ...)      (run)
    Engine(kind, workers, address, retries)                              (engines)
    ResultCache(folder), default_cache_dir(), trace_digest, file_digest, config_key  (cache)
    SweepRow, SweepResult                                                (results)
"""

from blockdraft.oracle.sweep.cache import (
    ResultCache,
    config_key,
    default_cache_dir,
    file_digest,
    trace_digest,
)
from blockdraft.oracle.sweep.engines import ENGINES, Engine, run_tasks
from blockdraft.oracle.sweep.results import SweepResult, SweepRow, row_of, steps_digest
from blockdraft.oracle.sweep.run import check_settings, sweep
from blockdraft.oracle.sweep.settings import STRATEGIES, TREES, Grid, Resources, Setting

__all__ = [
    "ENGINES",
    "STRATEGIES",
    "TREES",
    "Engine",
    "Grid",
    "Resources",
    "ResultCache",
    "Setting",
    "SweepResult",
    "SweepRow",
    "check_settings",
    "config_key",
    "default_cache_dir",
    "file_digest",
    "row_of",
    "run_tasks",
    "steps_digest",
    "sweep",
    "trace_digest",
]
