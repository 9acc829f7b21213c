"""How well Medusa heads predict chat: top-1/top-5 per head and B on a held-out chat set.

    .venv/bin/python -m benchmarks.bench_heads_chat [--heads DIR] [--max-new-tokens 96] \\
        --out benchmarks/results/heads/chat

The chat set (``benchmarks/chat_eval.jsonl``: 36 requests in six kinds, explanations, code,
summaries, QA, translation and math, written for this benchmark and never trained on) is
decoded greedily by SmolLM2-135M-Instruct (the packaged heads, or ``--heads``) on ONNX Runtime
float32 (the same answers as PyTorch float32; faster), recorded as a trace, and scored from it:

- top-1 / top-5 of each Medusa head (heads 2..h): at answer position ``t``, head ``i`` guesses
  ``y_{t+i}``; pooled over every position where that token exists, per kind and overall;
- B (docs/definitions.md sec. 2) of vanilla heads (k = 1) and of the 8-best trie (k = 8,
  p = 8), simulated exactly on the trace (the online decode gives the same B: tests).

Writes ``chat.{json,md}`` with the command and a signature.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

BENCH = Path(__file__).resolve().parent
CHAT = BENCH / "chat_eval.jsonl"


def head_accuracy(trace: Any, examples: list[int], ks: tuple[int, ...] = (1, 5)
                  ) -> dict[int, dict[int, float]]:
    """``{head i: {k: share of positions where y_{t+i} is in head i's top k}}``, i >= 2."""
    hits: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    total: dict[int, int] = defaultdict(int)
    for e in examples:
        ex = trace[e]
        y = np.asarray(ex.greedy_ids)
        top = np.asarray(ex.topk_ids)  # (m, h, K)
        for i in range(2, top.shape[1] + 1):
            t = np.arange(0, len(y) - i + 1)  # positions whose y_{t+i} exists
            if t.size == 0:
                continue
            want = y[t + i - 1]
            total[i] += t.size
            for k in ks:
                hits[i][k] += int((top[t, i - 1, :k] == want[:, None]).any(axis=1).sum())
    return {i: {k: hits[i][k] / total[i] for k in ks} for i in sorted(total)}


def main(argv: list[str] | None = None) -> int:
    import torch

    from benchmarks.common.report import command_line, header, write_report
    from blockdraft.core.signature import environment, format_signature
    from blockdraft.drafts import DraftSpec
    from blockdraft.models import load_model
    from blockdraft.oracle import simulate
    from blockdraft.oracle.record import record_trace

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heads", default=None, help="a Medusa heads folder (default: packaged)")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    rows = [json.loads(line) for line in CHAT.read_text(encoding="utf-8").splitlines() if line]
    model = load_model("smollm2", heads=args.heads, runtime="onnxruntime", threads=args.threads)
    tok = model.tokenizer
    prompts = [tok.apply_chat_template([{"role": "user", "content": r["prompt"]}])
               for r in rows]
    with tempfile.TemporaryDirectory() as tmp:
        trace = record_trace(model, prompts, Path(tmp) / "trace",
                             max_new_tokens=args.max_new_tokens, eos_id=tok.eos_id, K=10)
        kinds = sorted({r["category"] for r in rows})
        groups = {kind: [i for i, r in enumerate(rows) if r["category"] == kind]
                  for kind in kinds}
        groups["all"] = list(range(len(rows)))
        result: dict[str, Any] = {}
        for name, idx in groups.items():
            acc = head_accuracy(trace, idx)
            vanilla = simulate(trace, DraftSpec("heads"), examples=idx)
            trie = simulate(trace, DraftSpec("heads", k=8, p=8), examples=idx)
            result[name] = {"prompts": len(idx),
                            "tokens": int(sum(len(trace[i].greedy_ids) for i in idx)),
                            "top1": {i: a[1] for i, a in acc.items()},
                            "top5": {i: a[5] for i, a in acc.items()},
                            "B_vanilla": vanilla.block_efficiency,
                            "B_trie8": trie.block_efficiency}
    env = environment("cpu")
    heads = args.heads or "packaged"
    signature = format_signature({
        "model": "smollm2", "heads": Path(heads).name, "runtime": "onnxruntime",
        "precision": "float32", "set": CHAT.name, "max_new_tokens": args.max_new_tokens,
        "criterion": "exact", "version": env["version"], "commit": env["commit"]})
    report = {"command": command_line("benchmarks.bench_heads_chat", argv), "signature": signature,
              "groups": result, "wall_s": time.perf_counter() - start}
    report = json.loads(json.dumps(report))
    h = max(int(k) for k in report["groups"]["all"]["top1"]) if report["groups"] else 0
    lines = [*header("Medusa heads on a held-out chat set", report),
             "top-1 / top-5: head i's guess of the token i - 1 positions after the next one, "
             "pooled over the greedy answers; B: tokens per serial call, simulated exactly.", "",
             "| kind | prompts | tokens | " + " | ".join(f"head {i} top-1/top-5"
                                                         for i in range(2, h + 1))
             + " | vanilla B | 8-best trie B |", "|---|---|---|" + "---|" * (h - 1) + "---|---|"]
    for name, g in report["groups"].items():
        lines.append(f"| {name} | {g['prompts']} | {g['tokens']} | " + " | ".join(
            f"{g['top1'][str(i)]:.3f} / {g['top5'][str(i)]:.3f}" for i in range(2, h + 1))
            + f" | {g['B_vanilla']:.3f} | {g['B_trie8']:.3f} |")
    write_report(report, args.out, "chat", "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
