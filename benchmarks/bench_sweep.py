"""One sweep on SmolLM2, timed on every engine: serially, on 2 local worker processes and on a
local Ray of 2 CPUs (issue 31's targets: workers >= 1.8x serial, Ray >= 1.6x serial, Ray's
overhead <= 5% of a configuration's work), with offline = online checked on real decodes.

    .venv/bin/python -m benchmarks.bench_sweep --lm none PATH.bin --k 4,8,16 --p 1,4,16 \\
        --alpha 0.5,1,2 [--trace DIR] [--online 4] [--out DIR]          # make bench-sweep

The trace: ``--trace DIR``, or by default the held-out chat set's SmolLM2 trace of
``bench_kim.py`` (ONNX Runtime float32, packaged heads, K = 32, 128 new tokens; recorded once
and cached in ``$BLOCKDRAFT_CACHE/bench/kim``). The grid (``blockdraft sweep``'s axes) runs
once per engine (``--engines``), each with an empty result cache, so every run computes every
configuration; the rows must be equal bit for bit across engines (their step digests), and the
page says so. Timings: each engine's wall time (Ray's start-up apart and included), speedups
over the serial run, and Ray's overhead per configuration: ``(wall x CPUs - sum of the tasks'
work) / configurations`` over the mean work of a configuration (a task's work is its
simulation alone; the overhead counts scheduling, transfers, worker start-up, opening the trace
and loading the LMs in each worker, and the idle tail). Time it on a quiet machine (load below 1.5;
the page records the load before and after).

``--online N`` decodes the trace's first N prompts with SmolLM2 on ONNX Runtime (1 thread)
under each strategy kind (vanilla, 1-best, p-best trie, tree, lookup, heads + lookup) and
compares the decode's B with the simulation's over the same prompts (docs/definitions.md sec.
6: equal unless a numerical tie flips a step).

Writes ``sweep.json``, ``sweep.md`` and ``sweep.png`` (B against each swept axis) in ``--out``
(default ``benchmarks/results/sweep``), with the command and signature.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common.report import log

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results" / "sweep"
TARGETS = {"processes": 1.8, "ray": 1.6}
BUSY = 0.25
"""Other processes' share of the CPU above which the machine is reported busy (half a core of
two)."""
RAY_OVERHEAD_TARGET = 0.05


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=None,
                    help="a trace folder (default: bench_kim.py's SmolLM2 chat trace)")
    ap.add_argument("--strategy", default="heads", help="blockdraft sweep --strategy")
    ap.add_argument("--k", default="4,8,16")
    ap.add_argument("--p", default="1,4,16")
    ap.add_argument("--alpha", default="0.5,1,2")
    ap.add_argument("--lm", nargs="+", default=["none"],
                    help="n-gram LMs ('none': no rescorer), as blockdraft sweep --lm")
    ap.add_argument("--tree", default="confidence")
    ap.add_argument("--budget", default="16")
    ap.add_argument("--engines", default="serial,processes,ray",
                    help="which runs to time (serial first: the others' speedups are over it)")
    ap.add_argument("--workers", type=int, default=2, help="processes / local Ray CPUs")
    ap.add_argument("--max-examples", type=int, default=None, help="the trace's first N only")
    ap.add_argument("--cost", type=Path,
                    default=BENCH / "results" / "costs" / "curve-ort32.json")
    ap.add_argument("--online", type=int, default=0,
                    help="decode the first N prompts online per strategy kind (SmolLM2)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    return ap.parse_args(argv)


def default_trace() -> Path:
    """bench_kim.py's chat trace (recorded once when missing)."""
    from benchmarks.bench_kim import (
        CHAT,
        KIM_VERSION,
        MODEL,
        PRECISION,
        RUNTIME,
        chat_set,
        ensure_trace,
    )
    from benchmarks.common.real_model import heads_label
    from blockdraft.core.files import cache_dir
    from blockdraft.models import load_tokenizer

    assert KIM_VERSION == 1 and CHAT.is_file()
    tok = load_tokenizer(MODEL)
    fields = {"model": MODEL, "heads": heads_label(MODEL), "runtime": RUNTIME,
              "precision": PRECISION, "threads": 1, "K": 32, "max_new_tokens": 128,
              "criterion": "exact"}

    def load() -> Any:
        from blockdraft.models import load_model

        return load_model(MODEL, runtime=RUNTIME, precision=PRECISION, threads=1)

    trace, _ = ensure_trace(chat_set(tok), fields, cache_dir("bench", "kim"), load, tok.eos_id)
    return Path(trace.path)


