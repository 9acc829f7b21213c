"""Tune the drafting recipe on held-out training answers (Kim et al. App. E), never on the
evaluation prompts (issue 27, items 3d and 4).

    .venv/bin/python -m benchmarks.tune_drafting --trace TRACE --lm answers=LM.bin \\
        [--cost COSTS.json] [--alphas 0.25,0.5,1,2] [--weights 0,0.2,0.4] [--p 0,2,4] \\
        --out benchmarks/results/tune [--recipe DIR]

``TRACE`` is a trace of the base's greedy answers to the held-out prompts of a distillation
set (``blockdraft trace --ids`` over that split's prompts): prompts no model was trained on and
no benchmark decodes. Its examples are split in two halves:

1. the *fit* half measures the acceptance tables of the cost-aware tree
   (:func:`blockdraft.oracle.fit_acceptance`), once per context-LM weight (the LM evidence is
   the interpolated LM's);
2. the *tune* half simulates every setting (LM weight ``alpha``, context weight ``lam``, ``p``
   rescored paths; ``k`` and the tree's size limit fixed) and ranks them by the simulated
   speedup on the runtime's cost curve (:meth:`SimulationResult.simulated_speedup`); 1-best
   rescoring's B is reported for each ``alpha`` and ``lam`` too (App. E's sweep).

The best setting, its tables (fitted on the whole trace) and the LM are written as a drafting
recipe (``--recipe DIR``: ``acceptance.json`` and ``recipe.json``, to copy beside the heads).
Writes ``tune.{md,json}`` with the command and a signature.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common.report import log

BENCH = Path(__file__).resolve().parent


def cost_curve(path: Path | None, heads_ms: float) -> Any:
    """ONNX Runtime float32's curve from a ``bench_costs`` JSON (``chain_ms``: a forward over N
    tokens with the base head at each), the heads' part added; or a ``CostCurve`` JSON."""
    from blockdraft.models.cost import CostCurve

    path = path or BENCH / "results" / "costs" / "costs.json"
    data = json.loads(path.read_text())
    if "nodes" in data:
        return CostCurve.from_dict(data)
    row = next(r for r in data["rows"] if r["variant"] == "onnxruntime:float32")
    nodes = sorted(int(n) for n in row["chain_ms"])
    return CostCurve(nodes=tuple(nodes), step_ms=tuple(row["chain_ms"][str(n)] for n in nodes),
                     heads_ms=heads_ms, greedy_ms=row["greedy_ms"],
                     device=f"onnxruntime:float32 ({path.name}) + heads {heads_ms} ms")


