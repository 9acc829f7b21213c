"""The cost curve of verification: what one forward over N draft tokens costs against one
greedy step, per runtime, precision and device.

    .venv/bin/python -m benchmarks.bench_costs --model smollm2 \\
        --variants torch:float32,onnxruntime:float32,onnxruntime:int8 --threads 1 \\
        --out benchmarks/results/costs
    python -m benchmarks.bench_costs --shape smollm2 --device cuda \\
        --variants torch:float32,torch:bfloat16 --out $OUT      # scripts/gpu_check.sh

Compute does not depend on the weights, so ``--shape smollm2`` times a randomly initialised
model of SmolLM2-135M's exact shape (30 layers, d = 576, 9 query / 3 key-value heads, V =
49,152, 5 Medusa heads): that is how the GPU machines, which cannot hold the real weights,
measure it. ``--model smollm2`` loads the real one.

For every variant, on a ``--prefix``-token cache (median over ``--repeats`` rounds; the
variants and sizes interleaved inside each round, so a busy machine slows them alike):

- ``greedy``: one greedy step (one token, the base head only): the reference;
- ``chain[N]``: a forward over N new tokens in a row (a batch of one draft; causal), with the
  base head at every token: T = N in the cost curve;
- ``tree[N]``: the same over a token tree of N nodes (a 4-D ancestor mask, depths <= 5);
- ``verify[N]``: one whole verification call of that tree (``Verifier.run``: the forward, the
  criterion, keeping the accepted path's cache, every head at the accepted node).

The expected speedup of a strategy that accepts ``B`` tokens per call (B does not depend on
the device: take it from the CPU benchmarks) with trees of N nodes is ``B x greedy /
verify[N]``, reported for the B of the README's strategies. Writes ``costs.json``, ``costs.md``
and ``costs.png`` with the signature of every setting.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.common.report import command_line, save_figure, write_report
from benchmarks.common.stand_ins import SMOLLM2_SHAPE, TINY_SHAPE, bushy_tree, random_model
from blockdraft.core.signature import cpu_flags, cpu_model, environment, format_signature
from blockdraft.core.tree import DraftTree
from blockdraft.models.protocol import as_factored
from blockdraft.verify import Verifier

SIZES = (1, 2, 4, 6, 8, 16, 32, 64)
EXAMPLE_B = {"vanilla heads (B 1.10)": 1.10, "4-best 4-gram trie (B 1.21)": 1.21,
             "rescored tree (B 1.35)": 1.35, "B 1.6 (chat heads target)": 1.6,
             "B 2.0": 2.0}
"""Block efficiencies the report turns into expected speedups (labelled as such)."""


def build_variants(args: argparse.Namespace) -> dict[str, Any]:
    """``{"runtime:precision": model}`` on ``args.device``."""
    from blockdraft.models import load_model
    from blockdraft.models.runtimes import on_runtime

    out: dict[str, Any] = {}
    shape = SMOLLM2_SHAPE if args.shape == "smollm2" else TINY_SHAPE
    for variant in args.variants.split(","):
        runtime, precision = variant.split(":")
        if args.model:
            model = load_model(args.model, runtime=runtime, precision=precision,
                               threads=args.threads, device=args.device,
                               log=lambda m: print(m, file=sys.stderr, flush=True))
        else:
            base = random_model(shape)
            if runtime == "torch":
                model = base.to(dtype=getattr(torch, precision))
                model.base.to(args.device)
                model.heads.to(args.device)
            else:
                model = on_runtime(base, runtime, precision, threads=args.threads,
                                   log=lambda m: print(m, file=sys.stderr, flush=True))
        out[variant] = model
    return out


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _calls(verifier: Verifier, past: Any, trees: dict[int, DraftTree],
           chains: dict[int, torch.Tensor], dev: torch.device, sizes: list[int]
           ) -> list[tuple[str, Any]]:
    """One round's timed calls of a variant: ``(key, zero-argument function)``."""
    heads = as_factored(verifier.model)

    def forward(ids: torch.Tensor, tree: DraftTree | None = None) -> None:
        kw = {} if tree is None else {
            "position_ids": torch.tensor(past.length + tree.depths, device=dev),
            "tree_mask": torch.tensor(tree.ancestor_mask(), device=dev)}
        x, _ = heads.hidden(ids, past, **kw)
        heads.project(heads.head_states(x[0], heads=1))

    def one_row() -> None:  # ONNX Runtime's greedy step through the single-token kernel
        model: Any = verifier.model  # an ONNX Runtime model (checked below: pad_single)
        model.pad_single = False
        try:
            forward(chains[1][:, :1])
        finally:
            model.pad_single = True

    calls: list[tuple[str, Any]] = [("greedy", lambda: forward(chains[1][:, :1]))]
    if hasattr(verifier.model, "pad_single"):
        calls.append(("greedy_1row", one_row))
    for n in sizes:
        ids = torch.tensor(trees[n].tokens, device=dev)[None]
        calls += [(f"chain[{n}]", lambda n=n: forward(chains[n])),
                  (f"tree[{n}]", lambda n=n, ids=ids: forward(ids, trees[n])),
                  (f"verify[{n}]", lambda n=n: verifier.run(past, trees[n], None))]
    return calls


