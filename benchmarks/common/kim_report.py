"""The page of ``bench_kim.py``: Kim et al. (2024)'s tables beside ours, as Markdown, JSON and
the oracle plot.

    PAPER                                   every figure of the paper the page quotes
    markdown(report) -> str                 the page
    plot_oracle(report, path)               Fig. 6: B_oracle(k) / B per set, the paper's beside
    write_page(report, out) -> [paths]      kim.json (strict), kim.md, kim_oracle.png
    verdict_table3/4/5, verdict_fig6, verdict_latency(report) -> str   one line per table

Re-running this module on a saved ``kim.json`` redraws the page without re-simulating:

    .venv/bin/python -m benchmarks.common.kim_report benchmarks/results/kim/kim.json
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

SEARCHED = ("Where the paper's figures were looked for: the `search` tool's stored public pages "
            "and documentation (corpora `pages` and `docs`) hold arxiv.org/html/2404.09221v1 and "
            "v2, sciencestack.ai, emergentmind.com and huggingface.co/papers copies of the paper, "
            "but every query returned only their opening (title, abstract, introduction), never "
            "a table, a figure's values or an appendix. A figure marked 'not found' is left "
            "out rather than guessed; fill `kim_report.PAPER` from the paper when it is at hand.")
NOTES = "Table 4 as quoted in the project's shared/NOTES.md"

PAPER: dict[str, dict[str, Any]] = {
    # Every figure of Kim et al. (2024), arXiv 2404.09221, that this page quotes, by table or
    # figure. "figures": (what, value, where the text was read); "missing": what could not be
    # found (the page says so rather than invent a number).
    "abstract": {
        "title": "Abstract",
        "figures": [("block efficiency gain of refined drafts, across datasets", "+5% to +21%",
                     "abstract, arxiv.org/html/2404.09221v2")],
    },
    "table3": {
        "title": "Table 3 (consecutive repetition in drafts)",
        "figures": [],
        "missing": "its per-task % consecutive repeats and mean max run",
        "claim": "vanilla drafts repeat tokens consecutively; rescoring reduces the repetition",
    },
    "table4": {
        "title": "Table 4 (block efficiency of vanilla, neural, n-gram and p-best drafts)",
        "figures": [
            ("NewsRoom, vanilla B", 1.08, NOTES),
            ("NewsRoom, best rescored B", 1.31, NOTES),
            ("NewsRoom, gain", "+21%", NOTES),
            ("LAMBADA, vanilla B", 3.12, NOTES),
            ("LAMBADA, rescoring", "flat or negative", NOTES),
        ],
        "missing": "the other tasks' rows (vanilla, neural, n-gram, p-best B)",
        "claim": "rescoring helps most where vanilla B is low, is flat or negative where high",
    },
    "table5": {
        "title": "Table 5 (wins / ties / losses of rescored vs vanilla drafts, repairs)",
        "figures": [],
        "missing": "its win / tie / loss rates and % repair / % regress",
    },
    "fig6": {
        "title": "Fig. 6 (oracle B over the top-k lattice relative to vanilla B, vs k)",
        "figures": [],
        "curves": {},  # name -> [(k, B_oracle(k) / B)]; none could be read
        "missing": "the curves' values",
    },
    "appH": {
        "title": "App. H (latency of rescoring)",
        "figures": [],
        "missing": "its latency figures",
    },
}

# The paper's rows on the same data as one of our kinds (tasks set): kind -> Table 4 figures.
PAPER_SAME_DATA = {"cont-lambada": "LAMBADA: vanilla B 3.12, rescoring flat or negative"}


# ---- formatting ----------------------------------------------------------------------------------


def _f(x: Any, nd: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.{nd}f}"


def _gain(x: float | None, base: float | None) -> str:
    if x is None or not base:
        return "n/a"
    return f"{100 * (x / base - 1):+.1f}%"


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def _groups(s: dict[str, Any]) -> list[str]:
    return [*s["kinds"], "all"]


def _row_name(g: str) -> str:
    return "**all**" if g == "all" else g


def _b_columns(s: dict[str, Any]) -> list[str]:
    """Table 4's strategies in order: vanilla, 1-best rescorers, p-best, oracle."""
    names = list(s["B"])
    oracle = [n for n in names if n.startswith("oracle")]
    return [n for n in names if n not in oracle] + oracle


