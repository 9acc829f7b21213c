"""The offline BPD simulator: block efficiency of any drafting strategy from a trace.

SPEC sec. 2 and 6. With exact verification the committed text is the greedy reference ``y``,
so one trace gives every step's lattice, and walking ``t <- t + 1 + n`` from ``t = 0`` gives
the accepted lengths ``n`` and the block efficiency ``B`` of any strategy, no model needed.

Public surface:
    simulate(trace, strategy, *, examples=None, progress=False) -> SimulationResult
        walk every (or the chosen) example's trajectory under ``strategy``.
    simulate_at_positions(trace, strategy, example, t) -> StepRecords
        the step outcome at given positions (e.g. the vanilla trajectory's, SPEC sec. 7).
    oracle_accept_lengths(example, k) -> int64 [m]
        ``n_oracle(t, k)`` at every position of one example (SPEC sec. 5).
    accept_lengths(drafts, greedy_ids, t) -> int64 [p]
        ``n`` of each draft at position ``t`` under exact acceptance.
    Oracle(k)                     the oracle strategy of the top-``k`` lattice (``p = 1``)
    DraftStrategy                 the protocol a strategy follows (``HeadDrafter`` does)
    StepRecords, SimulationResult frozen results

Conventions. A step at position ``t`` (committed prefix ``x, y_1..y_t``; ``y_{t+1}`` is
already certain) asks the strategy for drafts ``d = (d_1 .. d_h)`` from the lattice at ``t``,
verifies them in one call and accepts ``n = #leading i >= 1 with d_{1+i} == y_{t+1+i}``
(a match past ``y_m`` is impossible). The draft with the largest ``n`` wins (ties: the first,
i.e. the best-scored). The call makes ``1 + n`` tokens certain, ``min(1 + n, m - (t + 1))``
of them inside ``y``; then ``t <- t + 1 + n``. The prefill is one call that makes ``y_1``
certain; an example is done when ``y_m`` is certain (``t + 1 >= m``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

import numpy as np

from blockdraft.arrays import readonly
from blockdraft.drafts.batch import DraftBatch
from blockdraft.lattice.sausage import SausageLattice
from blockdraft.oracle.trace import OracleError, Trace, TraceExample


class TraceMismatchWarning(UserWarning):
    """Head 1's stored top-1 differs from the greedy token somewhere in a trace."""


@runtime_checkable
class DraftStrategy(Protocol):
    """A drafting strategy: reads a top-``k`` lattice, proposes drafts.

    :class:`blockdraft.drafts.heads.HeadDrafter` is one. ``propose`` returns ``p >= 1`` drafts
    of ``h`` tokens, best first; ``context`` is the committed prefix (int64, oldest first).
    """

    @property
    def k(self) -> int: ...

    def propose(self, lattice: SausageLattice, context: np.ndarray) -> DraftBatch: ...


@dataclass(frozen=True)
class Oracle:
    """The oracle path of the top-``k`` lattice (SPEC sec. 5): at every step it accepts
    ``n_oracle(t, k)``, an upper bound on the ``n`` of any ``p = 1`` strategy drafting from
    that lattice *at that position*.

    ``B_oracle(k)`` is, as in SPEC and Kim et al., ``B`` when every step uses that draft. It is
    not a strict upper bound on another strategy's ``B`` over a whole text: a strategy that
    accepts fewer tokens lands on a different position, which can happen to have a better
    lattice (random synthetic traces show this on about 2 in 1,000 comparisons; see
    tests/oracle/test_oracle_simulate.py). Nor is ``B_oracle(k)`` monotone in ``k`` for the same
    reason, though ``n_oracle(t, k)`` is at every position.

    Attributes:
        k: arcs per slot, ``>= 1``.
    """

    k: int

    def __post_init__(self) -> None:
        if not isinstance(self.k, (int, np.integer)) or isinstance(self.k, bool) or self.k < 1:
            raise OracleError(f"Oracle.k must be a positive integer, got {self.k!r}")
        object.__setattr__(self, "k", int(self.k))

    @property
    def name(self) -> str:
        """A label for tables."""
        return f"oracle (k={self.k})"


