"""Analyses of drafts and heads over a trace (Kim et al. 2024 sec. 6).

The quantities are defined in docs/definitions.md sec. 7. Every function is pure numpy over a
:class:`~blockdraft.oracle.trace.Trace` and simulation results; every result is a frozen
dataclass with ``to_dict()`` for JSON.

Public surface:
    repetition(drafts) -> RepetitionStats
        consecutive repetition (Kim Table 3) of the drafts of the visited steps: a
        SimulationResult, StepRecords or an int ``[S, h]`` array.
    has_repetition(drafts) -> bool [S]
        whether each draft has two equal consecutive tokens.
    max_runs(drafts) -> int64 [S]
        the longest run of identical consecutive tokens in each draft (1..h).
    head_entropy(trace, visited=None) -> EntropyStats
        per-head entropies (nats) over the visited positions (Kim sec. 6.2, Fig. 3), their
        means ``H[i]`` and ``h_max``.
    h_max(mean_entropy) -> int
        ``max{k : H[1] <= H[2] <= ... <= H[k]}``.
    compare_steps(baseline, other) -> WinTieLoss
        wins / ties / losses of ``other`` against ``baseline`` at the same positions, with
        repair / regress counts (Kim Table 5).
    wins_ties_losses(trace, strategy, *, baseline=None) -> WinTieLoss
        ``strategy`` against vanilla at the vanilla trajectory's positions.
    oracle_curve(trace, ks=(1, 2, 4, 8, 16), *, examples=None, vanilla=None) -> OracleCurve
        ``B_oracle(k)`` and ``B_oracle(k) / B_vanilla`` (Kim Fig. 6) for ``k <= K``, and ``K``.

Percentages are in ``[0, 100]``; a percentage of an empty set is ``nan`` (``None`` in
``to_dict``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from blockdraft.core.checks import is_int
from blockdraft.drafts.protocol import Drafter
from blockdraft.drafts.spec import DraftSpec
from blockdraft.oracle.errors import OracleError
from blockdraft.oracle.results import SimulationResult, StepRecords
from blockdraft.oracle.simulate import _example_indices, simulate, simulate_at_positions
from blockdraft.oracle.trace import Trace


def _pct(num: int, den: int) -> float:
    return 100.0 * num / den if den else math.nan


def _json_float(x: float) -> float | None:
    return None if math.isnan(x) else float(x)


def _drafts_of(drafts: SimulationResult | StepRecords | np.ndarray) -> np.ndarray:
    if isinstance(drafts, SimulationResult):
        return drafts.steps.drafts
    if isinstance(drafts, StepRecords):
        return drafts.drafts
    arr = np.asarray(drafts)
    if arr.ndim != 2 or (arr.size and arr.dtype.kind not in "iu"):
        raise OracleError(
            f"drafts must be an integer [S, h] array (or a simulation result), got shape "
            f"{arr.shape} and dtype {arr.dtype}"
        )
    return arr


# ---------------------------------------------------------------------------- repetition
def has_repetition(drafts: SimulationResult | StepRecords | np.ndarray) -> np.ndarray:
    """bool ``[S]``: the draft has two equal consecutive tokens (``d_i == d_{i+1}``)."""
    d = _drafts_of(drafts)
    return np.asarray((d[:, 1:] == d[:, :-1]).any(axis=1))


def max_runs(drafts: SimulationResult | StepRecords | np.ndarray) -> np.ndarray:
    """int64 ``[S]``: the longest run of identical consecutive tokens per draft (``1..h``)."""
    d = _drafts_of(drafts)
    run = np.ones(d.shape[0], dtype=np.int64)
    best = run.copy()
    for j in range(1, d.shape[1]):
        run = np.where(d[:, j] == d[:, j - 1], run + 1, 1)
        best = np.maximum(best, run)
    return best


@dataclass(frozen=True)
class RepetitionStats:
    """Consecutive repetition in drafts (Kim Table 3; docs/definitions.md sec. 7).

    Attributes:
        num_steps: drafts counted ``S``.
        h: tokens per draft.
        repeated_pairs: ``sum_steps #{i : d_i == d_{i+1}}``.
        pct_consecutive: ``100 * repeated_pairs / (S * (h - 1))``.
        mean_max_run: mean over drafts of the longest run of identical consecutive tokens.
        pct_with_repetition: percent of drafts with at least one repeated pair.
    """

    num_steps: int
    h: int
    repeated_pairs: int
    pct_consecutive: float
    mean_max_run: float
    pct_with_repetition: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (``nan`` as ``None``)."""
        return {
            "num_steps": self.num_steps,
            "h": self.h,
            "repeated_pairs": self.repeated_pairs,
            "pct_consecutive": _json_float(self.pct_consecutive),
            "mean_max_run": _json_float(self.mean_max_run),
            "pct_with_repetition": _json_float(self.pct_with_repetition),
        }


