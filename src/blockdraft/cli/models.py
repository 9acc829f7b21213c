"""The ``train`` command: a BlockwiseLM or RescorerLM and its tokenizer, by the blockwise
training recipe; or, with ``--mode medusa``, Medusa heads on a Hugging Face model by
self-distillation (``blockdraft heads train``, :mod:`blockdraft.cli.heads`).

``trace`` and ``decode``, the commands that load a model, are :mod:`blockdraft.cli.trace` and
:mod:`blockdraft.cli.decode` (their shared options: :mod:`blockdraft.cli.model_options`)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

import numpy as np

from blockdraft.cli.common import (
    JSON_HELP,
    CliError,
    add_command,
    check_device,
    device_name,
    print_json,
    print_table,
    progress_bar,
    read_texts,
)
from blockdraft.cli.values import (
    ListAction,
    Rule,
    UsageError,
    add_rules,
    integer,
    non_negative_int,
    number,
    positive_int,
)
from blockdraft.core.outputs import claim_output


def cmd_train(args: argparse.Namespace) -> int:
    _check_train_arguments(args)
    check_device(args.device)
    if args.mode == "medusa":  # heads train, its output rule included
        return _train_medusa(args)
    from blockdraft.training.blockwise.recipe import MODEL_FILES

    out = Path(args.out)
    output = claim_output(out, what="a trained model", error=CliError, overwrite=args.overwrite,
                          resume=args.resume, own=MODEL_FILES)
    # --overwrite: trained in a folder beside it, swapped in only when training succeeded; the
    # old model stays as it was if this run fails or is interrupted
    with output.writing() as writing:
        args.out = writing.path
        try:
            code = _train(args, shown_out=out)
        finally:
            args.out = out
    return code


def _check_train_arguments(args: argparse.Namespace) -> None:
    """What ``train`` needs besides its rules (:data:`TRAIN_RULES`), before it touches
    anything.

    Raises:
        UsageError: ``--mode medusa`` without ``--prompts``, another mode without ``--corpus``.
    """
    if args.mode == "medusa" and not args.prompts:
        raise UsageError("--mode medusa needs --prompts (JSON-lines files of training prompts, "
                         '{"source": ..., "prompt": ...} a line)')
    if args.mode != "medusa" and not args.corpus:
        raise UsageError(f"--mode {args.mode} needs --corpus (text files to train on)")


_SIZES = ("--h", "--n-layer", "--n-head", "--d-model", "--d-ff")
_MEDUSA_ONLY = ("--base", "--prompts", "--medusa-layers", "--max-prompts", "--minutes",
                "--distill-minutes", "--dtype")
_BLOCKWISE_ONLY = ("--corpus", "--init", "--tokenizer", "--rescorer", "--distill", "--preset",
                   "--vocab-size", "--n-layer", "--n-head", "--d-model", "--d-ff", "--seq-len",
                   "--eval-fraction", "--checkpoint-interval")
_EXAMPLE_VALUE = {"--rescorer": (), "--corpus": ("c.txt",), "--prompts": ("p.jsonl",),
                  "--dtype": ("float32",), "--preset": ("tiny",), "--vocab-size": ("300",),
                  "--eval-fraction": ("0.1",), "--minutes": ("1",), "--distill-minutes": ("1",)}


def _example(option: str) -> tuple[str, ...]:
    return (option, *_EXAMPLE_VALUE.get(option, ("4",)))


TRAIN_RULES = (
    *(Rule(option, "applies only with --mode medusa (Medusa heads on a Hugging Face base); "
          f"add --mode medusa, or drop {option}", lambda a: a.mode == "medusa",
           ("--corpus", "c.txt", *_example(option))) for option in _MEDUSA_ONLY),
    *(Rule(option, "does not apply with --mode medusa (its heads learn from --prompts, the "
                   f"base's own answers, with heads train's settings); drop {option}",
           lambda a: a.mode != "medusa",
           ("--mode", "medusa", "--prompts", "p.jsonl", *_example(option)))
      for option in _BLOCKWISE_ONLY),
    Rule("--device", "does not apply with --mode medusa (heads train runs on the CPU); drop "
         "--device", lambda a: a.mode != "medusa" or a.device == "cpu",
         ("--mode", "medusa", "--prompts", "p.jsonl", "--device", "cuda")),
    Rule("--h", "is the heads with the base (h = 1 + Medusa heads): with --mode medusa it "
         "must be >= 2", lambda a: a.mode != "medusa" or a.h >= 2,
         ("--mode", "medusa", "--prompts", "p.jsonl", "--h", "1")),
    Rule("--h", "does not apply with --rescorer, which trains a RescorerLM of one head "
         "(h = 1); drop --h",
         lambda a: not a.rescorer or a.h == 1, ("--corpus", "c.txt", "--rescorer", "--h", "4")),
    *(Rule(option, "sets the size of a new model, and --init continues a trained one with its "
                   f"own config; drop {option}", lambda a: a.init is None,
           ("--corpus", "c.txt", "--init", "m", option, "4")) for option in _SIZES),
    Rule("--rescorer", "trains a new RescorerLM, and --init continues a trained model with its "
         "own config; drop --rescorer", lambda a: a.init is None,
         ("--corpus", "c.txt", "--init", "m", "--rescorer")),
    Rule("--preset", "sizes a new model, and --init continues a trained one with its own "
         "config; drop --preset", lambda a: a.init is None,
         ("--corpus", "c.txt", "--init", "m", "--preset", "tiny")),
    Rule("--vocab-size", "sizes the tokenizer trained here, and --tokenizer or --init brings "
         "its own; drop --vocab-size", lambda a: a.tokenizer is None and a.init is None,
         ("--corpus", "c.txt", "--tokenizer", "t.json", "--vocab-size", "300")),
    Rule("--distill", "trains the heads on the base model's own greedy outputs (Stern sec. "
         "6.2), so it needs a trained base: use --mode heads --init MODEL_DIR",
         lambda a: a.mode == "heads" and a.init is not None,
         ("--corpus", "c.txt", "--distill", "3")),
    *(Rule(option, f"applies only with --distill N (the distillation prompts); add --distill, "
                   f"or drop {option}", lambda a: a.distill is not None,
           ("--corpus", "c.txt", option, "8"))
      for option in ("--distill-len", "--distill-prompt-len")),
)
"""The options of ``train`` that apply only in some modes (:mod:`blockdraft.cli.values`)."""


def _train(args: argparse.Namespace, shown_out: Path | None = None) -> int:
    import torch

    from blockdraft.models import load_model, load_tokenizer
    from blockdraft.training import (
        TrainConfig,
        eos_stream,
        model_config,
        new_model,
        split_tail,
        train_and_save,
        train_tokenizer,
    )

    if args.threads:
        torch.set_num_threads(args.threads)
    for name, default in (("steps", 2000), ("batch_size", 32), ("seq_len", 128),
                          ("eval_fraction", 0.01), ("checkpoint_interval", 200),
                          ("vocab_size", 4096), ("preset", "small"), ("distill", 0),
                          ("distill_len", 64), ("distill_prompt_len", 32)):
        if getattr(args, name) is None:  # the defaults of the options that apply here only
            setattr(args, name, default)
    sizes = ("h", "n_layer", "n_head", "d_model", "d_ff")
    lines = read_texts(args.corpus, "--corpus")
    tok: Any
    if args.tokenizer:
        tok = load_tokenizer(args.tokenizer)
        if tok.eos_id is None:
            raise CliError(f"the tokenizer {args.tokenizer} has no end-of-text token to "
                           "separate the corpus lines with")
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
                              h=args.h, **{f: getattr(args, f) for f in sizes[1:]})
        model = new_model(config, rescorer=args.rescorer, device=args.device, seed=args.seed)
    if args.distill:
        train_ids = _distillation_stream(model, tok, lines, args)
    cfg = TrainConfig(steps=args.steps, batch_size=args.batch_size, seq_len=args.seq_len,
                      lr=args.lr, checkpoint_interval=args.checkpoint_interval)
    mode: Any = "base" if args.rescorer else args.mode
    result = train_and_save(
        model, train_ids, args.out, tokenizer=tok, cfg=cfg, mode=mode, seed=args.seed,
        eval_ids=eval_ids, checkpoints=True, resume=args.resume,
        extra_meta=lambda r: {"train": {
            # "step" keeps the final save consistent with its resumable state (--resume).
            "mode": mode, "step": r.steps, "steps": r.steps, "seed": args.seed,
            "corpus": [str(c) for c in args.corpus], "tokens": int(train_ids.size),
            "init": None if args.init is None else str(args.init),
            "distill": args.distill or None, "wall_s": r.wall_s,
            "last_eval": dataclasses.asdict(r.evals[-1]) if r.evals else None}},
    )
    if args.json:
        print_json({"out": shown_out or args.out, "steps": result.steps,
                    "final_loss": result.final_loss, "tokens_per_s": result.tokens_per_s,
                    "wall_s": result.wall_s})
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
                ["", "value"], rows, caption=f"checkpoint: {shown_out or args.out}")
    return 0


def _train_medusa(args: argparse.Namespace) -> int:
    """``--mode medusa``: ``blockdraft heads train`` (:func:`blockdraft.cli.heads.cmd_heads_train`)
    with this command's names for its options."""
    import blockdraft.cli.heads as heads

    given: dict[str, Any] = {
        "base": args.base or "smollm2", "prompts": args.prompts, "out": args.out,
        "heads": (6 if args.h is None else args.h) - 1, "layers": args.medusa_layers or 1,
        "max_prompts": args.max_prompts, "minutes": args.minutes,
        "distill_minutes": args.distill_minutes, "seed": args.seed, "threads": args.threads,
        "lr": args.lr, "overwrite": args.overwrite, "resume": args.resume, "json": args.json,
        "command_line": getattr(args, "command_line", "")}
    if args.dtype is not None:
        given["dtype"] = args.dtype
    if args.steps is not None:
        given["steps"] = args.steps
    if args.batch_size is not None:
        given["batch"] = args.batch_size
    return heads.cmd_heads_train(heads.train_namespace(**given))


