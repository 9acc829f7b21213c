"""Lossless in practice: is exact BPD token-identical to greedy decoding on a real model?

    .venv/bin/python -m benchmarks.bench_identity [--prompts 20] [--max-new-tokens 128]
        [--dtypes float32,bfloat16] [--heads smollm2|fresh|PATH] [--k 16] [--p 4]
        [--threads 1] [--out benchmarks/results]

For SmolLM2-135M-Instruct in each dtype, every prompt (a chat turn in the model's template;
the prompts are written here, short questions about Python and general knowledge, never taken
from evaluation or training data) is decoded with the project's greedy loop
(:func:`blockdraft.models.greedy_generate`, one token per forward) and with exact BPD
(:func:`blockdraft.verify.decode`, criterion ``exact``): vanilla heads (``k = 1, p = 1``) and
p-best 0-gram drafts (``k``, ``p``). docs/definitions.md sec. 1: the outputs are equal in exact
arithmetic; in floating point a forward over several tokens (the verifier's chunk, the prompt's
prefill) can round differently from one-token forwards and flip a near-tie of the argmax.

At every first divergence the script recomputes the base head's logits at that position on
both paths: greedy's (prefill, then one-token forwards, as ``greedy_generate`` runs them) and
BPD's (the decode replayed call by call through the public model API with the recorded trees:
the prefill's chunk and each verification call's chunk, as the verifier runs them), and reports
each path's top-2 tokens and margin (top-1 minus top-2 logit, in the model's dtype) and whether
it is an exact tie. A divergence that is not a near-tie on both paths is a bug.

Heads: ``smollm2`` (the trained heads shipped with the package), ``fresh`` (untrained Medusa
heads, seeded: drafts are poor, but every step still verifies an ``h``-token chunk, which is
what can round differently; use it before the trained heads exist) or a heads folder.

Writes ``benchmarks/results/identity.{md,json}`` with a signature (model, heads, dtype(s),
threads, h, k, p, prompts, max_new_tokens, version, commit).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.common.report import command_line, header, write_report
from blockdraft.core.signature import environment, format_signature
from blockdraft.drafts import DraftSpec
from blockdraft.models import greedy_generate, load_model
from blockdraft.models.hf import MedusaHeads
from blockdraft.verify import Verifier, decode
from blockdraft.verify.verifier import is_chain

RESULTS = Path(__file__).resolve().parent / "results"
MODEL = "smollm2"
FRESH_HEADS, FRESH_LAYERS = 5, 1

PROMPTS = (
    "How do I reverse a list in Python?",
    "What does the `yield` keyword do in Python?",
    "Explain the difference between a tuple and a list in Python.",
    "Write a Python function that checks whether a number is prime.",
    "What is a Python dictionary comprehension? Give an example.",
    "How do I read a text file line by line in Python?",
    "What is the purpose of `__init__` in a Python class?",
    "How can I sort a list of dictionaries by a key in Python?",
    "What is the difference between `==` and `is` in Python?",
    "How do I handle an exception in Python?",
    "What is the capital of Australia?",
    "Why is the sky blue?",
    "How many planets are in the solar system?",
    "Who wrote the play Romeo and Juliet?",
    "What is photosynthesis?",
    "How does a rainbow form?",
    "What is the boiling point of water at sea level?",
    "Name three primary colors.",
    "What causes the seasons on Earth?",
    "What is the largest ocean on Earth?",
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=len(PROMPTS),
                    help=f"how many of the {len(PROMPTS)} prompts (default all)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--heads", default=MODEL,
                    help="smollm2 (the packaged trained heads), fresh (untrained) or a folder")
    ap.add_argument("--k", type=int, default=16, help="lattice width of the p-best drafts")
    ap.add_argument("--p", type=int, default=4, help="drafts per call of the p-best strategy")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--seed", type=int, default=0, help="seeds fresh heads")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if not 1 <= args.prompts <= len(PROMPTS):
        ap.error(f"--prompts must be 1..{len(PROMPTS)}")
    return args


def build_model(heads: str, dtype: str, seed: int) -> tuple[Any, str]:
    """(model, heads label)."""
    if heads == "fresh":
        torch.manual_seed(seed)
        medusa = MedusaHeads(576, None, FRESH_HEADS, FRESH_LAYERS)
        label = f"fresh-untrained({FRESH_HEADS}x{FRESH_LAYERS},seed{seed})"
        return load_model(MODEL, dtype=dtype, heads=medusa), label
    if heads == MODEL:
        return load_model(MODEL, dtype=dtype), "smollm2-packaged"
    return load_model(MODEL, dtype=dtype, heads=heads), Path(heads).name


def top2(z: torch.Tensor) -> dict[str, Any]:
    """Top-2 of one logit vector ``[V]``, its margin in the model's dtype, and tie flag.

    ``top1`` is ``argmax`` (ties to the smallest id, what greedy and the verifier take),
    ``top2`` the best other token (``torch.topk`` orders ties arbitrarily, so it is not used).
    """
    i1 = int(torch.argmax(z))
    rest = z.clone()
    rest[i1] = float("-inf")
    i2 = int(torch.argmax(rest))
    margin = (z[i1] - z[i2]).float().item()
    return {"top1": i1, "top2": i2, "top1_logit": float(z[i1].float()),
            "top2_logit": float(z[i2].float()), "margin": margin, "tie": margin == 0.0}


@torch.no_grad()
def greedy_logits_at(model: Any, prompt: list[int], ys: list[int], i: int) -> torch.Tensor:
    """Head 1's logits before token ``i`` on greedy's path: the prompt's prefill, then one
    one-token forward per token (as ``greedy_generate`` runs a factored model)."""
    def base(ids: torch.Tensor, past: Any) -> tuple[torch.Tensor, Any]:
        x, cache = model.hidden(ids, past)
        return model.project(model.head_states(x[0, -1], heads=1))[0], cache

    z, past = base(torch.tensor([prompt]), None)
    for t in ys[:i]:
        z, past = base(torch.tensor([[t]]), past)
    return z


@torch.no_grad()
def bpd_logits_at(model: Any, prompt: list[int], res: Any, i: int, max_new: int,
                  eos: int | None) -> tuple[torch.Tensor, bool]:
    """Head 1's logits that chose token ``i`` on BPD's path: the decode replayed call by call
    with the recorded trees (same forwards, same cache: a chain as a causal forward, a tree
    with its tree mask, as the verifier runs them). Returns them and whether the replay
    reproduced the decode's tokens up to ``i`` (a sanity check)."""
    verifier = Verifier(model, "exact")
    logits, past = verifier.prefill(prompt)
    tokens = [int(torch.argmax(logits[0]))]
    if i == 0:
        return logits[0], tokens[0] == res.tokens[0]
    for step in res.steps:
        tree = step.tree.truncate(max_new - len(tokens))  # the last step needs no more
        ids = torch.tensor(tree.tokens, dtype=torch.long)[None]  # (1, N)
        if is_chain(tree):  # the verifier's forward
            x, _ = model.hidden(ids, past)
        else:
            x, _ = model.hidden(ids, past, position_ids=torch.tensor(past.length + tree.depths),
                                tree_mask=torch.tensor(tree.ancestor_mask()))
        base = model.project(model.head_states(x[0], heads=1))[:, 0]  # (N, V)
        outcome = verifier.verify_tree(past, tree, eos)
        # yielded: d_2 .. d_{1+n} (chosen by base at the accepted path's nodes 0 .. n-1), then
        # the next certain token (argmax of next_logits row 0, at the accepted node)
        sources = [base[u] for u in outcome.path[:-1]] + [outcome.next_logits[0]]
        for z in sources:
            tokens.append(int(torch.argmax(z)))
            if len(tokens) - 1 == i:
                return z, tokens == res.tokens[: i + 1]
        past = outcome.past
    raise RuntimeError(f"the replay ended before token {i}")


