"""The host's share of a decode step: what a step spends outside the model (issue 30, item 2;
issue 41's host target).

    .venv/bin/python -m benchmarks.bench_static_host [--model smollm2] [--runtime static]
        [--max-new-tokens 64] [--repeats 3] --out benchmarks/results/static
    .venv/bin/python -m benchmarks.bench_static_host --tiny --out /tmp/host   # a smoke run
    .venv/bin/python -m benchmarks.bench_static_host --null-forward [--tiny] --out /tmp/host
    python -m benchmarks.bench_static_host [--null-forward] --device cuda --dtype bfloat16 \
        --model GGUF --heads src/blockdraft/models/hf/heads/smollm2 --out OUT   # on a GPU

Each strategy decodes the prompts (exact criterion; every output checked against the
runtime's own greedy decoding) and every step's wall time is split as the decode loop records
it (:class:`~blockdraft.verify.records.DecodeStep`):

- forward: the verification forward and the base head at every node (on a GPU: the graph's
  replay and its synchronisation);
- heads: the next step's Medusa heads and their top-k at the accepted node, and the transfer
  of the ``[h, k]`` arrays to the host (on a GPU the heads move into the graph; the transfer
  stays on the host's bill);
- host: the lattice, the drafting, acceptance, the cache's row selection and the loop's
  book-keeping (``lattice_s + draft_s + other_s``), the part the issue budgets (vanilla heads
  at most 0.3 ms a step, 8x16 4-gram p-best at most 1.0 ms);
- step: the whole step (the sum of the above), and outside: the step less its forward.

``--null-forward`` (static runtime) runs a null body in place of the base's forward
(:meth:`StaticKVModel.use_body <blockdraft.models.runtimes.static.StaticKVModel.use_body>`:
the embeddings of the new tokens, so the "model" is a bigram map and every drafter does its
work), after measuring the model's cost curve with the real forward (so the default drafter
sizes its trees as it would). Everything else of a step stays: the runtime's checks, bias,
padding and cache book-keeping, the base head's projection, the heads, the lattice, the
drafter, the acceptance. A step's wall time is then the host's time per step with the forward
taken out (issue 41's target: at most 0.15 ms a step outside the graph replay). Outputs are
still checked against the null model's own greedy decoding.

Strategies: the model's default drafter, vanilla heads, prompt lookup, an 8-best trie (k 16,
head scores alone), Medusa's static tree of 16 nodes, the issue's 8x16 4-gram p-best (the
heads' lattice with k = 16, p = 8 drafts by the exact p-best search rescored by a 4-gram,
``--ngram``: by default the packaged SmolLM2 answers 4-gram; ``--tiny`` trains a tiny one on
random ids with the built-in estimator), verified as a trie, and on the static runtime the
device step's rows (issue 41, :mod:`blockdraft.models.runtimes.device_step`): vanilla heads
and the 16-node Medusa tree with the whole step on the device (one CUDA graph a step on a
GPU, eager on a CPU). Their ``forward`` is the device step (its launch and the wait for its
output row: forward, verdict, rows moved, next heads and draft), ``host`` and ``outside`` the
host's own work per step (the issue's target: at most 0.15 ms), ``heads``, ``lattice`` and
``draft`` zero (on the device).

The host code is the same on a CPU and a GPU, so its CPU figure is the one to read here;
the forward's is the CPU's, not the GPU's. Medians over steps of the best of ``--repeats``
runs. ``--tiny`` runs a tiny random Llama (V = 96, 3 heads, seconds) to check the script end
to end; its numbers mean nothing. Run it on a quiet machine (nothing else busy).
Writes ``host.{json,md}`` in ``--out``.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

NGRAM_ROW = "8x16 4-gram p-best (p 8, trie)"
DEVICE = "(device step)"
"""The rows whose steps run on the device (the static runtime's ``device_steps``)."""
BUDGET_MS = {"vanilla heads": 0.3, NGRAM_ROW: 1.0}
"""The issue's host budgets per step (ms)."""
PACKAGED_NGRAM = (Path(__file__).resolve().parents[1]
                  / "src/blockdraft/models/hf/heads/smollm2/ngram/answers4.bin")
PROMPTS = ("Explain what a Python list comprehension is.",
           "Write a function that reverses a string in Python.",
           "What is the difference between a tuple and a list?")


def strategies(ngram: Path | None = None) -> dict[str, Any]:
    """Strategy name -> its :class:`~blockdraft.drafts.DraftSpec`; with ``ngram`` (a KenLM
    binary or ARPA file) also the 8x16 p-best row: the heads' lattice ``h x k`` with
    ``k = 16``, ``p = 8`` drafts by the exact p-best search rescored by that n-gram LM, verified
    as their trie."""
    from blockdraft.drafts import DraftSpec

    rows = {"default": DraftSpec("default"),
            "vanilla heads": DraftSpec("heads"),
            "prompt lookup": DraftSpec("lookup"),
            "8-best trie (k 16)": DraftSpec("heads", k=16, p=8),
            "medusa tree N=16": DraftSpec("tree", tree="medusa", budget=16),
            f"vanilla heads {DEVICE}": DraftSpec("heads"),
            f"medusa tree N=16 {DEVICE}": DraftSpec("tree", tree="medusa", budget=16)}
    if ngram is not None:
        rows[NGRAM_ROW] = DraftSpec("heads", k=16, p=8, rescorer="ngram", lm=str(ngram))
    return rows


def tiny_ngram(folder: Path, vocab: int = 96) -> Path:
    """A 4-gram over random token ids of a tiny vocabulary (the built-in estimator): what the
    ``--tiny`` run's p-best row is rescored by. Returns its binary's path."""
    import numpy as np

    from blockdraft.training.ngram import train_ngram

    rng = np.random.default_rng(0)
    seqs = [rng.integers(2, vocab, 64) for _ in range(200)]
    binary = train_ngram(seqs, folder / "tiny4", order=4).binary
    if binary is None:
        raise RuntimeError("train_ngram made no KenLM binary (is KenLM's build_binary built? "
                           "run `make setup`)")
    return Path(binary)


def step_split_ms(results: list[Any]) -> dict[str, float]:
    """Median ms per step of forward, heads and host over every step of ``results``."""
    steps = [s for r in results for s in r.steps]
    parts = {"forward": [s.forward_s for s in steps], "heads": [s.heads_s for s in steps],
             "host": [s.lattice_s + s.draft_s + s.other_s for s in steps],
             "step": [s.forward_s + s.heads_s + s.lattice_s + s.draft_s + s.other_s
                      for s in steps],
             "outside": [s.heads_s + s.lattice_s + s.draft_s + s.other_s for s in steps],
             "lattice": [s.lattice_s for s in steps], "draft": [s.draft_s for s in steps],
             "other": [s.other_s for s in steps]}
    return {name: 1e3 * statistics.median(v) if v else float("nan")
            for name, v in parts.items()}


def measure(model: Any, prompts: list[list[int]], max_new: int, repeats: int,
            eos: int | None, ngram: Path | None = None,
            only: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Each strategy's split (the run of least host time of ``repeats``), B and losslessness
    (``only``: these strategies alone)."""
    from blockdraft.models import greedy_generate
    from blockdraft.verify import decode

    device = str(model.device)
    greedy = [greedy_generate(model, p, max_new, eos_id=eos) for p in prompts]
    rows: dict[str, Any] = {}
    static = model.capabilities.runtime == "static"
    for name, spec in strategies(ngram).items():
        on_device = name.endswith(DEVICE)
        if (only is not None and name not in only) or (on_device and not static):
            continue
        if static:
            model.device_steps = on_device
        decode(model, prompts[0], drafter=spec, max_new_tokens=4, eos_id=eos,
               device=device)  # warm-up (and the n-gram LM loaded, once)
        best: dict[str, Any] | None = None
        for _ in range(repeats):
            results = [decode(model, p, drafter=spec, max_new_tokens=max_new, eos_id=eos,
                              device=device) for p in prompts]
            split = step_split_ms(results)
            if best is None or split["host"] < best["split"]["host"]:
                tokens = sum(len(r.tokens) for r in results)
                best = {"split": split, "steps": sum(len(r.steps) for r in results),
                        "B": tokens / max(sum(r.calls for r in results), 1),
                        "identical": sum(r.tokens == g for r, g in zip(results, greedy,
                                                                        strict=True))}
        assert best is not None
        rows[name] = {**best, "prompts": len(prompts), "budget_ms": BUDGET_MS.get(name)}
    return rows


def null_body(model: Any) -> Any:
    """A null forward for the static runtime: ``x`` = the embeddings of the new tokens (in the
    model's dtype, on its device; the base head then maps each token to the next: a bigram
    model), with none of the base's layers."""
    embed = model.model.base.get_input_embeddings()

    def body(ids: Any, positions: Any, bias: Any, start: Any) -> Any:
        return embed(ids)  # (1, T, d)

    return body


def markdown(report: dict[str, Any]) -> str:
    from benchmarks.common.report import header

    null = report.get("null_forward", False)
    title = ("The host's time per decode step with a null forward (ms per step, medians)"
             if null else "The host's share of a decode step (ms per step, medians)")
    lines = [*header(title, report),
             "| strategy | B | identical | step | outside | forward | heads | host | lattice "
             "| draft | other | host budget |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, row in report["rows"].items():
        s = row["split"]
        budget = "-" if row["budget_ms"] is None else (
            f"{row['budget_ms']} ({'met' if s['host'] <= row['budget_ms'] else 'missed'})")
        lines.append(f"| {name} | {row['B']:.2f} | {row['identical']}/{row['prompts']} | "
                     f"{s['step']:.3f} | {s['outside']:.3f} | "
                     f"{s['forward']:.3f} | {s['heads']:.3f} | {s['host']:.3f} | "
                     f"{s['lattice']:.3f} | {s['draft']:.3f} | {s['other']:.3f} | {budget} |")
    lines += ["", "host = lattice + draft + other: everything but the forward and the heads; "
              "outside = step - forward (see the script's docstring)."]
    if null:
        lines.append("Null forward: the base's layers replaced by the embeddings of the new "
                     "tokens; `step` is the host's time per step (the runtime's own work, the "
                     "base head, the heads, the lattice, the drafter, the acceptance).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import torch

    from benchmarks.common.report import command_line, write_report
    from blockdraft.core.signature import environment, format_signature
    from blockdraft.models import load_model
    from blockdraft.models.runtimes import on_runtime

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2", help="what load_model takes (with heads)")
    ap.add_argument("--heads", default=None,
                    help="a heads folder for --model (default: the heads the name brings)")
    ap.add_argument("--tiny", action="store_true", help="a tiny random Llama: a smoke run")
    ap.add_argument("--runtime", default="static", choices=("static", "torch", "onnxruntime"))
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="where the model runs (cuda on a GPU)")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--null-forward", action="store_true",
                    help="the static runtime with a null body: the host's time per step")
    ap.add_argument("--ngram", type=Path, default=None,
                    help="the 4-gram of the 8x16 p-best row (KenLM binary or ARPA; default: "
                         "the packaged SmolLM2 answers 4-gram; --tiny: one trained on random "
                         "ids); 'none' leaves the row out")
    ap.add_argument("--strategy", action="append", default=None,
                    help="run this strategy only (repeatable; default: all), e.g. default")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    only = None if args.strategy is None else tuple(args.strategy)
    known = list(strategies(Path("lm")))
    if only is not None and not set(only) <= set(known):
        ap.error(f"--strategy: unknown {sorted(set(only) - set(known))}; one of {known}")
    if args.null_forward and args.runtime != "static":
        ap.error("--null-forward replaces the static runtime's forward: --runtime static")
    torch.set_num_threads(args.threads)
    ngram = None if str(args.ngram) == "none" else args.ngram
    if args.tiny and args.ngram is None:
        ngram = tiny_ngram(args.out / "tiny-ngram")
    elif args.ngram is None:
        ngram = PACKAGED_NGRAM
    if args.tiny:
        from benchmarks.common.stand_ins import tiny_model
        from blockdraft.models.hf import HFBlockwiseModel

        plain = tiny_model()
        tiny = HFBlockwiseModel(plain.base, plain.heads, device=args.device,
                                dtype=getattr(torch, args.dtype))
        model, name = on_runtime(tiny, args.runtime, args.dtype), "tiny-random-llama"
        prompts = [[5, 9, 2, 33, 7, 8, 9, 10, 11], [3, 1, 4, 1, 5, 9, 2, 6]]
        eos = None
    else:
        model = load_model(args.model, runtime=args.runtime, dtype=args.dtype,
                           device=args.device, heads=args.heads)
        name = args.model if args.heads is None else f"{args.model}+{Path(args.heads).name}"
        tok = model.tokenizer
        prompts = [tok.apply_chat_template([{"role": "user", "content": q}]) for q in PROMPTS]
        eos = tok.eos_id
    if args.null_forward:
        from blockdraft.models.cost import cost_curve_of

        cost_curve_of(model)  # the default drafter sizes its trees on the real forward's curve
        model.use_body(null_body(model))
    rows = measure(model, prompts, args.max_new_tokens, args.repeats, eos, ngram, only)
    signature = format_signature({
        "model": name, "runtime": args.runtime, "precision": args.dtype,
        "forward": "null" if args.null_forward else "model",
        "threads": args.threads, "max_new_tokens": args.max_new_tokens,
        "prompts": len(prompts), "repeats": args.repeats,
        "ngram": "-" if ngram is None else Path(ngram).name, **environment(args.device)})
    report = {"command": command_line("benchmarks.bench_static_host", argv), "signature": signature,
              "null_forward": args.null_forward, "rows": rows}
    write_report(report, args.out, "host", markdown)
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
