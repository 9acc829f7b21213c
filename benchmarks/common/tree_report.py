"""The report of the tree benchmark (``bench_trees.py``): B and speedup against the budget N.

    make_report(rows=..., costs=..., online=..., ...)   the JSON-ready report, targets judged
    markdown(report) -> str; plot(report, path); write_report(report, out) -> paths
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.real_report import _median
from benchmarks.common.report import finite, save_figure
from benchmarks.common.report import write_report as write_report_files

DEFINITIONS = [
    "N: the budget, nodes of the tree (the root, the certain token, included), i.e. the tokens "
    "one verification forward processes. A builder may fill fewer (the chain has at most h "
    "nodes; 'nodes' is the mean actually built).",
    "B: mean accepted tokens per verification call, the bonus token included (greedy = 1.00): "
    "per task generated tokens / calls pooled over the task's prompts, from the trace "
    "(blockdraft.oracle.simulate, equal to the online decode step by step); 'mean' is the mean "
    "over tasks. Builders marked (decoded): the tree lattice of prefix-conditioned heads, "
    "whose node expansions the trace does not hold, so B comes from decode over the same "
    "prompts, lengths and EOS (outputs checked equal to the trace's greedy continuation), and "
    "build ms includes every expansion (a head evaluation per node).",
    "verify ms: median wall time of one verification step as decode runs it (Verifier.run "
    "with the lattice width k) over a tree of that many nodes on the first prompt's cache: "
    "forward with the tree mask, acceptance, cache gather, the next step's heads as their "
    "top-k at the accepted node. greedy ms: the reference loop's per-token cost "
    "(greedy_generate).",
    "build ms: the builder's mean time per step (its draft call), measured while simulating. "
    "lattice ms: the step's lattice from the heads' top-k (decode's step_lattice).",
    "est. speedup: B x greedy ms / (verify ms at the tree's size + lattice ms + build ms): "
    "the decode loop's costs, measured on this machine in this run.",
    "measured speedup: end-to-end tokens/s of decode(drafter=builder) over the reference greedy "
    "loop on the same prompt (one prompt per task), median over prompts; identical: the output "
    "equals greedy's token for token.",
]


def _verify_ms(costs: dict[str, Any], nodes: float) -> float:
    """The measured verification cost for a tree of ``nodes`` (mean) nodes: the smallest
    measured size that holds it."""
    sizes = sorted(int(n) for n in costs["verify_ms"])
    size = next((n for n in sizes if n >= nodes - 1e-9), sizes[-1])
    return float(costs["verify_ms"][str(size)])


def _online_summary(online: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (builder, N): B, median speedup over greedy, identical outputs."""
    ref = {r["case"]: r for r in online if r["builder"] == "greedy"}
    keys = list(dict.fromkeys((r["builder"], r["N"]) for r in online if r["builder"] != "greedy"))
    out = []
    for key, n in keys:
        runs = [r for r in online if r["builder"] == key and r["N"] == n]
        speedups = [(r["tokens"] / r["wall_s"]) / (ref[r["case"]]["tokens"]
                                                     / ref[r["case"]]["wall_s"]) for r in runs]
        out.append({"builder": key, "N": n, "prompts": len(runs),
                    "B": sum(r["tokens"] for r in runs) / sum(r["calls"] for r in runs),
                    "speedup": _median(speedups), "speedups": speedups,
                    "identical": sum(r["identical"] for r in runs)})
    return out


def make_report(*, rows: list[dict[str, Any]], costs: dict[str, Any],
                online: list[dict[str, Any]], fields: dict[str, Any], tasks: Sequence[str],
                command: str, accuracies: np.ndarray, alpha_b: dict[str, dict[str, float]],
                lm: dict[str, Any], wall_s: float) -> dict[str, Any]:
    """The report: signature, rows with estimated speedups, costs, online runs, targets."""
    from blockdraft.core.signature import format_signature

    for r in rows:
        verify = _verify_ms(costs, r["nodes"])
        r["step_ms"] = verify + costs["lattice_ms"] + r["build_ms"]
        r["est_speedup"] = r["B_mean"] * costs["greedy_ms"] / r["step_ms"]
        r["build_share"] = r["build_ms"] / verify
    summary = _online_summary(online)
    report = {
        "signature": format_signature(fields), "fields": fields, "command": command,
        "wall_s": wall_s, "tasks": list(tasks), "definitions": DEFINITIONS, "costs": costs,
        "rows": rows, "online": summary, "online_runs": online,
        "calibration": {"alpha_B": alpha_b, "accuracies_top3": np.round(
            accuracies[:, :3], 4).tolist()},
        "lm": lm, "targets": _targets(rows, summary),
    }
    return finite(report)


