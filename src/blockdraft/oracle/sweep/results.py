"""What a sweep reports: one :class:`SweepRow` per configuration, and the :class:`SweepResult`
of the whole grid.

A row's figures come from the configuration's simulation over the trace
(:class:`~blockdraft.oracle.results.SimulationResult`), whichever engine ran it:

- ``block_efficiency``: ``B``, pooled over the examples (docs/definitions.md sec. 2);
- ``head_acceptance``: float ``[h - 1]``, entry ``i - 1`` the fraction of visited steps that
  accepted at least ``i`` drafted tokens (head ``i + 1``'s token, or a tree's or copy's token
  at that depth): ``P(n >= i)``, so entry 0 is the chance a step gains anything;
- ``pct_consecutive``, ``mean_max_run``: consecutive repetition in the winning drafts of the
  visited steps (docs/definitions.md sec. 7, Kim Table 3);
- ``mean_drafts``: drafts proposed per step (``p``; a tree's leaves); ``mean_nodes``: tokens a
  verification forward holds per step (the size a cost curve prices);
- on a runtime's cost curve (:class:`~blockdraft.models.cost.CostCurve`), given when the
  report is made: ``relative_time`` (the steps' time in greedy steps) and ``speedup`` over
  greedy decoding, prefills aside (:meth:`SimulationResult.simulated_speedup
  <blockdraft.oracle.results.SimulationResult.simulated_speedup>`'s figures, from the histogram
  of the steps' node counts, so a cached row prices on any curve);
- ``steps_sha256``: the digest of every per-step record (positions, accepted lengths, winning
  drafts, node counts): two runs agree bit for bit when their digests do.

Public surface:
    SweepRow, row_of(setting, key, result, work_s) -> SweepRow, steps_digest(steps) -> hex
    SweepResult(trace, trace_digest, signature, engine, rows, wall_s).to_dict(cost=None)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from blockdraft.core.digest import sha256_arrays
from blockdraft.oracle.analysis import repetition
from blockdraft.oracle.errors import OracleError
from blockdraft.oracle.results import SimulationResult, StepRecords
from blockdraft.oracle.sweep.settings import Setting


def steps_digest(steps: StepRecords) -> str:
    """SHA-256 of every per-step record of a simulation (names, dtypes, shapes and bytes)."""
    return sha256_arrays({name: getattr(steps, name) for name in
                          ("example", "t", "n", "tokens", "winner", "drafts", "num_drafts",
                           "nodes")})


@dataclass(frozen=True)
class SweepRow:
    """The figures of one configuration (see the module docstring for each).

    Attributes:
        setting: the configuration.
        key: its cache key.
        block_efficiency: ``B``.
        head_acceptance: ``P(n >= i)`` for ``i = 1 .. h - 1``.
        pct_consecutive, mean_max_run: repetition in the winning drafts (NaN without steps).
        mean_drafts, mean_nodes: per step (NaN without steps).
        examples, tokens, calls, steps: the counts ``B`` comes from (``tokens / calls``).
        nodes_histogram: ``((nodes, steps), ...)``, ascending: how many steps held how many
            tokens.
        steps_sha256: :func:`steps_digest` of the simulation.
        work_s: seconds the simulation took (summed over its shards, opening the inputs and
            building the strategy left out; the engine's wall time is the sweep's).
        cached: read from the cache, not computed in this sweep.
    """

    setting: Setting
    key: str
    block_efficiency: float
    head_acceptance: tuple[float, ...]
    pct_consecutive: float
    mean_max_run: float
    mean_drafts: float
    mean_nodes: float
    examples: int
    tokens: int
    calls: int
    steps: int
    nodes_histogram: tuple[tuple[int, int], ...]
    steps_sha256: str
    work_s: float
    cached: bool = field(default=False, compare=False)

    @property
    def label(self) -> str:
        """The setting's label."""
        return self.setting.label

    @property
    def heads(self) -> bool:
        """Whether the steps project the Medusa heads (every strategy but a lookup alone)."""
        return self.setting.strategy != "lookup"

    def relative_time(self, cost: Any) -> float:
        """The steps' time on ``cost`` (a :class:`~blockdraft.models.cost.CostCurve`), in
        greedy steps, prefills aside."""
        if not self.nodes_histogram:
            return 0.0
        nodes = np.array([n for n, _ in self.nodes_histogram], dtype=np.int64)
        counts = np.array([c for _, c in self.nodes_histogram], dtype=np.float64)
        return float((cost.steps(nodes, self.heads) / cost.greedy_ms * counts).sum())

    def speedup(self, cost: Any) -> float:
        """Speedup over greedy decoding on ``cost``: greedy's ``tokens - examples`` steps over
        :meth:`relative_time` (NaN without steps)."""
        time = self.relative_time(cost)
        return (self.tokens - self.examples) / time if time else math.nan

    def to_dict(self, cost: Any = None) -> dict[str, Any]:
        """JSON-ready (non-finite numbers as None); with ``cost``, its figures too.
        :meth:`from_dict` reads it back."""
        out: dict[str, Any] = {
            "label": self.label, "setting": self.setting.to_dict(), "key": self.key,
            "block_efficiency": self.block_efficiency,
            "head_acceptance": list(self.head_acceptance),
            "pct_consecutive": self.pct_consecutive, "mean_max_run": self.mean_max_run,
            "mean_drafts": self.mean_drafts, "mean_nodes": self.mean_nodes,
            "examples": self.examples, "tokens": self.tokens, "calls": self.calls,
            "steps": self.steps, "nodes_histogram": [list(x) for x in self.nodes_histogram],
            "steps_sha256": self.steps_sha256, "work_s": self.work_s, "cached": self.cached,
        }
        if cost is not None:
            out["relative_time"] = self.relative_time(cost)
            out["speedup"] = self.speedup(cost)
        return _finite(out)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], cached: bool = False) -> SweepRow:
        """The row :meth:`to_dict` wrote.

        Raises:
            OracleError: a missing field or a value of the wrong kind.
        """
        def num(x: Any) -> float:
            return math.nan if x is None else float(x)

        try:
            return cls(
                setting=Setting.from_dict(data["setting"]), key=str(data["key"]),
                block_efficiency=float(data["block_efficiency"]),
                head_acceptance=tuple(num(x) for x in data["head_acceptance"]),
                pct_consecutive=num(data["pct_consecutive"]),
                mean_max_run=num(data["mean_max_run"]), mean_drafts=num(data["mean_drafts"]),
                mean_nodes=num(data["mean_nodes"]), examples=int(data["examples"]),
                tokens=int(data["tokens"]), calls=int(data["calls"]), steps=int(data["steps"]),
                nodes_histogram=tuple((int(n), int(c)) for n, c in data["nodes_histogram"]),
                steps_sha256=str(data["steps_sha256"]), work_s=float(data["work_s"]),
                cached=cached)
        except (KeyError, TypeError, ValueError) as e:
            raise OracleError(f"not a sweep row ({e}): {dict(data)!r}"[:300]) from e


