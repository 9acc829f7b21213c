"""The EAGLE-style draft layer's learning curve beside the Medusa and prefix heads' (issue 40).

    .venv/bin/python -m benchmarks.heads_eagle --layer W/eagle1-0.5M --layer W/eagle1-1M \\
        --layer W/eagle3-0.5M --round2 benchmarks/results/heads/round2/round2.json \\
        --round2 benchmarks/results/heads/round2-2m/round2.json \\
        [--chat benchmarks/results/heads/eagle/chat-1M/prefix.json ...] \\
        --out benchmarks/results/heads/eagle

Each ``--layer`` is a folder of ``blockdraft heads train --arch eagle``: its config's training
record (the fusion, the unrolled steps, the signature with its tokens and steps) and its
``curve.json`` (every evaluation on the held-out shard: top-1 per draft step, the greedy chain's
B over five draft tokens). The evaluation whose layer the folder keeps is the one with the best
mean top-1, as ``heads train`` keeps it. ``--round2`` reads the Medusa and prefix heads' runs of
``benchmarks/heads_round2.py`` (held-out vanilla B: the same five-token chain of their heads'
argmax, on the same 200 held-out prompts of the same prompt mix). ``--chat`` adds the online
figures of ``benchmarks.bench_prefix_chat`` runs (the held-out chat requests, decoded).

Writes ``eagle.{json,md,png}``: one row per run (tokens, steps, training minutes, top-1 per draft
step, held-out chain B) and B against training tokens for the three kinds of drafter.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any


def layer_run(folder: Path) -> dict[str, Any]:
    """One draft layer's row: its record and its kept evaluation."""
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    record = config.get("training", {})
    signature = str(record.get("signature", ""))
    fields = dict(part.split(":", 1) for part in signature.split("|") if ":" in part)
    curve = json.loads((folder / "curve.json").read_text(encoding="utf-8"))["curve"]
    kept = max(curve, key=lambda e: sum(e["top1"]) / len(e["top1"]))
    readme = (folder / "README.md").read_text(encoding="utf-8")
    tokens = re.search(r"(\d+) answer tokens", readme)
    minutes = re.search(r"training time in all ([\d.]+) min", readme)
    fusion = record.get("fusion", "top")
    return {
        "name": folder.name,
        "kind": "EAGLE-3 (fused layers, training-time test)" if fusion == "layers"
        else "EAGLE-1 (top feature + regression)",
        "fusion": fusion, "unroll": record.get("unroll"),
        "train_tokens": int(tokens.group(1)) if tokens else None,
        "steps": curve[-1]["step"], "steps_asked": int(fields.get("steps", 0)),
        "kept_step": kept["step"],
        "train_min": float(minutes.group(1)) if minutes else round(curve[-1]["seconds"] / 60, 1),
        "top1": kept["top1"], "chain_B": kept["chain_B"], "signature": signature,
    }


def round2_runs(path: Path) -> list[dict[str, Any]]:
    """The Medusa and prefix heads' rows of a ``heads_round2`` report."""
    rows = []
    for run in json.loads(path.read_text(encoding="utf-8"))["runs"]:
        held = run.get("heldout") or {}
        if ("B_vanilla" not in held or run.get("epochs", 1.0) != 1.0
                or not run["name"].startswith(("self-", "prefix-"))):
            continue  # the self-distilled, cross-entropy runs of one epoch: the curves
        rows.append({"name": run["name"], "kind": run["arch"],
                     "train_tokens": run["train_tokens"], "steps": run["steps"],
                     "train_min": round(run["train_s"] / 60, 1), "top1": held["top1"],
                     "chain_B": held["B_vanilla"],
                     "chat_B": (run.get("chat") or {}).get("B_vanilla")})
    return rows


def chat_rows(path: Path) -> list[dict[str, Any]]:
    """The online chat figures of a ``bench_prefix_chat`` report."""
    report = json.loads(path.read_text(encoding="utf-8"))
    eagle = re.search(r"eagle:([^|]+)", report["signature"])
    runtime = re.search(r"runtime:([^|]+)", report["signature"])
    layer = f"{eagle.group(1) if eagle else '-'} ({runtime.group(1) if runtime else '?'})"
    return [{"layer": layer, "strategy": r["strategy"],
             "identical": r["identical"], "B": r["B"]["all"],
             "speedup": r.get("speedup")} for r in report["results"]]


