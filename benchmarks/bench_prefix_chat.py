"""Medusa heads against prefix-conditioned (Hydra-style) heads on the held-out chat set, online.

    .venv/bin/python benchmarks/bench_prefix_chat.py --medusa HEADS_DIR --prefix HEADS_DIR \\
        [--max-new-tokens 96] [--k 4] [--p 8] --out benchmarks/results/heads/prefix

The 36 requests of ``benchmarks/chat_eval.jsonl`` (never trained on) are decoded by
SmolLM2-135M-Instruct on PyTorch float32 (prefix heads have no ONNX graph yet) with the exact
criterion, once per strategy:

- Medusa heads: vanilla (each head's argmax) and the p-best trie of their sausage lattice;
- prefix heads: vanilla (each head reading the draft before it: Hydra's chain) and the exact
  p-best of their tree lattice (``ConditionalDrafter``), heads' scores alone.

Every output is checked against greedy decoding of the same model (token-identical). Reported:
B (tokens per serial call, the prefill counted) per kind of request and overall. No timing:
the heads' step cost is compared in the note (one ``d x d`` product a head either way).
Writes ``prefix.{json,md}`` with the command and a signature.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
CHAT = BENCH / "chat_eval.jsonl"


def main(argv: list[str] | None = None) -> int:
    import torch
    from report import command_line, header, write_report

    from blockdraft.core.signature import environment, format_signature
    from blockdraft.drafts import ConditionalDrafter, HeadDrafter
    from blockdraft.models import greedy_generate, load_model
    from blockdraft.verify.decode import decode

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--medusa", required=True, help="a Medusa heads folder")
    ap.add_argument("--prefix", required=True, help="a prefix heads folder")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--k", type=int, default=4, help="arcs per slot or node")
    ap.add_argument("--p", type=int, default=8, help="drafts per step")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    rows = [json.loads(line) for line in CHAT.read_text(encoding="utf-8").splitlines() if line]
    models = {name: load_model("smollm2", heads=folder, runtime="torch")
              for name, folder in (("medusa", args.medusa), ("prefix", args.prefix))}
    tok = models["medusa"].tokenizer
    prompts = [tok.apply_chat_template([{"role": "user", "content": r["prompt"]}])
               for r in rows]
    eos = tok.eos_id
    greedy = [greedy_generate(models["medusa"], p, args.max_new_tokens, eos_id=eos)
              for p in prompts]
    strategies: list[tuple[str, str, Any]] = [
        ("Medusa vanilla", "medusa", HeadDrafter(k=1, p=1)),
        (f"Medusa {args.p}-best (k={args.k})", "medusa", HeadDrafter(k=args.k, p=args.p)),
        ("prefix vanilla", "prefix", HeadDrafter(k=1, p=1)),
        (f"prefix {args.p}-best tree lattice (k={args.k})", "prefix",
         ConditionalDrafter(k=args.k, p=args.p)),
    ]
    kinds = sorted({r["category"] for r in rows})
    results: list[dict[str, Any]] = []
    for label, which, drafter in strategies:
        outs = decode(models[which], prompts, drafter=drafter,
                      max_new_tokens=args.max_new_tokens, eos_id=eos)
        same = sum(o.tokens == list(g) for o, g in zip(outs, greedy, strict=True))
        by_kind = {}
        for kind in [*kinds, "all"]:
            idx = [i for i, r in enumerate(rows) if kind in ("all", r["category"])]
            by_kind[kind] = (sum(len(outs[i].tokens) for i in idx)
                             / sum(outs[i].calls for i in idx))
        results.append({"strategy": label, "heads": which, "identical": f"{same}/{len(rows)}",
                        "B": by_kind})
        print(f"{label}: B {by_kind['all']:.3f}, identical {same}/{len(rows)}",
              file=sys.stderr, flush=True)
    env = environment("cpu")
    signature = format_signature({
        "model": "smollm2", "medusa": Path(args.medusa).name, "prefix": Path(args.prefix).name,
        "runtime": "torch", "precision": "float32", "set": CHAT.name,
        "max_new_tokens": args.max_new_tokens, "k": args.k, "p": args.p, "criterion": "exact",
        "version": env["version"], "commit": env["commit"]})
    report = {"command": command_line("bench_prefix_chat.py", argv), "signature": signature,
              "results": results, "wall_s": round(time.perf_counter() - start, 1)}
    lines = [*header("Medusa against prefix-conditioned heads on the held-out chat set", report),
             "B: tokens per serial call (prefill counted), exact criterion, PyTorch float32; "
             "identical: outputs token-identical to greedy.", "",
             "| strategy | identical | " + " | ".join(kinds) + " | all |",
             "|---|---|" + "---|" * (len(kinds) + 1)]
    for r in results:
        lines.append(f"| {r['strategy']} | {r['identical']} | " + " | ".join(
            f"{r['B'][kind]:.3f}" for kind in [*kinds, "all"]) + " |")
    write_report(report, args.out, "prefix", "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
