"""What a runtime's precision costs in quality: held-out perplexity and next-token agreement.

    .venv/bin/python -m benchmarks.bench_quality --windows 24 --window 256 \\
        --variants torch:float32,onnxruntime:float32,onnxruntime:int8 \\
        --out benchmarks/results/quality

SmolLM2-135M-Instruct on held-out text it was never trained or tuned on in this project:
WikiText-2 ``test.txt`` (the shared data's evaluation split of the corpus), cut into
``--windows`` windows of ``--window`` tokens (seeded). For every variant, teacher-forced over
each window (one forward, the base head at every position): the perplexity (``exp`` of the mean
negative log-likelihood of each next token, natural log), and, against the first variant (the
reference, PyTorch float32), the share of positions whose argmax (the greedy next token) agrees
and the top-2 margin of the reference at the disagreements. Writes ``quality.{json,md}``. With
``--text chat`` the text is the chat set's answers instead (``quality-chat.{json,md}``).

The variant ``llama.cpp`` is llama.cpp itself (llama-cpp-python) on the GGUF file the model was
loaded from, every position's logits of one batch per window (``logits_all``, flash attention
on, as the peers run): the same text and windows as ours, so its perplexity on the file's own
blocks stands beside ``onnxruntime:q4``'s (issue 39's ``llama-perplexity`` comparison, through
the Python binding; its windows are scored exactly as ours, not with ``llama-perplexity``'s
second-half rule).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
CHAT = REPO / "benchmarks" / "chat_eval.jsonl"
SHARED = Path(os.environ.get("BLOCKDRAFT_SHARED_DATA", REPO.parent / "shared" / "data"))


def windows(tok: Any, n: int, size: int, seed: int) -> list[list[int]]:
    """``n`` windows of ``size`` token ids from WikiText-2 test (seeded starts)."""
    text = (SHARED / "corpus" / "wikitext2_tokens" / "test.txt").read_text(encoding="utf-8")
    ids = tok.encode(text)
    rng = np.random.default_rng(seed)
    starts = sorted(rng.choice(len(ids) - size, size=n, replace=False))
    return [list(map(int, ids[s:s + size])) for s in starts]


def chat_windows(model: Any, n: int, size: int) -> list[tuple[list[int], int]]:
    """The first ``n`` requests of the chat set, each with ``model``'s greedy answer (at most
    ``size`` tokens, EOS honoured): ``(prompt + answer ids, len(prompt))``, the answer's tokens
    the ones scored. The answers are the reference's own greedy text: every scored token is the
    reference's argmax, which favours its perplexity over the other variants'."""
    from blockdraft.models.generate import greedy_generate

    tok = model.tokenizer
    rows = [json.loads(line) for line in CHAT.read_text(encoding="utf-8").splitlines() if line]
    out = []
    for r in rows[:n]:
        prompt = list(map(int, tok.apply_chat_template([{"role": "user",
                                                          "content": r["prompt"]}])))
        answer = greedy_generate(model, prompt, size, eos_id=tok.eos_id)
        out.append((prompt + answer, len(prompt)))
    return out


@torch.no_grad()
def base_logits(model: Any, ids: list[int]) -> torch.Tensor:
    """float ``[T, V]``: the base head's raw logits at every position (one forward)."""
    x, _ = model.hidden(torch.tensor([ids], device=model.device))
    return model.project(model.head_states(x[0], heads=1))[:, 0].float().cpu()


class LlamaCppLogits:
    """llama.cpp on a GGUF file: the logits at every position of a window (one batch each, the
    cache reset before it)."""

    def __init__(self, gguf: Path, threads: int, n_ctx: int) -> None:
        from llama_cpp import Llama

        self.gguf = gguf
        self.llm = Llama(model_path=str(gguf), n_threads=threads, n_threads_batch=threads,
                         n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, logits_all=True,
                         flash_attn=True, seed=0, verbose=False)

    def logits(self, ids: list[int]) -> torch.Tensor:
        """float ``[T, V]``: llama.cpp's raw logits at every position of ``ids``."""
        if len(ids) > self.llm.n_ctx():
            raise ValueError(f"a window of {len(ids)} tokens does not fit llama.cpp's context "
                             f"of {self.llm.n_ctx()}")
        self.llm.reset()
        self.llm.eval(ids)
        return torch.from_numpy(np.array(self.llm.scores[: len(ids)], dtype=np.float32))