def main(argv: list[str] | None = None) -> int:
    from benchmarks.common.report import command_line, header, save_figure, write_report

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layer", type=Path, action="append", default=[],
                    help="a draft layer's folder (heads train --arch eagle); repeat")
    ap.add_argument("--round2", type=Path, action="append", default=[],
                    help="a heads_round2 report (round2.json) with the Medusa and prefix runs")
    ap.add_argument("--chat", type=Path, action="append", default=[],
                    help="a bench_prefix_chat report (prefix.json) to add; repeat")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    if not args.layer:
        ap.error("give at least one --layer")
    layers = [layer_run(folder) for folder in args.layer]
    others = list({row["name"]: row for path in args.round2
                   for row in round2_runs(path)}.values())  # a run in two reports once
    chats = [row for path in args.chat for row in chat_rows(path)]
    signature = " ; ".join(sorted({row["signature"].split("|commit:")[0].split("|data:")[0]
                                   for row in layers}))
    report = {"command": command_line("benchmarks.heads_eagle", argv),
              "signature": signature, "layers": layers, "heads": others, "chat": chats}
    steps = max(len(row["top1"]) for row in [*layers, *others])
    lines = [*header("The EAGLE-style draft layer's learning curve beside the Medusa and prefix "
                     "heads", report),
             "Held-out: the base's greedy answers to 200 held-out training prompts (the same "
             "prompt mix); top-1 per draft step (Medusa and prefix: heads 1-5) against the "
             "base's token at that offset; chain B: tokens per serial call of the greedy "
             "chain of five draft tokens. Steps: those trained (a run stops at its time "
             "limit); train min: as each run recorded it (the EAGLE runs on one thread of the "
             "machine in the signature, the round-2 runs on one or two: "
             "benchmarks/results/heads/round2).", "",
             "| drafter | run | train tokens | steps | train min | "
             + " | ".join(f"top-1 step {i + 1}" for i in range(steps))
             + " | held-out chain B |",
             "|---|---|---|---|---|" + "---|" * steps + "---|"]
    for row in sorted([*others, *layers], key=lambda r: (r["kind"], r["train_tokens"] or 0)):
        top1 = [f"{v:.3f}" for v in row["top1"]] + ["-"] * (steps - len(row["top1"]))
        lines.append(f"| {row['kind']} | {row['name']} | {row['train_tokens'] or '-'} | "
                     f"{row['steps']} | {row['train_min']} | " + " | ".join(top1)
                     + f" | {row['chain_B']:.3f} |")
    if chats:
        lines += ["", "Online, the 36 held-out chat requests (bench_prefix_chat: every output "
                  "compared with greedy; the runtime in brackets, float32, one thread):", "",
                  "| layer | strategy | identical | B | speedup |", "|---|---|---|---|---|"]
        lines += [f"| {c['layer']} | {c['strategy']} | {c['identical']} | {c['B']:.3f} | "
                  + (f"{c['speedup']:.2f}x |" if c["speedup"] else "- |") for c in chats]

    def plot(report: dict[str, Any], path: Path) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4.2))
        kinds: dict[str, list[dict[str, Any]]] = {}
        for row in [*others, *layers]:
            if row["train_tokens"]:
                kinds.setdefault(row["kind"], []).append(row)
        for kind, rows in sorted(kinds.items()):
            rows.sort(key=lambda r: r["train_tokens"])
            ax.plot([r["train_tokens"] / 1e6 for r in rows], [r["chain_B"] for r in rows],
                    marker="o", label=kind)
        ax.set_xlabel("training answer tokens (millions)")
        ax.set_ylabel("held-out chain B (5 draft tokens)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        save_figure(fig, path, report)
        plt.close(fig)

    write_report(report, args.out, "eagle", "\n".join(lines), plot=plot)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
