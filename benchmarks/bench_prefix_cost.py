"""What the heads cost at a step: Medusa heads against prefix-conditioned heads and an
EAGLE-style draft layer, PyTorch.

    .venv/bin/python -m benchmarks.bench_prefix_cost --medusa HEADS_DIR --prefix HEADS_DIR \\
        [--eagle LAYER_DIR] [--k 4] [--repeats 300] --out benchmarks/results/heads/prefix

At one accepted position of SmolLM2-135M-Instruct (float32, one thread), the time of what the
verifier runs for the next step's lattice: ``head_topk`` (Medusa: the ResBlocks and the
shortlist projection of every head at once; prefix heads: head by head, each reading the
previous head's argmax, head 0 the base's greedy token, which the verifier has), and for
reference one greedy step (a forward of one token on a
256-token cache with the base head). With ``--eagle``: one draft token of the layer (one
position on its own cache of the same 256 positions: the layer, its shortlist head and the
top-k), and the greedy chain of the layer's depth from there (what ``head_topk`` runs at a
step); with ``--ort`` too, the layer's draft token on ONNX Runtime (its graph's call) against
ORT's greedy step (a 32-token greedy run after the same 256-token prompt, less its prefill).
Medians of ``--repeats`` calls, all interleaved.
Writes ``cost.{json,md}``. Run it on a quiet machine (nothing else busy).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ORT_STEPS = 32
"""Tokens of the timed ONNX Runtime greedy run (after a prefill of the same cache)."""
ORT_GREEDY = "ORT greedy step (forward + base head)"


def ort_calls(folder: str, feats: Any, ids: Any, positions: Any, first: Any,
              k: int, precisions: list[str]) -> dict[str, Callable[[], float | None]]:
    """The draft layer's one token on ONNX Runtime (its backend's call on a 255-position
    cache), once per weight precision (``[]``: the folder's), and ORT's greedy step (a run of
    :data:`ORT_STEPS` tokens after a 256-token prompt, less the prefill alone: the step is its
    mean)."""
    import torch

    from blockdraft.models import greedy_generate, load_model

    calls: dict[str, Callable[[], float | None]] = {}
    for precision in precisions or [""]:
        extra = {"draft_precision": precision} if precision else {}
        model = load_model("smollm2", heads=folder, runtime="onnxruntime", threads=1, **extra)
        step = model.heads_rule.backend.step
        kv = step(feats[:, :-1], ids[:, 1:], positions[:, :-1], None, None).kv
        last = (feats[:, -1:], first.view(1, 1), positions[:, -1:])

        def token(step: Any = step, kv: Any = kv, last: Any = last) -> None:
            out = step(*last, kv, None)
            torch.topk(out.logits[0, -1], k)

        tag = f", {precision} weights" if precision else ""
        calls[f"EAGLE one draft token on ORT{tag} (layer + shortlist head + top-k)"] = token
    prompt = ids[0].tolist()

    def greedy() -> float:
        t0 = time.perf_counter()
        greedy_generate(model, prompt, 1)
        t1 = time.perf_counter()
        greedy_generate(model, prompt, ORT_STEPS + 1)
        return (time.perf_counter() - t1 - (t1 - t0)) / ORT_STEPS  # one step, seconds

    calls[ORT_GREEDY] = greedy
    return calls


def main(argv: list[str] | None = None) -> int:
    import torch

    from benchmarks.common.report import command_line, header, write_report
    from blockdraft.core.signature import environment, format_signature
    from blockdraft.models import load_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--medusa", required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--eagle", default=None, help="a draft layer's folder (--arch eagle)")
    ap.add_argument("--ort", action="store_true",
                    help="with --eagle: also the layer's draft token and the greedy step on ONNX "
                         "Runtime (float32, one thread), each share against ORT's greedy step")
    ap.add_argument("--eagle-precision", default="",
                    help="with --ort: the layer's weights on ORT, comma-separated (float32, "
                         "int8, q4): one row each (default: the folder's recipe)")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=300)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    models = {name: load_model("smollm2", heads=folder, runtime="torch")
              for name, folder in (("medusa", args.medusa), ("prefix", args.prefix),
                                   ("eagle", args.eagle)) if folder is not None}
    base = models["medusa"]
    ids = torch.randint(100, 20000, (1, 256), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        x, past = base.hidden(ids, None)
        state = x[0, -1:]  # (1, d)
        step = torch.tensor([[int(ids[0, -1])]])
        first = base.project(base.head_states(state, heads=1))[:, 0].argmax(-1)  # (1,)

        def greedy() -> None:
            y, _ = base.hidden(step, past)
            base.project(base.head_states(y[0], heads=1))

        calls = {"greedy step (forward + base head)": greedy,
                 "Medusa head_topk": lambda: models["medusa"].head_topk(state, args.k),
                 "prefix head_topk": lambda: models["prefix"].head_topk(state, args.k,
                                                                        first=first)}
        if "eagle" in models:
            layer = models["eagle"].heads.layer
            depth = models["eagle"].heads.num_heads
            feats, positions = x.float(), torch.arange(256).unsqueeze(0)
            kv = layer(feats[:, :-1], ids[:, 1:], positions[:, :-1]).kv  # 255 cached positions
            last = (feats[:, -1:], first.view(1, 1), positions[:, -1:])

            def eagle_token() -> None:
                out = layer(*last, kv)
                torch.topk(out.logits[0, -1], args.k)

            calls["EAGLE one draft token (layer + shortlist head + top-k)"] = eagle_token
            calls[f"EAGLE head_topk (chain of depth {depth}, no cache: a stand-in)"] = (
                lambda: models["eagle"].head_topk(state, args.k, first=first))
            if args.ort:
                calls.update(ort_calls(args.eagle, feats, ids, positions, first, args.k,
                                       [v for v in args.eagle_precision.split(",") if v]))
        times: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(10):  # warm-up
            for fn in calls.values():
                fn()
        for _ in range(args.repeats):
            for name, fn in calls.items():
                t0 = time.perf_counter()
                own = fn()  # a call that times itself returns its seconds
                times[name].append(own if isinstance(own, float) else time.perf_counter() - t0)
    med = {name: 1e3 * statistics.median(v) for name, v in times.items()}
    greedy_ms = med["greedy step (forward + base head)"]
    env = environment("cpu")
    signature = format_signature({"model": "smollm2", "runtime": "torch", "precision": "float32",
                                  "threads": 1, "k": args.k, "cache": 256,
                                  "repeats": args.repeats,
                                  "eagle": Path(args.eagle).name if args.eagle else "-",
                                  "ort": bool(args.ort and args.eagle),
                                  "eagle_precision": args.eagle_precision or "-", **env})
    report = {"command": command_line("benchmarks.bench_prefix_cost", argv), "signature": signature,
              "median_ms": med}
    lines = [*header("The heads' cost at a step (PyTorch float32, one thread)", report),
             "| call | median ms | share of a greedy step |", "|---|---|---|"]
    lines += [f"| {name} | {ms:.3f} | "
              + (f"{ms / med[ORT_GREEDY]:.1%} of ORT's |" if "ORT" in name
                 else f"{ms / greedy_ms:.1%} |") for name, ms in med.items()]
    write_report(report, args.out, "cost", "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