def run_engine(kind: str, trace: Path, settings: Any, args: argparse.Namespace) -> dict[str, Any]:
    """One timed sweep on a fresh, empty cache: its result, wall time and (Ray) start-up."""
    from blockdraft.oracle.sweep import Engine, ResultCache, sweep

    engine = Engine(kind, workers=1 if kind == "serial" else args.workers)
    examples = None if args.max_examples is None else range(args.max_examples)
    start_s = 0.0
    ray: Any = None
    if kind == "ray":
        import ray as ray_lib

        ray = ray_lib
        t0 = time.perf_counter()
        ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
        start_s = time.perf_counter() - t0
    try:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            result = sweep(trace, settings, engine=engine, cache=ResultCache(tmp),
                           examples=examples)
            wall = time.perf_counter() - t0
    finally:
        if ray is not None:
            ray.shutdown()
    work = sum(r.work_s for r in result.rows)
    cpus = 1 if kind == "serial" else args.workers
    n = len(result.rows)
    overhead = (wall * cpus - work) / n
    log(f"{engine.name}: {wall:.1f} s (+ {start_s:.1f} s start-up), work {work:.1f} s")
    return {"engine": engine.name, "kind": kind, "wall_s": wall, "startup_s": start_s,
            "total_s": wall + start_s, "work_s": work, "cpus": cpus,
            "overhead_per_config_s": overhead, "overhead_fraction": overhead / (work / n),
            "result": result}


def online_check(trace_path: Path, n: int, lm: str | None) -> list[dict[str, Any]]:
    """Decode the first ``n`` prompts of the trace under each strategy kind; B online against
    the simulation over the same prompts."""
    from blockdraft.drafts import DraftSpec
    from blockdraft.models import load_model
    from blockdraft.oracle import Trace, simulate
    from blockdraft.verify import decode

    trace = Trace.open(trace_path)
    sig = dict(trace.signature)
    model = load_model(str(sig.get("model", "smollm2")), runtime=sig.get("runtime", "torch"),
                       precision=sig.get("precision"), threads=1)
    eos = sig.get("eos_id")
    kinds = {"vanilla": DraftSpec("heads"), "p-best trie": DraftSpec("heads", k=8, p=4),
             "confidence tree": DraftSpec("tree", k=4, tree="confidence", budget=16),
             "lookup": DraftSpec("lookup"), "vanilla + lookup": DraftSpec("combined")}
    if lm:
        kinds["1-best"] = DraftSpec("heads", k=8, rescorer="ngram", lm=lm)
        kinds["4-best rescored trie"] = DraftSpec("heads", k=8, p=4, rescorer="ngram", lm=lm)
        kinds["heads + lookup, rescored"] = DraftSpec("combined", k=8, rescorer="ngram", lm=lm)
    rows = []
    examples = list(range(min(n, trace.num_examples)))
    for name, setting in kinds.items():  # the spec built offline by simulate, online by decode
        offline = simulate(trace, setting, examples=examples)
        tokens = calls = same = 0
        for e in examples:
            ex = trace[e]
            res = decode(model, ex.prompt_ids.tolist(), drafter=setting, max_new_tokens=ex.m,
                         eos_id=eos)
            tokens += len(res.tokens)
            calls += res.calls
            same += res.accept_lengths == offline.steps.n[offline.steps.example == e].tolist()
        online_b = tokens / calls
        rows.append({"strategy": name, "label": setting.label, "prompts": len(examples),
                     "B_offline": offline.block_efficiency, "B_online": online_b,
                     "equal": online_b == offline.block_efficiency,
                     "prompts_step_for_step": same})
        log(f"online {name}: B {online_b:.4f} online, {offline.block_efficiency:.4f} offline")
    return rows


def _shown(path: Path) -> str:
    """``path`` relative to the checkout when it is inside it."""
    try:
        return str(path.resolve().relative_to(BENCH.parent))
    except ValueError:
        return str(path)


def _busy_line(report: dict[str, Any]) -> str:
    """What the report says of other work on the machine before the sweep."""
    busy = report.get("cpu_busy_before")
    load = (f"load average {report['load_before']:.2f} before, {report['load_after']:.2f} after"
            " (it lags: a job that ended a minute before still counts)")
    if busy is None:
        return load + "."
    verdict = "busy: the timings are not the machine's" if busy > BUSY else "quiet"
    return (f"{100 * busy:.0f}% of the CPU in use by other processes over the 2 s before the "
            f"sweep ({verdict}; busy above {100 * BUSY:.0f}%); {load}.")


