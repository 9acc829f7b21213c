"""Buckets of new tokens and of attended rows, and one CUDA graph per pair: the thin layer over a
static forward.

A forward of ``T`` new tokens (``T`` at most the largest bucket) is padded to the next bucket
(:data:`BUCKETS`: 1, 2, 4, 8, 16, 32, 64), so a step's shapes come from a small fixed set. A
padding token repeats the last real token's position and reads the prefix and itself only; no
real token reads it, its keys and values land in rows past the cache's length (which the next
forward overwrites) and its output is dropped.

The rows a forward attends are bucketed too (:func:`kv_rows`): the rows it reads and writes
(``T_past + T``), rounded up to a power of two of at least :data:`KV_MIN`, at most the buffer's
rows. Attention then costs what the sequence holds, not what the buffer could hold (issue 41:
a 2048-row buffer attended in full cost a float32 greedy step twice a 300-row one), and a decode
meets a new shape only when its length doubles.

On a CUDA device each (tokens, rows) pair's forward is captured once as a CUDA graph
(:class:`BucketRunner` with ``capture=True``) and replayed: a step copies its inputs into the
graph's static input tensors and replays. On a CPU the same padded forward runs eagerly (that is
what the CPU tests check; capture itself is untested here: no GPU in CI).

The forward must be a function of static-shaped tensors only, ``forward(ids [1, Tb], positions
[1, Tb], bias [1, 1, Tb, R], start []) -> x [1, Tb, d]``, that reads its write row from
``start`` on the device (so a replay never depends on Python state) and attends ``R`` rows (the
bias's last size), with no host synchronisation inside (a requirement of capture). Its inputs
are made from the step's record (:class:`~blockdraft.models.step.Step`, padded on the device by
:func:`pad_step`).

Public surface:
    BUCKETS, KV_MIN
    bucket_of(t, buckets) -> Tb or None
    kv_rows(rows, total) -> R                 rows attended for a forward reaching ``rows``
    pad_step(step, size) -> Step              padded to ``size`` new tokens
    capture(run, pool, reset=None) -> (graph, output)   one zero-argument step as a CUDA graph
    BucketRunner(forward, inputs, buckets, capture)
        .run(step) -> x [1, T, d];  .captured (token buckets), .graphs ((tokens, rows) pairs)
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

KV_MIN = 64
"""The fewest rows a forward attends (short sequences share one shape)."""

Forward = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
Inputs = Callable[[Step], tuple[torch.Tensor, ...]]


def bucket_of(t: int, buckets: tuple[int, ...]) -> int | None:
    """The smallest bucket of at least ``t`` tokens, or None when ``t`` exceeds them all."""
    return next((b for b in buckets if b >= t), None)


def kv_rows(rows: int, total: int) -> int:
    """The rows a forward attends when it reads and writes rows ``0 .. rows - 1`` of a buffer of
    ``total`` rows: the next power of two of at least :data:`KV_MIN`, at most ``total``."""
    want = max(int(rows), KV_MIN)
    return min(1 << (want - 1).bit_length(), int(total))


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


def capture(run: Callable[[], Any], pool: Any, reset: Callable[[], None] | None = None
            ) -> tuple[Any, Any]:
    """Capture ``run`` (a function of static tensors only, no host synchronisation inside) as
    one CUDA graph: ``(graph, output)``, ``output`` what the captured call returned (its
    tensors are rewritten by every replay). It first runs :data:`WARMUP` times eagerly on a
    side stream (``reset()`` after each: a step that changes its own state in place puts it
    back), as ``torch.cuda.graph`` asks; the capture itself runs nothing. Graphs captured with
    one ``pool`` (``torch.cuda.graph_pool_handle()``) share their memory: replay them one at a
    time. Untested without a GPU."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(WARMUP):
            run()
            if reset is not None:
                reset()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        output = run()
    return graph, output


@dataclass(frozen=True, eq=False)
class _Captured:
    """One bucket's graph, its static inputs (copied into before each replay) and output."""

    graph: Any  # torch.cuda.CUDAGraph
    inputs: tuple[torch.Tensor, ...]
    output: torch.Tensor


class BucketRunner:
    """Runs a static forward padded to its bucket, captured once per (tokens, attended rows)
    pair on a CUDA device.

    Args:
        forward: the forward (see the module docstring).
        inputs: ``step -> (ids, positions, bias, start)``, a (padded) step's arguments on its
            device, the bias over the rows the forward attends.
        buckets: increasing bucket sizes.
        capture: capture a CUDA graph per (tokens, rows) pair (the step's tensors on a CUDA
            device); False runs the padded step eagerly.
    """

    def __init__(self, forward: Forward, inputs: Inputs, buckets: tuple[int, ...],
                 capture: bool) -> None:
        self.forward, self.inputs, self.buckets = forward, inputs, buckets
        self.capture = capture
        self._graphs: dict[tuple[int, int], _Captured] = {}
        self._pool: Any = None

    @property
    def largest(self) -> int:
        """The largest bucket: a forward of more new tokens runs unpadded, eagerly."""
        return self.buckets[-1]

    @property
    def captured(self) -> tuple[int, ...]:
        """The token buckets captured so far (each at its first use, for some rows)."""
        return tuple(sorted({size for size, _ in self._graphs}))

    @property
    def graphs(self) -> tuple[tuple[int, int], ...]:
        """The ``(tokens, attended rows)`` pairs captured so far."""
        return tuple(sorted(self._graphs))

    def run(self, step: Step) -> torch.Tensor:
        """The step's output for ``T <= largest`` new tokens: ``x [1, T, d]`` (its own tensor)."""
        t = step.length
        size = bucket_of(t, self.buckets)
        assert size is not None, "the caller runs T > largest unpadded"
        args = self.inputs(pad_step(step, size))
        if not self.capture:
            return self.forward(*args)[:, :t]
        key = (size, int(args[2].shape[-1]))
        captured = self._graphs.get(key) or self._capture(key, args)
        for static, value in zip(captured.inputs, args, strict=True):
            static.copy_(value, non_blocking=True)
        captured.graph.replay()
        return captured.output[:, :t].clone()

    def _capture(self, key: tuple[int, int], args: tuple[torch.Tensor, ...]) -> _Captured:
        """Capture the step's graph for ``key = (tokens, rows)`` (untested without a GPU). Its
        warm-up runs write the last ``tokens`` of the ``rows`` attended: rows past the cache's
        length (the step reads and writes at most ``rows`` rows from its start), which the
        replay that follows overwrites; no cache row is touched."""
        size, rows = key
        static = tuple(a.clone() for a in args)
        static[3].fill_(rows - size)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph, output = capture(lambda: self.forward(*static), self._pool)
        captured = _Captured(graph, static, output)
        self._graphs[key] = captured
        return captured