def main(argv: list[str] | None = None) -> int:
    from blockdraft.core.files import write_text_atomic
    from blockdraft.core.signature import environment, format_signature
    from blockdraft.drafts import DraftSpec
    from blockdraft.oracle import Trace, fit_acceptance, simulate
    from blockdraft.rescorers.ngram import NgramLM, NgramRescorer

    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--trace", type=Path, required=True)
    ap.add_argument("--lm", required=True, help="NAME=PATH of the n-gram LM")
    ap.add_argument("--cost", type=Path, default=None, help="a cost curve (JSON)")
    ap.add_argument("--heads-ms", type=float, default=1.0,
                    help="the heads' part of a step when --cost is a bench_costs file")
    ap.add_argument("--alphas", default="0.25,0.5,1,2")
    ap.add_argument("--weights", default="0,0.2,0.4")
    ap.add_argument("--p", default="0,2,4")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--max-nodes", type=int, default=32)
    ap.add_argument("--context-order", type=int, default=4)
    ap.add_argument("--out", type=Path, default=BENCH / "results" / "tune")
    ap.add_argument("--recipe", type=Path, default=None)
    args = ap.parse_args(argv)
    start = time.perf_counter()
    trace = Trace.open(args.trace)
    name, _, lm_path = args.lm.partition("=")
    lm = NgramLM(lm_path)
    cost = cost_curve(args.cost, args.heads_ms)
    alphas = [float(a) for a in args.alphas.split(",")]
    weights = [float(w) for w in args.weights.split(",")]
    ps = [int(p) for p in args.p.split(",")]
    n = trace.num_examples
    fit_half, tune_half = list(range(0, n, 2)), list(range(1, n, 2))

    def rescorer(alpha: float, lam: float) -> Any:
        return NgramRescorer(lm, alpha=alpha, context_weight=lam,
                             context_order=args.context_order)

    def ngram(alpha: float, lam: float) -> dict[str, Any]:
        """The spec's fields of ``rescorer(alpha, lam)``: the LM file, its weight, the context
        LM."""
        return {"rescorer": "ngram", "lm": lm_path, "alpha": alpha,
                "context_order": args.context_order, "context_weight": lam}

    tables: dict[float, str] = {}  # the fitted tables' files: a spec names its tables by file
    scratch = tempfile.TemporaryDirectory(prefix="tune-tables-")
    for lam in weights:
        t0 = time.perf_counter()
        fitted = fit_acceptance(trace, k=args.k, lm=rescorer(1.0, lam).path_scorer(),
                                examples=fit_half)
        tables[lam] = str(fitted.save(Path(scratch.name) / f"lam{lam:g}.json"))
        log(f"tables for lam={lam} fitted in {time.perf_counter() - t0:.0f} s")
    rows: list[dict[str, Any]] = []
    vanilla = simulate(trace, DraftSpec("heads"), examples=tune_half)
    rows.append({"strategy": "vanilla", "alpha": None, "lam": None, "p": None,
                 "B": vanilla.block_efficiency, "speedup": vanilla.simulated_speedup(cost)})
    for alpha, lam in itertools.product(alphas, weights):
        res = simulate(trace, DraftSpec("heads", k=args.k, p=1, **ngram(alpha, lam)),
                       examples=tune_half)
        rows.append({"strategy": "1-best", "alpha": alpha, "lam": lam, "p": 1,
                     "B": res.block_efficiency, "speedup": res.simulated_speedup(cost)})
        log(f"1-best alpha={alpha} lam={lam}: B {res.block_efficiency:.3f}")
    for p, lam in itertools.product(ps, weights):
        tree_alphas: list[float | None] = list(alphas) if p else [None]
        for tree_alpha in tree_alphas:
            # the heads' chain, p rescored paths and lookup copies, on the pinned cost curve
            spec = DraftSpec("cost-aware", k=args.k, p=p, budget=args.max_nodes, lookup=True,
                             copy_length=16, tables=tables[lam],
                             **({} if p == 0 and lam == 0 else ngram(tree_alpha or 1.0, lam)))
            res = simulate(trace, spec.build(cost=cost), examples=tune_half)
            nodes = res.steps.nodes
            assert nodes is not None  # a rated drafter records its trees' sizes
            rows.append({"strategy": "cost-aware tree", "alpha": tree_alpha, "lam": lam, "p": p,
                         "B": res.block_efficiency, "speedup": res.simulated_speedup(cost),
                         "nodes": float(nodes.mean())})
            log(f"tree p={p} alpha={tree_alpha} lam={lam}: B {res.block_efficiency:.3f}, simulated "
                f"speedup {rows[-1]['speedup']:.3f}, {rows[-1]['nodes']:.1f} nodes")
    scratch.cleanup()
    best = max((r for r in rows if r["strategy"] == "cost-aware tree"),
               key=lambda r: r["speedup"])
    fields = {"trace": args.trace.name, "examples": n, "lm": f"{name}:{Path(lm_path).name}",
              "k": args.k, "max_nodes": args.max_nodes, "context_order": args.context_order,
              "cost": cost.device, **environment("cpu")}
    report = {"command": "python -m benchmarks.tune_drafting " + shlex.join(
        sys.argv[1:] if argv is None else argv), "signature": format_signature(fields),
        "cost": cost.to_dict(), "rows": rows, "best": best,
        "wall_s": time.perf_counter() - start}
    args.out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out / "tune.json", json.dumps(report, indent=1) + "\n")
    write_text_atomic(args.out / "tune.md", markdown(report))
    if args.recipe is not None:
        lam = best["lam"]
        final = fit_acceptance(trace, k=args.k, lm=rescorer(1.0, lam).path_scorer(),
                               signature=report["signature"])
        args.recipe.mkdir(parents=True, exist_ok=True)
        final.save(args.recipe / "acceptance.json")
        recipe = {"k": args.k, "p": best["p"], "max_nodes": args.max_nodes,
                  "alpha": best["alpha"] or 1.0, "context_order": args.context_order,
                  "context_weight": lam, "tuned_on": report["signature"]}
        write_text_atomic(args.recipe / "recipe.json", json.dumps(recipe, indent=1) + "\n")
        log(f"recipe written to {args.recipe}: {recipe}")
    print(markdown(report))
    return 0


def markdown(report: dict[str, Any]) -> str:
    def f(x: Any, fmt: str = ".3f") -> str:
        return "-" if x is None else format(x, fmt)

    lines = ["# The drafting recipe, tuned on held-out training answers", "",
             f"Command: `{report['command']}`", "", f"Signature: `{report['signature']}`", "",
             "Simulated on the tune half of the trace (the tables fitted on the other half); "
             "speedup: over greedy on the cost curve, prefill aside.", "",
             "| strategy | alpha | lam | p | B | simulated speedup | nodes/step |",
             "|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        lines.append(f"| {r['strategy']} | {f(r['alpha'], 'g')} | {f(r['lam'], 'g')} | "
                     f"{f(r['p'], 'd')} | {f(r['B'])} | {f(r['speedup'])}x | "
                     f"{f(r.get('nodes'), '.1f')} |")
    b = report["best"]
    lines += ["", f"Best: cost-aware tree, p = {b['p']}, alpha = {b['alpha']}, lam = {b['lam']}: "
              f"B {b['B']:.3f}, simulated speedup {b['speedup']:.3f}x."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