def _refined(s: dict[str, Any]) -> list[str]:
    """Table 4's strategies other than vanilla and the oracle."""
    return [n for n in _b_columns(s) if n != "vanilla" and not n.startswith("oracle")]


# ---- verdicts ------------------------------------------------------------------------------------


def verdict_table3(report: dict[str, Any]) -> str:
    parts = []
    for name, s in report["sets"].items():
        rep = s["repetition"]
        v = rep["vanilla"]["all"]
        text = f"{name} vanilla {_f(v['pct_consecutive'], 1)}% consec. (max run " \
               f"{_f(v['mean_max_run'], 2)})"
        others = [f"{label} {_f(r['all']['pct_consecutive'], 1)}%" for label, r in rep.items()
                  if label != "vanilla"]
        parts.append(text + (" -> " + ", ".join(others) if others else
                             ", no rescored drafts to compare"))
    return ("Kim: vanilla drafts repeat tokens and rescoring reduces it (figures not found); "
            "ours: " + "; ".join(parts) + ".")


def verdict_table4(report: dict[str, Any]) -> str:
    parts = []
    for name, s in report["sets"].items():
        B = s["B"]
        van = B["vanilla"]
        lows = [van[g] for g in s["kinds"]]
        refined = _refined(s)
        if not refined:
            parts.append(f"{name} vanilla B {min(lows):.2f}-{max(lows):.2f}, nothing refined")
            continue
        best = max(refined, key=lambda n: B[n]["all"])
        gains = [100 * (B[best][g] / van[g] - 1) for g in s["kinds"]]
        parts.append(f"{name} vanilla B {min(lows):.2f}-{max(lows):.2f}; best refined "
                     f"'{best}' {_gain(B[best]['all'], van['all'])} overall "
                     f"({min(gains):+.1f}% to {max(gains):+.1f}% per kind)")
    return ("Kim: +5% to +21% where vanilla B is low (NewsRoom 1.08 -> 1.31), flat or negative "
            "where it is high (LAMBADA 3.12); ours: " + "; ".join(parts) + ".")


def verdict_table5(report: dict[str, Any]) -> str:
    parts = []
    for name, s in report["sets"].items():
        for label, by in s["wtl"].items():
            w = by["all"]
            parts.append(f"{name} {label}: wins {_f(w['pct_wins'], 1)}%, losses "
                         f"{_f(w['pct_losses'], 1)}%, {_f(w['pct_repair_among_wins'], 0)}% of "
                         "wins repair a repetition")
    if not parts:
        return "Kim: figures not found; ours: no rescorer was given (no rows)."
    return "Kim: figures not found; ours: " + "; ".join(parts) + "."


def verdict_fig6(report: dict[str, Any]) -> str:
    parts = []
    for name, s in report["sets"].items():
        o = s["oracle"]["all"]
        r = dict(zip(o["ks"], o["ratio"], strict=True))
        k16 = 16 if 16 in r else max(r)
        parts.append(f"{name} B_oracle({k16}) / B = {r[k16]:.2f}x (vanilla B "
                     f"{o['b_vanilla']:.2f}), {r[max(r)]:.2f}x at k = {max(r)}")
    return ("Kim: the oracle shows headroom over vanilla (the curves' values not found); ours: "
            + "; ".join(parts) + ".")


