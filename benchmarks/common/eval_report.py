"""Markdown tables and PNG plots of bench_eval.py's results (eval.json -> eval.md, eval_*.png).

    .venv/bin/python -m benchmarks.common.eval_report benchmarks/results/eval.json

Each table mirrors one of Kim et al. (2024) and carries the signature of the settings that
produced it. Re-running this script on a saved eval.json redraws everything without
re-evaluating.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

CATEGORY = {"lambada": "LM", "wikitext2": "LM", "llm-wikitext": "LM", "llm-book": "LM",
            "squad": "QA", "cnndm": "S-Sum", "samsum": "S-Sum", "xsum": "L-Sum",
            "multinews": "L-Sum"}


def _f(x: Any, nd: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.{nd}f}"


def _pct(x: float, base: float) -> str:
    return f"{100 * (x / base - 1):+.1f}%"


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def _sig(report: dict[str, Any], **extra: Any) -> str:
    base = report["signature"]
    more = "|".join(f"{k}:{v}" for k, v in extra.items())
    return f"Signature: `{base}{'|' + more if more else ''}`"


def _provenance(tasks: dict[str, Any]) -> str:
    """Which per-task analyses this run computed and which came from the result cache."""
    cached = [t for t, r in tasks.items() if r.get("from_cache")]
    worker_min = sum(float(r.get("wall_s", 0.0)) for r in tasks.values()) / 60
    if not cached:
        return (f"Every task's analyses were computed in this run ({worker_min:.1f} min of "
                "worker time over the tasks).")
    commits = sorted({str(tasks[t].get("computed_at", "unrecorded")) for t in cached})
    return (f"The analyses of {len(cached)} of {len(tasks)} tasks ({', '.join(cached)}) came "
            f"from the per-task result cache (computed at commit {', '.join(commits)}; "
            f"{worker_min:.1f} min of worker time when computed): the cache key covers the trace, "
            "the settings and the models, not the code. The latency and end-to-end tables are "
            "always measured in the run.")


def _mean(xs: list[float]) -> float:
    return float(np.mean(xs)) if xs else float("nan")


def write_report(report: dict[str, Any], out_dir: Path) -> Path:
    """Write eval.md and the plots for ``report`` (the dict saved as eval.json)."""
    report = json.loads(json.dumps(report))  # the JSON view: string keys everywhere
    tasks: dict[str, Any] = report["tasks"]
    names = list(tasks)
    cfg = report["config"]
    md: list[str] = [
        "# Evaluation on real data (Kim et al. 2024, reproduced with our models)", "",
        f"Made by `{report['command']}` in {report['wall_s'] / 60:.1f} min; preset "
        f"`{report['preset']}`: {cfg['n_eval']} reported examples per task (after "
        f"{cfg['n_tune']} used to tune alpha), greedy continuations of "
        + (f"up to {cfg['max_new_tokens']} tokens (stopping at EOS)" if cfg["stop_at_eos"] else
           f"{cfg['max_new_tokens']} tokens (EOS is an ordinary token: the models, pretrained on "
           "one paragraph per line, end most continuations within a few tokens)")
        + f", lattices of the top {cfg['k']} tokens per head, exact "
        "verification (lossless) throughout. Every B comes from one trace per task simulated "
        "offline (trace once, simulate many); the end-to-end table uses the online decode.", "",
        _provenance(tasks), "",
        "## Models", "",
    ]
    md += _table(["model", "what", "training", "command"], [
        [name, _model_what(m), _model_train(m), f"`{m['command'][:90]}...`"]
        for name, m in report["models"].items()
    ])
    md += ["", "## Tasks", ""]
    md += _table(["task", "category", "examples", "prompts cut to fit", "mean prompt tokens",
                  "generated tokens (eval)", "trace s", "evaluation s"], [
        [t, CATEGORY.get(t, "?"), r["examples"], r["truncated"], f"{r['prompt_tokens_mean']:.0f}",
         r["generated_tokens"], f"{r['trace_s']:.0f}", f"{r['wall_s']:.0f}"]
        for t, r in tasks.items()
    ])
    budget = tasks[names[0]]["prompt_budget"]
    md += ["", f"Prompts are cut (at a word, the template kept) to {budget} tokens so prompt + "
           f"continuation fit the model's {budget + cfg['max_new_tokens']}-token context.", ""]

    # Table 1 / 10
    md += ["## Block efficiency vs number of heads (Kim Table 1 / 10)", ""]
    rows = [[t, CATEGORY.get(t, "?")] + [_f(tasks[t]["B"][f"vanilla-h{h}" if h < 9 else "vanilla"])
                                         for h in (3, 6, 9)] for t in names]
    rows.append(["**mean**", ""] + [_f(_mean([tasks[t]["B"][f"vanilla-h{h}" if h < 9 else
                                                           "vanilla"] for t in names]))
                                     for h in (3, 6, 9)])
    md += _table(["task", "category", "h = 3", "h = 6", "h = 9"], rows)
    md += ["", "h = 3 and 6 are the first heads of the 9-head model (its extra heads are trained "
           "independently on a frozen base, so they are the same heads a 3- or 6-head model "
           "would have).", "", _sig(report, strategy="vanilla"), ""]

    # Table 4
    cols = ["vanilla", "neural-mini", "neural-small", "4-gram", "16-best 0-gram",
            "16-best 4-gram", "oracle-16"]
    md += ["## Rescoring and p-best drafts (Kim Table 4)", "",
           "B on the eval split (alpha = 1), relative change against vanilla in brackets.", ""]
    rows = []
    for t in names:
        b = tasks[t]["B"]
        rows.append([t] + [_f(b["vanilla"])] + [f"{_f(b[c])} ({_pct(b[c], b['vanilla'])})"
                                                  for c in cols[1:]])
    means = {c: _mean([tasks[t]["B"][c] for t in names]) for c in cols}
    rows.append(["**mean**", _f(means["vanilla"])] + [
        f"{_f(means[c])} ({_pct(means[c], means['vanilla'])})" for c in cols[1:]])
    md += _table(["task", *cols], rows)
    md += ["", _sig(report, h=9, k=cfg["k"], alpha=1.0, lm="4-gram(lmplz)",
                    rescorers="mini:1Ld128/small:2Ld256(onnx)", backend="exact"), ""]

    # Table 3
    md += ["## Consecutive repetition in drafts (Kim Table 3)", ""]
    rows = []
    for t in names:
        rv, r2 = tasks[t]["repetition"]["vanilla"], tasks[t]["repetition"]["2-gram"]
        rows.append([t, _f(rv["pct_consecutive"], 1), _f(r2["pct_consecutive"], 1),
                     _f(rv["mean_max_run"], 2), _f(r2["mean_max_run"], 2)])
    md += _table(["task", "% consec. vanilla", "% consec. 2-gram", "max run vanilla",
                  "max run 2-gram"], rows)
    md += ["", "Over the drafts of the steps each strategy actually visits "
           "(docs/definitions.md sec. 7).", "",
           _sig(report, h=9, k=cfg["k"], alpha=1.0, lm="2-gram"), ""]

    # Table 5
    md += ["## Wins, ties and losses against vanilla (Kim Table 5)", "",
           "Pooled over tasks, at the vanilla trajectory's positions.", ""]
    rows = []
    for name in ("2-gram", "4-gram", "neural-mini", "neural-small"):
        w = {key: sum(tasks[t]["wtl"][name][key] for t in names)
             for key in ("num_positions", "wins", "ties", "losses", "repair_wins",
                         "regress_wins", "repair_losses", "regress_losses")}
        n = w["num_positions"]

        def pc(a: int, b: int) -> str:
            return _f(100 * a / b, 1) if b else "n/a"

        rows.append([name, n, pc(w["wins"], n), pc(w["ties"], n), pc(w["losses"], n),
                     pc(w["repair_wins"], w["wins"]), pc(w["regress_wins"], w["wins"]),
                     pc(w["repair_losses"], w["losses"]), pc(w["regress_losses"], w["losses"])])
    md += _table(["rescorer", "positions", "% wins", "% ties", "% losses", "% repair (wins)",
                  "% regress (wins)", "% repair (losses)", "% regress (losses)"], rows)
    md += ["", _sig(report, h=9, k=cfg["k"], alpha=1.0), ""]

    # Fig 3
    md += ["## Head confidence (Kim Fig. 3)", ""]
    rows = [[t] + [_f(x, 2) for x in tasks[t]["entropy"]["mean"]] +
            [tasks[t]["entropy"]["h_max"], _f(tasks[t]["B"]["vanilla"])] for t in names]
    h = len(tasks[names[0]]["entropy"]["mean"])
    md += _table(["task"] + [f"H[{i + 1}]" for i in range(h)] + ["h_max", "B vanilla"], rows)
    hm = np.array([tasks[t]["entropy"]["h_max"] for t in names], dtype=float)
    bv = np.array([tasks[t]["B"]["vanilla"] for t in names])
    corr = float(np.corrcoef(hm, bv)[0, 1]) if hm.std() > 0 and bv.std() > 0 else float("nan")
    report_corr = "n/a (h_max is constant)" if math.isnan(corr) else f"{corr:.2f}"
    md += ["", f"Pearson correlation of h_max and vanilla B across tasks: {report_corr}.", "",
           "![entropy](eval_entropy.png)", "![h_max vs B](eval_hmax_vs_B.png)", "",
           _sig(report, h=9, positions="vanilla-visited"), ""]

    # Fig 6
    md += ["## Oracle block efficiency vs k (Kim Fig. 6)", ""]
    ks = list(tasks[names[0]]["oracle"])
    rows = [[t, _f(tasks[t]["B"]["vanilla"])] + [
        f"{_f(tasks[t]['oracle'][k])} ({tasks[t]['oracle'][k] / tasks[t]['B']['vanilla']:.2f}x)"
        for k in ks] for t in names]
    md += _table(["task", "vanilla"] + [f"oracle k={k}" for k in ks], rows)
    md += ["", "![oracle](eval_oracle.png)", "", _sig(report, h=9), ""]

    # Fig 7
    md += ["## B vs p for p-best drafts (Kim Fig. 7)", ""]
    ps = list(tasks[names[0]]["pcurve"]["0-gram"])
    rows = []
    for kind in ("0-gram", "4-gram"):
        for t in names:
            rows.append([kind, t] + [_f(tasks[t]["pcurve"][kind][p]) for p in ps])
        rows.append([kind, "**mean**"] + [_f(_mean([tasks[t]["pcurve"][kind][p] for t in names]))
                                          for p in ps])
    md += _table(["drafts", "task"] + [f"p = {p}" for p in ps], rows)
    md += ["", "![p-best](eval_pbest.png)", "", _sig(report, h=9, k=cfg["k"], alpha=1.0), ""]

    # Table 8
    md += ["## Interpolation weight tuned per task (Kim Table 8)", "",
           f"alpha chosen from {cfg['alphas']} for the best B on the first {cfg['n_tune']} "
           f"examples of each task, then reported on the next {cfg['n_eval']}.", ""]
    rows = []
    for name in cfg["tune"]:
        for t in names:
            a = tasks[t]["alpha"][name]
            rows.append([name, t, a["best"], _f(a["eval_alpha1"]), _f(a["eval_best"]),
                         _pct(a["eval_best"], a["eval_alpha1"]),
                         _pct(a["eval_best"], tasks[t]["B"]["vanilla"])])
    md += _table(["rescorer", "task", "tuned alpha", "B (alpha = 1)", "B (tuned)",
                  "tuned vs alpha=1", "tuned vs vanilla"], rows)
    md += ["", _sig(report, h=9, k=cfg["k"], n_tune=cfg["n_tune"]), ""]

    if report.get("latency"):
        md += _latency_tables(report)
    if report.get("e2e"):
        md += _e2e_table(report)

    _plots(report, out_dir)
    path = out_dir / "eval.md"
    path.write_text("\n".join(md) + "\n", encoding="utf-8")
    return path


def _model_what(m: dict[str, Any]) -> str:
    if "ngrams" in m:
        return f"{len(m['counts'])}-gram, {m['ngrams']:,} n-grams"
    c = m["config"]
    kind = "BlockwiseLM" if c.get("h", 1) > 1 else "RescorerLM"
    return f"{kind} {c['n_layer']}L d{c['d_model']} h={c['h']} V={c['vocab_size']}"


def _model_train(m: dict[str, Any]) -> str:
    tr = m.get("train") or {}
    ev = tr.get("last_eval") or {}
    loss = ev.get("loss")
    parts = []
    if tr.get("steps"):
        parts.append(f"{tr['steps']} steps, seed {tr.get('seed')}")
    if loss:
        parts.append(f"held-out loss head 1 {loss[0]:.2f} nats")
        if len(loss) > 1:
            parts.append(f"heads 2..{len(loss)} top-1 "
                         + "/".join(f"{a:.2f}" for a in ev.get("accuracy", [])[1:]))
    if m.get("wall_s"):
        parts.append(f"{m['wall_s'] / 60:.0f} min")
    return "; ".join(parts) or "-"


def _latency_tables(report: dict[str, Any]) -> list[str]:
    lat = report["latency"]
    md = ["## Rescoring latency on real lattices (Kim Tables 12 and 13)", "",
          "Lattices drawn at random positions of the traces' eval split "
          f"({', '.join(lat['lattices_from'])}); "
          "4-gram, alpha = 1; median of single calls (ms); agreement = share of lattices where "
          "the WFST returns exactly the exact backend's drafts.", ""]
    by = {(r["h"], r["k"], r["p"], r["backend"]): r for r in lat["pbest"] + lat["sizes"]}
    rows = []
    for r in lat["pbest"]:
        if r["backend"] != "exact":
            continue
        w = by.get((r["h"], r["k"], r["p"], "wfst"))
        rows.append([f"{r['h']}x{r['k']}", r["p"], _f(r["median_ms"], 2),
                     _f(w["median_ms"], 2) if w else "n/a",
                     f"{w['median_ms'] / r['median_ms']:.1f}x" if w else "n/a",
                     f"{100 * w['agreement']:.0f}%" if w and w["agreement"] is not None else "n/a"])
    md += ["### p-best latency vs p (Table 12)", ""]
    md += _table(["lattice", "p", "exact ms", "WFST ms", "WFST / exact", "agreement"], rows)
    rows = []
    for r in lat["sizes"]:
        if r["backend"] != "exact":
            continue
        w = by.get((r["h"], r["k"], r["p"], "wfst"))
        rows.append([r["h"], r["k"], _f(r["median_ms"], 2), _f(w["median_ms"], 2) if w else "n/a",
                     f"{w['median_ms'] / r['median_ms']:.1f}x" if w else "n/a"])
    md += ["", "### 1-best latency vs lattice size (Table 13)", ""]
    md += _table(["h", "k", "exact ms", "WFST ms", "WFST / exact"], rows)
    n = lat["pbest"][0]["n"] if lat["pbest"] else 0
    md += ["", _sig(report, lm="4-gram", alpha=1.0, n=n, lattices="trace-eval",
                    exact="native", wfst="pynini-eps-backoff"), ""]
    return md


def _e2e_table(report: dict[str, Any]) -> list[str]:
    e = report["e2e"]
    md = ["## End to end: wall-clock speedup over greedy decoding", "",
          f"Online `decode` (exact criterion) against plain greedy decoding with the same model "
          f"on {e['prompts']} prompts ({', '.join(e['tasks'])}), {e['tokens']} tokens, "
          f"{e['threads']} torch threads; greedy: {e['greedy_s']:.2f} s "
          f"({e['greedy_ms_per_token']:.1f} ms/token). `lossless` checks every output equals "
          "greedy's token for token.", ""]
    rows = [[r["strategy"], _f(r["B"], 2), _f(r["wall_s"], 2), f"{r['speedup']:.2f}x",
             _f(r["forward_s"], 2), _f(r["draft_s"], 2), _f(r["other_s"], 2),
             _f(r["ms_per_verify"], 1), _f(r["ms_draft_per_step"], 2),
             "yes" if r["lossless"] else "**NO**"] for r in e["rows"]]
    md += _table(["strategy", "B", "wall s", "speedup", "forward s", "drafting s", "other s",
                  "ms / verify call", "ms drafting / step", "lossless"], rows)
    md += ["", _sig(report, criterion="exact", threads=e["threads"], prompts=e["prompts"]), ""]
    return md


def _plots(report: dict[str, Any], out_dir: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = report["tasks"]
    names = list(tasks)
    sig = report["signature"]

    def save(fig: Any, name: str) -> None:
        fig.text(0.01, 0.005, sig, fontsize=5, color="0.4")
        fig.savefig(out_dir / name, dpi=110)
        plt.close(fig)

    # Fig 3 (left): entropy densities per head, one panel per task
    cols = 3
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(11, 3 * rows), squeeze=False)
    for ax, t in zip(axes.ravel(), names, strict=False):
        ent = np.asarray(tasks[t]["entropy"]["samples"])
        grid = np.linspace(0, max(1e-2, float(ent.max()) * 1.05), 200)
        for i in range(ent.shape[1]):
            x = ent[:, i]
            bw = max(1e-3, 1.06 * x.std() * x.size ** (-0.2))
            dens = np.exp(-0.5 * ((grid[:, None] - x[None]) / bw) ** 2).sum(1) / (
                x.size * bw * np.sqrt(2 * np.pi))
            ax.plot(grid, dens, lw=1, label=f"head {i + 1}")
        ax.set_title(f"{t} (h_max = {tasks[t]['entropy']['h_max']})", fontsize=9)
        ax.set_xlabel("entropy (nats)", fontsize=8)
    for ax in axes.ravel()[len(names):]:
        ax.axis("off")
    axes[0, 0].legend(fontsize=6)
    fig.suptitle("Head entropy densities at vanilla-visited positions (Kim Fig. 3)")
    fig.tight_layout(rect=(0, 0.02, 1, 0.97))
    save(fig, "eval_entropy.png")

    # Fig 3 (right): h_max vs B
    fig, ax = plt.subplots(figsize=(5.5, 4))
    hm = [tasks[t]["entropy"]["h_max"] for t in names]
    bv = [tasks[t]["B"]["vanilla"] for t in names]
    ax.scatter(hm, bv)
    for t, x, y in zip(names, hm, bv, strict=True):
        ax.annotate(t, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("h_max (heads with non-decreasing mean entropy)")
    ax.set_ylabel("vanilla B")
    ax.set_title("h_max vs block efficiency across tasks")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    save(fig, "eval_hmax_vs_B.png")

    # Fig 6: oracle ratio vs k
    fig, ax = plt.subplots(figsize=(6, 4))
    for t in names:
        ks = [int(k) for k in tasks[t]["oracle"]]
        ratio = [tasks[t]["oracle"][str(k)] / tasks[t]["B"]["vanilla"] for k in ks]
        ax.plot(ks, ratio, marker="o", lw=1, label=t)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k (arcs per slot)")
    ax.set_ylabel("B_oracle(k) / B_vanilla")
    ax.set_title("Oracle headroom of the top-k lattice (Kim Fig. 6)")
    ax.legend(fontsize=7)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    save(fig, "eval_oracle.png")

    # Fig 7: B vs p
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, kind in zip(axes, ("0-gram", "4-gram"), strict=True):
        for t in names:
            ps = [int(p) for p in tasks[t]["pcurve"][kind]]
            ax.plot(ps, [tasks[t]["pcurve"][kind][str(p)] for p in ps], marker="o", lw=1,
                    label=t)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("p (drafts verified per call)")
        ax.set_title(f"p-best {kind}")
    axes[0].set_ylabel("B")
    axes[1].legend(fontsize=7)
    fig.suptitle("Block efficiency vs p (Kim Fig. 7)")
    fig.tight_layout(rect=(0, 0.03, 1, 0.95))
    save(fig, "eval_pbest.png")


if __name__ == "__main__":
    src = Path(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results/eval.json")
    print(write_report(json.loads(src.read_text()), src.parent))
