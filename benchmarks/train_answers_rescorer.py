"""A neural rescorer trained on the base's own answers (issue 27, item 3c).

    .venv/bin/python -m benchmarks.train_answers_rescorer --distill DIR -o OUT \\
        [--steps 600] [--d-model 128] [--threads 1]

A :class:`~blockdraft.models.RescorerLM` (one head, 1 layer by default) over SmolLM2's token
ids, trained on the training answers of a distillation set (``blockdraft heads distill``: the
base's greedy answers, one sequence each, EOS-separated) and evaluated on its held-out answers;
the local neural rescorer (:class:`~blockdraft.rescorers.neural.NeuralRescorer`, Kim Alg. 2)
then reads it. ``blockdraft train --rescorer`` trains the same model on text files; this trains
it on what the model says, the text whose next tokens the verifier accepts.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np


def main(argv: list[str] | None = None) -> int:
    import torch

    from blockdraft.models import load_tokenizer
    from blockdraft.training.blockwise import TrainConfig
    from blockdraft.training.blockwise.recipe import (
        eos_stream,
        model_config,
        new_model,
        train_and_save,
    )
    from blockdraft.training.heads import open_distill_set

    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--distill", type=Path, required=True)
    ap.add_argument("-o", "--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--n-layer", type=int, default=1)
    ap.add_argument("--n-head", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--d-ff", type=int, default=512)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    tok = load_tokenizer("smollm2")
    dset = open_distill_set(args.distill)
    train = [a.tolist() for a in dset.answers("train")]
    held = [a.tolist() for a in dset.answers("heldout")]
    if tok.eos_id is None:
        raise SystemExit("smollm2's tokenizer names no EOS token: the training stream needs one")
    train_ids = eos_stream(train, tok.eos_id)
    eval_ids = eos_stream(held, tok.eos_id)
    print(f"{train_ids.size} training tokens, {eval_ids.size} held-out", file=sys.stderr)
    config = model_config("small", tok.vocab_size, rescorer=True, n_layer=args.n_layer,
                          n_head=args.n_head, d_model=args.d_model, d_ff=args.d_ff)
    model = new_model(config, rescorer=True, seed=args.seed)
    cfg = TrainConfig(steps=args.steps, batch_size=args.batch_size, seq_len=args.seq_len,
                      lr=args.lr, checkpoint_interval=max(args.steps // 4, 1))
    start = time.perf_counter()
    result = train_and_save(
        model, train_ids, args.out, tokenizer=tok, cfg=cfg, mode="base", seed=args.seed,
        eval_ids=eval_ids, checkpoints=True,
        extra_meta=lambda r: {"train": {
            "mode": "base", "step": r.steps, "steps": r.steps, "seed": args.seed,
            "corpus": [f"distilled answers: {args.distill.name} (train split)"],
            "tokens": int(train_ids.size), "init": None, "distill": None, "wall_s": r.wall_s,
            "command": "python -m benchmarks.train_answers_rescorer " + " ".join(
                sys.argv[1:] if argv is None else argv)}})
    last = result.evals[-1] if result.evals else None
    print(f"trained in {time.perf_counter() - start:.0f} s; final loss {result.final_loss:.3f}"
          + ("" if last is None else f"; held-out loss {float(np.asarray(last.loss)[0]):.3f}, "
             f"top-1 {float(np.asarray(last.accuracy)[0]):.3f}"), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
