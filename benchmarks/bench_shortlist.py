"""Shortlist heads: how many of the vocabulary the Medusa heads need (issue 27, item 2).

    .venv/bin/python -m benchmarks.bench_shortlist --distill DIR \\
        --trace chat=TRACE_DIR --trace tasks=TRACE_DIR [--sizes 4096,8192,16384,32768] \\
        [--runtimes onnxruntime:float32,torch:float32] --threads 1 \\
        --out benchmarks/results/shortlist

The shortlist of each size is the most frequent tokens of the base's own answers in the
training split of a distillation set (``blockdraft heads distill``), the end-of-sequence id
always in (:func:`blockdraft.training.heads.shortlist.frequency_shortlist`). For each size:

- coverage: the share of answer tokens inside it, on the set's held-out answers and on the
  greedy outputs of each trace (the prompts the benchmarks decode);
- B of vanilla heads and of the 4-best 0-gram trie, simulated on each trace (K = 32, recorded
  without a shortlist) with every head's top-K cut to the shortlist: a head's ranking over the
  shortlist is its ranking over V with the other tokens removed, so these B are exact for
  strategies that rank by head scores (a per-head constant shift leaves path rankings alone),
  up to the rare positions where no shortlisted token is in a head's stored top 32 (there a
  shortlisted token that is not the target stands in: a miss, as it almost surely is);
- step time on each runtime (one thread, the model exported with that shortlist): the
  Medusa heads' part of a step (ResBlocks, projection onto the shortlist, top-k; ``heads``
  of :func:`blockdraft.models.cost.measure_cost_curve`), a vanilla step over 6 nodes, and a
  greedy step, medians; run it on a quiet machine.

Writes ``shortlist.{md,json,png}`` with the command and a signature.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.report import log

BENCH = Path(__file__).resolve().parent


def restricted_trace(trace: Any, ids: np.ndarray, path: Path) -> Any:
    """``trace`` with every Medusa head's top-K cut to the shortlist ``ids`` (the kept entries
    in their order, padding after; head 1 untouched; log-probs as stored)."""
    from blockdraft.oracle import TraceWriter

    keep = np.zeros(trace.V, dtype=bool)
    keep[ids] = True
    with TraceWriter(path, h=trace.h, K=trace.K, V=trace.V,
                     signature={**dict(trace.signature), "shortlist": int(ids.size)}) as w:
        for ex in trace:
            top = np.array(ex.topk_ids, dtype=np.int64)  # (m, h, K)
            lp = np.array(ex.topk_logprobs, dtype=np.float64)
            y = np.asarray(ex.greedy_ids, dtype=np.int64)
            for i in range(1, trace.h):
                inside = (top[:, i] >= 0) & keep[np.maximum(top[:, i], 0)]  # (m, K)
                order = np.argsort(~inside, axis=1, kind="stable")  # inside first, in order
                top[:, i] = np.take_along_axis(np.where(inside, top[:, i], -1), order, 1)
                lp[:, i] = np.take_along_axis(np.where(inside, lp[:, i], -np.inf), order, 1)
                # no shortlisted token in the stored top-K: the head's top-1 lies further down,
                # a guess that is (almost) never right; stand in a shortlisted token that is
                # not the target, so the strategy still drafts and misses
                empty = np.flatnonzero(top[:, i, 0] < 0)
                target = np.full(empty.size, -1)
                ok = empty + i - 1 < y.size
                target[ok] = y[empty[ok] + i - 1]
                top[empty, i, 0] = np.where(target == ids[0], ids[1], ids[0])
                lp[empty, i, 0] = -30.0
            w.add(ex.prompt_ids, ex.greedy_ids, top, lp, np.array(ex.entropy))
    from blockdraft.oracle import Trace

    return Trace.open(path)


def simulate_sizes(traces: dict[str, Any], shortlists: dict[int, np.ndarray]
                   ) -> dict[str, dict[str, dict[str, float]]]:
    """``{trace: {size or 'V': {strategy: B}}}``."""
    from blockdraft.drafts import DraftSpec
    from blockdraft.oracle import simulate

    strategies = {"vanilla": DraftSpec("heads"),
                  "4-best 0-gram trie": DraftSpec("heads", k=4, p=4)}
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name, trace in traces.items():
        out[name] = {"V": {s: simulate(trace, d).block_efficiency
                           for s, d in strategies.items()}}
        for size, ids in shortlists.items():
            with tempfile.TemporaryDirectory() as tmp:
                cut = restricted_trace(trace, ids, Path(tmp) / "t")
                out[name][str(size)] = {s: simulate(cut, d).block_efficiency
                                        for s, d in strategies.items()}
            log(f"{name} shortlist {size}: " + ", ".join(
                f"{s} B {b:.3f}" for s, b in out[name][str(size)].items()))
    return out


def time_sizes(shortlists: dict[int, np.ndarray], runtimes: list[str], threads: int,
               repeats: int) -> dict[str, dict[str, dict[str, float]]]:
    """``{runtime: {size or 'V': {heads_ms, vanilla_ms, greedy_ms}}}``, the sizes interleaved
    in every round."""
    import copy

    import torch

    from blockdraft.models import load_model
    from blockdraft.models.cost import measure_cost_curve
    from blockdraft.models.hf import HFBlockwiseModel
    from blockdraft.models.runtimes import on_runtime

    torch.set_num_threads(threads)
    base = load_model("smollm2")
    models: dict[tuple[str, str], Any] = {}
    for size in ["V", *map(str, shortlists)]:
        heads = copy.deepcopy(base.heads)
        heads.set_shortlist(None if size == "V" else torch.from_numpy(shortlists[int(size)]))
        model = HFBlockwiseModel(base.base, heads, None)
        for spec in runtimes:
            runtime, precision = spec.split(":")
            models[spec, size] = (model if runtime == "torch"
                                  else on_runtime(model, runtime, precision, threads=threads))
    times: dict[str, dict[str, dict[str, list[float]]]] = {}
    for _ in range(repeats):
        for (spec, size), model in models.items():
            curve = measure_cost_curve(model, nodes=(1, 2, 4, 6), prefix=128, repeats=3)
            row = times.setdefault(spec, {}).setdefault(size, {})
            row.setdefault("heads_ms", []).append(curve.heads_ms)
            row.setdefault("vanilla_ms", []).append(curve.step(6))
            row.setdefault("greedy_ms", []).append(curve.greedy_ms)
    return {spec: {size: {k: float(np.median(v)) for k, v in row.items()}
                   for size, row in by_size.items()} for spec, by_size in times.items()}


def main(argv: list[str] | None = None) -> int:
    from blockdraft.core.files import write_text_atomic
    from blockdraft.core.signature import environment, format_signature
    from blockdraft.models import load_tokenizer
    from blockdraft.oracle import Trace
    from blockdraft.training.heads import open_distill_set
    from blockdraft.training.heads.shortlist import coverage, frequency_shortlist, token_counts

    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--distill", type=Path, required=True, help="a distillation set folder")
    ap.add_argument("--trace", action="append", default=[], help="NAME=DIR (repeatable)")
    ap.add_argument("--sizes", default="4096,8192,16384,32768")
    ap.add_argument("--runtimes", default="onnxruntime:float32,torch:float32",
                    help="runtime:precision list to time, or none")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5, help="timing rounds (interleaved)")
    ap.add_argument("--out", type=Path, default=BENCH / "results" / "shortlist")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    tok = load_tokenizer("smollm2")
    dset = open_distill_set(args.distill)
    vocab = 49152
    counts = token_counts(dset.answers("train"), vocab)
    held = token_counts(dset.answers("heldout"), vocab)
    eos_id = getattr(tok, "eos_id", None)
    eos = [] if eos_id is None else [int(eos_id)]
    shortlists = {n: frequency_shortlist(counts, n, always=eos) for n in sizes}
    traces = {}
    for spec in args.trace:
        name, _, path = spec.partition("=")
        traces[name] = Trace.open(path)
    cov = {str(n): {"train": coverage(counts, ids), "heldout": coverage(held, ids),
                    **{name: coverage(token_counts([np.asarray(ex.greedy_ids)
                                                    for ex in tr], vocab), ids)
                       for name, tr in traces.items()}}
           for n, ids in shortlists.items()}
    log(f"counted {int(counts.sum())} answer tokens; coverage: " + json.dumps(cov))
    b = simulate_sizes(traces, shortlists)
    runtimes = [] if args.runtimes == "none" else args.runtimes.split(",")
    timing = time_sizes(shortlists, runtimes, args.threads, args.repeats) if runtimes else {}
    env = environment("cpu")
    fields = {"model": "smollm2", "heads": "packaged", "distill": args.distill.name,
              "train_tokens": int(counts.sum()), "sizes": args.sizes,
              "traces": "+".join(traces), "threads": args.threads, "repeats": args.repeats,
              **env}
    report = {"command": "python -m benchmarks.bench_shortlist " + shlex.join(
        sys.argv[1:] if argv is None else argv), "signature": format_signature(fields),
        "coverage": cov, "B": b, "timing": timing, "wall_s": time.perf_counter() - start}
    args.out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out / "shortlist.json", json.dumps(report, indent=1) + "\n")
    write_text_atomic(args.out / "shortlist.md", markdown(report))
    plot(report, args.out / "shortlist.png")
    print(markdown(report))
    return 0


def markdown(report: dict[str, Any]) -> str:
    sizes = list(report["coverage"])
    cols = ["V", *sizes]
    lines = ["# Shortlist heads: coverage, B and step time by draft-vocabulary size", "",
             f"Command: `{report['command']}`", "", f"Signature: `{report['signature']}`", "",
             "Coverage: the share of answer tokens inside the shortlist (counted on the "
             "training answers). B: simulated on each trace with the heads' top-K cut to the "
             "shortlist (exact for these strategies). Times: medians, ms, one thread.", "",
             "| size | " + " | ".join(f"coverage {k}" for k in report["coverage"][sizes[0]])
             + " |", "|---|" + "---|" * len(report["coverage"][sizes[0]])]
    for n in sizes:
        lines.append(f"| {n} | " + " | ".join(f"{v:.4f}" for v in report["coverage"][n].values())
                     + " |")
    for name, by in report["B"].items():
        strategies = list(by["V"])
        lines += ["", f"## B on {name}", "", "| strategy | " + " | ".join(cols) + " |",
                  "|---|" + "---|" * len(cols)]
        for s in strategies:
            lines.append(f"| {s} | " + " | ".join(f"{by[c][s]:.3f}" for c in cols) + " |")
    for spec, by in report["timing"].items():
        lines += ["", f"## Step time on {spec} (ms)", "",
                  "| size | heads (ResBlocks + projection + top-k) | vanilla step (6 nodes + "
                  "heads) | greedy step | vanilla / greedy |", "|---|---|---|---|---|"]
        for c in cols:
            r = by[c]
            lines.append(f"| {c} | {r['heads_ms']:.2f} | {r['vanilla_ms']:.2f} | "
                         f"{r['greedy_ms']:.2f} | {r['vanilla_ms'] / r['greedy_ms']:.3f} |")
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [int(s) for s in report["coverage"]]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for name, by in report["B"].items():
        for s in by["V"]:
            axes[0].plot(sizes, [by[str(n)][s] for n in sizes], marker="o", label=f"{name}: {s}")
            axes[0].axhline(by["V"][s], ls=":", lw=0.8)
    axes[0].set(xscale="log", xlabel="shortlist size (tokens)", ylabel="B (simulated)",
                title="B by shortlist (dotted: the whole vocabulary)")
    axes[0].legend(fontsize=7)
    for spec, by in report["timing"].items():
        axes[1].plot(sizes, [by[str(n)]["heads_ms"] for n in sizes], marker="o", label=spec)
        axes[1].axhline(by["V"]["heads_ms"], ls=":", lw=0.8)
    axes[1].set(xscale="log", xlabel="shortlist size (tokens)", ylabel="ms per step",
                title="the heads' part of a step (dotted: V)")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
