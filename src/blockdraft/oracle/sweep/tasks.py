"""The unit of a sweep's work: one configuration over one shard of the trace's examples
(:class:`Task`), run by :func:`run_task` in whatever process an engine chose, and the shards of
a configuration merged back into one simulation (:func:`merge`), equal to a single
:func:`~blockdraft.oracle.simulate.simulate` call over all its examples, record for record.

A task carries paths and digests, never loaded objects, so it pickles small to a local process
or a Ray worker. Each process opens a trace and loads an LM once (checked against the digests
the sweep took where its inputs entered: a worker on another machine that sees other bytes at
the same path refuses them), and builds a fresh strategy per task, so no state of one task's
strategy reaches another's.

A task run in a worker process or on Ray (:func:`run_task_in_worker`) sends back what it would
have shown: the warnings it raised and what native code (KenLM loading an LM) wrote on its
standard error, so the sweep shows each once, in this process, as the serial run shows it
(blockdraft's warnings as one ``blockdraft: warning:`` line), never once per worker.

Public surface:
    Task(index, config, setting, trace, trace_digest, examples, lm_digest, threads)
    ShardOutcome       what a task returns: the shard's per-step records and counts, its time,
                       what a worker would have shown
    run_task(task) -> ShardOutcome
    run_task_in_worker(task) -> ShardOutcome   the same, its warnings and stderr sent back
    plan_shards(lengths, examples, shards) -> [int64 [e_j]]   contiguous, balanced by positions
    merge(outcomes, setting, h, signature) -> SimulationResult
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from blockdraft.oracle.errors import OracleError
from blockdraft.oracle.results import SimulationResult, StepRecords
from blockdraft.oracle.simulate import TraceMismatchWarning, simulate
from blockdraft.oracle.sweep.cache import file_digest, trace_digest
from blockdraft.oracle.sweep.settings import Resources, Setting
from blockdraft.oracle.trace import Trace

_STEP_FIELDS = ("example", "t", "n", "tokens", "winner", "drafts", "num_drafts", "nodes")


@dataclass(frozen=True)
class Task:
    """One configuration over one shard.

    Attributes:
        index: the task's place in the sweep's list.
        config: the configuration's place in the grid.
        setting: the configuration.
        trace: the trace folder (the same path on every worker).
        trace_digest: what that folder must hold (:func:`~blockdraft.oracle.sweep.cache
            .trace_digest`).
        examples: the shard's trace indices, ascending.
        lm_digest: what the setting's rescorer file must hold, or None without one.
        threads: torch threads of a neural rescorer in the worker.
    """

    index: int
    config: int
    setting: Setting
    trace: str
    trace_digest: str
    examples: tuple[int, ...]
    lm_digest: str | None = None
    threads: int = 1


@dataclass(frozen=True)
class ShardOutcome:
    """What :func:`run_task` returns (plain arrays: cheap to send back).

    Attributes:
        index: the task's index.
        examples, generated, calls: int64 ``[e]`` per example of the shard.
        steps: the shard's per-step records, by field name.
        work_s: seconds of the simulation itself.
        setup_s: seconds before it: opening the trace and loading an LM (once per process),
            building the strategy.
        pid: the worker process.
        warnings: ``(category, message)`` of each warning the task raised in a worker, once
            each (empty when it ran here: its warnings were shown as they came).
        stderr: what the worker's native code wrote on standard error meanwhile.
    """

    index: int
    examples: np.ndarray
    generated: np.ndarray
    calls: np.ndarray
    steps: dict[str, np.ndarray]
    work_s: float
    setup_s: float
    pid: int
    warnings: tuple[tuple[type[Warning], str], ...] = ()
    stderr: str = ""


class _Process:
    """What one process keeps between tasks: opened traces and loaded LMs, by digest."""

    traces: dict[tuple[str, str], Trace] = {}
    checked: dict[tuple[str, str], bool] = {}
    resources: dict[int, Resources] = {}


def _trace(path: str, digest: str) -> Trace:
    key = (path, digest)
    if key not in _Process.traces:
        if trace_digest(path) != digest:
            raise OracleError(f"the trace at {path} is not the one this sweep started with (its "
                              "digest differs: changed since, or another copy on this worker); "
                              "give every worker the same trace")
        _Process.traces[key] = Trace.open(path)
    return _Process.traces[key]


def _resources(task: Task) -> Resources:
    setting = task.setting
    if setting.rescorer and task.lm_digest is not None:
        key = (setting.lm, task.lm_digest)
        if key not in _Process.checked:
            if file_digest(setting.lm) != task.lm_digest:
                raise OracleError(f"the LM at {setting.lm} is not the one this sweep started "
                                  "with (its digest differs); give every worker the same file")
            _Process.checked[key] = True
    return _Process.resources.setdefault(task.threads, Resources(threads=task.threads))


def run_task(task: Task) -> ShardOutcome:
    """Simulate one configuration over one shard (in any process).

    Raises:
        OracleError: the trace or LM differs from the sweep's, or the simulation refuses the
            strategy.
    """
    import os

    start = time.perf_counter()
    trace = _trace(task.trace, task.trace_digest)
    strategy = task.setting.build(_resources(task))
    ready = time.perf_counter()
    with warnings.catch_warnings():  # the sweep warns once about the trace's ties
        warnings.simplefilter("ignore", TraceMismatchWarning)
        res = simulate(trace, strategy, examples=list(task.examples))
    return ShardOutcome(
        index=task.index, examples=np.asarray(res.examples), generated=np.asarray(res.generated),
        calls=np.asarray(res.calls),
        steps={name: np.asarray(getattr(res.steps, name)) for name in _STEP_FIELDS},
        work_s=time.perf_counter() - ready, setup_s=ready - start, pid=os.getpid())


def run_task_in_worker(task: Task) -> ShardOutcome:
    """:func:`run_task` in a worker process or on Ray: its warnings (each once) and what native
    code wrote on the process's standard error are sent back in the outcome, for the sweep
    to show in its own process (:func:`~blockdraft.oracle.sweep.run.sweep`).

    Raises:
        OracleError: as :func:`run_task`.
    """
    import dataclasses

    with _stderr_captured() as written, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outcome = run_task(task)
    seen: dict[tuple[type[Warning], str], None] = {}
    for w in caught:
        seen.setdefault((w.category, str(w.message)), None)
    return dataclasses.replace(outcome, warnings=tuple(seen), stderr="".join(written))


@contextlib.contextmanager
def _stderr_captured() -> Iterator[list[str]]:
    """File descriptor 2 sent to a temporary file while the block runs (native code writes
    there, past Python's ``sys.stderr``); the text is appended to the yielded list."""
    import os
    import sys
    import tempfile

    written: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield written
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            written.append(tmp.read().decode("utf-8", errors="replace"))


def plan_shards(lengths: np.ndarray, examples: np.ndarray, shards: int) -> list[np.ndarray]:
    """Split ``examples`` (trace indices, in order) into at most ``shards`` contiguous runs of
    about equal positions (``lengths[e]`` each); none is empty."""
    if shards <= 1 or examples.size <= 1:
        return [examples]
    sizes = lengths[examples].astype(np.float64)
    ends = np.cumsum(sizes)
    cuts = np.searchsorted(ends, ends[-1] * np.arange(1, shards) / shards, side="left") + 1
    bounds = np.unique(np.concatenate(([0], np.clip(cuts, 1, examples.size), [examples.size])))
    return [examples[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]


def merge(outcomes: list[ShardOutcome], strategy: str, k: int, h: int,
          signature: Any, mismatches: tuple[np.ndarray, np.ndarray]) -> SimulationResult:
    """The shards of one configuration (in example order) as one simulation, equal to
    :func:`~blockdraft.oracle.simulate.simulate` over all their examples.

    Args:
        outcomes: the configuration's shards, in example order.
        strategy, k, h, signature: the result's labels.
        mismatches: ``(example, t)`` where head 1's stored top-1 differs from ``y``, over the
            examples simulated (the trace's, :meth:`~blockdraft.oracle.trace.Trace
            .head1_mismatches`).
    """
    def cat(name: str) -> np.ndarray:
        return np.concatenate([o.steps[name] for o in outcomes])

    steps = StepRecords(**{name: cat(name) for name in _STEP_FIELDS})
    return SimulationResult(
        strategy=strategy, k=k, h=h,
        examples=np.concatenate([o.examples for o in outcomes]),
        generated=np.concatenate([o.generated for o in outcomes]),
        calls=np.concatenate([o.calls for o in outcomes]), steps=steps,
        mismatch_example=mismatches[0], mismatch_t=mismatches[1], signature=signature)