def repetition(drafts: SimulationResult | StepRecords | np.ndarray) -> RepetitionStats:
    """Consecutive repetition of the drafts of the steps actually visited.

    Args:
        drafts: a :class:`SimulationResult` (its winning drafts, one per visited step; for
            ``p = 1`` the only draft), its :class:`StepRecords`, or int ``[S, h]`` drafts
            ``d_1 .. d_h``.

    Returns:
        The statistics (``nan`` fields when ``S = 0``).

    Raises:
        OracleError: if ``h < 2`` (no consecutive pairs) or the drafts are not ``[S, h]``.
    """
    d = _drafts_of(drafts)
    s, h = d.shape
    if h < 2:
        raise OracleError(f"repetition needs drafts of h >= 2 tokens, got h = {h}")
    pairs = int((d[:, 1:] == d[:, :-1]).sum())
    return RepetitionStats(
        num_steps=int(s),
        h=int(h),
        repeated_pairs=pairs,
        pct_consecutive=_pct(pairs, s * (h - 1)),
        mean_max_run=float(max_runs(d).mean()) if s else math.nan,
        pct_with_repetition=_pct(int(has_repetition(d).sum()), s),
    )


# ---------------------------------------------------------------------------- entropy
def h_max(mean_entropy: Sequence[float] | np.ndarray) -> int:
    """``max{k : H[1] <= H[2] <= ... <= H[k]}`` (Kim sec. 6.2): the heads whose mean entropy
    rises monotonically from head 1.

    Args:
        mean_entropy: float ``[h]``, ``h >= 1``, mean entropy per head (nats).

    Raises:
        OracleError: on an empty or non-finite input.
    """
    H = np.asarray(mean_entropy, dtype=np.float64)
    if H.ndim != 1 or H.size == 0 or not np.all(np.isfinite(H)):
        raise OracleError(f"mean_entropy must be a non-empty finite [h] array, got {H!r}")
    drops = np.flatnonzero(np.diff(H) < 0)
    return int(drops[0] + 1) if drops.size else int(H.size)