def markdown(report: dict[str, Any]) -> str:
    from benchmarks.common.report import header

    lines = [*header("A sweep of drafting strategies on SmolLM2, on one core, 2 processes "
                     "and a local Ray", report)]
    lines += [f"Trace: `{report['trace']}` ({report['examples']} examples, "
              f"{report['positions']} positions); {report['configurations']} configurations; "
              + _busy_line(report), "",
              "## Wall times", "",
              "| engine | wall s | start-up s | speedup over serial | target | overhead per "
              "configuration |", "|---|---|---|---|---|---|"]
    for run in report["runs"]:
        target = report["targets"].get(run["kind"])
        lines.append(
            f"| {run['engine']} | {run['wall_s']:.1f} | {run['startup_s']:.1f} | "
            + (f"{run['speedup']:.2f}x" if run.get("speedup") else "-") + " | "
            + (f">= {target}x: {'met' if run['speedup'] >= target else 'NOT met'}"
               if target and run.get("speedup") else "-") + " | "
            + f"{100 * run['overhead_fraction']:.1f}% of its work"
            + (f" (target <= 5%: {'met' if run['overhead_fraction'] <= 0.05 else 'NOT met'})"
               if run["kind"] == "ray" else "") + " |")
    lines += ["", "Speedup: serial wall time over the engine's (Ray's: start-up included). "
              "Overhead: (wall x CPUs - the tasks' summed work) / configurations, over a "
              "configuration's mean work: scheduling, transfers, worker start-up and the idle "
              "tail together.", "",
              f"Every engine's rows equal the serial run's bit for bit: "
              f"**{report['identical']}**.", "", "## Configurations", "",
              "| configuration | B | P(n>=i), i=1..h-1 | % rep | drafts | nodes | speedup |",
              "|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        lines.append(f"| {r['label']} | {r['block_efficiency']:.3f} | "
                     + " ".join(f"{a:.2f}" for a in r["head_acceptance"])
                     + f" | {r['pct_consecutive']:.1f} | {r['mean_drafts']:.2f} | "
                     f"{r['mean_nodes']:.2f} | "
                     + (f"{r['speedup']:.2f}x" if r.get("speedup") else "-") + " |")
    lines += ["", f"Speedup: over greedy decoding on `{report['cost']}`, prefills aside "
              "(simulated). P(n>=i): the share of steps that accepted at least i drafted "
              "tokens. % rep: consecutive repeated tokens in the winning drafts.", ""]
    if report["online"]:
        lines += ["## Offline = online", "", "| strategy | prompts | B offline | B online | "
                  "equal | prompts equal step for step |", "|---|---|---|---|---|---|"]
        for o in report["online"]:
            lines.append(f"| {o['strategy']} | {o['prompts']} | {o['B_offline']:.4f} | "
                         f"{o['B_online']:.4f} | {o['equal']} | {o['prompts_step_for_step']} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from benchmarks.common.report import command_line, cpu_busy, write_report
    from blockdraft.cli import build_parser
    from blockdraft.cli.sweep import grid_from_args
    from blockdraft.core.signature import environment, format_signature
    from blockdraft.models.cost import read_cost_curve
    from blockdraft.oracle import Trace
    from blockdraft.oracle.plots import plot_sweep

    args = parse_args(argv)
    busy_before = cpu_busy()  # other processes' share of the CPU now (the load average lags)
    load_before = os.getloadavg()[0]
    trace_path = args.trace or default_trace()
    trace = Trace.open(trace_path)
    grid_args = build_parser().parse_args(
        ["sweep", str(trace_path), "--strategy", args.strategy, "--k", args.k, "--p", args.p,
         "--alpha", args.alpha, "--tree", args.tree, "--budget", args.budget,
         "--lm", *args.lm])
    settings = grid_from_args(grid_args, trace).expand()
    log(f"{len(settings)} configurations over {trace_path}")
    cost = read_cost_curve(args.cost) if args.cost and args.cost.is_file() else None
    runs = [run_engine(kind, trace_path, settings, args) for kind in args.engines.split(",")]
    base = runs[0]
    identical = all(
        [r.steps_sha256 for r in run["result"].rows] == [r.steps_sha256 for r in
                                                         base["result"].rows]
        and [r.block_efficiency for r in run["result"].rows] == [
            r.block_efficiency for r in base["result"].rows] for run in runs)
    for run in runs:
        run["speedup"] = base["total_s"] / run["total_s"] if run is not base else None
    lms = [p for p in args.lm if p != "none"]
    online = online_check(trace_path, args.online, lms[0] if lms else None) if args.online else []
    n = len(trace.lengths) if args.max_examples is None else min(args.max_examples,
                                                                 trace.num_examples)
    fields = {"trace": Path(trace_path).name, **{f"trace_{k}": v for k, v in
                                                  trace.signature.items()
                                                  if k in ("model", "runtime", "precision",
                                                           "max_new_tokens", "K")},
              "examples": n, "strategy": args.strategy, "k": args.k, "p": args.p,
              "alpha": args.alpha, "lm": "+".join(Path(p).name for p in args.lm),
              "workers": args.workers, "engines": args.engines, **environment("cpu")}
    report = {
        "command": command_line("benchmarks.bench_sweep", argv),
        "signature": format_signature(fields),
        "fields": fields, "trace": str(trace_path), "examples": n,
        "positions": int(trace.lengths[:n].sum()), "configurations": len(settings),
        "load_before": load_before, "load_after": os.getloadavg()[0],
        "cpu_busy_before": busy_before,
        "targets": TARGETS, "ray_overhead_target": RAY_OVERHEAD_TARGET,
        "identical": identical, "cost": _shown(args.cost) if cost else None,
        "runs": [{k: v for k, v in run.items() if k != "result"} for run in runs],
        "rows": base["result"].to_dict(cost)["rows"], "online": online,
    }
    if busy_before is not None and busy_before > BUSY:
        log(f"the machine was busy ({100 * busy_before:.0f}% of its CPU in use before the "
            "sweep): the timings are not the machine's")
    def plot(_: dict[str, Any], path: Path) -> None:
        plot_sweep(base["result"], path)

    paths = write_report(report, args.out, "sweep", markdown, plot=plot)
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
