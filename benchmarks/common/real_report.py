"""The report of the real-model benchmark (``bench_real.py``): per task and overall figures,
Markdown, JSON (strict: non-finite numbers written as null) and the speedup plot.

    summarise(rows, names, tasks)        B, tokens/s, speedup, identity and step split
    make_report(result, cases, ...)      the JSON-ready report with its signature
    markdown(report) -> str; plot(report, path); write_report(report, out) -> paths
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.report import finite, save_figure
from benchmarks.common.report import write_report as write_report_files
from blockdraft.core.efficiency import block_efficiency

# ---- summarising ---------------------------------------------------------------------------------


def own_runtime(tag: str) -> str:
    """The runtime tag of a model tag: ``ort32/smollm2-prefix`` (other heads on the same base
    and runtime) -> ``ort32``, whose greedy loop it is compared with."""
    return tag.split("/", 1)[0]


def _median(xs: Sequence[float]) -> float | None:
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    return float(np.median(xs)) if xs else None


def _mean(xs: Sequence[float | None]) -> float | None:
    ys = [x for x in xs if x is not None and math.isfinite(x)]
    return float(np.mean(ys)) if ys else None


def _cell(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Figures of one strategy over some prompts (see the module docstring)."""
    tokens = sum(r["tokens"] for r in rows)
    counted = [r for r in rows if r.get("calls")]
    calls = sum(r["calls"] for r in counted)
    more = [r for r in counted if r["calls"] > 1]
    cell: dict[str, Any] = {
        "prompts": len(rows), "tokens": tokens,
        "B": block_efficiency(sum(r["tokens"] for r in counted), calls) if calls else None,
        "B_verify": (sum(r["tokens"] - 1 for r in more) / sum(r["calls"] - 1 for r in more)
                     if more else None),
        "tok_s": _median([r["tok_s"] for r in rows]),
        "speedup": _median([r["speedup"] for r in rows]),
        "identical": sum(bool(r["identical"]) for r in rows),
        "identical_rate": sum(bool(r["identical"]) for r in rows) / len(rows) if rows else None,
        "wall_s": sum(r["wall_s"] for r in rows),
    }
    own = [r["identical_own"] for r in rows if r.get("identical_own") is not None]
    if own:
        cell["identical_own"] = sum(own)
        cell["identical_own_rate"] = sum(own) / len(own)
        cell["speedup_own"] = _median([r["speedup_own"] for r in rows
                                       if r.get("speedup_own") is not None])
    steps = sum(r.get("steps", 0) for r in rows)
    calls = [r for r in rows if r.get("prefill_s") is not None]
    if calls:  # the whole call: prefill, steps, and what lies outside both
        cell["accounting"] = _accounting(calls)
    if steps:
        parts = {key: sum(r.get(f"{key}_s", 0.0) for r in rows)
                 for key in ("forward", "heads", "lattice", "search", "other")}
        total = sum(parts.values())
        cell["steps"] = steps
        cell["split"] = {key: v / total for key, v in parts.items()} if total > 0 else None
        cell["ms_per_step"] = {key: 1e3 * v / steps for key, v in parts.items()}
        cell["overhead"] = ((total - parts["forward"]) / parts["forward"]
                            if parts["forward"] > 0 else None)
        cell["iad_steps"] = sum(r.get("iad_steps", 0) for r in rows)
    return cell