@dataclass(frozen=True, eq=False)
class EntropyStats:
    """Head entropies over visited positions (Kim sec. 6.2, Fig. 3).

    Attributes:
        entropy: float64 ``[S, h]``, nats: row ``j`` holds every head's entropy at position
            ``(example[j], t[j])``; column ``i`` is head ``i + 1``'s distribution.
        example, t: int64 ``[S]``, the positions.
        mean: float64 ``[h]``, ``H[i]``, the mean per head.
        h_max: ``max{k : H[1] <= ... <= H[k]}``.
        signature: the trace's signature.
    """

    entropy: np.ndarray
    example: np.ndarray
    t: np.ndarray
    mean: np.ndarray
    h_max: int
    signature: Mapping[str, Any]

    def __post_init__(self) -> None:
        for name in ("entropy", "example", "t", "mean"):
            arr = np.array(getattr(self, name), copy=True)
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)
        object.__setattr__(self, "signature", MappingProxyType(dict(self.signature)))

    @property
    def h(self) -> int:
        """Heads."""
        return int(self.entropy.shape[1])

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary: per-head mean, std and quantiles (5, 25, 50, 75, 95), h_max."""
        q = np.percentile(self.entropy, [5, 25, 50, 75, 95], axis=0)  # (5, h)
        return {
            "num_positions": int(self.entropy.shape[0]),
            "h": self.h,
            "mean": self.mean.tolist(),
            "std": self.entropy.std(axis=0).tolist(),
            "quantiles": {
                f"p{p}": q[j].tolist() for j, p in enumerate((5, 25, 50, 75, 95))
            },
            "h_max": self.h_max,
            "unit": "nats",
            "signature": dict(self.signature),
        }


def head_entropy(
    trace: Trace, visited: SimulationResult | StepRecords | None = None
) -> EntropyStats:
    """Per-head entropy over the visited positions.

    Args:
        trace: the trace.
        visited: the steps whose positions count (a simulation of ``trace``, usually vanilla's:
            the positions where a lattice was actually built); ``None`` takes every position
            of every example.

    Returns:
        The distribution per head, its means ``H[i]`` and ``h_max``.

    Raises:
        OracleError: if there are no positions, or ``visited`` does not fit the trace.
    """
    offsets = np.asarray(trace.position_offsets)
    if visited is None:
        rows = np.arange(trace.num_positions, dtype=np.int64)
        example = np.searchsorted(offsets, rows, side="right") - 1
        t = rows - offsets[example]
        entropy = np.asarray(trace.entropy, dtype=np.float64)
    else:
        steps = visited.steps if isinstance(visited, SimulationResult) else visited
        example, t = steps.example, steps.t
        if example.size and (
            example.max() >= trace.num_examples or (t >= trace.lengths[example]).any()
        ):
            raise OracleError(
                "the visited positions do not fit this trace (an example or t out of range); "
                "pass a simulation of the same trace"
            )
        rows = offsets[example] + t
        entropy = np.asarray(trace.entropy[rows], dtype=np.float64)
    if entropy.shape[0] == 0:
        raise OracleError("no positions to average over: the simulation visited no step")
    mean = entropy.mean(axis=0)
    return EntropyStats(
        entropy=entropy, example=example, t=t, mean=mean, h_max=h_max(mean),
        signature=trace.signature,
    )


# ---------------------------------------------------------------------------- wins/ties/losses
@dataclass(frozen=True)
class WinTieLoss:
    """``n`` of one strategy against a baseline at the same positions (Kim Table 5).

    A draft has repetition when two consecutive tokens are equal. A repair: the baseline draft
    has repetition and the other none; a regress: the reverse.

    Attributes:
        strategy, baseline: labels.
        num_positions: positions compared.
        wins, ties, losses: ``n_other >`` / ``==`` / ``< n_baseline``.
        repair_wins, regress_wins: repairs / regresses among the wins.
        repair_losses, regress_losses: repairs / regresses among the losses.
    """

    strategy: str
    baseline: str
    num_positions: int
    wins: int
    ties: int
    losses: int
    repair_wins: int
    regress_wins: int
    repair_losses: int
    regress_losses: int

    @property
    def pct_repair_among_wins(self) -> float:
        """Percent of wins that are repairs."""
        return _pct(self.repair_wins, self.wins)

    @property
    def pct_regress_among_wins(self) -> float:
        """Percent of wins that are regresses."""
        return _pct(self.regress_wins, self.wins)

    @property
    def pct_repair_among_losses(self) -> float:
        """Percent of losses that are repairs."""
        return _pct(self.repair_losses, self.losses)

    @property
    def pct_regress_among_losses(self) -> float:
        """Percent of losses that are regresses."""
        return _pct(self.regress_losses, self.losses)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready counts and percentages (``nan`` as ``None``)."""
        return {
            "strategy": self.strategy,
            "baseline": self.baseline,
            "num_positions": self.num_positions,
            "wins": self.wins,
            "ties": self.ties,
            "losses": self.losses,
            "pct_wins": _json_float(_pct(self.wins, self.num_positions)),
            "pct_ties": _json_float(_pct(self.ties, self.num_positions)),
            "pct_losses": _json_float(_pct(self.losses, self.num_positions)),
            "repair_wins": self.repair_wins,
            "regress_wins": self.regress_wins,
            "repair_losses": self.repair_losses,
            "regress_losses": self.regress_losses,
            "pct_repair_among_wins": _json_float(self.pct_repair_among_wins),
            "pct_regress_among_wins": _json_float(self.pct_regress_among_wins),
            "pct_repair_among_losses": _json_float(self.pct_repair_among_losses),
            "pct_regress_among_losses": _json_float(self.pct_regress_among_losses),
        }


def compare_steps(
    baseline: StepRecords,
    other: StepRecords,
    *,
    strategy: str = "strategy",
    baseline_name: str = "vanilla",
) -> WinTieLoss:
    """Wins, ties and losses of ``other`` against ``baseline`` at the same positions.

    Args:
        baseline: the baseline's steps (usually vanilla's trajectory).
        other: the other strategy's outcome at exactly those positions (same order), e.g.
            from :func:`~blockdraft.oracle.simulate.simulate_at_positions`.
        strategy, baseline_name: labels for the result.

    Raises:
        OracleError: if the two records are not at the same positions.
    """
    if (
        len(baseline) != len(other)
        or not np.array_equal(baseline.example, other.example)
        or not np.array_equal(baseline.t, other.t)
    ):
        raise OracleError(
            "compare_steps needs both records at the same positions in the same order; "
            "compute the other with simulate_at_positions(trace, strategy, baseline.example, "
            "baseline.t)"
        )
    win = other.n > baseline.n
    loss = other.n < baseline.n
    rep_b = has_repetition(baseline.drafts)
    rep_o = has_repetition(other.drafts)
    repair = rep_b & ~rep_o
    regress = ~rep_b & rep_o
    return WinTieLoss(
        strategy=strategy,
        baseline=baseline_name,
        num_positions=len(baseline),
        wins=int(win.sum()),
        ties=int((~win & ~loss).sum()),
        losses=int(loss.sum()),
        repair_wins=int((win & repair).sum()),
        regress_wins=int((win & regress).sum()),
        repair_losses=int((loss & repair).sum()),
        regress_losses=int((loss & regress).sum()),
    )


