"""Issue 30's GPU benchmark: the cost curve eager against CUDA graphs, the decode loop end to end,
and transformers' own generate beside it, in one run (``scripts/gpu_check.sh`` runs it).

    python -m benchmarks.bench_gpu --device cuda --out $OUT                 # random weights
    python -m benchmarks.bench_gpu --device cuda --model DIR/x.gguf --out $OUT   # real weights
    python -m benchmarks.bench_gpu --device cpu --tiny --out /tmp/gpu       # smoke (~20 s)

Sections (``--sections``, each written to ``gpu.{json,md,png}`` as soon as it ends, so a run
stopped at a time limit keeps what it measured):

- ``costs``: random weights of SmolLM2-135M's exact shape (cost does not depend on them), per
  precision (bfloat16, float32): one forward over ``T = 1, 2, 4, ..., 64`` new tokens after a
  ``--prefix``-token cache (base head included), a verification call over a 64-node token tree
  and a greedy step (the median step of ``greedy_generate``), for transformers eager (the
  adapter, dynamic cache), the static runtime without graphs and the static runtime with one
  CUDA graph per bucket (``graph``; on a CPU it is skipped, the reason in the report), plus the
  bare replay of the captured graph. The issue's targets, ratios within one run: a greedy step
  <= 1.25x the bare captured forward (T = 1); a 64-node tree verification <= 1.3x a greedy
  step; graph greedy >= 5x the eager greedy loop.
- ``e2e``: decode with greedy, vanilla heads, prompt lookup and an 8-best trie (k 16) on the
  graph runtime (the static runtime on a CPU), exact criterion, each strategy's speedup over
  the runtime's own greedy and its ratio to B (target >= 0.9). With ``--model`` (the real
  weights, e.g. SmolLM2's GGUF with the packaged heads) on chat prompts; otherwise rows
  labelled ``replay``: random weights of the exact shape, with a drafter that replays the tree
  sizes and accepted lengths of a recorded CPU decode of the real model (``--replay``, written
  by ``benchmarks/common/replay.py``) after running the strategy's own drafter for its host cost.
- ``peers``: transformers' ``generate`` on the same base, greedy with its dynamic cache, with its
  static cache (``cache_implementation="static"``, compile disabled), with its static cache and
  ``torch.compile`` (CUDA only: the last row, written as unfinished before it starts, so a
  stage's time limit leaves it marked so) and its prompt lookup (``prompt_lookup_num_tokens``).

Every report carries the command and a signature (GPU name, torch, transformers, precision,
model). ``--tiny`` runs a tiny random Llama (V = 256) with short decodes: it checks the script,
its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.common.replay import (
    PROMPTS,
    ReplayTreeDrafter,
    inner_drafter,
    load_replay,
    strategies,
)
from benchmarks.common.report import command_line, header, save_figure, write_report
from benchmarks.common.stand_ins import SMOLLM2_SHAPE, TINY_SHAPE, bushy_tree, random_model

SIZES = (1, 2, 4, 8, 16, 32, 64)
TREE = 64
TARGETS = {"greedy_over_replay": 1.25, "tree_over_greedy": 1.3, "graph_over_eager": 5.0,
           "speedup_over_B": 0.9}
DEFAULT_REPLAY = Path(__file__).resolve().parent / "replay" / "smollm2_chat.json"
HEADS = Path(__file__).resolve().parents[1] / "src/blockdraft/models/hf/heads/smollm2"


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _log(msg: str) -> None:
    print(f"[bench_gpu {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---- models ---------------------------------------------------------------------------------

def random_base(args: argparse.Namespace, precision: str) -> Any:
    """A random Llama of the shape (``--tiny``: a tiny one) with 5 Medusa heads, on the device."""
    from blockdraft.models.hf import HFBlockwiseModel

    m = random_model(TINY_SHAPE if args.tiny else SMOLLM2_SHAPE)
    return HFBlockwiseModel(m.base, m.heads, dtype=getattr(torch, precision)).to(args.device)


def real_model(args: argparse.Namespace, precision: str) -> Any:
    from blockdraft.models import load_model

    heads = args.heads or (str(HEADS) if str(args.model).endswith(".gguf") else None)
    return load_model(args.model, dtype=precision, device=args.device, heads=heads)


def runtimes(model: Any, capacity: int, graphs: bool) -> dict[str, Any]:
    """``{"eager": adapter, "static": no graphs, "graph": captured}`` (a reason string where a
    runtime cannot run)."""
    from blockdraft.models.runtimes.cuda_graphs import BUCKETS
    from blockdraft.models.runtimes.static import StaticKVModel

    out: dict[str, Any] = {"eager": model}
    out["static"] = StaticKVModel(model, capacity=capacity, buckets=BUCKETS, graphs=False)
    if graphs:
        out["graph"] = StaticKVModel(model, capacity=capacity)
    else:
        reason = (f"skipped: CUDA graphs need a CUDA device (device {model.device})"
                  if model.device.type != "cuda" else "skipped: --no-graphs")
        out["graph"] = reason
    return out


def warm_buckets(model: Any, vocab: int) -> None:
    """Run (and on CUDA capture) every bucket once after a short prefill."""
    runner = getattr(model, "_runner", None)
    if runner is None:
        return
    dev = model.device
    _, past = model.hidden(torch.full((1, 4), 2, dtype=torch.long, device=dev))
    for t in runner.buckets:
        model.hidden(torch.full((1, t), 3 % vocab, dtype=torch.long, device=dev), past)


def greedy_step_ms(model: Any, prompt: list[int], n: int) -> float:
    """The median step (ms) of ``greedy_generate`` after ``prompt`` (its prefill left out)."""
    from blockdraft.models import greedy_generate

    clock: list[float] = []
    greedy_generate(model, prompt, n, clock=clock)
    return 1e3 * statistics.median(clock[1:])


# ---- (b) the cost curve ---------------------------------------------------------------------

@torch.no_grad()
def cost_curve(args: argparse.Namespace, precision: str) -> dict[str, Any]:
    """Medians (ms) of every runtime's forwards, tree verification, greedy step and replay."""
    from blockdraft.models.protocol import as_factored
    from blockdraft.verify import Verifier

    model = random_base(args, precision)
    vocab = int(model.config.vocab_size)
    capacity = args.prefix + max(SIZES) + args.greedy_tokens + 8
    rts = runtimes(model, capacity, args.graphs)
    rng = np.random.default_rng(0)
    prefix = rng.integers(2, vocab, args.prefix).tolist()
    tree = bushy_tree(TREE, vocab, rng)
    chains = {t: torch.as_tensor(rng.integers(2, vocab, t), device=model.device)[None]
              for t in SIZES}
    live = {name: m for name, m in rts.items() if not isinstance(m, str)}
    prepared = {}
    for name, m in live.items():
        verifier = Verifier(m)
        _, past = verifier.prefill(prefix)
        prepared[name] = (m, verifier, past)
    times: dict[str, dict[str, list[float]]] = {name: {} for name in live}

    def timed(name: str, key: str, fn: Any) -> None:
        _sync(model.device)
        start = time.perf_counter()
        fn()
        _sync(model.device)
        times[name].setdefault(key, []).append(1e3 * (time.perf_counter() - start))

    for rnd in range(args.repeats + 1):  # round 0 warms up (and captures) every shape
        for name, (m, verifier, past) in prepared.items():
            heads = as_factored(m)

            def forward(ids: torch.Tensor, heads: Any = heads, past: Any = past) -> None:
                x, _ = heads.hidden(ids, past)
                heads.project(heads.head_states(x[0], heads=1))

            for t in SIZES:
                timed(name, f"T{t}", lambda t=t, f=forward: f(chains[t]))
            timed(name, f"tree{TREE}",
                  lambda v=verifier, p=past: v.run(p, tree, None))
            runner = getattr(m, "_runner", None)
            if runner is not None and runner.capture:
                for t in SIZES:
                    graph = runner._graphs[t].graph
                    timed(name, f"replay{t}", graph.replay)
        if rnd == 0:
            for timings in times.values():
                timings.clear()
    med = {name: {k: float(np.median(v)) for k, v in t.items()} for name, t in times.items()}
    for name, m in live.items():  # the greedy loop, after the timed rounds (its own prefill)
        greedy_step_ms(m, prefix, 2)  # warm-up
        med[name]["greedy"] = greedy_step_ms(m, prefix, args.greedy_tokens)
    skipped = {name: m for name, m in rts.items() if isinstance(m, str)}
    return {"precision": precision, "ms": med, "skipped": skipped,
            "targets": targets(med, skipped)}


