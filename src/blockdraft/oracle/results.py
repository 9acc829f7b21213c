"""The results of a simulation: per-step records and the per-example totals with ``B``.

Public surface:
    StepRecords         one row per simulated step (a verification call), frozen arrays
    SimulationResult    the outcome of :func:`~blockdraft.oracle.simulate.simulate`: calls,
                        generated tokens, block efficiency ``B``, the steps, ``to_dict()``
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from blockdraft.core.arrays import readonly
from blockdraft.core.efficiency import block_efficiency
from blockdraft.oracle.errors import OracleError


@dataclass(frozen=True, eq=False)
class StepRecords:
    """One row per simulated step (a verification call), in walk order.

    Attributes:
        example: int64 ``[S]``, the trace index of the step's example.
        t: int64 ``[S]``, the position (the committed prefix is ``x, y_1..y_t``).
        n: int64 ``[S]``, tokens accepted beyond the certain ``d_1`` (``0 .. h-1``).
        tokens: int64 ``[S]``, tokens of ``y`` the call made certain:
            ``min(1 + n, m - (t + 1))``.
        winner: int64 ``[S]``, the accepted node of the step's tree (a batch of drafts is
            verified as its trie: the first leaf below the node ends the winning draft).
        drafts: int64 ``[S, h]``, the winning draft ``d_1 .. d_h`` (the root path of the accepted
            node's first leaf, the lattice's top-1 tokens after it).
        num_drafts: int64 ``[S]``, drafts the strategy proposed (the tree's leaves: ``p``, or
            fewer when the lattice has fewer paths).
        nodes: int64 ``[S]``, tokens the step's verification forward holds (the tree's nodes,
            or the trie of a batch's drafts; ``h`` for the oracle's chain), the size a cost
            curve prices; zeros when unknown (records built elsewhere).
    """

    example: np.ndarray
    t: np.ndarray
    n: np.ndarray
    tokens: np.ndarray
    winner: np.ndarray
    drafts: np.ndarray
    num_drafts: np.ndarray
    nodes: np.ndarray | None = None

    def __post_init__(self) -> None:
        s = np.asarray(self.example).shape[0]
        if self.nodes is None:
            object.__setattr__(self, "nodes", np.zeros(s, dtype=np.int64))
        for name in ("example", "t", "n", "tokens", "winner", "num_drafts", "nodes"):
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

    def relative_time(self, cost: Any, heads: bool = True) -> float:
        """The simulated steps' time in greedy steps on a runtime's cost curve
        (:class:`~blockdraft.models.cost.CostCurve`): ``sum cost.relative(nodes)`` (the
        prefill left out; ``heads``: the steps project the Medusa heads, as every strategy but
        a lookup alone does)."""
        nodes = self.steps.nodes
        assert nodes is not None  # filled in by StepRecords
        return float(sum(cost.relative(int(n), heads) for n in nodes))

    def simulated_speedup(self, cost: Any, heads: bool = True) -> float:
        """Speedup over greedy on that curve, prefills aside: greedy's ``sum(m - 1)`` steps
        over :meth:`relative_time` (NaN without steps)."""
        time = self.relative_time(cost, heads)
        return float((self.generated - 1).clip(min=0).sum() / time) if time else float("nan")

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
        number this project reports; docs/definitions.md sec. 2, the rule of
        :func:`~blockdraft.core.efficiency.block_efficiency`)."""
        return block_efficiency(self.total_generated, self.total_calls)

    @property
    def example_block_efficiency(self) -> np.ndarray:
        """float64 ``[E]``: ``m / calls`` of each example."""
        return np.array([block_efficiency(m, c) for m, c in
                         zip(self.generated.tolist(), self.calls.tolist(), strict=True)],
                        dtype=np.float64)

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