def wins_ties_losses(
    trace: Trace, strategy: Drafter | DraftSpec, *, baseline: SimulationResult | None = None
) -> WinTieLoss:
    """``strategy`` against vanilla BPD at the vanilla trajectory's positions
    (docs/definitions.md sec. 7).

    Args:
        trace: the trace.
        strategy: as in :func:`~blockdraft.oracle.simulate.simulate`.
        baseline: a vanilla simulation of ``trace`` to reuse; simulated when ``None``.

    Returns:
        The counts, with repairs and regresses among wins and losses.
    """
    if baseline is None:
        baseline = simulate(trace, DraftSpec("heads"))
    other = simulate_at_positions(trace, strategy, baseline.steps.example, baseline.steps.t)
    name = strategy.label if isinstance(strategy, DraftSpec) else strategy.name
    return compare_steps(baseline.steps, other, strategy=name, baseline_name=baseline.strategy)


# ---------------------------------------------------------------------------- oracle curve
@dataclass(frozen=True, eq=False)
class OracleCurve:
    """Oracle block efficiency against vanilla (Kim Fig. 6; docs/definitions.md sec. 5, 7).

    Attributes:
        ks: int64 ``[n]``, lattice widths, increasing.
        b_oracle: float64 ``[n]``, ``B_oracle(k)`` (pooled: tokens / calls).
        b_vanilla: ``B`` of vanilla BPD on the same examples.
        signature: the trace's signature.
    """

    ks: np.ndarray
    b_oracle: np.ndarray
    b_vanilla: float
    signature: Mapping[str, Any]

    def __post_init__(self) -> None:
        for name, dtype in (("ks", np.int64), ("b_oracle", np.float64)):
            arr = np.array(getattr(self, name), dtype=dtype, copy=True)
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)
        object.__setattr__(self, "signature", MappingProxyType(dict(self.signature)))

    @property
    def ratio(self) -> np.ndarray:
        """float64 ``[n]``: ``B_oracle(k) / B_vanilla``."""
        return self.b_oracle / self.b_vanilla

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready rows ``{k, b_oracle, ratio}`` and ``b_vanilla``."""
        return {
            "b_vanilla": self.b_vanilla,
            "curve": [
                {"k": int(k), "b_oracle": float(b), "ratio": float(r)}
                for k, b, r in zip(self.ks, self.b_oracle, self.ratio, strict=True)
            ],
            "signature": dict(self.signature),
        }


def oracle_curve(
    trace: Trace,
    ks: Sequence[int] = (1, 2, 4, 8, 16),
    *,
    examples: Iterable[int] | slice | None = None,
    vanilla: SimulationResult | None = None,
) -> OracleCurve:
    """``B_oracle(k)`` and ``B_oracle(k) / B_vanilla`` for ``k`` in ``ks`` up to the trace's
    ``K``, plus ``K`` itself.

    Args:
        trace: the trace.
        ks: lattice widths (positive); those above ``K`` are dropped and ``K`` is added.
        examples: trace indices to use (all by default).
        vanilla: a vanilla simulation of the same examples to reuse; simulated when ``None``
            (with a real :func:`~blockdraft.drafts.heads.vanilla` drafter, not ``Oracle(1)``).

    Raises:
        OracleError: on a non-positive ``k``, or a ``vanilla`` result of other examples.
    """
    for k in ks:
        if not is_int(k) or k < 1:
            raise OracleError(f"ks must be positive integers, got {k!r} in {list(ks)}")
    widths = sorted({int(k) for k in ks if k <= trace.K} | {trace.K})
    b = [simulate(trace, DraftSpec("oracle", k=k), examples=examples).block_efficiency
         for k in widths]
    if vanilla is None:
        vanilla = simulate(trace, DraftSpec("heads"), examples=examples)
    else:
        if not np.array_equal(vanilla.examples, _example_indices(trace, examples)):
            raise OracleError(
                "the vanilla result covers other examples than the oracle curve; simulate "
                "vanilla with the same `examples`"
            )
    return OracleCurve(
        ks=np.asarray(widths), b_oracle=np.asarray(b), b_vanilla=vanilla.block_efficiency,
        signature=trace.signature,
    )