def verdict_latency(report: dict[str, Any]) -> str:
    lat = report.get("latency")
    if not lat:
        return "Kim: figures not found; ours: not measured (--latency-n 0)."
    rows = sorted(lat["rows"], key=lambda r: r["median_ms"])
    lo, hi = rows[0], rows[-1]
    busy = " (a busy machine: re-run on a quiet one)" if _busy(lat) else ""
    return (f"Kim: figures not found; ours: median per step {lo['median_ms']:.2f} ms "
            f"({lo['strategy']}, p = {lo['p']}) to {hi['median_ms']:.2f} ms ({hi['strategy']}, "
            f"p = {hi['p']}){busy}.")


def _busy(lat: dict[str, Any]) -> bool:
    return bool(lat["load_before"]["busy"] or lat["load_after"]["busy"])


# ---- the page ------------------------------------------------------------------------------------


def _paper_section() -> list[str]:
    md = ["## The paper's figures quoted here", "",
          "Every number from Kim et al. (2024) on this page, with where it was read "
          "(`kim_report.PAPER`). Where a number could not be found it is not invented: the "
          "table says so.", ""]
    rows = []
    for entry in PAPER.values():
        for what, value, where in entry["figures"]:
            rows.append([entry["title"], what, value, where])
        if entry.get("missing"):
            rows.append([entry["title"], entry["missing"], "not found", "-"])
    return md + _table(["table / figure", "what", "value", "source"], rows) + ["", SEARCHED, ""]


def _sizes(report: dict[str, Any]) -> list[str]:
    rows = []
    for name, s in report["sets"].items():
        for g in _groups(s):
            z = s["sizes"][g]
            rows.append([name, _row_name(g), z["prompts"], z["prompt_tokens"], z["tokens"]])
    return _table(["set", "kind", "prompts", "prompt tokens", "generated tokens"], rows)


def _table3(report: dict[str, Any]) -> list[str]:
    md = ["## Table 3: consecutive repetition in drafts", "",
          "% consec.: consecutive pairs of equal tokens among all pairs of the drafts; max run: "
          "mean over steps of the longest run of one token (1..h). Over the drafts of the steps "
          "each strategy actually visits (docs/definitions.md sec. 7); rescored drafts are the "
          "1-best of the k-wide lattice.", ""]
    for name, s in report["sets"].items():
        labels = list(s["repetition"])
        header = ["kind"] + [f"{lab}: % consec. / max run" for lab in labels] + ["Kim"]
        rows = [[_row_name(g)] + [
            f"{_f(s['repetition'][lab][g]['pct_consecutive'], 1)} / "
            f"{_f(s['repetition'][lab][g]['mean_max_run'], 2)}" for lab in labels]
            + ["not found"] for g in _groups(s)]
        md += [f"**{name}**", ""] + _table(header, rows) + [""]
    return md + [f"Verdict: {verdict_table3(report)}", ""]


def _table4(report: dict[str, Any]) -> list[str]:
    st = report["settings"]
    md = ["## Table 4: block efficiency B", "",
          f"B = generated tokens / serial calls (prefill counted), pooled over a kind's prompts "
          f"('all': over the set); exact criterion. Rescorers and p-best read the top "
          f"k = {st['k']} of each head, alpha = {st['alpha']} (not tuned); p-best drafts are "
          "verified as one trie. Relative change against vanilla in brackets.", ""]
    for name, s in report["sets"].items():
        cols = _b_columns(s)
        rows = []
        for g in _groups(s):
            van = s["B"]["vanilla"][g]
            rows.append([_row_name(g), _f(van)] + [
                f"{_f(s['B'][c].get(g))} ({_gain(s['B'][c].get(g), van)})" for c in cols[1:]]
                + [PAPER_SAME_DATA.get(g, "-")])
        md += [f"**{name}**", ""] + _table(["kind", *cols, "Kim (same data)"], rows) + [""]
    return md + [f"Verdict: {verdict_table4(report)}", ""]