def _row(rows: Sequence[dict[str, Any]], key: str, n: int) -> dict[str, Any] | None:
    return next((r for r in rows if r["builder"] == key and r["N"] == n), None)


def _targets(rows: list[dict[str, Any]], online: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    res, cal, eag = (_row(rows, k, 32) for k in ("rescored-4gram", "calibrated", "eagle2"))
    if res and cal and eag:
        gain = res["B_mean"] / max(cal["B_mean"], eag["B_mean"]) - 1
        out.append({"target": "N = 32: the lattice-rescored tree accepts >= 10% more tokens per "
                              "call than both the calibrated Medusa tree and the EAGLE-2-style "
                              "tree (mean over tasks)",
                    "measured": f"B {res['B_mean']:.3f} vs {cal['B_mean']:.3f} (calibrated), "
                                f"{eag['B_mean']:.3f} (EAGLE-2-style): {100 * gain:+.1f}%",
                    "met": gain >= 0.10})
    lossless = [o for o in online if o["identical"] == o["prompts"] and o["speedup"] is not None]
    if lossless:
        best = max(lossless, key=lambda o: o["speedup"])
        out.append({"target": "the best lossless tree strategy: >= 2.0x the greedy reference's "
                              "tokens/s (measured online)",
                    "measured": f"{best['speedup']:.2f}x ({best['builder']}, N = {best['N']})",
                    "met": best["speedup"] >= 2.0})
    if rows:
        best = max(rows, key=lambda r: r["est_speedup"])
        out.append({"target": "the same, estimated from B and the measured step costs",
                    "measured": f"{best['est_speedup']:.2f}x ({best['builder']}, N = {best['N']})",
                    "met": best["est_speedup"] >= 2.0})
        worst = max(rows, key=lambda r: r["build_share"])
        out.append({"target": "tree building within the drafting budget (<= 10% of a forward)",
                    "measured": f"worst {100 * worst['build_share']:.1f}% ({worst['builder']}, "
                                f"N = {worst['N']}, {worst['build_ms']:.2f} ms)",
                    "met": worst["build_share"] <= 0.10})
    return out


# ---- Markdown ------------------------------------------------------------------------------------


def _grid(rows: Sequence[dict[str, Any]], value: str, fmt: str) -> list[str]:
    budgets = sorted({r["N"] for r in rows})
    names = list(dict.fromkeys(r["builder"] for r in rows))
    lines = ["| builder | " + " | ".join(f"N = {n}" for n in budgets) + " |",
             "|---|" + "---|" * len(budgets)]
    for key in names:
        first = next(r for r in rows if r["builder"] == key)
        label = first["name"] + (" (decoded)" if first.get("decoded") else "")
        cells = []
        for n in budgets:
            r = _row(rows, key, n)
            cells.append("-" if r is None else format(r[value], fmt))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def markdown(report: dict[str, Any]) -> str:
    """The report as Markdown."""
    rows, costs, tasks = report["rows"], report["costs"], report["tasks"]
    f = report["fields"]
    out = [f"# Token trees at equal budget: {f.get('model')}, heads {f.get('heads')}", "",
           f"Command: `{report['command']}` ({report['wall_s'] / 60:.1f} min)", "",
           f"Signature: `{report['signature']}`", "",
           "Definitions:", "", *[f"- {d}" for d in report["definitions"]], "",
           f"Lattice width k = {f['k']} for every builder; the 4-gram builders use "
           f"{report['lm'].get('name')} ({report['lm'].get('ngrams')} n-grams, made by "
           f"`{report['lm'].get('command', '?')}`). Calibration on {f.get('calibration', '?')} "
           "(never the benchmark's): Medusa's calibrated tree from their per-depth, per-rank "
           "head accuracies, and each rescored tree's alpha, the best B at N = 32 of "
           + "; ".join(f"{key}: " + ", ".join(f"alpha {a} -> {b:.3f}" for a, b in grid.items())
                       for key, grid in report["calibration"]["alpha_B"].items() if grid)
           + ".", "",
           "## B (mean accepted tokens per call) against N, mean over tasks", "",
           *_grid(rows, "B_mean", ".3f"), "",
           "## Estimated speedup over greedy against N", "",
           *_grid(rows, "est_speedup", ".2f"), "",
           "## Costs (ms, medians)", "",
           f"Greedy step {costs['greedy_ms']:.1f} ms; lattice {costs['lattice_ms']:.2f} ms; "
           f"prefix {costs['prefix']} tokens.", "",
           "| tree nodes | " + " | ".join(costs["verify_ms"]) + " |",
           "|---|" + "---|" * len(costs["verify_ms"]),
           "| verify ms | " + " | ".join(f"{v:.1f}" for v in costs["verify_ms"].values()) + " |",
           "| / greedy step | " + " | ".join(f"{v / costs['greedy_ms']:.2f}"
                                            for v in costs["verify_ms"].values()) + " |", "",
           "Tree building per step (ms):", "", *_grid(rows, "build_ms", ".2f"), ""]
    n32 = [r for r in rows if r["N"] == 32] or rows
    out += [f"## B per task at N = {n32[0]['N']}", "",
            "| builder | " + " | ".join(tasks) + " | mean |",
            "|---|" + "---|" * (len(tasks) + 1)]
    for r in n32:
        label = r["name"] + (" (decoded)" if r.get("decoded") else "")
        out.append(f"| {label} | " + " | ".join(f"{r['B'][t]:.3f}" for t in tasks)
                   + f" | {r['B_mean']:.3f} |")
    n_online = len({r.get("case", r["task"]) for r in report["online_runs"]})
    out += ["", f"## Measured end to end ({n_online} prompts, "
            f"{f.get('online_max_new_tokens', '?')} new tokens each)", ""]
    if report["online"]:
        out += ["| builder | N | prompts | B | speedup (median) | identical |",
                "|---|---|---|---|---|---|"]
        for o in report["online"]:
            sp = "-" if o["speedup"] is None else f"{o['speedup']:.2f}x"
            out.append(f"| {o['builder']} | {o['N']} | {o['prompts']} | {o['B']:.3f} | {sp} | "
                       f"{o['identical']}/{o['prompts']} |")
    else:
        out.append("Not run (--online-budgets empty).")
    out += ["", "## Targets (issue 12)", "", "| target | measured | met |", "|---|---|---|"]
    for t in report["targets"]:
        out.append(f"| {t['target']} | {t['measured']} | {'yes' if t['met'] else 'no'} |")
    out += ["", "Calibration: top-3 rank accuracies per depth (depth 1 first): "
            + "; ".join("/".join(f"{a:.3f}" for a in accs)
                        for accs in report["calibration"]["accuracies_top3"]) + ".", ""]
    return "\n".join(out)


# ---- plot ----------------------------------------------------------------------------------------


def plot(report: dict[str, Any], path: Path) -> None:
    """B and speedup against N per builder (measured speedups as filled markers)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["rows"]
    names = list(dict.fromkeys(r["builder"] for r in rows))
    fig, (ax_b, ax_s) = plt.subplots(1, 2, figsize=(11.0, 4.6))
    for i, key in enumerate(names):
        mine = sorted((r for r in rows if r["builder"] == key), key=lambda r: r["N"])
        color = f"C{i}"
        xs = [r["N"] for r in mine]
        style = {"marker": "o" if len(mine) > 1 else "*", "markersize": 5 if len(mine) > 1 else 11}
        ax_b.plot(xs, [r["B_mean"] for r in mine], color=color, label=mine[0]["name"], **style)
        ax_s.plot(xs, [r["est_speedup"] for r in mine], color=color, linestyle="--", **style)
        measured = [o for o in report["online"] if o["builder"] == key and o["speedup"]]
        if measured:
            ax_s.plot([o["N"] for o in measured], [o["speedup"] for o in measured], color=color,
                      marker="s", linestyle="none", markersize=7)
    for ax in (ax_b, ax_s):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({r["N"] for r in rows}))
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_xlabel("N (tree nodes per verification forward)")
        ax.grid(alpha=0.3)
    ax_b.set_ylabel("B, accepted tokens per call (mean over tasks)")
    ax_s.set_ylabel("speedup over greedy\n(dashed: estimated; squares: measured)")
    ax_s.axhline(1.0, color="red", linewidth=1, linestyle=":")
    ax_b.legend(fontsize=7)
    fig.suptitle(f"{report['fields'].get('model')}: token trees at equal budget N",
                 fontsize=10)
    save_figure(fig, path, report, width=190, top=0.95)


def write_report(report: dict[str, Any], out: Path, stem: str = "trees") -> list[Path]:
    """``<stem>.json``, ``<stem>.md`` and ``<stem>.png`` in ``out`` (each written atomically)."""
    return write_report_files(report, out, stem, markdown, plot)
