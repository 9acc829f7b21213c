"""The model commands: ``train`` (a BlockwiseLM or RescorerLM and its tokenizer, by the
shared training recipe), ``trace`` (greedy-decode prompts and record a trace) and ``decode``
(one prompt with blockwise parallel decoding)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

import numpy as np

from blockdraft.cli.common import (
    CliError,
    add_command,
    print_json,
    print_table,
    progress_bar,
    read_id_lines,
    read_texts,
)


def cmd_train(args: argparse.Namespace) -> int:
    import torch

    from blockdraft.models import Tokenizer, TrainConfig, load_model, load_tokenizer
    from blockdraft.recipes import (
        eos_stream,
        model_config,
        new_model,
        split_tail,
        train_and_save,
        train_tokenizer,
    )

    if args.threads:
        torch.set_num_threads(args.threads)
    sizes = ("h", "n_layer", "n_head", "d_model", "d_ff")
    if args.init is not None:
        given = [f"--{f.replace('_', '-')}" for f in sizes if getattr(args, f) is not None]
        if given or args.rescorer:
            raise CliError(
                f"--init {args.init} continues that model with its own config; drop "
                f"{', '.join(given + (['--rescorer'] if args.rescorer else []))}"
            )
    if args.distill and (args.init is None or args.mode != "heads"):
        raise CliError(
            "--distill trains the heads on the base model's own greedy outputs (Stern sec. "
            "6.2), so it needs a trained base: use --mode heads --init MODEL_DIR"
        )
    lines = read_texts(args.corpus)
    if args.tokenizer:
        tok = Tokenizer.load(args.tokenizer)
    elif args.init is not None:
        tok = load_tokenizer(args.init)
    else:
        tok = train_tokenizer(lines, args.vocab_size, log=_stderr)
    train_ids, eval_ids = split_tail(eos_stream(tok.encode_batch(lines), tok.eos_id),
                                     args.eval_fraction)
    if args.init is not None:
        model = load_model(args.init, device=args.device)
        if model.config.vocab_size != tok.vocab_size:
            raise CliError(
                f"the tokenizer has {tok.vocab_size} tokens but the model in {args.init} has "
                f"V = {model.config.vocab_size}; use the model's own tokenizer"
            )
    else:
        config = model_config(args.preset, tok.vocab_size, rescorer=args.rescorer,
                              h=args.h or None, **{f: getattr(args, f) for f in sizes[1:]})
        model = new_model(config, rescorer=args.rescorer, device=args.device)
    if args.distill:
        train_ids = _distillation_stream(model, tok, lines, args)
    cfg = TrainConfig(steps=args.steps, batch_size=args.batch_size, seq_len=args.seq_len,
                      lr=args.lr, checkpoint_interval=args.checkpoint_interval)
    mode: Any = "base" if args.rescorer else args.mode
    result = train_and_save(
        model, train_ids, args.out, tokenizer=tok, cfg=cfg, mode=mode, seed=args.seed,
        eval_ids=eval_ids, checkpoints=True, resume=args.resume,
        extra_meta=lambda r: {"train": {
            "mode": mode, "steps": r.steps, "seed": args.seed,
            "corpus": [str(c) for c in args.corpus], "tokens": int(train_ids.size),
            "init": None if args.init is None else str(args.init),
            "distill": args.distill or None, "wall_s": r.wall_s,
            "last_eval": dataclasses.asdict(r.evals[-1]) if r.evals else None}},
    )
    if args.json:
        print_json({"out": args.out, "steps": result.steps, "final_loss": result.final_loss,
                    "tokens_per_s": result.tokens_per_s, "wall_s": result.wall_s})
        return 0
    rows = [("steps", result.steps), ("final training loss (nats)", result.final_loss),
            ("tokens/s", result.tokens_per_s), ("wall time (s)", result.wall_s)]
    if result.evals:
        last = result.evals[-1]
        rows += [(f"held-out loss head {i + 1} (nats)", float(x)) for i, x in
                 enumerate(last.loss)]
        rows += [(f"held-out top-1 head {i + 1}", float(x)) for i, x in
                 enumerate(last.accuracy)]
    print_table(f"trained {args.preset} {'RescorerLM' if args.rescorer else 'BlockwiseLM'}",
                ["", "value"], rows, caption=f"checkpoint: {args.out}")
    return 0


def _distillation_stream(model: Any, tok: Any, lines: list[str], args: argparse.Namespace
                         ) -> np.ndarray:
    """Sequence-level distillation data: ``args.distill`` corpus lines drawn with the seed,
    each cut to its first ``--distill-prompt-len`` tokens and continued greedily by the base
    model for ``--distill-len`` tokens (the lines of the held-out tail are never drawn)."""
    from blockdraft.models.train import distill_targets

    n_train_lines = len(lines) - max(1, int(len(lines) * args.eval_fraction))
    rng = np.random.default_rng(args.seed)
    prompts: list[list[int]] = []
    for i in rng.permutation(n_train_lines):
        ids = tok.encode(lines[int(i)])
        if len(ids) > args.distill_prompt_len:
            prompts.append([tok.eos_id, *ids[: args.distill_prompt_len]])
        if len(prompts) == args.distill:
            break
    if not prompts:
        raise CliError(
            f"no corpus line has more than --distill-prompt-len = {args.distill_prompt_len} "
            "tokens to prompt the base model with; lower it"
        )
    parts = [distill_targets(model, [p], args.distill_len, eos_id=tok.eos_id)
             for p in progress_bar(f"distilling {len(prompts)} greedy continuations")(prompts)]
    _stderr(f"distillation: {len(prompts)} prompts -> {sum(x.size for x in parts)} tokens")
    return np.concatenate(parts)


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


def cmd_trace(args: argparse.Namespace) -> int:
    from blockdraft.core.signature import environment
    from blockdraft.models import load_model, load_tokenizer
    from blockdraft.oracle.record import record_trace

    model = load_model(args.model, device=args.device)
    if args.ids:
        prompts = [p.tolist() for p in read_id_lines(Path(args.prompts))]
        eos = args.eos_id
    else:
        tok = load_tokenizer(args.model)
        lines = read_texts([args.prompts])
        prompts = [tok.encode(line) for line in lines]
        eos = tok.eos_id if args.eos_id is None else args.eos_id
    sig = {"model": Path(args.model).name, "prompts": Path(args.prompts).name,
           "max_new_tokens": args.max_new_tokens, **environment(args.device)}
    trace = record_trace(model, prompts, args.output, max_new_tokens=args.max_new_tokens,
                         eos_id=eos, K=args.K, signature=sig, overwrite=args.overwrite,
                         progress=progress_bar("tracing"))
    print(f"wrote {args.output}: {trace.num_examples} examples, {trace.num_positions} "
          f"positions, h={trace.h}, K={trace.K}")
    return 0


def cmd_decode(args: argparse.Namespace) -> int:
    from blockdraft.models import greedy_generate, load_model, load_tokenizer
    from blockdraft.verify import Criterion, decode

    model = load_model(args.model, device=args.device)
    tok = load_tokenizer(args.model)
    prompt = tok.encode(args.prompt)
    rescorer: Any = None
    if args.lm:
        from blockdraft.rescorers.ngram import NgramLM, NgramRescorer

        lm = NgramLM(args.lm)
        lm.check_vocab(tok.vocab_size)
        rescorer = NgramRescorer(lm, alpha=args.alpha)
    elif args.rescorer_model:
        from blockdraft.rescorers.neural import NeuralRescorer

        rescorer = NeuralRescorer(str(args.rescorer_model), alpha=args.alpha,
                                  backend=args.neural_backend)
    criterion = Criterion.parse(args.criterion)
    res = decode(model, prompt, rescorer=rescorer, k=args.k, p=args.p, criterion=criterion,
                 max_new_tokens=args.max_new_tokens, eos_id=tok.eos_id, device=args.device,
                 iad=args.iad)
    assert not isinstance(res, list)
    greedy_s = None
    if args.compare_greedy:
        import time

        t0 = time.perf_counter()
        ref = greedy_generate(model, prompt, args.max_new_tokens, eos_id=tok.eos_id)
        greedy_s = time.perf_counter() - t0
        if criterion.lossless and ref != res.tokens:
            raise CliError("lossless decoding differs from greedy decoding (a bug: report it)")
    text = tok.decode(res.tokens)
    if args.json:
        print_json({"text": text, "tokens": res.tokens, "block_efficiency": res.block_efficiency,
                    "calls": res.calls, "wall_s": res.wall_s, "forward_s": res.forward_s,
                    "draft_s": res.draft_s, "greedy_s": greedy_s, "criterion": str(criterion),
                    "drafter": res.drafter, "stopped": res.stopped})
        return 0
    print(text)
    rows: list[tuple[str, object]] = [
        ("drafter", res.drafter), ("criterion", str(criterion)),
        ("tokens", len(res.tokens)), ("serial calls", res.calls),
        ("block efficiency B", res.block_efficiency), ("wall s", res.wall_s),
        ("  in model forwards", res.forward_s), ("  in drafting / rescoring", res.draft_s),
    ]
    if greedy_s is not None:
        rows += [("greedy wall s", greedy_s), ("speedup over greedy", greedy_s / res.wall_s)]
    print_table("decode", ["", "value"], rows)
    return 0


def add_parsers(sub: Any) -> None:
    """``train``, ``trace`` and ``decode``."""
    p = add_command(sub, "train", "train a BlockwiseLM (or a RescorerLM) and its BPE tokenizer",
                    cmd_train)
    p.add_argument("--corpus", nargs="+", required=True, help="text files, one document a line")
    p.add_argument("-o", "--out", required=True, type=Path, help="checkpoint directory")
    p.add_argument("--preset", default="small", choices=["tiny", "small", "base"])
    p.add_argument("--h", type=int, default=None, help="prediction heads (default: preset's)")
    p.add_argument("--rescorer", action="store_true",
                   help="train a RescorerLM (h = 1) for local neural rescoring")
    p.add_argument("--mode", default="base-then-heads",
                   choices=["joint", "heads", "base", "base-then-heads"],
                   help="joint (Kim App. C.1), heads on a frozen base (Stern), base only, or "
                        "base then heads (default)")
    p.add_argument("--tokenizer", type=Path, default=None,
                   help="reuse a tokenizer (tokenizer.json or GPT-2 files) instead of training")
    p.add_argument("--init", type=Path, default=None,
                   help="start from this trained model directory (its config and tokenizer)")
    p.add_argument("--distill", type=int, default=0, metavar="N",
                   help="with --mode heads --init: train the heads on the base model's greedy "
                        "continuations of N corpus prompts (Stern sec. 6.2)")
    p.add_argument("--distill-len", type=int, default=64,
                   help="greedy tokens per distillation prompt (default 64)")
    p.add_argument("--distill-prompt-len", type=int, default=32,
                   help="corpus tokens per distillation prompt (default 32)")
    p.add_argument("--vocab-size", type=int, default=4096)
    p.add_argument("--n-layer", type=int, default=None, help="transformer blocks (preset's)")
    p.add_argument("--n-head", type=int, default=None, help="attention heads (preset's)")
    p.add_argument("--d-model", type=int, default=None, help="residual width (preset's)")
    p.add_argument("--d-ff", type=int, default=None, help="MLP hidden width (preset's)")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--eval-fraction", type=float, default=0.01,
                   help="tail of the corpus held out for evaluation (default 0.01)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    p.add_argument("--checkpoint-interval", type=int, default=200,
                   help="steps between resumable checkpoints (0: only at the end; default 200)")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", action="store_true")

    p = add_command(sub, "trace",
                    "greedy-decode prompts and record a trace (docs/definitions.md sec. 6)",
                    cmd_trace)
    p.add_argument("--model", required=True, type=Path, help="checkpoint directory")
    p.add_argument("--prompts", required=True, type=Path,
                   help="one prompt per line (text, or token ids with --ids)")
    p.add_argument("-o", "--output", required=True, type=Path, help="trace directory")
    p.add_argument("--ids", action="store_true", help="prompts are token ids")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--eos-id", type=int, default=None,
                   help="end-of-text id (default: the tokenizer's)")
    p.add_argument("--K", type=int, default=16, help="top-K kept per head (default 16)")
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("--device", default="cpu")

    p = add_command(sub, "decode", "decode a prompt with blockwise parallel decoding", cmd_decode)
    p.add_argument("--model", required=True, type=Path, help="checkpoint directory")
    p.add_argument("--prompt", required=True, help="prompt text")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--k", type=int, default=16, help="lattice width (default 16)")
    p.add_argument("--p", type=int, default=1, help="drafts verified per step (default 1)")
    p.add_argument("--lm", type=Path, default=None, help="n-gram LM for global rescoring")
    p.add_argument("--rescorer-model", type=Path, default=None,
                   help="RescorerLM checkpoint for local neural rescoring")
    p.add_argument("--neural-backend", choices=["torch", "onnx"], default="onnx")
    p.add_argument("--alpha", type=float, default=1.0)
    p.add_argument("--criterion", default="exact",
                   help='acceptance criterion, e.g. "exact", "topk:k=4", "gad++:beta=5,tau=3"')
    p.add_argument("--iad", action="store_true", help="add an input-guided draft")
    p.add_argument("--compare-greedy", action="store_true",
                   help="also time plain greedy decoding (and check losslessness)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", action="store_true")