def _finite(x: Any) -> Any:
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


def row_of(setting: Setting, key: str, result: SimulationResult, work_s: float) -> SweepRow:
    """The figures of ``setting`` from its simulation ``result``."""
    steps = result.steps
    s = len(steps)
    n = steps.n
    rep = repetition(result) if result.h >= 2 else None
    assert steps.nodes is not None  # filled in by StepRecords
    values, counts = np.unique(steps.nodes, return_counts=True)
    return SweepRow(
        setting=setting, key=key, block_efficiency=result.block_efficiency,
        head_acceptance=tuple(float((n >= i).sum() / s) if s else math.nan
                              for i in range(1, result.h)),
        pct_consecutive=rep.pct_consecutive if rep else math.nan,
        mean_max_run=rep.mean_max_run if rep else math.nan,
        mean_drafts=float(steps.num_drafts.sum() / s) if s else math.nan,
        mean_nodes=float(steps.nodes.sum() / s) if s else math.nan,
        examples=int(result.examples.shape[0]), tokens=result.total_generated,
        calls=result.total_calls, steps=s,
        nodes_histogram=tuple((int(v), int(c)) for v, c in zip(values, counts, strict=True)),
        steps_sha256=steps_digest(steps), work_s=float(work_s))


@dataclass(frozen=True)
class SweepResult:
    """A sweep over one trace.

    Attributes:
        trace: the trace folder, as given.
        trace_digest: its :func:`~blockdraft.oracle.sweep.cache.trace_digest`.
        signature: the trace's signature.
        engine: what ran it (``"serial"``, ``"processes:2"``, ``"ray:local"``, ...).
        rows: one per configuration, in the grid's order.
        wall_s: the sweep's wall time (opening the trace and starting the engine included).
    """

    trace: str
    trace_digest: str
    signature: Mapping[str, Any]
    engine: str
    rows: tuple[SweepRow, ...]
    wall_s: float

    @property
    def computed(self) -> int:
        """Configurations computed in this sweep (the rest came from the cache)."""
        return sum(not r.cached for r in self.rows)

    def to_dict(self, cost: Any = None) -> dict[str, Any]:
        """JSON-ready: the trace, its signature, the engine, the wall time and every row (with
        the cost curve's figures when ``cost`` is given)."""
        out: dict[str, Any] = {
            "trace": self.trace, "trace_digest": self.trace_digest,
            "signature": dict(self.signature), "engine": self.engine, "wall_s": self.wall_s,
            "configurations": len(self.rows), "computed": self.computed,
            "rows": [r.to_dict(cost) for r in self.rows],
        }
        if cost is not None:
            out["cost_curve"] = cost.to_dict()
        return out