def targets(med: dict[str, dict[str, float]], skipped: dict[str, str]) -> dict[str, Any]:
    """The issue's three ratios of one precision (graph runtime; None where it did not run)."""
    g = med.get("graph")
    e = med.get("eager")
    if g is None:
        why = skipped.get("graph", "no graph runtime")
        return {key: {"value": None, "target": TARGETS[key], "met": None, "note": why}
                for key in ("greedy_over_replay", "tree_over_greedy", "graph_over_eager")}
    vals = {"greedy_over_replay": g["greedy"] / g["replay1"],
            "tree_over_greedy": g[f"tree{TREE}"] / g["greedy"],
            "graph_over_eager": (e["greedy"] / g["greedy"]) if e else None}
    out = {}
    for key, v in vals.items():
        lower_is_better = key != "graph_over_eager"
        met = None if v is None else (v <= TARGETS[key] if lower_is_better else
                                      v >= TARGETS[key])
        out[key] = {"value": v, "target": TARGETS[key], "met": met}
    return out


# ---- (c) end to end, (d) peers --------------------------------------------------------------

def e2e_setup(args: argparse.Namespace, precision: str) -> dict[str, Any]:
    """The model, prompts and replay data of the end-to-end section (with ``reason`` where it
    is skipped: no real weights and no replay file; the peers then run on random weights)."""
    if args.model:
        model = real_model(args, precision)
        tok = model.tokenizer
        prompts = [tok.apply_chat_template([{"role": "user", "content": q}])
                   for q in PROMPTS[:args.prompts]]
        return {"model": model, "prompts": prompts, "eos": tok.eos_id, "replay": None,
                "mode": "real", "max_new": args.max_new_tokens}
    model = random_base(args, precision)
    vocab = int(model.config.vocab_size)
    if not args.replay.is_file():
        rng = np.random.default_rng(1)
        return {"model": model, "prompts": [rng.integers(2, vocab, 40).tolist()
                                            for _ in range(args.prompts)],
                "eos": None, "replay": None, "mode": "random",
                "max_new": args.max_new_tokens,
                "reason": f"skipped: no --model and no replay file {args.replay} (record one: "
                "python -m benchmarks.common.replay --model smollm2 --out "
                "benchmarks/replay/smollm2_chat.json)"}
    data = load_replay(args.replay)
    first = next(iter(data["strategies"].values()))[:args.prompts]
    rng = np.random.default_rng(1)
    prompts = [rng.integers(2, vocab, e["prompt_length"]).tolist() for e in first]
    return {"model": model, "prompts": prompts, "eos": None, "replay": data, "mode": "replay",
            "max_new": min(args.max_new_tokens, int(data["max_new_tokens"]))}


