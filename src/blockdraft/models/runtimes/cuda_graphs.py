"""Buckets of new tokens, and one CUDA graph per bucket: the thin layer over a static forward.

A forward of ``T`` new tokens (``T`` at most the largest bucket) is padded to the next bucket
(:data:`BUCKETS`: 1, 2, 4, 8, 16, 32, 64), so a step's shapes come from a small fixed set. A
padding token repeats the last real token's position and reads the prefix and itself only; no
real token reads it, its keys and values land in rows past the cache's length (which the next
forward overwrites) and its output is dropped. On a CUDA device each bucket's forward is then
captured once as a CUDA graph (:class:`BucketRunner` with ``capture=True``) and replayed: a
step copies its inputs into the graph's static input tensors and replays. On a CPU the same
padded forward runs eagerly (that is what the CPU tests check; capture itself is untested
here: no GPU in CI).

The forward must be a function of static-shaped tensors only, ``forward(ids [1, Tb], positions
[1, Tb], bias [1, 1, Tb, R], start []) -> x [1, Tb, d]``, that reads its write row from
``start`` on the device (so a replay never depends on Python state), with no host
synchronisation inside (a requirement of capture). Its inputs are made from the step's record
(:class:`~blockdraft.models.step.Step`, padded on the device by :func:`pad_step`).

Public surface:
    BUCKETS
    bucket_of(t, buckets) -> Tb or None
    pad_step(step, size) -> Step          padded to ``size`` new tokens
    BucketRunner(forward, inputs, buckets, scratch_row, capture)
        .run(step) -> x [1, T, d]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from blockdraft.models.step import Step

BUCKETS = (1, 2, 4, 8, 16, 32, 64)
"""The numbers of new tokens a graph is captured for (a chain, a tree, a greedy step)."""
WARMUP = 2
"""Eager runs of a bucket's forward on a side stream before its capture (what
``torch.cuda.graph`` asks for: lazy initialisations happen outside the graph)."""

Forward = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
Inputs = Callable[[Step], tuple[torch.Tensor, ...]]


def bucket_of(t: int, buckets: tuple[int, ...]) -> int | None:
    """The smallest bucket of at least ``t`` tokens, or None when ``t`` exceeds them all."""
    return next((b for b in buckets if b >= t), None)


def pad_step(step: Step, size: int) -> Step:
    """The step's ``T`` new tokens padded to ``size`` (on its device): padding tokens are token
    0 at the last real position, reading themselves only among the new tokens; no real token
    reads them."""
    t, dev = step.length, step.ids.device
    ids = torch.zeros(1, size, dtype=torch.long, device=dev)
    ids[:, :t] = step.ids
    positions = step.positions[:, -1:].repeat(1, size)  # (1, size)
    positions[:, :t] = step.positions
    mask = torch.eye(size, dtype=torch.bool, device=dev)
    mask[:t, :t] = (torch.ones(t, t, dtype=torch.bool, device=dev).tril()
                    if step.tree_mask is None else step.tree_mask)
    return dataclasses.replace(step, ids=ids, positions=positions, tree_mask=mask)


@dataclass(frozen=True, eq=False)
class _Captured:
    """One bucket's graph, its static inputs (copied into before each replay) and output."""

    graph: Any  # torch.cuda.CUDAGraph
    inputs: tuple[torch.Tensor, ...]
    output: torch.Tensor


class BucketRunner:
    """Runs a static forward padded to its bucket, captured once per bucket on a CUDA device.

    Args:
        forward: the forward (see the module docstring).
        inputs: ``step -> (ids, positions, bias, start)``, a (padded) step's arguments on its
            device.
        buckets: increasing bucket sizes.
        scratch_row: a first row where a bucket's warm-up runs may write (``scratch_row +
            max(buckets)`` rows must exist, past every cache's length).
        capture: capture a CUDA graph per bucket (the step's tensors on a CUDA device);
            False runs the padded step eagerly.
    """

    def __init__(self, forward: Forward, inputs: Inputs, buckets: tuple[int, ...],
                 scratch_row: int, capture: bool) -> None:
        self.forward, self.inputs, self.buckets = forward, inputs, buckets
        self.scratch_row, self.capture = scratch_row, capture
        self._graphs: dict[int, _Captured] = {}
        self._pool: Any = None

    @property
    def largest(self) -> int:
        """The largest bucket: a forward of more new tokens runs unpadded, eagerly."""
        return self.buckets[-1]

    @property
    def captured(self) -> tuple[int, ...]:
        """The buckets captured so far (each at its first use)."""
        return tuple(sorted(self._graphs))

    def run(self, step: Step) -> torch.Tensor:
        """The step's output for ``T <= largest`` new tokens: ``x [1, T, d]`` (its own tensor)."""
        t = step.length
        size = bucket_of(t, self.buckets)
        assert size is not None, "the caller runs T > largest unpadded"
        args = self.inputs(pad_step(step, size))
        if not self.capture:
            return self.forward(*args)[:, :t]
        captured = self._graphs.get(size) or self._capture(size, args)
        for static, value in zip(captured.inputs, args, strict=True):
            static.copy_(value, non_blocking=True)
        captured.graph.replay()
        return captured.output[:, :t].clone()

    def _capture(self, size: int, args: tuple[torch.Tensor, ...]) -> _Captured:
        """Capture bucket ``size``'s step (untested without a GPU). Its warm-up runs write
        from ``scratch_row``, so no cache row is touched before the first replay."""
        static = tuple(a.clone() for a in args)
        static[3].fill_(self.scratch_row)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP):
                self.forward(*static)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            output = self.forward(*static)
        captured = _Captured(graph, static, output)
        self._graphs[size] = captured
        return captured