@dataclass(frozen=True, eq=False)
class StepRecords:
    """One row per simulated step (a verification call), in walk order.

    Attributes:
        example: int64 ``[S]``, the trace index of the step's example.
        t: int64 ``[S]``, the position (the committed prefix is ``x, y_1..y_t``).
        n: int64 ``[S]``, tokens accepted beyond the certain ``d_1`` (``0 .. h-1``).
        tokens: int64 ``[S]``, tokens of ``y`` the call made certain:
            ``min(1 + n, m - (t + 1))``.
        winner: int64 ``[S]``, the index of the winning draft in the strategy's batch.
        drafts: int64 ``[S, h]``, the winning draft ``d_1 .. d_h``.
        num_drafts: int64 ``[S]``, drafts the strategy proposed (``p``, or fewer when the
            lattice has fewer paths).
    """

    example: np.ndarray
    t: np.ndarray
    n: np.ndarray
    tokens: np.ndarray
    winner: np.ndarray
    drafts: np.ndarray
    num_drafts: np.ndarray

    def __post_init__(self) -> None:
        s = np.asarray(self.example).shape[0]
        for name in ("example", "t", "n", "tokens", "winner", "num_drafts"):
            arr = readonly(getattr(self, name), np.int64)
            if arr.shape != (s,):
                raise OracleError(f"StepRecords.{name} must have shape ({s},), got {arr.shape}")
            object.__setattr__(self, name, arr)
        drafts = readonly(self.drafts, np.int64)
        if drafts.ndim != 2 or drafts.shape[0] != s:
            raise OracleError(f"StepRecords.drafts must be [{s}, h], got {drafts.shape}")
        object.__setattr__(self, "drafts", drafts)

    def __len__(self) -> int:
        return int(self.example.shape[0])

    @property
    def h(self) -> int:
        """Tokens per draft."""
        return int(self.drafts.shape[1])