def _table5(report: dict[str, Any]) -> list[str]:
    md = ["## Table 5: wins, ties and losses of rescored drafts against vanilla", "",
          "At the positions vanilla visits, n of the rescored 1-best draft against n of the "
          "vanilla draft; repair: the vanilla draft repeats a token and the rescored one does "
          "not; regress: the reverse (% among wins and among losses).", ""]
    any_rows = False
    for name, s in report["sets"].items():
        for label, by in s["wtl"].items():
            any_rows = True
            rows = [[_row_name(g), w["num_positions"], _f(w["pct_wins"], 1),
                     _f(w["pct_ties"], 1), _f(w["pct_losses"], 1),
                     _f(w["pct_repair_among_wins"], 1), _f(w["pct_regress_among_wins"], 1),
                     _f(w["pct_repair_among_losses"], 1), _f(w["pct_regress_among_losses"], 1),
                     "not found"]
                    for g in _groups(s) for w in [by[g]]]
            md += [f"**{name}: {label}**", ""] + _table(
                ["kind", "positions", "% wins", "% ties", "% losses", "% repair (wins)",
                 "% regress (wins)", "% repair (losses)", "% regress (losses)", "Kim"],
                rows) + [""]
    if not any_rows:
        md += ["No rows: no rescorer (--lm or --neural) was given.", ""]
    return md + [f"Verdict: {verdict_table5(report)}", ""]


def _fig6(report: dict[str, Any]) -> list[str]:
    md = ["## Fig. 6: oracle block efficiency against k", "",
          "B_oracle(k): B when every step drafts the longest run of slots whose top k holds the "
          "greedy continuation (docs/definitions.md sec. 5), relative to vanilla B.", ""]
    for name, s in report["sets"].items():
        ks = s["oracle"]["all"]["ks"]
        rows = [[_row_name(g), _f(o["b_vanilla"])] + [
            f"{_f(b)} ({r:.2f}x)" for b, r in zip(o["b_oracle"], o["ratio"], strict=True)]
            for g in _groups(s) for o in [s["oracle"][g]]]
        md += [f"**{name}**", ""] + _table(["kind", "vanilla B"] + [f"k = {k}" for k in ks],
                                           rows) + [""]
    return md + ["![oracle](kim_oracle.png)", "", f"Verdict: {verdict_fig6(report)}", ""]


def _latency(report: dict[str, Any]) -> list[str]:
    md = ["## App. H: latency of drafting per step", ""]
    lat = report.get("latency")
    if not lat:
        return md + ["Not measured (--latency-n 0).", "", f"Verdict: {verdict_latency(report)}",
                     ""]
    lb, la = lat["load_before"], lat["load_after"]
    md += [f"Median wall-clock ms of one step's drafting at the shapes the tables use (h x k "
           f"lattice, p drafts), one thread, {lat['n']} lattices drawn from the traces "
           "(the same ones for every n-gram row; `blockdraft.rescorers.latency.bench_rescore`); "
           "the neural row times a decode step's call with two new context tokens "
           "(`time_step`). Lattice building and verification are not included. A context-LM row "
           "rebuilds the context LM's counts at every drawn position (in a decode loop a step "
           "counts only its new tokens): an upper bound.", "",
           f"Machine load (1-min average) {lb['load1']:.2f} before and {la['load1']:.2f} after, "
           f"on {lb['cores']} cores."]
    if _busy(lat):
        md += ["**These latency rows were measured on a busy machine (other jobs on the "
               "cores): they are not final; re-run on a quiet machine.**"]
    rows = [[r["strategy"], r["shape"], r["p"], f"{r['median_ms']:.3f}", f"{r['p90_ms']:.3f}",
             r["n"], "not found"] for r in lat["rows"]]
    md += [""] + _table(["strategy", "h x k", "p", "median ms", "p90 ms", "lattices", "Kim"],
                        rows)
    return md + ["", f"Verdict: {verdict_latency(report)}", ""]


