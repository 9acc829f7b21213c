"""Medusa heads against prefix-conditioned (Hydra-style) heads and an EAGLE-style draft layer on
the held-out chat set, online.

    .venv/bin/python -m benchmarks.bench_prefix_chat --medusa HEADS_DIR --prefix HEADS_DIR \\
        [--eagle LAYER_DIR] [--max-new-tokens 96] [--k 4] [--p 8] [--budget 16] \\
        [--runtime onnxruntime --time] --out benchmarks/results/heads/prefix

The 36 requests of ``benchmarks/chat_eval.jsonl`` (never trained on) are decoded by
SmolLM2-135M-Instruct on PyTorch or ONNX Runtime, float32, with the exact criterion, once per
strategy:

- Medusa heads: vanilla (each head's argmax) and the p-best trie of their sausage lattice;
- prefix heads: vanilla (each head reading the draft before it: Hydra's chain) and the exact
  p-best of their tree lattice (``ConditionalDrafter``), heads' scores alone;
- with ``--eagle``: the draft layer's chain (its greedy draft, one layer forward a token) and the
  exact p-best of its tree lattice, as the prefix heads' (PyTorch only so far);
- with ``--budget N``: each heads' confidence tree of N nodes (EAGLE-2's; Medusa heads over
  their sausage, prefix heads over their tree lattice: ``ConditionalTreeDrafter``);
- with ``--ngram LM --alpha A`` (and ``--eagle``, ``--budget N``): the draft layer's EAGLE-2
  tree of N nodes grown best first by arc + A x the n-gram LM's log-probability instead (Kim et
  al.'s global rescoring applied to the tree), and its p-best paths ranked by the LM;
- with ``--defaults``: each heads' default drafter (``decode`` told nothing) without timing.

Every output is checked against greedy decoding of the same model (token-identical). Reported:
B (tokens per serial call, the prefill counted) per kind of request and overall. With
``--time``: every call timed, interleaved per request (greedy, then each strategy, after one
warm-up of each on the first request), tokens/s and the speedup over greedy as medians over the
requests; prompt lookup and each heads' default drafter (``decode`` told nothing: the Medusa
heads' packaged recipe, the prefix heads' cost-aware tree lattice with lookup copies, and the
same without the copies) join the strategies.
Writes ``prefix.{json,md}`` with the command and a signature.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
CHAT = BENCH / "chat_eval.jsonl"


def main(argv: list[str] | None = None) -> int:
    import torch

    from benchmarks.common.report import command_line, header, write_report
    from blockdraft.core.signature import environment, format_signature
    from blockdraft.drafts import ConditionalTreeDrafter, DraftSpec, default_spec
    from blockdraft.drafts.spec import Resources
    from blockdraft.models import greedy_generate, load_model
    from blockdraft.models.capabilities import capabilities_of
    from blockdraft.oracle.sweep.cache import file_digest
    from blockdraft.verify import decode

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--medusa", default=None, help="a Medusa heads folder")
    ap.add_argument("--prefix", default=None, help="a prefix heads folder")
    ap.add_argument("--eagle", default=None,
                    help="an EAGLE-style draft layer's folder (heads train --arch eagle)")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--k", type=int, default=4, help="arcs per slot or node")
    ap.add_argument("--p", default="8", help="drafts per step (comma-separated: one strategy "
                                             "per value)")
    ap.add_argument("--budget", default="",
                    help="token-tree sizes N (comma-separated): each heads' confidence tree "
                         "(EAGLE-2's: the sausage's for Medusa heads, the tree lattice's for "
                         "prefix heads) of N nodes")
    ap.add_argument("--eagle-precision", default="",
                    help="with --eagle on onnxruntime: the layer's weights, comma-separated "
                         "(float32, int8, q4): one set of the layer's rows per value (default: "
                         "the folder's recipe)")
    ap.add_argument("--ngram", default=None,
                    help="an n-gram LM (KenLM file) rescoring the draft layer's tree and p-best "
                         "paths (with --eagle)")
    ap.add_argument("--alpha", default="1",
                    help="the n-gram LM's weights (comma-separated: one strategy per value)")
    ap.add_argument("--defaults", action="store_true",
                    help="add each heads' default drafter (B only unless --time)")
    ap.add_argument("--runtime", default="torch", choices=("torch", "onnxruntime"))
    ap.add_argument("--time", action="store_true",
                    help="also time every call (interleaved per prompt: greedy first) and add "
                         "prompt lookup and the Medusa heads' packaged default drafter")
    ap.add_argument("--prompts", type=int, default=None, help="the first N requests only")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    rows = [json.loads(line) for line in CHAT.read_text(encoding="utf-8").splitlines() if line]
    rows = rows[: args.prompts] if args.prompts else rows
    models = {name: load_model("smollm2", heads=folder, runtime=args.runtime,
                               threads=args.threads)
              for name, folder in (("medusa", args.medusa), ("prefix", args.prefix))
              if folder is not None}
    precisions = [v for v in args.eagle_precision.split(",") if v]
    # the draft layer once per weight precision asked (its rows tagged), else as its folder says
    eagles = {f"eagle-{v}": f" [{v}]" for v in precisions} if precisions else {"eagle": ""}
    if args.eagle:
        for key in eagles:
            extra = {"draft_precision": key.split("-", 1)[1]} if key != "eagle" else {}
            models[key] = load_model("smollm2", heads=args.eagle, runtime=args.runtime,
                                     threads=args.threads, **extra)
    if not models:
        ap.error("name at least one of --medusa, --prefix, --eagle")
    first = next(iter(models.values()))  # greedy decodes with the base of the first named
    tok = first.tokenizer
    prompts = [tok.apply_chat_template([{"role": "user", "content": r["prompt"]}])
               for r in rows]
    eos, n_new = tok.eos_id, args.max_new_tokens
    ps = [int(v) for v in args.p.split(",") if v]  # "": no p-best rows

    def ngram_scorers() -> list[tuple[float, Any]]:
        """(alpha, the LM's path scorer) per ``--alpha`` value, or none without ``--ngram``."""
        if not args.ngram:
            return []
        spec = DraftSpec("tree-lattice", k=args.k, p=1, rescorer="ngram", lm=args.ngram,
                         alpha=1.0)
        return [(float(a), resources.path_scorer(spec)) for a in args.alpha.split(",")]

    resources = Resources()
    # each a DraftSpec, which decode builds on the heads' model (its capabilities, its cost
    # curve), but for the tree-lattice confidence tree of exactly N nodes: the spec's
    # tree-lattice tree always grows while it pays on a cost curve, so that one is built here
    strategies: list[tuple[str, str, Any]] = []
    if args.medusa:
        strategies += [("Medusa vanilla", "medusa", DraftSpec("heads")),
                       *[(f"Medusa {p}-best (k={args.k})", "medusa",
                          DraftSpec("heads", k=args.k, p=p)) for p in ps]]
    if args.prefix:
        strategies += [("prefix vanilla", "prefix", DraftSpec("heads")),
                       *[(f"prefix {p}-best tree lattice (k={args.k})", "prefix",
                          DraftSpec("tree-lattice", k=args.k, p=p)) for p in ps]]
    for key, tag in eagles.items() if args.eagle else ():
        strategies += [(f"EAGLE chain{tag}", key, DraftSpec("heads")),
                       *[(f"EAGLE {p}-best tree lattice (k={args.k}){tag}", key,
                          DraftSpec("tree-lattice", k=args.k, p=p)) for p in ps]]
    for n in [int(v) for v in args.budget.split(",") if v]:
        if args.medusa:
            strategies.append((f"Medusa confidence tree (k={args.k}, N={n})", "medusa",
                               DraftSpec("tree", tree="confidence", k=args.k, budget=n)))
        if args.prefix:
            strategies.append((f"prefix tree-lattice confidence tree (k={args.k}, N={n})",
                               "prefix", ConditionalTreeDrafter(k=args.k, budget=n)))
        for key, tag in eagles.items() if args.eagle else ():  # EAGLE-2's dynamic tree
            strategies.append((f"EAGLE-2 tree (k={args.k}, N={n}){tag}", key,
                               ConditionalTreeDrafter(k=args.k, budget=n)))
            strategies += [(f"EAGLE-2 tree + n-gram (k={args.k}, N={n}, alpha={a:g}){tag}",
                            key, ConditionalTreeDrafter(k=args.k, budget=n, scorer=lm, alpha=a))
                           for a, lm in ngram_scorers()]
    for key, tag in eagles.items() if args.eagle else ():
        # the p-best paths ranked by the LM alone (Kim et al.'s global rescoring)
        strategies += [(f"EAGLE {p}-best tree lattice + n-gram (k={args.k}){tag}", key,
                        DraftSpec("tree-lattice", k=args.k, p=p, rescorer="ngram",
                                  lm=args.ngram, alpha=1.0)) for p in ps if args.ngram]
    if args.defaults and not args.time:
        strategies += [(f"{which} default", which, DraftSpec("default")) for which in models]
    if args.time:
        base = next(iter(models))
        strategies[:0] = [("prompt lookup", base, DraftSpec("lookup"))]
        if args.medusa:
            strategies.insert(1, ("Medusa default (packaged recipe)", "medusa",
                                  DraftSpec("default")))
        for which, label in (("prefix", "prefix"),
                             *((key, f"EAGLE{tag}") for key, tag in eagles.items())):
            if which not in models:
                continue
            strategies.append((f"{label} default (cost-aware tree lattice + lookup)", which,
                               DraftSpec("default")))
            default = default_spec(capabilities_of(models[which]))
            if default.lookup:  # the same tree without the copies, beside
                strategies.append((f"{label} cost-aware tree lattice, no lookup", which,
                                   dataclasses.replace(default, lookup=False)))

    def run(which: str, drafter: Any, prompt: list[int]) -> tuple[list[int], int, float]:
        t0 = time.perf_counter()
        if drafter is None and which == "greedy":
            out = greedy_generate(first, prompt, n_new, eos_id=eos)
            return list(out), len(out), time.perf_counter() - t0
        o = decode(models[which], prompt, drafter=drafter, max_new_tokens=n_new, eos_id=eos)
        return list(o.tokens), o.calls, time.perf_counter() - t0

    if args.time:  # warm-up: exports, cost curves, the default drafter's files
        for _, which, drafter in [("greedy", "greedy", None), *strategies]:
            run(which, drafter, prompts[0])
    kinds = sorted({r["category"] for r in rows})
    got: dict[str, list[tuple[list[int], int, float]]] = {"greedy": []}
    for i, prompt in enumerate(prompts):
        got["greedy"].append(run("greedy", None, prompt))
        for label, which, drafter in strategies:
            got.setdefault(label, []).append(run(which, drafter, prompt))
        print(f"prompt {i + 1}/{len(prompts)}", file=sys.stderr, flush=True)
    greedy = got["greedy"]
    results: list[dict[str, Any]] = []
    for label, which, _ in [("greedy", "greedy", None), *strategies]:
        outs = got[label]
        same = sum(o[0] == g[0] for o, g in zip(outs, greedy, strict=True))
        by_kind = {}
        for kind in [*kinds, "all"]:
            idx = [i for i, r in enumerate(rows) if kind in ("all", r["category"])]
            by_kind[kind] = sum(len(outs[i][0]) for i in idx) / sum(outs[i][1] for i in idx)
        row: dict[str, Any] = {"strategy": label, "heads": which,
                               "identical": f"{same}/{len(rows)}", "B": by_kind}
        if args.time:
            row["tokens_per_s"] = statistics.median(len(o[0]) / o[2] for o in outs)
            row["speedup"] = statistics.median(
                (len(o[0]) / o[2]) / (len(g[0]) / g[2]) for o, g in zip(outs, greedy,
                                                                       strict=True))
        results.append(row)
        print(f"{label}: B {by_kind['all']:.3f}, identical {same}/{len(rows)}"
              + (f", {row['speedup']:.2f}x" if args.time else ""), file=sys.stderr, flush=True)
    env = environment("cpu")
    signature = format_signature({
        "model": "smollm2",
        **{which: Path(folder).name if folder else "-" for which, folder in
           (("medusa", args.medusa), ("prefix", args.prefix), ("eagle", args.eagle))},
        "eagle_precision": args.eagle_precision or "-",
        "runtime": args.runtime, "precision": "float32", "set": CHAT.name,
        "prompts": len(rows), "max_new_tokens": n_new, "k": args.k, "p": args.p,
        "budget": args.budget or "-",
        "ngram": f"{Path(args.ngram).name}@{file_digest(args.ngram)[:12]}|alpha:{args.alpha}"
        if args.ngram else "-", "criterion": "exact", "threads": args.threads, **env})
    report = {"command": command_line("benchmarks.bench_prefix_chat", argv), "signature": signature,
              "results": results, "wall_s": round(time.perf_counter() - start, 1)}
    timed = args.time
    lines = [*header("Medusa against prefix-conditioned heads on the held-out chat set", report),
             f"B: tokens per serial call (prefill counted), exact criterion, {args.runtime} "
             "float32; identical: outputs token-identical to greedy."
             + (" tokens/s: median over requests of tokens over the call's wall time; "
                "speedup: median over requests of that over greedy's on the same request "
                "(interleaved: greedy, then every strategy, per request)." if timed else ""),
             "",
             "| strategy | identical | " + " | ".join(kinds) + " | all |"
             + (" tokens/s | speedup |" if timed else ""),
             "|---|---|" + "---|" * (len(kinds) + 1) + ("---|---|" if timed else "")]
    for r in results:
        lines.append(f"| {r['strategy']} | {r['identical']} | " + " | ".join(
            f"{r['B'][kind]:.3f}" for kind in [*kinds, "all"]) + " |"
            + (f" {r['tokens_per_s']:.1f} | {r['speedup']:.2f}x |" if timed else ""))
    write_report(report, args.out, "prefix", "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
