"""The heads' second round: a learning curve over full epochs and the recipe at equal data.

    .venv/bin/python -m benchmarks.heads_round2 --data SELF_SET [--labelled LABELLED_SET] \\
        --prompts mix.jsonl --chat CHAT_SET --work DIR --out benchmarks/results/heads/round2 \\
        [--points 250000,500000,1000000,2000000] [--epochs 1] [--only NAME,...]

Every run is ``blockdraft heads train`` on a prefix of a distillation set (``--train-tokens``,
whole shards in plan order), for ``epochs`` passes over that prefix (steps = its positions x
epochs / batch), the softmax over the 4,096-token shortlist the packaged heads draft with,
2 ResBlocks, 5 heads; one thread (``--threads``). The runs:

- ``self-N``: the self-distilled set (bfloat16 greedy answers, their bfloat16 states), for each
  point ``N`` the set reaches (the learning curve);
- ``kl-N``: the same data with the KL loss to the base's distribution (the first point);
- ``prefix-N``: prefix-conditioned (Hydra-style) heads of 1 ResBlock, whose input projection
  costs what the Medusa heads' second ResBlock costs (equal step cost), at every point;
- ``labelled-N``: the same texts labelled by float32 one-forward labels (``heads label``), at
  the first point the labelled set reaches;
- ``prefix-N-e2``: a second epoch of ``prefix-N`` at the last point, warm-started from its heads
  (``heads train --init``) at a third of the learning rate (a restarted cosine).

Each run's heads are scored by ``blockdraft heads curve`` on the held-out split of the self
set and on the chat set (the 36 requests of ``benchmarks/chat_eval.jsonl``, their float32
greedy answers distilled into a set with every prompt held out): top-1 per head, vanilla B
walked along the greedy answers (exact for a chain of 1-best drafts) and the top-5 oracle B.
A run already trained (its heads folder exists) is not trained again, so the script resumes.
Writes ``round2.{json,md}`` and ``round2.png`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any


def _run(argv: list[str]) -> None:
    from blockdraft.cli import main

    code = main(argv)
    if code != 0:
        raise SystemExit(f"blockdraft {' '.join(argv)} exited with {code}")


def main(argv: list[str] | None = None) -> int:
    from benchmarks.common.report import command_line, write_report
    from blockdraft.core.signature import environment, format_signature
    from blockdraft.training.heads import open_distill_set

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="the self-distilled set")
    ap.add_argument("--prompts", type=Path, required=True, help="the prompts that made it")
    ap.add_argument("--labelled", type=Path, default=None, help="its texts labelled (float32)")
    ap.add_argument("--chat", type=Path, required=True, help="the chat set (all held out)")
    ap.add_argument("--work", type=Path, required=True, help="heads, training folders, curves")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--points", default="250000,500000,1000000,2000000")
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1, help="torch threads of each training run")
    ap.add_argument("--only", default="",
                    help="train only these runs (comma-separated names); every run trained "
                         "before is reported too")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    self_set = open_distill_set(args.data)
    have = self_set.summary()["train_tokens"]
    points = [int(p) for p in args.points.split(",") if int(p) <= have]
    runs: list[tuple[str, Path, int, list[str]]] = [
        (f"self-{p // 1000}k", args.data, p, []) for p in points]
    if points:  # the recipe at equal data: the first point, where a run costs least
        runs.append((f"kl-{points[0] // 1000}k", args.data, points[0], ["--loss", "kl"]))
    for p in points:  # Hydra-style heads at the cost of the Medusa heads: one ResBlock fewer
        runs.append((f"prefix-{p // 1000}k", args.data, p,
                     ["--arch", "prefix", "--layers", "1"]))
    if points:  # a second epoch at the last point, from the first epoch's heads
        last = f"prefix-{points[-1] // 1000}k"
        runs.append((f"{last}-e2", args.data, points[-1],
                     ["--arch", "prefix", "--layers", "1", "--init", str(args.work / last),
                      "--lr", "3e-4"]))
    if args.labelled is not None and points:
        lab = open_distill_set(args.labelled)
        if lab.summary()["train_tokens"] >= points[0]:
            runs.append((f"labelled-{points[0] // 1000}k", args.labelled, points[0], []))
    only = {n for n in args.only.split(",") if n}
    rows: list[dict[str, Any]] = []
    for name, data, point, extra in runs:
        heads = args.work / name
        if only and name not in only and not (heads / "config.json").is_file():
            continue  # not asked for and not trained before: nothing to report
        cut = open_distill_set(data).first(point)
        tokens = cut.summary()["train_tokens"]
        steps = math.ceil(tokens * args.epochs / args.batch)
        t0 = time.perf_counter()
        if not (heads / "config.json").is_file():
            data_args = [] if open_distill_set(data).labelled else [
                "--prompts", str(args.prompts), "--dtype", "bfloat16", "--batch-size", "32",
                "--distill-minutes", "0"]
            _run(["heads", "train", *data_args, "--data", str(data), "--train-tokens",
                  str(point), "--heads", "5", "--layers", "2", "--steps", str(steps),
                  "--batch", str(args.batch), "--lr", "1e-3", "--warmup", "50", "--vocab",
                  "shortlist", "--shortlist", "4096", "--eval-every", str(max(steps // 8, 1)),
                  "--eval-positions", "2048", "--threads", str(args.threads), "--work",
                  str(args.work / f"{name}.work"), "-o", str(heads), "--json", *extra])
        curve = json.loads((heads / "curve.json").read_text())["curve"]
        train_s = curve[-1]["seconds"] if curve else time.perf_counter() - t0
        scores = {}
        for split, folder in (("heldout", args.data), ("chat", args.chat)):
            curve = args.work / f"{name}.{split}"
            if not (curve / "data_curve.json").is_file():
                _run(["heads", "curve", str(heads), "--data", str(folder), "--threads",
                      str(args.threads), "-o", str(curve), "--json"])
            scores[split] = json.loads((curve / "data_curve.json").read_text())["runs"][0]
        rows.append({"name": name, "data": str(data), "train_tokens": tokens, "steps": steps,
                     "epochs": args.epochs * (2 if "--init" in extra else 1),
                     "loss": "kl" if "kl" in extra else "ce",
                     "arch": ("prefix, 1 ResBlock" if "prefix" in extra else "medusa, 2 ResBlocks")
                     + (", 2nd epoch (warm start, lr 3e-4)" if "--init" in extra else ""),
                     "labels": "one-forward float32" if name.startswith("labelled")
                     else "generated bfloat16", "train_s": round(train_s, 1), **scores})
        print(json.dumps(rows[-1])[:400], file=sys.stderr, flush=True)
    env = environment("cpu")
    signature = format_signature({"heads": 5, "vocab": "shortlist:4096",  # layers: per row
                                  "batch": args.batch, "epochs": args.epochs,
                                  "threads": args.threads,
                                  **env})
    report = {"command": command_line("benchmarks.heads_round2", argv), "signature": signature,
              "runs": rows, "wall_s": round(time.perf_counter() - start, 1)}
    write_report(report, args.out, "round2", _markdown,
                 plot=lambda rep, path: _plot(rep["runs"], path))
    print(_markdown(report))
    return 0


def _fmt(score: dict[str, Any], key: str) -> str:
    value = score.get(key)
    if isinstance(value, list):
        return "/".join(f"{v:.3f}".lstrip("0") for v in value)
    return "-" if value is None else f"{value:.3f}"


def _markdown(report: dict[str, Any]) -> str:
    from benchmarks.common.report import header

    lines = [*header("Heads, second round: learning curve and recipe", report),
             "| run | heads | labels | loss | train tokens | steps | train min | held-out top-1, "
             "heads 2-6 | held-out vanilla B | held-out top-5 oracle B | chat top-1 | chat "
             "vanilla B | chat top-5 oracle B |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["runs"]:
        h, c = r["heldout"], r["chat"]
        lines.append(f"| {r['name']} | {r['arch']} | {r['labels']} | {r['loss']} | "
                     f"{r['train_tokens']} | {r['steps']} | {r['train_s'] / 60:.1f} | "
                     f"{_fmt(h, 'top1')} | "
                     f"{_fmt(h, 'B_vanilla')} | {_fmt(h, 'B_oracle5')} | {_fmt(c, 'top1')} | "
                     f"{_fmt(c, 'B_vanilla')} | {_fmt(c, 'B_oracle5')} |")
    return "\n".join(lines) + "\n"


def _plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not any(r["name"].startswith(("self-", "prefix-")) for r in rows):
        return
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for prefix, label, color in (("self-", "Medusa, 2 ResBlocks", "C0"),
                                 ("prefix-", "prefix-conditioned, 1 ResBlock", "C3")):
        curve = sorted((r for r in rows if r["name"].startswith(prefix)
                        and not r["name"].endswith("-e2")), key=lambda r: r["train_tokens"])
        x = [r["train_tokens"] / 1e6 for r in curve]
        for split, style in (("heldout", "o-"), ("chat", "s--")):
            ax.plot(x, [r[split].get("B_vanilla") for r in curve], style, color=color,
                    label=f"{label}: {split} vanilla B")
    for r in rows:  # a second epoch: a point beside its curve
        if r["name"].endswith("-e2"):
            ax.plot([r["train_tokens"] / 1e6] * 2,
                    [r["heldout"].get("B_vanilla"), r["chat"].get("B_vanilla")], "*",
                    color="C2", markersize=11, label="prefix, 2nd epoch: held-out, chat")
    ax.set_xscale("log")
    ticks = sorted({r["train_tokens"] / 1e6 for r in rows})
    ax.set_xticks(ticks, [f"{t:.2f}" for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("training answer tokens (M), one epoch")
    ax.set_ylabel("vanilla B (tokens per call)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
