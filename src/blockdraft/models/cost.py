"""What a verification step costs on a model's runtime, as a function of its tree size.

A tree drafter that sizes its tree by what pays (:class:`~blockdraft.drafts.CostAwareTreeDrafter`)
needs the price of each node: a forward over ``N`` new tokens costs little more than one
token's while the step is memory-bound (ONNX Runtime float32 on a CPU: about 1.01x at N = 2,
1.16x at 6, 1.9x at 16; a captured graph on a GPU: flat up to 64), and then grows with ``N``.
:class:`CostCurve` holds the measured milliseconds; :func:`measure_cost_curve` measures them
on the model itself, in a second or two, with the calls a verification step makes (the
forward over a token tree of ``N`` nodes and the base head at every node; the Medusa heads'
top-k at the accepted node, once).

Public surface:
    CostCurve(nodes, step_ms, heads_ms, greedy_ms, device="")
        .step(n, heads=True) -> ms        one verification step over n nodes
        .steps(n [...], heads=True) -> ms [...]   the same for many sizes at once
        .relative(n, heads=True) -> float the same over a greedy step
        .to_dict() / CostCurve.from_dict(d)
    measure_cost_curve(model, nodes=(1, 2, 4, 6, 8, 12, 16, 24, 32), prefix=128,
                       repeats=5) -> CostCurve
    read_cost_curve(path, variant=None) -> CostCurve   a curve file of benchmarks/results/costs
    cost_curve_of(model) -> CostCurve      declared, or measured once per model (MEASURED)
    monotone(values) -> list        the non-decreasing least-squares fit (a dip is noise)
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from blockdraft.models.capabilities import capabilities_of
from blockdraft.models.errors import ModelError

DEFAULT_NODES = (1, 2, 4, 6, 8, 12, 16, 24, 32)
"""Tree sizes a measured curve holds (linear in between, extrapolated past the last)."""


@dataclass(frozen=True)
class CostCurve:
    """Milliseconds of one verification step by its number of tree nodes ``N``.

    Attributes:
        nodes: the measured sizes, ascending, starting at 1.
        step_ms: ms of a step over ``N`` nodes: the forward and the base head at every node.
        heads_ms: ms the step adds when the next step's Medusa heads are projected (their
            ResBlocks, projection and top-k at one node).
        greedy_ms: ms of a greedy step (one node, no Medusa head): the unit of
            :meth:`relative`.
        device: what was measured (runtime, precision, threads), for records.
    """

    nodes: tuple[int, ...]
    step_ms: tuple[float, ...]
    heads_ms: float
    greedy_ms: float
    device: str = ""

    def __post_init__(self) -> None:
        nodes = tuple(int(n) for n in self.nodes)
        ms = tuple(float(x) for x in self.step_ms)
        if not nodes or nodes[0] != 1 or bool(np.any(np.diff(nodes) <= 0)) or (
                len(ms) != len(nodes)):
            raise ModelError(f"a cost curve needs ascending node counts from 1 and one time "
                             f"each, got nodes {nodes} and times {ms}")
        if not all(np.isfinite(x) and x > 0 for x in (*ms, self.greedy_ms)) or not (
                np.isfinite(self.heads_ms) and self.heads_ms >= 0):
            raise ModelError(f"cost curve times must be finite and positive, got {ms}, "
                             f"heads {self.heads_ms}, greedy {self.greedy_ms}")
        object.__setattr__(self, "nodes", nodes)
        object.__setattr__(self, "step_ms", ms)

    def step(self, n: int, heads: bool = True) -> float:
        """ms of a step over ``n >= 1`` nodes (interpolated; past the last measured size, the
        last segment's slope)."""
        return float(self.steps(np.asarray([n]), heads)[0])

    def steps(self, n: np.ndarray, heads: bool = True) -> np.ndarray:
        """:meth:`step` of every entry of ``n`` (int ``[...]``): float64 ``[...]``."""
        x, y = np.asarray(self.nodes), np.asarray(self.step_ms)
        n = np.asarray(n, dtype=np.float64)
        ms = np.interp(n, x, y)
        if len(x) > 1:
            slope = (y[-1] - y[-2]) / (x[-1] - x[-2])
            ms = np.where(n > x[-1], y[-1] + slope * (n - x[-1]), ms)
        return ms + (self.heads_ms if heads else 0.0)

    def relative(self, n: int, heads: bool = True) -> float:
        """:meth:`step` in greedy steps."""
        return self.step(n, heads) / self.greedy_ms

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (:meth:`from_dict` reads it back)."""
        return {"nodes": list(self.nodes), "step_ms": list(self.step_ms),
                "heads_ms": self.heads_ms, "greedy_ms": self.greedy_ms, "device": self.device}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CostCurve:
        """The curve :meth:`to_dict` wrote.

        Raises:
            ModelError: a missing field or values :class:`CostCurve` refuses.
        """
        try:
            return cls(nodes=tuple(data["nodes"]), step_ms=tuple(data["step_ms"]),
                       heads_ms=float(data["heads_ms"]), greedy_ms=float(data["greedy_ms"]),
                       device=str(data.get("device", "")))
        except (KeyError, TypeError, ValueError) as e:
            raise ModelError(f"not a cost curve ({e}): {data!r}") from e


def read_cost_curve(path: str | Path, variant: str | None = None) -> CostCurve:
    """A cost curve from a file of ``benchmarks/results/costs``: a :meth:`CostCurve.to_dict`
    JSON (``curve-ort32.json``, written by ``benchmarks/measure_curve.py``), or the runtime
    comparison of ``benchmarks/bench_costs.py`` (``costs.json``), whose ``variant`` row
    (``"onnxruntime:float32"``; needed when it holds several) gives the curve: a whole
    verification call over ``N`` nodes (``verify_ms``, the heads' projection included, so
    ``heads_ms`` is 0) and its greedy step.

    Raises:
        ModelError: a file that cannot be read or is neither kind, or an unknown variant.
    """
    import json

    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ModelError(f"cannot read the cost curve {p}: {e}") from e
    if not isinstance(data, dict):
        raise ModelError(f"{p} is not a cost curve (a JSON object)")
    if "nodes" in data:
        if variant:
            raise ModelError(f"{p} holds one curve; drop its variant {variant!r}")
        return CostCurve.from_dict(data)
    rows = data.get("rows")
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ModelError(f"{p} is neither a cost curve (nodes, step_ms) nor bench_costs.py's "
                         "comparison (rows)")
    names = [str(r.get("variant")) for r in rows]
    if variant is None and len(rows) != 1:
        raise ModelError(f"{p} holds the curves of {', '.join(names)}: name one "
                         f"({p}:{names[0]})")
    if variant is not None and variant not in names:
        raise ModelError(f"{p} has no variant {variant!r}; it holds {', '.join(names)}")
    row = rows[names.index(variant) if variant is not None else 0]
    try:
        ms = {int(n): float(v) for n, v in row["verify_ms"].items()}
        sizes = sorted(ms)
        return CostCurve(nodes=tuple(sizes), step_ms=tuple(monotone([ms[n] for n in sizes])),
                         heads_ms=0.0, greedy_ms=float(row["greedy_ms"]),
                         device=f"{row['variant']} ({p.name}: verify_ms)")
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ModelError(f"{p}: variant {row.get('variant')!r} has no usable verify_ms and "
                         f"greedy_ms ({e})") from e


def _bushy_tree(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A tree of ``n`` nodes, two children per node (breadth first): its parents and depths."""
    parents = np.array([-1] + [(u - 1) // 2 for u in range(1, n)], dtype=np.int64)
    depths = np.zeros(n, dtype=np.int64)
    for u in range(1, n):
        depths[u] = depths[parents[u]] + 1
    return parents, depths


def measure_cost_curve(model: Any, nodes: Sequence[int] = DEFAULT_NODES, prefix: int = 128,
                       repeats: int = 5, seed: int = 0) -> CostCurve:
    """The model's :class:`CostCurve`, measured now (medians over ``repeats`` after a warm-up
    round, made non-decreasing in the tree size by :func:`monotone`; about ``repeats x
    sum(nodes)`` forwards' worth of time, 1-3 s for SmolLM2 on a CPU). Time it on a quiet
    machine: another busy process inflates every size differently.

    Raises:
        ModelError: ``nodes`` not ascending from 1, or a model without the factored protocol
            (``hidden``), whose trees cannot be timed this way.
    """
    import torch  # here: reading and using a cost curve needs no torch (sweep workers)

    from blockdraft.models.protocol import as_factored

    with torch.no_grad():
        return _measure(as_factored(model), model, nodes, prefix, repeats, seed)


def _measure(m: Any, model: Any, nodes: Sequence[int], prefix: int, repeats: int,
             seed: int) -> CostCurve:
    import torch

    sizes = tuple(int(n) for n in nodes)
    if not sizes or sizes[0] != 1 or bool(np.any(np.diff(sizes) <= 0)):
        raise ModelError(f"nodes must ascend from 1, got {sizes}")
    caps = capabilities_of(model)
    if caps.max_seq_len is not None:
        prefix = max(1, min(prefix, caps.max_seq_len - sizes[-1] - 1))
    if caps.vocab_size is None:
        raise ModelError(f"{type(model).__name__} declares no vocabulary size: its cost curve "
                         "cannot draw token ids")
    vocab = caps.vocab_size
    dev = torch.device(model.device)
    rng = np.random.default_rng(seed)
    ids = torch.as_tensor(rng.integers(0, vocab, (1, prefix)), device=dev)
    _, past = m.hidden(ids, None)
    h = caps.h

    def step(n: int) -> None:
        parents, depths = _bushy_tree(n, rng)
        tokens = torch.as_tensor(rng.integers(0, vocab, (1, n)), device=dev)
        if n == 1:
            x, _ = m.hidden(tokens, past)
        else:
            mask = np.zeros((n, n), dtype=bool)
            for u in range(n):
                v = u
                while v >= 0:
                    mask[u, v] = True
                    v = int(parents[v])
            x, _ = m.hidden(tokens, past, position_ids=torch.as_tensor(
                past.length + depths, device=dev), tree_mask=torch.as_tensor(mask, device=dev))
        m.project(m.head_states(x[0], heads=1))

    def heads() -> None:
        if h > 1 and caps.head_topk:
            m.head_topk(torch.zeros(1, _width(model), device=dev), 8)

    def timed(fn: Any) -> float:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        start = time.perf_counter()
        fn()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        return (time.perf_counter() - start) * 1e3

    times: dict[Any, list[float]] = {}
    for rnd in range(repeats + 1):  # round 0 warms every shape up
        for n in sizes:
            ms = timed(lambda n=n: step(n))
            if rnd:
                times.setdefault(n, []).append(ms)
        ms = timed(heads)
        if rnd:
            times.setdefault("heads", []).append(ms)
    step_ms = tuple(monotone([float(np.median(times[n])) for n in sizes]))
    label = " ".join(str(x) for x in (caps.runtime, caps.precision,
                                      f"threads={getattr(model, 'threads', '')}"))
    return CostCurve(nodes=sizes, step_ms=step_ms, heads_ms=float(np.median(times["heads"])),
                     greedy_ms=step_ms[0], device=label)


class MeasuredCurves:
    """Cost curves measured on model objects, each once (a mutable cache, weakly keyed by the
    model: a curve goes with its model).

    ``get(model)`` is the model's declared curve (:attr:`Capabilities.cost
    <blockdraft.models.capabilities.Capabilities.cost>`) when it declares one, else the curve
    measured at the first call (:func:`measure_cost_curve` over the sizes a drafter sizes its
    trees by, about a second for SmolLM2 on a CPU), kept for the next.
    """

    NODES = (1, 2, 4, 8, 16, 32)
    """The sizes measured for a drafter (a tree of at most 32 nodes pays on every runtime
    measured; the curve extrapolates past them)."""

    def __init__(self) -> None:
        self._curves: weakref.WeakKeyDictionary[Any, CostCurve] = weakref.WeakKeyDictionary()

    def get(self, model: Any) -> CostCurve:
        """The model's declared or measured curve (see the class docstring)."""
        declared = capabilities_of(model).cost
        if declared is not None:
            return declared  # type: ignore[no-any-return]
        curve = self._curves.get(model)
        if curve is None:
            curve = measure_cost_curve(model, nodes=self.NODES, repeats=5)
            self._curves[model] = curve
        return curve


MEASURED = MeasuredCurves()
"""The process's curves, one per model object."""


def cost_curve_of(model: Any) -> CostCurve:
    """The model's verification cost curve: declared, or measured once (:class:`MeasuredCurves`)."""
    return MEASURED.get(model)


def monotone(values: Sequence[float]) -> list[float]:
    """The least-squares non-decreasing fit of ``values`` (pool adjacent violators): a forward
    over more tokens never costs less, so a measured dip is noise, pooled with its neighbour."""
    blocks: list[list[float]] = []  # [sum, count]
    for v in values:
        blocks.append([float(v), 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            total, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    out: list[float] = []
    for total, count in blocks:
        out += [total / count] * int(count)
    return out


def _width(model: Any) -> int:
    """The hidden size ``d`` the heads read."""
    config = getattr(model, "config", None)
    for name in ("d_model", "hidden_size", "n_embd"):
        value = getattr(config, name, None)
        if value:
            return int(value)
    raise ModelError(f"cannot tell the hidden size of {type(model).__name__}")