def _distillation_stream(model: Any, tok: Any, lines: list[str], args: argparse.Namespace
                         ) -> np.ndarray:
    """Sequence-level distillation data: ``args.distill`` corpus lines drawn with the seed,
    each cut to its first ``--distill-prompt-len`` tokens and continued greedily by the base
    model for ``--distill-len`` tokens (the lines of the held-out tail are never drawn)."""
    from blockdraft.training.blockwise import distill_targets

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


def add_parsers(sub: Any) -> None:
    """``train``."""
    p = add_command(sub, "train", "train a BlockwiseLM (or a RescorerLM) and its BPE tokenizer",
                    cmd_train)
    p.add_argument("--corpus", action=ListAction, default=None,
                   help="text files, one document a line (every mode but medusa)")
    p.add_argument("-o", "--out", required=True, type=Path, help="checkpoint directory")
    p.add_argument("--preset", default=None, choices=["tiny", "small", "base"],
                   help="the size of a new model (default small)")
    p.add_argument("--h", type=positive_int, default=None,
                   help="prediction heads, the base's included (default: the preset's; "
                        "--mode medusa: 1 + Medusa heads, default 6)")
    p.add_argument("--rescorer", action="store_true",
                   help="train a RescorerLM (h = 1) for local neural rescoring")
    p.add_argument("--mode", default="base-then-heads",
                   choices=["joint", "heads", "base", "base-then-heads", "medusa"],
                   help="joint (Kim App. C.1), heads on a frozen base (Stern), base only, "
                        "base then heads (default), or medusa: Medusa heads on a Hugging Face "
                        "model (--base) by self-distillation on --prompts")
    p.add_argument("--tokenizer", default=None,
                   help="reuse a tokenizer instead of training one: a model name (smollm2), a "
                        "Hugging Face model folder or .gguf file, a blockdraft model folder, a "
                        "tokenizer.json or GPT-2 files (e.g. --rescorer --tokenizer smollm2: a "
                        "RescorerLM over SmolLM2's token ids)")
    p.add_argument("--base", default=None,
                   help="--mode medusa: the base model (a name, HF folder or .gguf; default "
                        "smollm2)")
    p.add_argument("--prompts", action=ListAction, type=Path, default=None,
                   help="--mode medusa: JSON-lines files of training prompts")
    p.add_argument("--medusa-layers", type=positive_int, default=None,
                   help="--mode medusa: ResBlocks per Medusa head (default 1)")
    p.add_argument("--max-prompts", type=positive_int, default=None,
                   help="--mode medusa: training prompts to distil (default: all)")
    p.add_argument("--minutes", type=number(0.0), default=None,
                   help="--mode medusa: time box of the head training (minutes)")
    p.add_argument("--distill-minutes", type=number(0.0), default=None,
                   help="--mode medusa: time box of the distillation data step (minutes)")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default=None,
                   help="--mode medusa: the base's dtype while generating (default float32)")
    p.add_argument("--init", type=Path, default=None,
                   help="start from this trained model directory (its config and tokenizer)")
    p.add_argument("--distill", type=positive_int, default=None, metavar="N",
                   help="with --mode heads --init: train the heads on the base model's greedy "
                        "continuations of N corpus prompts (Stern sec. 6.2)")
    p.add_argument("--distill-len", type=positive_int, default=None,
                   help="greedy tokens per distillation prompt (default 64)")
    p.add_argument("--distill-prompt-len", type=positive_int, default=None,
                   help="corpus tokens per distillation prompt (default 32)")
    p.add_argument("--vocab-size", type=integer(259), default=None,
                   help="the tokenizer trained here: its largest vocabulary (default 4096)")
    p.add_argument("--n-layer", type=positive_int, default=None,
                   help="transformer blocks (default: the preset's)")
    p.add_argument("--n-head", type=positive_int, default=None,
                   help="attention heads (default: the preset's)")
    p.add_argument("--d-model", type=positive_int, default=None,
                   help="residual width (default: the preset's)")
    p.add_argument("--d-ff", type=positive_int, default=None,
                   help="MLP hidden width (default: the preset's)")
    p.add_argument("--steps", type=positive_int, default=None,
                   help="optimizer steps (default 2000; --mode medusa: its default)")
    p.add_argument("--batch-size", type=positive_int, default=None,
                   help="sequences per step (default 32; --mode medusa: positions per step, "
                        "its default)")
    p.add_argument("--seq-len", type=integer(2), default=None,
                   help="tokens per training sequence (default 128)")
    p.add_argument("--lr", type=number(above=0.0), default=1e-3,
                   help="peak learning rate, > 0 (default %(default)s)")
    p.add_argument("--eval-fraction", type=number(0.0, below=1.0), default=None,
                   help="tail of the corpus held out for evaluation (default 0.01)")
    p.add_argument("--seed", type=non_negative_int, default=0)
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    p.add_argument("--overwrite", action="store_true",
                   help="replace what --out holds (without it an existing model is refused)")
    p.add_argument("--checkpoint-interval", type=non_negative_int, default=None,
                   help="steps between resumable checkpoints (0: only at the end; default 200)")
    p.add_argument("--threads", type=positive_int, default=None, help="torch intra-op threads")
    p.add_argument("--device", type=device_name, default="cpu",
                   help="cpu (default), cuda, cuda:N, mps or xpu")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    add_rules(p, *TRAIN_RULES)


_MOVED = {"cmd_trace": "trace", "cmd_decode": "decode", "NO_TOKENS": "decode",
          "encode_prompt": "model_options"}
"""Names of ``trace`` and ``decode``, in their own modules now."""


def __getattr__(name: str) -> Any:
    """The old import path of what moved to :mod:`blockdraft.cli.trace`,
    :mod:`blockdraft.cli.decode` and :mod:`blockdraft.cli.model_options`, kept."""
    if name in _MOVED:
        import importlib

        return getattr(importlib.import_module(f"blockdraft.cli.{_MOVED[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