@torch.no_grad()
def end_to_end(args: argparse.Namespace, setup: dict[str, Any]) -> dict[str, Any]:
    """Each strategy's tokens/s, B, speedup over the runtime's own greedy and its ratio to B."""
    from blockdraft.models import greedy_generate
    from blockdraft.verify import decode

    model, prompts, eos, max_new = (setup["model"], setup["prompts"], setup["eos"],
                                    setup["max_new"])
    vocab = int(model.config.vocab_size)
    capacity = max(len(p) for p in prompts) + max_new + max(SIZES) + 8
    rts = runtimes(model, capacity, args.graphs)
    name = "graph" if not isinstance(rts["graph"], str) else "static"
    rt = rts[name]
    warm_buckets(rt, vocab)
    device = str(model.device)
    rows: dict[str, Any] = {}

    def greedy_row(m: Any) -> tuple[dict[str, Any], list[list[int]]]:
        greedy_generate(m, prompts[0], 2, eos_id=eos)  # warm-up
        outs, secs = [], 0.0
        for p in prompts:
            clock: list[float] = []
            outs.append(greedy_generate(m, p, max_new, eos_id=eos, clock=clock))
            secs += sum(clock)
        tokens = sum(len(o) for o in outs)
        return {"tokens": tokens, "seconds": secs, "tok_s": tokens / secs, "B": 1.0}, outs

    rows["greedy"], greedy_out = greedy_row(rt)
    base_tok_s = rows["greedy"]["tok_s"]
    rows["greedy"].update(speedup=1.0, ratio=1.0, identical=len(prompts))
    eager, _ = greedy_row(rts["eager"])
    rows["transformers eager greedy (adapter)"] = {
        **eager, "speedup": eager["tok_s"] / base_tok_s, "ratio": None, "identical": None}
    for sname, spec in strategies().items():
        _log(f"e2e {setup['mode']} {sname}")

        def run(p: list[int], i: int, n: int, sname: str = sname, spec: Any = spec) -> Any:
            if setup["replay"] is None:
                return decode(rt, p, drafter=spec, max_new_tokens=n, eos_id=eos, device=device)
            entry = setup["replay"]["strategies"][sname][i]
            drafter = ReplayTreeDrafter(entry["steps"], len(p), greedy_out[i], vocab,
                                        inner_drafter(sname, rt))
            return decode(rt, p, drafter=drafter, max_new_tokens=n, eos_id=eos, device=device)

        run(prompts[0], 0, 8)  # warm-up
        results = [run(p, i, max_new) for i, p in enumerate(prompts)]
        tokens = sum(len(r.tokens) for r in results)
        secs = sum(r.wall_s for r in results)
        calls = sum(r.calls for r in results)
        b = tokens / calls
        speedup = tokens / secs / base_tok_s
        steps = [s for r in results for s in r.steps]
        host = [1e3 * (s.lattice_s + s.draft_s + s.other_s) for s in steps]
        row = {"tokens": tokens, "seconds": secs, "tok_s": tokens / secs, "B": b,
               "speedup": speedup, "ratio": speedup / b,
               "met": speedup / b >= TARGETS["speedup_over_B"],
               "identical": sum(r.tokens == g for r, g in zip(results, greedy_out, strict=True)),
               "host_ms": statistics.median(host) if host else None}
        if setup["replay"] is not None:
            entries = setup["replay"]["strategies"][sname][:len(prompts)]
            rec_calls = sum(1 + len(e["steps"]) for e in entries)
            row["recorded_B"] = sum(e["tokens"] for e in entries) / rec_calls
        rows[sname] = row
    return {"mode": setup["mode"], "runtime": name, "prompts": len(prompts),
            "max_new_tokens": max_new, "rows": rows,
            "graph_skipped": rts["graph"] if isinstance(rts["graph"], str) else None}