@dataclass(frozen=True, eq=False)
class SimulationResult:
    """The outcome of :func:`simulate`.

    Attributes:
        strategy: the strategy's label.
        k: the lattice width the strategy read.
        h: heads (tokens per draft).
        examples: int64 ``[E]``, the trace indices simulated.
        generated: int64 ``[E]``, ``m`` of each example (generated tokens).
        calls: int64 ``[E]``, serial model calls of each example, the prefill included.
        steps: the per-step records (``S = sum(calls - 1)`` rows).
        mismatch_example, mismatch_t: int64 ``[M]``, positions of the simulated examples where
            head 1's stored top-1 differs from ``y_{t+1}`` (numerical ties; the simulation
            trusts ``y``, an online decode could diverge there).
        signature: the trace's signature (read-only).
    """

    strategy: str
    k: int
    h: int
    examples: np.ndarray
    generated: np.ndarray
    calls: np.ndarray
    steps: StepRecords
    mismatch_example: np.ndarray
    mismatch_t: np.ndarray
    signature: Mapping[str, Any]

    def __post_init__(self) -> None:
        for name in ("examples", "generated", "calls", "mismatch_example", "mismatch_t"):
            object.__setattr__(self, name, readonly(getattr(self, name), np.int64))
        object.__setattr__(self, "signature", MappingProxyType(dict(self.signature)))

    @property
    def total_generated(self) -> int:
        """Generated tokens over all simulated examples."""
        return int(self.generated.sum())

    @property
    def total_calls(self) -> int:
        """Serial calls over all simulated examples (prefills included)."""
        return int(self.calls.sum())

    @property
    def block_efficiency(self) -> float:
        """``B`` pooled over examples: ``sum m / sum calls`` (tokens per serial call, the
        number this project reports; SPEC sec. 2)."""
        return self.total_generated / self.total_calls

    @property
    def example_block_efficiency(self) -> np.ndarray:
        """float64 ``[E]``: ``m / calls`` of each example."""
        return self.generated / self.calls

    @property
    def mean_example_block_efficiency(self) -> float:
        """The unweighted mean over examples of ``m / calls`` (for comparison only)."""
        return float(np.mean(self.example_block_efficiency))

    @property
    def num_mismatches(self) -> int:
        """Positions where head 1's stored top-1 differs from the greedy token."""
        return int(self.mismatch_example.shape[0])

    def accept_histogram(self) -> np.ndarray:
        """int64 ``[h]``: how many steps accepted ``n = 0 .. h-1``."""
        return np.bincount(self.steps.n, minlength=self.h).astype(np.int64)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (per-step arrays left out; at most 100 mismatches listed)."""
        return {
            "strategy": self.strategy,
            "k": self.k,
            "h": self.h,
            "num_examples": int(self.examples.shape[0]),
            "generated": self.total_generated,
            "calls": self.total_calls,
            "block_efficiency": self.block_efficiency,
            "mean_example_block_efficiency": self.mean_example_block_efficiency,
            "num_steps": len(self.steps),
            "mean_accepted": float(self.steps.n.mean()) if len(self.steps) else 0.0,
            "accept_histogram": self.accept_histogram().tolist(),
            "num_mismatches": self.num_mismatches,
            "mismatches": [
                [int(e), int(t)]
                for e, t in zip(self.mismatch_example[:100], self.mismatch_t[:100], strict=True)
            ],
            "signature": dict(self.signature),
        }


# ---------------------------------------------------------------------------- the maths
def accept_lengths(drafts: np.ndarray, greedy_ids: np.ndarray, t: int) -> np.ndarray:
    """Exact acceptance (SPEC sec. 2) of every draft at position ``t``.

    Args:
        drafts: int ``[p, h]``, column ``i`` is slot ``i + 1``.
        greedy_ids: int ``[m]``, ``y_1 .. y_m``.
        t: the position, ``0 <= t < m``.

    Returns:
        int64 ``[p]``: ``n = #leading i = 1..h-1 with d_{1+i} == y_{t+1+i}``; slots past
        ``y_m`` never match.
    """
    d = np.asarray(drafts)
    y = np.asarray(greedy_ids)
    span = min(d.shape[1] - 1, y.shape[0] - 1 - t)  # slots 2..1+span have a target in y
    if span <= 0:
        return np.zeros(d.shape[0], dtype=np.int64)
    eq = d[:, 1 : 1 + span] == y[t + 1 : t + 1 + span][None, :]  # (p, span)
    return np.cumprod(eq, axis=1).sum(axis=1).astype(np.int64)


def oracle_accept_lengths(example: TraceExample, k: int) -> np.ndarray:
    """``n_oracle(t, k)`` at every position of an example (SPEC sec. 5).

    Args:
        example: a trace example.
        k: lattice width, ``1 <= k <= K``.

    Returns:
        int64 ``[m]``: ``max{n : y_{t+1+i} in top-k of head 1+i at t, for all 1 <= i <= n}``.
    """
    m, h = example.m, example.h
    if h == 1:
        return np.zeros(m, dtype=np.int64)
    y = np.asarray(example.greedy_ids, dtype=np.int64)
    ypad = np.concatenate([y, np.full(h, -2, dtype=np.int64)])  # -2 never matches an id
    targets = ypad[np.arange(m)[:, None] + np.arange(1, h)[None, :]]  # (m, h-1): y_{t+1+i}
    topk = np.asarray(example.topk_ids[:, 1:, :k])  # (m, h-1, k)
    hit = (topk == targets[..., None]).any(axis=-1)  # (m, h-1)
    return np.cumprod(hit, axis=1).sum(axis=1).astype(np.int64)


# ---------------------------------------------------------------------------- stepping
@dataclass(frozen=True)
class _Outcome:
    n: int
    winner: int
    draft: np.ndarray
    num_drafts: int


def _strategy_k(trace: Trace, strategy: Oracle | DraftStrategy) -> int:
    """Validate a strategy against a trace; return its lattice width."""
    if not isinstance(strategy, Oracle) and not isinstance(strategy, DraftStrategy):
        raise OracleError(
            f"strategy must be an Oracle or have .k and .propose(lattice, context) (like "
            f"HeadDrafter), got {type(strategy).__name__}"
        )
    k = strategy.k
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
        raise OracleError(f"strategy {_name(strategy)!r} has k = {k!r}; k must be >= 1")
    if k > trace.K:
        raise OracleError(
            f"strategy {_name(strategy)!r} reads k = {k} arcs per slot, but the trace stores "
            f"only K = {trace.K}; use k <= {trace.K} or re-trace with K >= {k}"
        )
    return int(k)


def _name(strategy: Any) -> str:
    return str(getattr(strategy, "name", "") or type(strategy).__name__)


def _stepper(
    example: TraceExample, strategy: Oracle | DraftStrategy, k: int
) -> Callable[[int], _Outcome]:
    """A function: position ``t`` -> the step's outcome under ``strategy``."""
    y = np.asarray(example.greedy_ids, dtype=np.int64)
    if isinstance(strategy, Oracle):
        n_all = oracle_accept_lengths(example, k)
        top1 = np.asarray(example.topk_ids[:, :, 0], dtype=np.int64)  # (m, h)

        def oracle_step(t: int) -> _Outcome:
            n = int(n_all[t])
            draft = top1[t].copy()  # slots past the accepted prefix: the vanilla token
            draft[1 : 1 + n] = y[t + 1 : t + 1 + n]
            return _Outcome(n=n, winner=0, draft=draft, num_drafts=1)

        return oracle_step

    def step(t: int) -> _Outcome:
        batch = strategy.propose(example.lattice(t, k), example.context(t))
        if not isinstance(batch, DraftBatch):
            raise OracleError(
                f"strategy {_name(strategy)!r} returned {type(batch).__name__}, not a DraftBatch"
            )
        if batch.h != example.h:
            raise OracleError(
                f"strategy {_name(strategy)!r} proposed drafts of {batch.h} tokens at example "
                f"{example.index}, t = {t}; the trace has h = {example.h} heads"
            )
        n = accept_lengths(batch.tokens, y, t)
        w = int(np.argmax(n))  # the first maximum: the best-scored among the longest
        return _Outcome(n=int(n[w]), winner=w, draft=batch.tokens[w], num_drafts=batch.p)

    return step