def markdown(report: dict[str, Any]) -> str:
    """The page."""
    f = report["fields"]
    md = ["# Kim et al. (2024)'s tables on SmolLM2-135M-Instruct with Medusa heads", "",
          f"Command: `{report['command']}`", "", f"Signature: `{report['signature']}`", "",
          f"SmolLM2-135M-Instruct with the heads {f['heads']} (h = {f['h']}) on ONNX Runtime "
          f"{f['precision']}, {f['threads']} thread(s), exact criterion (lossless). Each prompt "
          f"set was recorded once as a trace (greedy, EOS honoured, at most "
          f"{f['max_new_tokens']} new tokens, top K = {f['K']} per head) and every strategy is "
          "simulated offline from it (docs/definitions.md sec. 6). The kinds: the chat set's "
          "categories, the tasks set's tasks.", ""]
    for name, s in report["sets"].items():
        t = s["trace"]
        md.append(f"- {name}: {s['source']}; trace {Path(t['path']).name} ("
                  + ("from the cache" if t["from_cache"] else f"recorded in {t['record_s']:.0f} s")
                  + f"); head 1's stored top-1 differs from the greedy token at "
                  f"{s['mismatches']} position(s).")
    md += ["", *_sizes(report), ""]
    if report["missing"]:
        md += ["**Missing rows:**", ""] + [f"- {m}" for m in report["missing"]] + [""]
    md += _paper_section()
    md += _table3(report) + _table4(report) + _table5(report) + _fig6(report)
    md += _latency(report)
    md += [f"Wall time of the run: {report['wall_s'] / 60:.1f} min."]
    return "\n".join(md) + "\n"


def plot_oracle(report: dict[str, Any], path: Path) -> None:
    """Fig. 6: ``B_oracle(k) / B_vanilla`` against k per set (each kind faint), the paper's
    curves beside when :data:`PAPER` has any, else a note that they were not found."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks.common.report import save_figure

    fig, (ax, side) = plt.subplots(1, 2, figsize=(10, 4.6), gridspec_kw={"width_ratios": [3, 2]})
    for i, (name, s) in enumerate(report["sets"].items()):
        color = f"C{i}"
        for g in s["kinds"]:
            o = s["oracle"][g]
            ax.plot(o["ks"], o["ratio"], color=color, alpha=0.25, lw=0.8)
        o = s["oracle"]["all"]
        ax.plot(o["ks"], o["ratio"], color=color, marker="o", lw=2,
                label=f"ours: {name} (vanilla B {o['b_vanilla']:.2f}; faint: its kinds)")
    ax.axhline(1.0, color="0.6", lw=0.8, ls="--")
    ax.set_xscale("log", base=2)
    ks = next(iter(report["sets"].values()))["oracle"]["all"]["ks"]
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xlabel("k (arcs per slot of the top-k lattice)")
    ax.set_ylabel("B_oracle(k) / B_vanilla")
    ax.set_title("Ours: SmolLM2-135M-Instruct + Medusa heads")
    ax.legend(fontsize=7)
    curves = PAPER["fig6"]["curves"]
    if curves:
        for j, (name, points) in enumerate(curves.items()):
            side.plot([k for k, _ in points], [r for _, r in points], marker="s",
                      color=f"C{j + 3}", label=name)
        side.set_xscale("log", base=2)
        side.legend(fontsize=7)
    else:
        side.axis("off")
        side.text(0.02, 0.5, "Kim et al. (2024), Fig. 6:\nthe curves' values were not found\n"
                  "in the paper text available here,\nso none is drawn (see kim.md,\n"
                  "'The paper's figures quoted here').", fontsize=9, va="center")
    side.set_title("Kim et al. (2024), Fig. 6")
    save_figure(fig, path, report, width=170)


def write_page(report: dict[str, Any], out: Path) -> list[Path]:
    """``kim.json`` (strict JSON), ``kim.md`` and ``kim_oracle.png`` in ``out``."""
    from benchmarks.common.report import finite, write_report

    paths = write_report(report, out, "kim", markdown)
    plot_oracle(finite(report), out / "kim_oracle.png")
    return [*paths, out / "kim_oracle.png"]


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m benchmarks.common.kim_report KIM_JSON")
    src = Path(sys.argv[1])
    print("\n".join(str(p) for p in write_page(json.loads(src.read_text()), src.parent)))