def _accounting(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Where the calls' time went, pooled over them (seconds and per-step milliseconds): the
    prefill, the steps (forward, the next heads, the lattice, the search, the rest), what lies
    outside both inside ``decode`` (its set-up, the records), and outside ``decode`` in the
    harness's timing (``wall_s - decode_wall_s``)."""
    keys = ("forward", "heads", "lattice", "search", "other")
    wall = sum(r["wall_s"] for r in rows)
    decode_wall = sum(r.get("decode_wall_s", r["wall_s"]) for r in rows)
    prefill = sum(r["prefill_s"] for r in rows)
    parts = {k: sum(r.get(f"{k}_s", 0.0) for r in rows) for k in keys}
    steps = sum(r.get("steps", 0) for r in rows)
    steps_s = sum(parts.values())
    tokens = sum(r["tokens"] for r in rows)
    return {"calls": len(rows), "wall_s": wall, "prefill_s": prefill, "steps_s": steps_s,
            "outside_s": decode_wall - prefill - steps_s, "harness_s": wall - decode_wall,
            "steps": steps, "tokens": tokens,
            "step_ms": 1e3 * steps_s / steps if steps else None,
            "ms_per_step": {k: 1e3 * v / steps if steps else None for k, v in parts.items()},
            "nodes_per_step": (sum(r.get("nodes", 0) for r in rows) / steps
                               if steps and any("nodes" in r for r in rows) else None)}


def prediction(acc: dict[str, Any], greedy: dict[str, Any]) -> dict[str, Any]:
    """The speedup over a greedy loop predicted from the parts, against the measured one.

    ``steps``: ``B_verify x greedy's ms per step / this ms per step`` (the steps alone);
    ``call``: greedy's whole time over this whole time (prefill and outside included);
    ``prefill_share``/``outside_share``: of this strategy's time. The two differ by what the
    prefill (the same for both, so it pulls the ratio towards 1) and the outside add."""
    if not acc.get("steps") or not greedy.get("steps"):
        return {}
    b_verify = (acc["tokens"] - acc["calls"]) / acc["steps"]  # tokens after the prefill's
    g_step = greedy["step_ms"]
    return {"steps": b_verify * g_step / acc["step_ms"],
            "call": greedy["wall_s"] / acc["wall_s"],
            "prefill_share": acc["prefill_s"] / acc["wall_s"],
            "outside_share": (acc["outside_s"] + acc["harness_s"]) / acc["wall_s"]}


def summarise(rows: list[dict[str, Any]], names: Sequence[str], tasks: Sequence[str]
              ) -> dict[str, Any]:
    """``{"per_task": {name: {task: cell}}, "overall": {name: cell}}``: per task pooled B and
    medians over prompts; overall the mean over tasks of B, tokens/s and speedup, pooled
    identity and time split."""
    per_task: dict[str, dict[str, Any]] = {}
    overall: dict[str, Any] = {}
    for name in names:
        mine = [r for r in rows if r["strategy"] == name]
        cells = {t: _cell([r for r in mine if r["task"] == t]) for t in tasks
                 if any(r["task"] == t for r in mine)}
        per_task[name] = cells
        pooled = _cell(mine)
        for key in ("B", "B_verify", "tok_s", "speedup", "speedup_own"):
            if key in pooled:
                pooled[key] = _mean([c.get(key) for c in cells.values()])
        pooled["speedup_median_all"] = _median([r["speedup"] for r in mine])
        overall[name] = pooled
    return {"per_task": per_task, "overall": overall}


# ---- the report ----------------------------------------------------------------------------------

DEFINITIONS = (
    "B = generated tokens / serial model calls, the prefill counted as a call "
    "(docs/definitions.md sec. 2; greedy = 1.00; each verification call counts its accepted "
    "tokens plus the bonus token); per task pooled over prompts, overall the mean over tasks. "
    "B/verify = (tokens - 1) / (calls - 1): tokens per verification call, the prefill and its "
    "token left out (Spec-Bench's per-step mean). tokens/s = generated tokens / wall time of the "
    "whole call, prefill included; speedup = tokens/s over the reference greedy loop's on the "
    "same prompt; both are medians over a task's prompts, and their means over tasks overall. "
    "Identical = token for token the reference greedy output. With several runtimes, 'vs own "
    "greedy' is the speedup over that runtime's own greedy loop on the same prompt and how many "
    "outputs equal that loop's (the lossless check of its precision). Step split: one verification "
    "step's wall time (prefill excluded, pooled over steps) in the forward, the lattice (top-k "
    "of every head), the draft search / rescoring (the drafter's draft) and the rest "
    "(acceptance, cache, book-keeping); non-fwd/fwd = everything but the forward over the "
    "forward."
)


def _f(x: Any, fmt: str = ".2f", none: str = "-") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return none
    return format(x, fmt)


def _pct(x: Any) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def markdown(report: dict[str, Any]) -> str:
    """The report as Markdown."""
    summary, names, tasks = report["summary"], report["strategies"], report["tasks"]
    overall = summary["overall"]
    lines = [
        "# End to end on the real model: SmolLM2-135M-Instruct + Medusa heads, peers beside",
        "", f"Command: `{report['command']}`", "", f"Signature: `{report['signature']}`", "",
        f"Wall time of the run: {report['wall_s'] / 60:.1f} min. {report['prompts_total']} "
        f"prompts ({report['fields'].get('prompts_per_task', '?')} per task), at most "
        f"{report['fields'].get('max_new_tokens', '?')} new tokens, EOS honoured, batch 1, "
        "temperature "
        f"0, exact criterion for every blockdraft strategy.", "",
        f"Definitions. {DEFINITIONS}", "",
        "## Overall (mean over tasks)", "",
        "| strategy | kind | B | B/verify | tokens/s | speedup | vs own greedy | identical | "
        "fwd ms/step | forward | lattice | search/rescoring | other | non-fwd/fwd |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in names:
        c = overall[name]
        split = c.get("split") or {}
        ms = c.get("ms_per_step") or {}
        own = (f"{_f(c.get('speedup_own'))}x ({c['identical_own']}/{c['prompts']} identical)"
               if "identical_own" in c and report["kinds"][name] != "peer" else "-")
        lines.append(
            f"| {name} | {report['kinds'][name]} | {_f(c['B'])} | {_f(c['B_verify'])} | "
            f"{_f(c['tok_s'], '.1f')} | {_f(c['speedup'])}x | {own} | "
            f"{c['identical']}/{c['prompts']} | "
            f"{_f(ms.get('forward'), '.1f')} | {_pct(split.get('forward'))} | "
            f"{_pct(split.get('lattice'))} | {_pct(split.get('search'))} | "
            f"{_pct(split.get('other'))} | {_pct(c.get('overhead'))} |")
    lines += accounting_markdown(report)
    ref = overall[names[0]]
    if ref.get("tok_s"):
        lines += ["", f"Reference greedy loop: {_f(ref['tok_s'], '.1f')} tokens/s "
                  f"({_f(1e3 / ref['tok_s'], '.1f')} ms per token), mean over tasks of the "
                  "medians."]
    for title, key, fmt in (("Speedup over the reference greedy loop (median over prompts)",
                             "speedup", ".2f"), ("B (pooled over prompts)", "B", ".2f"),
                            ("tokens/s (median over prompts)", "tok_s", ".1f")):
        lines += ["", f"## {title}", "", "| strategy | " + " | ".join(tasks) + " | mean |",
                  "|---" * (len(tasks) + 2) + "|"]
        for name in names:
            cells = summary["per_task"][name]
            lines.append(f"| {name} | " + " | ".join(
                _f(cells.get(t, {}).get(key), fmt) for t in tasks)
                + f" | {_f(overall[name][key], fmt)} |")
    lines += ["", "## Identical to the reference greedy output (prompts)", "",
              "| strategy | " + " | ".join(tasks) + " | all |", "|---" * (len(tasks) + 2) + "|"]
    for name in names:
        cells = summary["per_task"][name]
        lines.append(f"| {name} | " + " | ".join(
            f"{cells[t]['identical']}/{cells[t]['prompts']}" if t in cells else "-"
            for t in tasks) + f" | {overall[name]['identical']}/{overall[name]['prompts']} |")
    peers = [n for n in names if report["kinds"][n] == "peer"]
    if peers:
        lines += ["", "## Peers", "",
                  "| peer | precision | identical to its own greedy | identical to our greedy "
                  "| B | speedup over our greedy | over its own greedy |",
                  "|---|---|---|---|---|---|---|"]
        for name in peers:
            c = overall[name]
            own = (f"{c['identical_own']}/{c['prompts']}" if "identical_own" in c else
                   "(is its own greedy)")
            lines.append(f"| {name} | {report['precision'].get(name, '-')} | {own} | "
                         f"{c['identical']}/{c['prompts']} | {_f(c['B'])} | "
                         f"{_f(c['speedup'])}x | {_f(c.get('speedup_own'))}x |")
    if report["skipped"]:
        lines += ["", "## Not run", ""]
        lines += [f"- **{name}**: {why}" for name, why in report["skipped"].items()]
    lines += ["", "## Prompts", "",
              "| task | prompts | mean prompt tokens | cut to fit | mean greedy tokens | "
              "ended by EOS |", "|---|---|---|---|---|---|"]
    for t in tasks:
        ps = [p for p in report["prompts"] if p["task"] == t]
        if ps:
            lines.append(
                f"| {t} | {len(ps)} | {np.mean([p['prompt_tokens'] for p in ps]):.0f} | "
                f"{sum(p['truncated'] for p in ps)} | "
                f"{np.mean([p['greedy_tokens'] for p in ps]):.0f} | "
                f"{sum(p['greedy_eos'] for p in ps)} |")
    if report.get("errors"):
        lines += ["", "## Errors (runs that raised; left out of every figure)", ""]
        lines += [f"- {e['task']} #{e['case']}, {e['strategy']}: `{e['error']}`"
                  for e in report["errors"]]
    if report.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {n}" for n in report["notes"]]
    return "\n".join(lines) + "\n"


def accounting_markdown(report: dict[str, Any]) -> list[str]:
    """The whole-call accounting table (empty when no strategy has one)."""
    overall = report["summary"]["overall"]
    names = [n for n in report["strategies"] if "prediction" in overall[n]]
    if not names:
        return []
    lines = ["", "## Where each call's time goes", "",
             "Pooled over the prompts, one thread. Per call: the prefill (the prompt's forward), "
             "the verification steps, and what lies outside both (decode's set-up and records, "
             "and the harness's timing around the call). Per step (ms): the forward with the base "
             "head at every node, the next step's Medusa heads (ResBlocks, projection and top-k), "
             "the lattice, the search (the drafter), the rest (criterion, cache). Predicted from "
             "the steps: B/verify x greedy's ms per step / the strategy's ms per step; measured: "
             "the whole calls' time ratio against the same runtime's greedy loop on the same "
             "prompts. Where the two differ by more than 5%, the last columns say why: the "
             "prefill (the same work for both, so it pulls the measured ratio towards 1) and the "
             "time outside the steps.", "",
             "| strategy | nodes/step | ms/step | forward | heads | lattice | search | other | "
             "prefill ms/call | outside ms/call | predicted (steps) | measured (calls) | gap | "
             "prefill share | outside share |", "|---" * 15 + "|"]
    for name in report["strategies"]:
        c = overall[name]
        acc = c.get("accounting")
        if not acc:
            continue
        ms = acc.get("ms_per_step") or {}
        pred = c.get("prediction") or {}
        gap = (pred["call"] / pred["steps"] - 1) if pred.get("steps") else None
        lines.append(
            f"| {name} | {_f(acc.get('nodes_per_step'), '.1f')} | {_f(acc.get('step_ms'), '.1f')} "
            f"| {_f(ms.get('forward'), '.1f')} | {_f(ms.get('heads'), '.2f')} | "
            f"{_f(ms.get('lattice'), '.2f')} | {_f(ms.get('search'), '.2f')} | "
            f"{_f(ms.get('other'), '.2f')} | {_f(1e3 * acc['prefill_s'] / acc['calls'], '.0f')} | "
            f"{_f(1e3 * (acc['outside_s'] + acc['harness_s']) / acc['calls'], '.1f')} | "
            f"{_f(pred.get('steps'))}x | {_f(pred.get('call'))}x | "
            f"{'-' if gap is None else f'{100 * gap:+.1f}%'} | "
            f"{_pct(pred.get('prefill_share'))} | {_pct(pred.get('outside_share'))} |")
    return lines


def plot(report: dict[str, Any], path: Path) -> None:
    """Speedup per strategy (bars per task and their mean), the reference at 1x."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in report["strategies"] if report["kinds"][n] != "reference"]
    tasks = list(report["tasks"]) + ["mean"]
    per_task, overall = report["summary"]["per_task"], report["summary"]["overall"]
    width = 0.8 / len(tasks)
    fig, ax = plt.subplots(figsize=(max(8.0, 1.2 * len(names) + 2), 5.0))
    x = np.arange(len(names))
    for j, t in enumerate(tasks):
        ys = [(overall[n]["speedup"] if t == "mean" else per_task[n].get(t, {}).get("speedup"))
              for n in names]
        ys = [np.nan if y is None else y for y in ys]
        ax.bar(x + (j - (len(tasks) - 1) / 2) * width, ys, width, label=t,
               color="black" if t == "mean" else None)
    ax.axhline(1.0, color="red", linewidth=1, linestyle="--", label="reference greedy")
    ax.set_xticks(x)
    ax.set_xticklabels(names, rotation=25, ha="right", fontsize=8)
    for xi, n in zip(x, names, strict=True):
        mean = overall[n]["speedup"]
        if mean is not None:
            ax.annotate(f"{mean:.2f}", (xi + (len(tasks) - 1) / 2 * width, mean),
                        ha="center", va="bottom", fontsize=6)
    ax.set_ylabel("speedup over greedy (tokens/s ratio)")
    ax.set_title(f"{report['fields'].get('model', 'model')} end to end: speedup per strategy and "
                 "task (median over prompts; black: mean over tasks)", fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    save_figure(fig, path, report, width=200)


def make_report(result: dict[str, Any], cases: Sequence[Any],
                strategies: Sequence[Any], peers: Sequence[Any], *,
                fields: dict[str, Any], command: str, skipped: dict[str, str],
                wall_s: float, notes: Sequence[str] = (),
                decode_text: Callable[[list[int]], str] | None = None) -> dict[str, Any]:
    """The report (JSON-ready): signature, settings, summary, rows and prompts."""
    from blockdraft.core.signature import format_signature

    names = [s.name for s in strategies] + [p.name for p in peers]
    tasks = list(dict.fromkeys(c.task for c in cases))
    rows = result["rows"]
    prompts = []
    for i, case in enumerate(cases):
        out = result["outputs"].get(i, [])
        ref: dict[str, Any] = next(
            (r for r in rows if r["case"] == i and r["strategy"] == names[0]), {})
        prompts.append({
            "task": case.task, "id": case.id, "prompt_tokens": len(case.ids),
            "truncated": case.truncated, "preview": case.preview,
            "greedy_tokens": len(out), "greedy_eos": ref.get("stopped") == "eos",
            "greedy_text": decode_text(out) if decode_text else None,
        })
    kinds = {s.name: ("reference" if i == 0 else "greedy") if s.make is None else "blockdraft"
             for i, s in enumerate(strategies)}
    kinds.update({p.name: "peer" for p in peers})
    summary = summarise(rows, names, tasks)
    own_greedy: dict[str, str] = {}
    for st in strategies:
        if st.make is None:
            own_greedy.setdefault(getattr(st, "runtime", ""), st.name)
    for st in strategies:
        tag = getattr(st, "runtime", "")
        greedy = own_greedy.get(tag, own_greedy.get(own_runtime(tag)))
        cell = summary["overall"][st.name]
        if st.make is not None and greedy and "accounting" in cell:
            ref = summary["overall"][greedy].get("accounting", {})
            # the same prompts on both sides: pool over the prompts both ran
            done = {r["case"] for r in rows if r["strategy"] == st.name}
            both = [r for r in rows if r["strategy"] == greedy and r["case"] in done]
            if both:
                ref = _accounting(both)
            cell["prediction"] = prediction(cell["accounting"], ref)
            cell["own_greedy"] = greedy
    report = {
        "signature": format_signature(fields), "fields": fields, "command": command,
        "wall_s": wall_s, "tasks": tasks, "strategies": names, "kinds": kinds,
        "settings": {s.name: {"k": s.k, "p": s.p, "alpha": s.alpha, "lm": s.lm, "tree": s.tree}
                     for s in strategies},
        "precision": {p.name: p.precision for p in peers},
        "skipped": dict(skipped), "definitions": DEFINITIONS, "notes": list(notes),
        "prompts_total": len(cases), "summary": summary,
        "errors": list(result.get("errors", [])),
        "prompts": prompts, "rows": rows,
    }
    return finite(report)


def write_report(report: dict[str, Any], out: Path, stem: str = "real") -> list[Path]:
    """``<stem>.json``, ``<stem>.md`` and ``<stem>.png`` in ``out`` (each written atomically)."""
    return write_report_files(report, out, stem, markdown, plot)
