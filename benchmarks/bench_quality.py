"""What a runtime's precision costs in quality: held-out perplexity and next-token agreement.

    .venv/bin/python -m benchmarks.bench_quality --windows 24 --window 256 \\
        --variants torch:float32,onnxruntime:float32,onnxruntime:int8 \\
        --out benchmarks/results/quality

SmolLM2-135M-Instruct on held-out text it was never trained or tuned on in this project:
WikiText-2 ``test.txt`` (the shared data's evaluation split of the corpus), cut into
``--windows`` windows of ``--window`` tokens (seeded). For every variant, teacher-forced over
each window (one forward, the base head at every position): the perplexity (``exp`` of the mean
negative log-likelihood of each next token, natural log), and, against the first variant (the
reference, PyTorch float32), the share of positions whose argmax (the greedy next token) agrees
and the top-2 margin of the reference at the disagreements. Writes ``quality.{json,md}``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("BLOCKDRAFT_SHARED_DATA", REPO.parent / "shared" / "data"))


def windows(tok: Any, n: int, size: int, seed: int) -> list[list[int]]:
    """``n`` windows of ``size`` token ids from WikiText-2 test (seeded starts)."""
    text = (SHARED / "corpus" / "wikitext2_tokens" / "test.txt").read_text(encoding="utf-8")
    ids = tok.encode(text)
    rng = np.random.default_rng(seed)
    starts = sorted(rng.choice(len(ids) - size, size=n, replace=False))
    return [list(map(int, ids[s:s + size])) for s in starts]


@torch.no_grad()
def base_logits(model: Any, ids: list[int]) -> torch.Tensor:
    """float ``[T, V]``: the base head's raw logits at every position (one forward)."""
    x, _ = model.hidden(torch.tensor([ids], device=model.device))
    return model.project(model.head_states(x[0], heads=1))[:, 0].float().cpu()


def main(argv: list[str] | None = None) -> int:
    from benchmarks.common.report import command_line, header, write_report
    from blockdraft.core.signature import environment, format_signature
    from blockdraft.models import load_model
    from blockdraft.models.runtimes import on_runtime

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", type=int, default=24)
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--variants", default="torch:float32,onnxruntime:float32,onnxruntime:int8")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    base = load_model("smollm2")
    models = {}
    for spec in args.variants.split(","):
        runtime, precision = spec.split(":")
        models[spec] = base if runtime == "torch" else on_runtime(base, runtime, precision,
                                                                  threads=args.threads)
    data = windows(base.tokenizer, args.windows, args.window, args.seed)
    ref_name = next(iter(models))
    nll: dict[str, list[float]] = {k: [] for k in models}
    agree: dict[str, list[bool]] = {k: [] for k in models}
    margins: dict[str, list[float]] = {k: [] for k in models}
    for w, ids in enumerate(data):
        ref = None
        for name, model in models.items():
            logits = base_logits(model, ids)  # (T, V)
            logp = torch.log_softmax(logits.double(), -1)
            targets = torch.tensor(ids[1:])
            nll[name] += (-logp[:-1].gather(1, targets[:, None])[:, 0]).tolist()
            if ref is None:
                ref = logits
                top2 = ref.topk(2, -1).values
                gap = (top2[:, 0] - top2[:, 1]).tolist()
            same = (logits.argmax(-1) == ref.argmax(-1)).tolist()
            agree[name] += same
            margins[name] += [g for g, s in zip(gap, same, strict=True) if not s]
        print(f"window {w + 1}/{len(data)}", file=sys.stderr, flush=True)
    rows = []
    for name in models:
        rows.append({
            "variant": name, "positions": len(nll[name]),
            "perplexity": math.exp(float(np.mean(nll[name]))),
            "argmax_agreement": float(np.mean(agree[name])),
            "disagreements": int(len(agree[name]) - sum(agree[name])),
            "max_reference_margin_at_disagreement": max(margins[name], default=None),
            "median_reference_margin_at_disagreement": (float(np.median(margins[name]))
                                                        if margins[name] else None),
        })
    env = environment("cpu")
    signature = format_signature({
        "model": "smollm2", "text": "wikitext2-test", "windows": args.windows,
        "window": args.window, "seed": args.seed, "threads": args.threads,
        "torch": torch.__version__, "version": env["version"], "commit": env["commit"]})
    report = {"command": command_line("benchmarks.bench_quality", argv), "signature": signature,
        "reference": ref_name, "rows": rows, "wall_s": time.perf_counter() - start}
    lines = [*header("Quality of a runtime's precision: held-out perplexity and next-token "
                     "agreement", report),
             f"Teacher-forced over {args.windows} windows of {args.window} WikiText-2 test "
             f"tokens; agreement: the argmax of the base head at each position equals the "
             f"reference's ({ref_name}); margin: the reference's top-2 logit gap where they "
             "differ.", "",
             "| variant | positions | perplexity | argmax agreement | disagreements | "
             "reference margin there (median / max) |", "|---|---|---|---|---|---|"]
    for r in rows:
        med, mx = (r["median_reference_margin_at_disagreement"],
                   r["max_reference_margin_at_disagreement"])
        lines.append(f"| {r['variant']} | {r['positions']} | {r['perplexity']:.3f} | "
                     f"{100 * r['argmax_agreement']:.2f}% | {r['disagreements']} | "
                     + ("-" if med is None else f"{med:.3f} / {mx:.3f}") + " |")
    write_report(report, args.out, "quality", "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