def run_one(model: Any, tok: Any, prompt_text: str, strategies: dict[str, DraftSpec],
            max_new: int) -> list[dict[str, Any]]:
    prompt = tok.apply_chat_template([{"role": "user", "content": prompt_text}])
    eos = tok.eos_id
    t0 = time.perf_counter()
    ys = greedy_generate(model, prompt, max_new, eos_id=eos)
    greedy_s = time.perf_counter() - t0
    rows = []
    for name, spec in strategies.items():
        res = decode(model, prompt, drafter=spec, criterion="exact", max_new_tokens=max_new,
                     eos_id=eos)
        identical = res.tokens == ys
        row: dict[str, Any] = {
            "strategy": name, "identical": identical, "greedy_tokens": len(ys),
            "bpd_tokens": len(res.tokens), "block_efficiency": res.block_efficiency,
            "greedy_s": greedy_s, "bpd_s": res.wall_s, "first_divergence": None,
        }
        if not identical:
            i = next((j for j, (a, b) in enumerate(zip(ys, res.tokens, strict=False)) if a != b),
                     min(len(ys), len(res.tokens)))
            div: dict[str, Any] = {"index": i, "greedy_token": ys[i] if i < len(ys) else None,
                                   "bpd_token": res.tokens[i] if i < len(res.tokens) else None}
            if i < min(len(ys), len(res.tokens)):
                zg = greedy_logits_at(model, prompt, ys, i)
                zb, replay_ok = bpd_logits_at(model, prompt, res, i, max_new, eos)
                div["greedy_path"] = top2(zg)
                div["bpd_path"] = top2(zb)
                div["replay_ok"] = replay_ok and int(torch.argmax(zg)) == ys[i]
                div["text_before"] = tok.decode(ys[max(0, i - 8): i])
            row["first_divergence"] = div
        rows.append(row)
    return rows


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for key in sorted({(r["dtype"], r["strategy"]) for r in runs}):
        sel = [r for r in runs if (r["dtype"], r["strategy"]) == key]
        divs = [r["first_divergence"] for r in sel if r["first_divergence"]]
        margins = [max(d["greedy_path"]["margin"], d["bpd_path"]["margin"])
                   for d in divs if "greedy_path" in d]
        out.append({
            "dtype": key[0], "strategy": key[1], "prompts": len(sel),
            "identical": sum(r["identical"] for r in sel),
            "identical_rate": sum(r["identical"] for r in sel) / len(sel),
            "divergences": len(divs),
            "exact_ties": sum(bool(d.get("greedy_path", {}).get("tie")
                                   or d.get("bpd_path", {}).get("tie")) for d in divs),
            "max_margin_at_divergence": max(margins) if margins else None,
            "mean_B": float(np.mean([r["block_efficiency"] for r in sel])),
        })
    return out