def main(argv: list[str] | None = None) -> int:
    from benchmarks.common.report import command_line, header, write_report
    from blockdraft.core.signature import environment, format_signature
    from blockdraft.models import load_model
    from blockdraft.models.runtimes import on_runtime

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", type=int, default=24)
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--variants", default="torch:float32,onnxruntime:float32,onnxruntime:int8")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--text", choices=("wikitext2", "chat"), default="wikitext2",
                    help="WikiText-2 test windows, or the chat set's answers (greedy by the "
                         "reference variant, scored on the answer tokens)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    base = load_model("smollm2")
    models: dict[str, Any] = {}
    for spec in args.variants.split(","):
        if spec == "llama.cpp":
            from benchmarks.common.peers import llama_cpp_missing
            from blockdraft.models.hf.loading import smollm2_gguf

            why = llama_cpp_missing()
            if why is not None:
                ap.error(f"variant llama.cpp: {why}")
            # a chat window is its prompt (under 512 tokens) and an answer of --window at most
            n_ctx = args.window if args.text == "wikitext2" else args.window + 512
            models[spec] = LlamaCppLogits(smollm2_gguf(), args.threads, n_ctx)
            continue
        runtime, _, precision = spec.partition(":")
        if not precision:
            ap.error(f"variant {spec!r}: write RUNTIME:PRECISION (torch:float32, "
                     "onnxruntime:q4, ...) or llama.cpp")
        models[spec] = base if runtime == "torch" else on_runtime(base, runtime, precision,
                                                                  threads=args.threads)
    data = ([(ids, 1) for ids in windows(base.tokenizer, args.windows, args.window, args.seed)]
            if args.text == "wikitext2" else chat_windows(
                next(iter(models.values())), args.windows, args.window))
    ref_name = next(iter(models))
    nll: dict[str, list[float]] = {k: [] for k in models}
    agree: dict[str, list[bool]] = {k: [] for k in models}
    margins: dict[str, list[float]] = {k: [] for k in models}
    for w, (ids, first) in enumerate(data):
        ref = None
        for name, model in models.items():
            logits = (model.logits(ids) if isinstance(model, LlamaCppLogits)
                      else base_logits(model, ids))  # (T, V)
            logp = torch.log_softmax(logits.double(), -1)
            targets = torch.tensor(ids[first:])  # each scored token, predicted one before
            nll[name] += (-logp[first - 1:-1].gather(1, targets[:, None])[:, 0]).tolist()
            logits = logits[first - 1:-1]
            if ref is None:
                ref = logits
                top2 = ref.topk(2, -1).values
                gap = (top2[:, 0] - top2[:, 1]).tolist()
            same = (logits.argmax(-1) == ref.argmax(-1)).tolist()
            agree[name] += same
            margins[name] += [g for g, s in zip(gap, same, strict=True) if not s]
        print(f"window {w + 1}/{len(data)}", file=sys.stderr, flush=True)
    rows: list[dict[str, Any]] = []
    for name in models:
        rows.append({
            "variant": name, "positions": len(nll[name]),
            "perplexity": math.exp(float(np.mean(nll[name]))),
            "argmax_agreement": float(np.mean(agree[name])),
            "disagreements": int(len(agree[name]) - sum(agree[name])),
            "max_reference_margin_at_disagreement": max(margins[name], default=None),
            "median_reference_margin_at_disagreement": (float(np.median(margins[name]))
                                                        if margins[name] else None),
        })
    env = environment("cpu")
    signature = format_signature({
        "model": "smollm2", "text": ("wikitext2-test" if args.text == "wikitext2"
                                      else "chat-eval-answers"), "windows": args.windows,
        "window": args.window, "seed": args.seed, "threads": args.threads,
        **({"llama_cpp": _llama_version()} if "llama.cpp" in models else {}),
        "torch": torch.__version__, "version": env["version"], "commit": env["commit"]})
    report = {"command": command_line("benchmarks.bench_quality", argv), "signature": signature,
        "reference": ref_name, "rows": rows, "wall_s": time.perf_counter() - start}
    lines = [*header("Quality of a runtime's precision: held-out perplexity and next-token "
                     "agreement", report),
             (f"Teacher-forced over {args.windows} windows of {args.window} WikiText-2 test "
              "tokens" if args.text == "wikitext2" else
              f"Teacher-forced over the first {args.windows} requests of the chat set, each "
              f"with the reference's greedy answer (at most {args.window} tokens), the answer "
              "tokens scored (each is the reference's argmax: its perplexity is favoured)")
             + f"; agreement: the argmax of the base head at each position equals the "
             f"reference's ({ref_name}); margin: the reference's top-2 logit gap where they "
             "differ.", "",
             "| variant | positions | perplexity | argmax agreement | disagreements | "
             "reference margin there (median / max) |", "|---|---|---|---|---|---|"]
    for r in rows:
        med, mx = (r["median_reference_margin_at_disagreement"],
                   r["max_reference_margin_at_disagreement"])
        lines.append(f"| {r['variant']} | {r['positions']} | {r['perplexity']:.3f} | "
                     f"{100 * r['argmax_agreement']:.2f}% | {r['disagreements']} | "
                     + ("-" if med is None else f"{med:.3f} / {mx:.3f}") + " |")
    write_report(report, args.out, "quality" if args.text == "wikitext2" else "quality-chat",
                 "\n".join(lines))
    print("\n".join(lines))
    return 0


def _llama_version() -> str:
    import llama_cpp

    return str(llama_cpp.__version__)


if __name__ == "__main__":
    raise SystemExit(main())