def _example_indices(trace: Trace, examples: Iterable[int] | slice | None) -> np.ndarray:
    n = trace.num_examples
    if examples is None:
        idx = np.arange(n, dtype=np.int64)
    elif isinstance(examples, slice):
        idx = np.arange(n, dtype=np.int64)[examples]
    else:
        idx = np.asarray(list(examples) if not isinstance(examples, np.ndarray) else examples)
        if idx.size == 0:
            idx = idx.astype(np.int64)
        if idx.ndim != 1 or idx.dtype.kind not in "iu":
            raise OracleError(f"examples must be 1-D integer indices, got {examples!r}")
        idx = idx.astype(np.int64)
        bad = (idx < 0) | (idx >= n)
        if bad.any():
            raise OracleError(
                f"example index {int(idx[bad][0])} is out of range for a trace of {n} examples"
            )
    if idx.size == 0:
        raise OracleError(
            f"no examples to simulate (trace {trace.path} has {n}); B is undefined"
        )
    return idx


def _warn_mismatches(trace: Trace, ex: np.ndarray, ts: np.ndarray) -> None:
    if ex.size:
        first = ", ".join(f"(example {e}, t = {t})" for e, t in zip(ex[:3], ts[:3], strict=True))
        warnings.warn(
            f"trace {trace.path}: head 1's stored top-1 differs from the greedy token y_(t+1) "
            f"at {ex.size} position(s), e.g. {first}: numerical ties between the greedy run "
            "and the teacher-forced pass; the simulation follows y (see "
            "SimulationResult.mismatch_example / mismatch_t)",
            TraceMismatchWarning,
            stacklevel=3,
        )


# ---------------------------------------------------------------------------- public
def simulate(
    trace: Trace,
    strategy: Oracle | DraftStrategy,
    *,
    examples: Iterable[int] | slice | None = None,
    progress: bool = False,
) -> SimulationResult:
    """Simulate BPD with exact verification under ``strategy`` (SPEC sec. 2, 6).

    Args:
        trace: the trace.
        strategy: an :class:`Oracle`, or any :class:`DraftStrategy` such as
            :class:`~blockdraft.drafts.heads.HeadDrafter` (vanilla, p-best 0-gram, rescored).
            Each step gives it the lattice at ``t`` of width ``strategy.k`` (slot 1 = the
            stored top-1 of head 1 alone) and the context ``x, y_1..y_t`` (int64).
        examples: trace indices (or a slice) to simulate; all by default.
        progress: show a progress bar over examples (rich) on stderr.

    Returns:
        The per-step records, per-example calls and ``B``.

    Raises:
        OracleError: if the strategy is not one, reads ``k > K``, proposes drafts of the wrong
            length, or ``examples`` is empty or out of range.

    Warns:
        TraceMismatchWarning: when head 1's stored top-1 differs from ``y_{t+1}`` somewhere in
            the simulated examples (counted and located in the result).
    """
    k = _strategy_k(trace, strategy)
    idx = _example_indices(trace, examples)
    rows: dict[str, list[Any]] = {key: [] for key in StepRecords.__dataclass_fields__}
    calls = np.empty(idx.size, dtype=np.int64)
    generated = np.empty(idx.size, dtype=np.int64)
    mis_e: list[np.ndarray] = []
    mis_t: list[np.ndarray] = []
    order: Iterable[tuple[int, int]] = enumerate(idx.tolist())
    if progress:
        from rich.progress import track

        order = track(list(order), description=f"simulating {_name(strategy)}")
    for j, e in order:
        ex = trace[e]
        step = _stepper(ex, strategy, k)
        m = ex.m
        t, n_calls = 0, 1  # the prefill: one call, y_1 certain
        while t + 1 < m:
            out = step(t)
            rows["example"].append(e)
            rows["t"].append(t)
            rows["n"].append(out.n)
            rows["tokens"].append(min(1 + out.n, m - (t + 1)))
            rows["winner"].append(out.winner)
            rows["drafts"].append(out.draft)
            rows["num_drafts"].append(out.num_drafts)
            n_calls += 1
            t += 1 + out.n
        calls[j] = n_calls
        generated[j] = m
        mt = ex.head1_mismatches()
        mis_e.append(np.full(mt.size, e, dtype=np.int64))
        mis_t.append(mt)
    steps = StepRecords(
        example=np.asarray(rows["example"], dtype=np.int64),
        t=np.asarray(rows["t"], dtype=np.int64),
        n=np.asarray(rows["n"], dtype=np.int64),
        tokens=np.asarray(rows["tokens"], dtype=np.int64),
        winner=np.asarray(rows["winner"], dtype=np.int64),
        drafts=(
            np.stack(rows["drafts"]).astype(np.int64)
            if rows["drafts"]
            else np.zeros((0, trace.h), dtype=np.int64)
        ),
        num_drafts=np.asarray(rows["num_drafts"], dtype=np.int64),
    )
    mismatch_example = np.concatenate(mis_e)
    mismatch_t = np.concatenate(mis_t)
    _warn_mismatches(trace, mismatch_example, mismatch_t)
    return SimulationResult(
        strategy=_name(strategy),
        k=k,
        h=trace.h,
        examples=idx,
        generated=generated,
        calls=calls,
        steps=steps,
        mismatch_example=mismatch_example,
        mismatch_t=mismatch_t,
        signature=trace.signature,
    )