def _top2_cell(x: dict[str, Any] | None) -> str:
    if x is None:
        return "-"
    return f"{x['top1']}, {x['top2']} ({x['margin']:.4g}{', tie' if x['tie'] else ''})"


def markdown(signature: str, summary: list[dict[str, Any]], runs: list[dict[str, Any]],
             command: str) -> str:
    lines = [
        *header("Lossless in practice: exact BPD vs greedy on SmolLM2-135M-Instruct",
                {"command": command, "signature": signature}),
        "Identical = the exact-BPD output equals `greedy_generate`'s token for token. At a "
        "first divergence, the margin is top-1 minus top-2 base logit at that position on each "
        "path (greedy: one-token forwards; BPD: the chunk that chose the token), in the "
        "model's dtype; a tie is a margin of exactly 0.", "",
        "| dtype | strategy | identical | divergences | exact ties | max margin at divergence "
        "| mean B |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in summary:
        mm = "-" if s["max_margin_at_divergence"] is None else \
            f"{s['max_margin_at_divergence']:.4g}"
        lines.append(f"| {s['dtype']} | {s['strategy']} | {s['identical']}/{s['prompts']} "
                     f"| {s['divergences']} | {s['exact_ties']} | {mm} | {s['mean_B']:.3f} |")
    divs = [r for r in runs if r["first_divergence"]]
    if divs:
        lines += ["", "## Divergences", "",
                  "| dtype | strategy | prompt | index | greedy token | BPD token | greedy path "
                  "top-2 (margin) | BPD path top-2 (margin) | replay ok |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in divs:
            d = r["first_divergence"]
            g, b = d.get("greedy_path"), d.get("bpd_path")
            lines.append(f"| {r['dtype']} | {r['strategy']} | {r['prompt_index']} | "
                         f"{d['index']} | {d['greedy_token']} | {d['bpd_token']} | "
                         f"{_top2_cell(g)} | {_top2_cell(b)} | "
                         f"{d.get('replay_ok', '-')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    prompts = PROMPTS[: args.prompts]
    runs: list[dict[str, Any]] = []
    h = heads_label = None
    wall = time.perf_counter()
    for dtype in dtypes:
        model, heads_label = build_model(args.heads, dtype, args.seed)
        tok = model.tokenizer
        h = model.h
        strategies = {"vanilla": DraftSpec("heads"),
                      f"{args.p}-best 0-gram (k={args.k})": DraftSpec("heads", k=args.k,
                                                                     p=args.p)}
        for j, text in enumerate(prompts):
            for row in run_one(model, tok, text, strategies, args.max_new_tokens):
                row.update(dtype=dtype, prompt_index=j)
                runs.append(row)
                print(f"[{dtype}] prompt {j} {row['strategy']}: "
                      f"{'identical' if row['identical'] else 'DIVERGES'} "
                      f"({row['greedy_tokens']} tokens, B {row['block_efficiency']:.2f})",
                      file=sys.stderr, flush=True)
        del model
    fields = {"model": MODEL, "heads": heads_label, "dtypes": "+".join(dtypes),
              "threads": args.threads, "h": h, "k": args.k, "p": args.p,
              "prompts": len(prompts), "max_new_tokens": args.max_new_tokens,
              "criterion": "exact", **environment("cpu")}
    signature = format_signature(fields)
    summary = summarise(runs)
    command = command_line("benchmarks.bench_identity", argv)
    write_report({"signature": signature, "fields": fields, "command": command,
                  "wall_s": time.perf_counter() - wall, "summary": summary, "runs": runs,
                  "prompts": list(prompts)}, args.out, "identity",
                 markdown(signature, summary, runs, command))
    print(markdown(signature, summary, runs, command))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