@torch.no_grad()
def peers(args: argparse.Namespace, setup: dict[str, Any], out: dict[str, Any],
          report: dict[str, Any], save: Any) -> None:
    """transformers' generate on the same base: greedy (dynamic cache, static cache, static
    cache + torch.compile) and prompt lookup; tokens/s, B and outputs against its greedy,
    filled into ``out`` (an entry of ``report``, saved before each row)."""
    from benchmarks.common.peers import HFGenerate

    base = setup["model"].base
    prompts, eos, max_new = setup["prompts"], setup["eos"], setup["max_new"]
    out.update(rows={}, skipped={})
    specs: list[tuple[str, dict[str, Any]]] = [("HF generate greedy, dynamic cache", {}),
             ("HF generate greedy, static cache", {"cache": "static", "compile": False}),
             ("HF generate prompt lookup (n=10)", {"lookup": 10})]
    if base.device.type == "cuda":
        specs.append(("HF generate greedy, static cache + torch.compile",
                      {"cache": "static", "compile": True}))
    else:
        out["skipped"]["HF generate greedy, static cache + torch.compile"] = (
            "skipped: torch.compile is timed on CUDA only (minutes to compile on a CPU)")
    reference: list[list[int]] | None = None
    for name, kw in specs:
        _log(f"peers {name}")
        out["rows"][name] = {"status": "unfinished (stopped at the stage's time limit?)"}
        save(report)
        peer = HFGenerate(base, **kw)
        start = time.perf_counter()
        peer.generate(prompts[0], 4, eos)  # warm-up (the compilation, with torch.compile)
        warm = time.perf_counter() - start
        outs, secs, calls = [], 0.0, 0
        for p in prompts:
            _sync(base.device)
            start = time.perf_counter()
            o = peer.generate(p, max_new, eos)
            _sync(base.device)
            secs += time.perf_counter() - start
            outs.append(o.tokens)
            calls += o.calls or 0
        tokens = sum(len(o) for o in outs)
        if reference is None:
            reference = outs
        out["rows"][name] = {
            "tokens": tokens, "seconds": secs, "tok_s": tokens / secs, "warmup_s": warm,
            "B": tokens / calls if calls else None,
            "identical": sum(a == b for a, b in zip(outs, reference, strict=True))}
        peer.close()


# ---- the report -----------------------------------------------------------------------------

def _f(v: Any, fmt: str = ".2f") -> str:
    return "-" if v is None else format(v, fmt)