def simulate_at_positions(
    trace: Trace,
    strategy: Oracle | DraftStrategy,
    example: Sequence[int] | np.ndarray,
    t: Sequence[int] | np.ndarray,
) -> StepRecords:
    """The step outcome of ``strategy`` at given positions, not along its own trajectory.

    Used to compare strategies at the same positions (SPEC sec. 7: wins, ties, losses at the
    vanilla trajectory's positions, ``vanilla_result.steps.example`` and ``.steps.t``).

    Args:
        trace: the trace.
        strategy: as in :func:`simulate`.
        example: int ``[S]``, trace indices.
        t: int ``[S]``, positions, ``0 <= t[j] < m`` of ``example[j]``.

    Returns:
        One record per position, in the order given.

    Raises:
        OracleError: on a bad strategy, arrays of different lengths, or a position out of
            range.
    """
    k = _strategy_k(trace, strategy)
    ex_arr = np.asarray(example)
    t_arr = np.asarray(t)
    if ex_arr.ndim != 1 or t_arr.shape != ex_arr.shape:
        raise OracleError(
            f"example and t must be 1-D arrays of one length, got shapes {ex_arr.shape} and "
            f"{t_arr.shape}"
        )
    if ex_arr.size and (ex_arr.dtype.kind not in "iu" or t_arr.dtype.kind not in "iu"):
        raise OracleError(
            f"example and t must be integers, got dtypes {ex_arr.dtype} and {t_arr.dtype}"
        )
    ex_arr = ex_arr.astype(np.int64)
    t_arr = t_arr.astype(np.int64)
    s = ex_arr.size
    if s and ((ex_arr < 0) | (ex_arr >= trace.num_examples)).any():
        bad = int(ex_arr[(ex_arr < 0) | (ex_arr >= trace.num_examples)][0])
        raise OracleError(
            f"example index {bad} is out of range for a trace of {trace.num_examples} examples"
        )
    lengths = trace.lengths
    if s:
        m = lengths[ex_arr]
        bad = (t_arr < 0) | (t_arr >= m)
        if bad.any():
            j = int(np.argmax(bad))
            raise OracleError(
                f"position t = {int(t_arr[j])} is outside [0, {int(m[j]) - 1}] for example "
                f"{int(ex_arr[j])} (m = {int(m[j])})"
            )
    n = np.zeros(s, dtype=np.int64)
    tokens = np.zeros(s, dtype=np.int64)
    winner = np.zeros(s, dtype=np.int64)
    num_drafts = np.zeros(s, dtype=np.int64)
    drafts = np.zeros((s, trace.h), dtype=np.int64)
    current = -1
    step: Callable[[int], _Outcome] | None = None
    for j in np.argsort(ex_arr, kind="stable").tolist():
        e = int(ex_arr[j])
        if e != current or step is None:
            step, current = _stepper(trace[e], strategy, k), e
        out = step(int(t_arr[j]))
        n[j], winner[j], num_drafts[j] = out.n, out.winner, out.num_drafts
        drafts[j] = out.draft
        tokens[j] = min(1 + out.n, int(lengths[e]) - (int(t_arr[j]) + 1))
    return StepRecords(
        example=ex_arr, t=t_arr, n=n, tokens=tokens, winner=winner, drafts=drafts,
        num_drafts=num_drafts,
    )