@torch.no_grad()
def measure(models: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Medians (ms) of every variant's greedy step, chain, tree and verification costs."""
    rng = np.random.default_rng(0)
    sizes = [n for n in SIZES if n <= args.max_n]
    prepared = {}
    for name, model in models.items():
        vocab = int(model.config.vocab_size)
        dev = model.device
        prefix = torch.as_tensor(rng.integers(0, vocab, args.prefix), device=dev)[None]
        verifier = Verifier(model)
        _, past = verifier.prefill(prefix[0].tolist())
        trees = {n: bushy_tree(n, vocab, rng) for n in sizes}
        chains = {n: torch.as_tensor(rng.integers(0, vocab, n), device=dev)[None]
                  for n in sizes}
        prepared[name] = (model, verifier, past, trees, chains, dev)
    times: dict[str, dict[str, list[float]]] = {name: {} for name in models}

    def timed(name: str, key: str, fn: Any, dev: torch.device) -> None:
        _sync(dev)
        start = time.perf_counter()
        fn()
        _sync(dev)
        times[name].setdefault(key, []).append((time.perf_counter() - start) * 1e3)

    for rnd in range(args.repeats + 1):  # round 0 warms up every shape
        for name, (_model, verifier, past, trees, chains, dev) in prepared.items():
            for key, fn in _calls(verifier, past, trees, chains, dev, sizes):
                timed(name, key, fn, dev)
        if rnd == 0:
            for name in times:
                times[name].clear()
    return {name: {k: float(np.median(v)) for k, v in t.items()} for name, t in times.items()}


def make_report(medians: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    sizes = [n for n in SIZES if n <= args.max_n]
    rows = []
    for name, m in medians.items():
        greedy = m["greedy"]
        rows.append({
            "variant": name, "greedy_ms": greedy, "greedy_1row_ms": m.get("greedy_1row"),
            "chain_ms": {n: m[f"chain[{n}]"] for n in sizes},
            "tree_ms": {n: m[f"tree[{n}]"] for n in sizes},
            "verify_ms": {n: m[f"verify[{n}]"] for n in sizes},
            "chain_ratio": {n: m[f"chain[{n}]"] / m["chain[1]"] for n in sizes},
            "verify_over_greedy": {n: m[f"verify[{n}]"] / greedy for n in sizes},
            "expected_speedup": {label: {n: b * greedy / m[f"verify[{n}]"] for n in sizes}
                                 for label, b in EXAMPLE_B.items()},
        })
    device = args.device
    if device.startswith("cuda") and torch.cuda.is_available():
        device_name = torch.cuda.get_device_name(torch.device(device))
    else:
        device_name = cpu_model()
    env = environment(device)
    fields = {"model": args.model or f"random:{args.shape}", "prefix": args.prefix,
              "repeats": args.repeats, "threads": args.threads, "device": device_name,
              "torch": torch.__version__, "version": env["version"], "commit": env["commit"]}
    try:
        import onnxruntime

        fields["onnxruntime"] = onnxruntime.__version__
        providers = onnxruntime.get_available_providers()
    except ImportError:
        providers = []
    return {"command": command_line("benchmarks.bench_costs", None),
            "signature": format_signature(fields),
            "cpu_flags": " ".join(cpu_flags()), "ort_providers": providers, "sizes": sizes,
            "rows": rows}


def markdown(report: dict[str, Any]) -> str:
    sizes = report["sizes"]
    lines = ["# Verification cost curve", "", f"Command: `{report['command']}`", "",
             f"Signature: `{report['signature']}`", "",
             f"CPU flags: `{report['cpu_flags']}`; ONNX Runtime providers: "
             f"{', '.join(report['ort_providers']) or 'none'}", "",
             "Medians in ms. `greedy` = one greedy step (ONNX Runtime: run as two rows, which "
             "makes every forward bit-identical per token; `1 row` = through the one-token "
             "kernel, the fastest greedy). `chain` = a forward over N new tokens in a row with "
             "the base head at each (T = N), `tree` = over a token tree of N nodes (4-D mask), "
             "`verify` = a whole verification call of that tree; ratios to a greedy step.", ""]
    head = "| variant | greedy ms | " + " | ".join(f"N={n}" for n in sizes) + " |"
    sep = "|---|---|" + "---|" * len(sizes)
    for key, title in (("chain_ms", "chain (T = N), ms (ratio to T = 1)"),
                       ("tree_ms", "tree of N nodes, ms"),
                       ("verify_ms", "verification call over N nodes, ms (ratio to greedy)")):
        lines += [f"## {title}", "", head, sep]
        for row in report["rows"]:
            cells = []
            for n in sizes:
                ms = row[key][str(n)] if str(n) in row[key] else row[key][n]
                ratio = (row["chain_ratio"] if key == "chain_ms"
                         else row["verify_over_greedy"] if key == "verify_ms" else None)
                r = None if ratio is None else (ratio[str(n)] if str(n) in ratio else ratio[n])
                cells.append(f"{ms:.2f}" + ("" if r is None else f" ({r:.2f})"))
            one = row.get("greedy_1row_ms")
            greedy = f"{row['greedy_ms']:.2f}" + ("" if one is None else f" (1 row {one:.2f})")
            lines.append(f"| {row['variant']} | {greedy} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["## Expected speedup over greedy, B x greedy / verify[N] (estimates)", ""]
    for row in report["rows"]:
        lines += [f"### {row['variant']}", "", "| strategy's B | " +
                  " | ".join(f"N={n}" for n in sizes) + " |", "|---|" + "---|" * len(sizes)]
        for label, by_n in row["expected_speedup"].items():
            vals = [by_n[str(n)] if str(n) in by_n else by_n[n] for n in sizes]
            lines.append(f"| {label} | " + " | ".join(f"{v:.2f}x" for v in vals) + " |")
        lines.append("")
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = report["sizes"]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for row in report["rows"]:
        vals = row["verify_over_greedy"]
        ys = [vals[str(n)] if str(n) in vals else vals[n] for n in sizes]
        ax.plot(sizes, ys, marker="o", label=row["variant"])
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens in the verification forward (N)")
    ax.set_ylabel("cost / one greedy step")
    ax.set_title("Verification cost against a greedy step")
    ax.grid(alpha=0.3)
    ax.legend()
    save_figure(fig, path, report)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="", help="a model load_model takes (default: random)")
    ap.add_argument("--shape", choices=("smollm2", "tiny"), default="smollm2",
                    help="the random model's shape (without --model)")
    ap.add_argument("--variants", default="torch:float32,onnxruntime:float32",
                    help="runtime:precision,... (torch:float32|bfloat16|float16, "
                         "onnxruntime:float32|int8)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--prefix", type=int, default=256, help="cached tokens before the drafts")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--max-n", type=int, default=64)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    models = build_variants(args)
    report = make_report(measure(models, args), args)
    report = json.loads(json.dumps(report))  # int keys as strings, as the JSON file has them
    for path in write_report(report, args.out, "costs", markdown, plot):
        print(path)
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
