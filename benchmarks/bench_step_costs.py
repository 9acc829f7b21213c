"""Per-step costs of the decode loop, independent of what the weights learned.

    .venv/bin/python -m benchmarks.bench_step_costs [--repeats 30] [--threads 2]
        [--rescorer-threads 1]

Compute does not depend on the values of the weights, so these timings use randomly
initialised models of the presets' sizes (labelled "random weights" in every signature):

- one verification call of a `small` BlockwiseLM (h = 9, V = 4,096) on a 256-token prefix
  cache, for p = 1, 4 and 16 drafts in one batch, relative to p = 1 (issue 3, item 7), and one
  step of plain greedy decoding on the same cache (one token, head 1 only): a strategy with
  block efficiency B beats greedy in wall time only when B exceeds (verification + drafting)
  / greedy step, the break-even B the table reports for drafting at no cost;
- one local neural rescoring step (Kim Alg. 2, h = 9, k = 16, two new context tokens) with the
  project's two RescorerLM sizes, torch and ONNX Runtime, relative to the p = 1 verification
  call (target: <= 1/4). The verifier runs on ``--threads``; the rescorer on
  ``--rescorer-threads`` (torch threads and ONNX Runtime intra-op threads), default 1: a step
  is h - 1 single-token forwards of tiny kernels, where a thread pool costs more than it gains.
  The machine may be shared: each rescorer row's ratio divides by a p = 1 verification timed
  right before it, back to back in the same process.

Block efficiency and end-to-end speedups need trained models: see the models and evaluation
benchmarks. Writes benchmarks/results/step_costs.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from blockdraft.core.signature import environment, format_signature
from blockdraft.drafts import DraftBatch
from blockdraft.lattice import SausageLattice
from blockdraft.models import BlockwiseConfig, BlockwiseLM, RescorerLM
from blockdraft.rescorers.neural import NeuralRescorer
from blockdraft.rescorers.neural.rescorer import time_step
from blockdraft.verify import Verifier

RESULTS = Path(__file__).resolve().parent / "results"
V, H, K, PREFIX = 4096, 9, 16, 256
RESCORERS = {  # name -> BlockwiseConfig overrides (h = 1, V = 4096, max_seq_len = 512)
    "rescorer-mini (1L d128)": dict(n_layer=1, n_head=2, d_model=128, d_ff=512),
    "rescorer-small (2L d256)": dict(n_layer=2, n_head=4, d_model=256, d_ff=1024),
}


def median_ms(fn, repeats: int) -> float:
    fn()  # warm-up
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts) * 1e3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2, help="torch threads of the verifier")
    ap.add_argument("--rescorer-threads", type=int, default=1,
                    help="torch / ONNX Runtime intra-op threads of the rescorer")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)

    model = BlockwiseLM(BlockwiseConfig.small(vocab_size=V, h=H)).eval()
    verifier = Verifier(model)
    prompt = rng.integers(0, V, size=PREFIX)
    logits, past = verifier.prefill(prompt)
    d1 = int(torch.argmax(logits[0]))

    def verify_p(p: int) -> float:
        toks = rng.integers(0, V, size=(p, H))
        toks[:, 0] = d1
        batch = DraftBatch(tokens=toks, scores=-np.arange(p, dtype=float),
                           head_scores=-np.arange(p, dtype=float), lm_scores=np.zeros(p))
        torch.set_num_threads(args.threads)
        with torch.no_grad():
            return median_ms(lambda: verifier.verify(past, batch), args.repeats)

    verify_ms = {p: verify_p(p) for p in (1, 4, 16)}

    def greedy_step() -> None:  # what greedy_generate does per token
        x, _ = model.hidden(torch.tensor([[d1]]), past)  # (1, 1, d)
        int(torch.argmax(model.project(model.head_states(x[0, -1], heads=1))[0]))

    with torch.no_grad():
        greedy_ms = median_ms(greedy_step, args.repeats)

    lat = SausageLattice.from_logits(rng.normal(size=(H, V)), k=K)
    context = rng.integers(0, V, size=PREFIX)
    rescore_ms: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, over in RESCORERS.items():
            rmodel = RescorerLM(BlockwiseConfig.small(vocab_size=V, h=1, **over)).eval()
            rescore_ms[name] = {}
            for backend in ("torch", "onnx"):
                r = NeuralRescorer(rmodel, alpha=1.0, backend=backend,
                                   onnx_path=Path(tmp) / f"{len(rescore_ms)}.onnx",
                                   intra_op_threads=args.rescorer_threads)
                if backend == "onnx":  # the ratio's denominator, timed right before
                    rescore_ms[name]["verify_p1"] = verify_p(1)
                torch.set_num_threads(args.rescorer_threads)
                rescore_ms[name][backend] = time_step(r, lat, context, repeats=args.repeats,
                                                      new_tokens=2)

    fields = {"model": "small(h=9,V=4096)", "weights": "random (timing only)", "prefix": PREFIX,
              "h": H, "k": K, "threads": args.threads,
              "rescorer_threads": args.rescorer_threads, "repeats": args.repeats,
              **environment()}
    sig = format_signature(fields)
    lines = [
        "# Decode-step costs (random weights: compute only)", "",
        f"Command: `.venv/bin/python -m benchmarks.bench_step_costs --repeats {args.repeats} "
        f"--threads {args.threads} --rescorer-threads {args.rescorer_threads}`", "",
        f"Signature: `{sig}`", "",
        "## Verifying p drafts in one batched call (small BlockwiseLM, 256-token prefix cache)",
        "", "| p | ms per call | relative to p = 1 |", "|---|---|---|",
    ]
    for p, ms in verify_ms.items():
        lines.append(f"| {p} | {ms:.2f} | {ms / verify_ms[1]:.2f}x |")
    lines += ["", f"One greedy step on the same cache (one token, head 1): {greedy_ms:.2f} ms, so "
              "a strategy beats greedy only above B = verification / greedy step (drafting "
              "free): " + ", ".join(f"p = {p}: {ms / greedy_ms:.2f}"
                                    for p, ms in verify_ms.items()) + "."]
    lines += ["", "## One local neural rescoring step (h = 9, k = 16, 2 new context tokens)",
              "", "| rescoring LM | torch ms | ONNX Runtime ms | p = 1 verification ms (adjacent) "
              "| ONNX / p=1 verification |", "|---|---|---|---|---|"]
    for name, d in rescore_ms.items():
        lines.append(f"| {name} | {d['torch']:.2f} | {d['onnx']:.2f} | {d['verify_p1']:.2f} | "
                     f"{d['onnx'] / d['verify_p1']:.2f} |")
    lines += ["", "Target (issue 3): ONNX rescoring step <= 0.25 of one p = 1 verification.", ""]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "step_costs.md").write_text("\n".join(lines))
    (RESULTS / "step_costs.json").write_text(json.dumps(
        {"signature": sig, "fields": fields, "verify_ms": verify_ms, "greedy_step_ms": greedy_ms,
         "rescore_ms": rescore_ms}, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