def markdown(report: dict[str, Any]) -> str:
    lines = header("GPU benchmark: cost curve, end to end, peers (issue 30)", report)
    if report.get("pending"):
        lines += [f"Not finished: {', '.join(report['pending'])} (a stage's time limit?).", ""]
    for c in report.get("costs", []):
        p = c["precision"]
        lines += [f"## Cost curve, {p} (median ms)", "",
                  "One forward over T new tokens after the prefix, base head included; "
                  f"`tree{TREE}` a verification call over a {TREE}-node token tree; `greedy` "
                  "the median step of the greedy loop; `replay` the captured graph alone.", "",
                  "| runtime | " + " | ".join(f"T={t}" for t in SIZES)
                  + f" | tree{TREE} | greedy |", "|---|" + "---|" * (len(SIZES) + 2)]
        for name, ms in c["ms"].items():
            lines.append(f"| {name} | " + " | ".join(_f(ms.get(f"T{t}")) for t in SIZES)
                         + f" | {_f(ms.get(f'tree{TREE}'))} | {_f(ms.get('greedy'))} |")
            if "replay1" in ms:
                lines.append(f"| {name} (replay only) | "
                             + " | ".join(_f(ms.get(f"replay{t}")) for t in SIZES) + " | - | - |")
        for name, why in c["skipped"].items():
            lines.append(f"| {name} | {why} |" + " |" * (len(SIZES) + 1))
        lines += ["", f"Targets ({p}, graph runtime, ratios within this run):", "",
                  "| target | value | bound | met |", "|---|---|---|---|"]
        labels = {"greedy_over_replay": "greedy step / bare captured forward (T=1)",
                  "tree_over_greedy": f"{TREE}-node tree verification / greedy step",
                  "graph_over_eager": "eager greedy step / graph greedy step"}
        for key, t in c["targets"].items():
            op = ">=" if key == "graph_over_eager" else "<="
            met = "-" if t["met"] is None else ("met" if t["met"] else "missed")
            lines.append(f"| {labels[key]} | {_f(t['value'])}"
                         f"{'' if t['value'] is not None else ' (' + t.get('note', '') + ')'}"
                         f" | {op} {t['target']} | {met} |")
        lines.append("")
    for e in report.get("e2e", []):
        if "rows" not in e:
            lines += [f"## End to end, {e['precision']}", "", e["reason"], ""]
            continue
        label = " (replay)" if e["mode"] == "replay" else ""
        lines += [f"## End to end, {e['precision']}, runtime {e['runtime']}{label}", "",
                  f"{e['prompts']} prompts x {e['max_new_tokens']} new tokens, exact criterion. "
                  "speedup: tokens/s over the runtime's own greedy; ratio: speedup / B "
                  f"(target >= {TARGETS['speedup_over_B']}); host: median ms per step outside "
                  "the forward and heads."
                  + (" replay: random weights of the exact shape, each step's tree size and "
                     "accepted length replayed from the recorded CPU decode (recorded B beside)."
                     if e["mode"] == "replay" else ""), ""]
        if e.get("graph_skipped"):
            lines += [f"Graph runtime {e['graph_skipped']}; the static runtime ran instead.", ""]
        lines += ["| strategy | tokens/s | B | recorded B | speedup | ratio to B | target "
                  "| identical | host ms |", "|---|---|---|---|---|---|---|---|---|"]
        for name, r in e["rows"].items():
            met = "-" if r.get("met") is None else ("met" if r["met"] else "missed")
            ident = "-" if r.get("identical") is None else f"{r['identical']}/{e['prompts']}"
            row_label = label if name in strategies() else ""
            lines.append(f"| {name}{row_label} | {_f(r['tok_s'], '.1f')} "
                         f"| {_f(r['B'])} | {_f(r.get('recorded_B'))} | {_f(r['speedup'])}x | "
                         f"{_f(r.get('ratio'))} | {met} | {ident} | "
                         f"{_f(r.get('host_ms'), '.3f')} |")
        lines.append("")
    for pr in report.get("peers", []):
        lines += [f"## transformers' generate beside it, {pr['precision']}"
                  f"{' (random weights)' if pr.get('mode') != 'real' else ''}", "",
                  "| peer | tokens/s | B | identical to its greedy | warm-up s |",
                  "|---|---|---|---|---|"]
        for name, r in pr["rows"].items():
            if "tok_s" not in r:
                lines.append(f"| {name} | {r['status']} | | | |")
                continue
            lines.append(f"| {name} | {r['tok_s']:.1f} | {_f(r['B'])} | "
                         f"{r['identical']}/{pr.get('prompts', '?')} | "
                         f"{r['warmup_s']:.1f} |")
        for name, why in pr.get("skipped", {}).items():
            lines.append(f"| {name} | {why} | | | |")
        lines.append("")
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for c in report["costs"]:
        for name, ms in c["ms"].items():
            ax.plot(SIZES, [ms[f"T{t}"] for t in SIZES], marker="o",
                    label=f"{name}, {c['precision']}")
            if "replay1" in ms:
                ax.plot(SIZES, [ms[f"replay{t}"] for t in SIZES], ls="--",
                        label=f"graph replay only, {c['precision']}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("new tokens in the forward (T)")
    ax.set_ylabel("ms (median)")
    ax.set_title("One forward after the prefix: eager against CUDA graphs")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    save_figure(fig, path, report)


def signature(args: argparse.Namespace) -> str:
    import transformers

    from blockdraft.core.signature import environment, format_signature

    dev = torch.device(args.device)
    gpu = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "none"
    model = args.model or f"random:{'tiny' if args.tiny else 'smollm2'}"
    return format_signature({
        "model": model, "replay": "-" if args.model else args.replay.name,
        "precisions": ",".join(args.precisions), "prefix": args.prefix,
        "repeats": args.repeats, "gpu": gpu, "torch": torch.__version__,
        "cuda": torch.version.cuda, "transformers": transformers.__version__,
        **environment(args.device if dev.type == "cuda" else "cpu")})


def main(argv: list[str] | None = None) -> int:
    import os

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true", help="a tiny random Llama: a smoke run")
    ap.add_argument("--precisions", default="bfloat16,float32")
    ap.add_argument("--sections", default="costs,e2e,peers")
    ap.add_argument("--model", default=os.environ.get("BLOCKDRAFT_GPU_MODEL", ""),
                    help="real weights (a .gguf file, with the packaged SmolLM2 heads, or what "
                         "load_model takes; env BLOCKDRAFT_GPU_MODEL); default: replay")
    ap.add_argument("--heads", default="", help="heads for --model (default: packaged)")
    ap.add_argument("--replay", type=Path, default=DEFAULT_REPLAY)
    ap.add_argument("--no-graphs", dest="graphs", action="store_false")
    ap.add_argument("--prefix", type=int, default=None, help="cached tokens (256; tiny 32)")
    ap.add_argument("--repeats", type=int, default=None, help="timed rounds (20; tiny 2)")
    ap.add_argument("--greedy-tokens", type=int, default=None, help="(64; tiny 8)")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=None, help="(128; tiny 12)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    tiny = args.tiny
    args.prefix = args.prefix or (32 if tiny else 256)
    args.repeats = args.repeats or (2 if tiny else 20)
    args.greedy_tokens = args.greedy_tokens or (8 if tiny else 64)
    args.max_new_tokens = args.max_new_tokens or (12 if tiny else 128)
    args.precisions = args.precisions.split(",")
    args.graphs = args.graphs and torch.device(args.device).type == "cuda"
    torch.set_num_threads(args.threads)
    sections = args.sections.split(",")
    pending = [f"{s}:{p}" for s in sections for p in args.precisions]
    report: dict[str, Any] = {"command": command_line("benchmarks.bench_gpu", argv),
                              "signature": signature(args), "costs": [], "e2e": [],
                              "peers": [], "pending": pending}

    def save(rep: dict[str, Any]) -> None:
        write_report(rep, args.out, "gpu", markdown, plot if rep["costs"] else None)

    for precision in args.precisions:
        if "costs" in sections:
            _log(f"costs {precision}")
            report["costs"].append(cost_curve(args, precision))
            pending.remove(f"costs:{precision}")
            save(report)
        if "e2e" in sections or "peers" in sections:
            setup = e2e_setup(args, precision)
            if "e2e" in sections:
                if "reason" in setup:
                    report["e2e"].append({"precision": precision, "reason": setup["reason"]})
                else:
                    report["e2e"].append({"precision": precision, **end_to_end(args, setup)})
                pending.remove(f"e2e:{precision}")
                save(report)
            if "peers" in sections:
                entry: dict[str, Any] = {"precision": precision, "mode": setup["mode"],
                                         "prompts": len(setup["prompts"])}
                report["peers"].append(entry)
                peers(args, setup, entry, report, save)
            if "peers" in sections:
                pending.remove(f"peers:{precision}")
                save(report)
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
