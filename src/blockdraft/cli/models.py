"""The model commands: ``train`` (a BlockwiseLM or RescorerLM and its tokenizer, by the
blockwise training recipe; or, with ``--mode medusa``, Medusa heads on a Hugging Face model by
self-distillation: ``blockdraft heads train``, :mod:`blockdraft.cli.heads`), ``trace``
(greedy-decode prompts and record a trace) and ``decode`` (one prompt with blockwise parallel
decoding).

``trace`` and ``decode`` take any model :func:`blockdraft.models.load_model` loads: a
blockdraft checkpoint folder, a known name (``smollm2``), a Hugging Face folder or ``.gguf``
file with ``--heads``, with ``--dtype``; ``--chat`` wraps each prompt in the model's chat
template."""

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
    finite_float,
    non_negative_int,
    positive_int,
    print_json,
    print_table,
    progress_bar,
    read_id_lines,
    read_texts,
    utf8_argument,
)
from blockdraft.core.outputs import claim_output

NO_TOKENS = ("undefined: no token was generated (--max-new-tokens 0), so B = tokens / serial "
             "calls has nothing to measure")
"""The ``_reason`` of ``decode``'s block efficiency (and speedup) when it has no tokens."""


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
    """The argument combinations ``train`` refuses, before it touches anything."""
    if args.mode == "medusa":
        if not args.prompts:
            raise CliError("--mode medusa needs --prompts (JSON-lines files of training prompts, "
                           '{"source": ..., "prompt": ...} a line)')
        flags = (("--corpus", args.corpus), ("--init", args.init),
                 ("--tokenizer", args.tokenizer), ("--rescorer", args.rescorer),
                 ("--distill", args.distill))
        unused = [flag for flag, value in flags if value]
        if unused:
            raise CliError(f"--mode medusa does not take {', '.join(unused)}")
        h = 6 if args.h is None else args.h
        if h < 2:
            raise CliError(
                f"--h is the heads with the base (h = 1 + Medusa heads), >= 2; got {h}")
        return
    if not args.corpus:
        raise CliError(f"--mode {args.mode} needs --corpus (text files to train on)")
    if args.prompts or args.base:
        raise CliError("--prompts and --base are for --mode medusa")
    sizes = ("h", "n_layer", "n_head", "d_model", "d_ff")
    for f in sizes:
        value = getattr(args, f)
        if value is not None and value < 1:
            raise CliError(f"--{f.replace('_', '-')} must be an integer >= 1, got {value}")
    if args.rescorer and args.h not in (None, 1):
        raise CliError(f"--rescorer trains a RescorerLM of one head (h = 1); got --h {args.h}")
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
    args.steps = 2000 if args.steps is None else args.steps
    args.batch_size = 32 if args.batch_size is None else args.batch_size
    sizes = ("h", "n_layer", "n_head", "d_model", "d_ff")
    lines = read_texts(args.corpus)
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
        "heads": (6 if args.h is None else args.h) - 1, "layers": args.medusa_layers,
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


def _load(args: argparse.Namespace) -> Any:
    """The model of ``--model`` (``--heads``, ``--dtype``, ``--device``, ``--runtime``,
    ``--precision``, ``--threads``); a first ONNX export reports its stages on stderr."""
    from blockdraft.models import load_model

    if args.precision is not None and args.runtime != "onnxruntime":
        raise CliError(f"--precision {args.precision} is for --runtime onnxruntime; PyTorch's "
                       "precision is --dtype")
    if args.dtype not in (None, "float32") and args.runtime == "onnxruntime":
        raise CliError(f"--dtype {args.dtype} is PyTorch's; --runtime {args.runtime} takes "
                       "--precision float32|int8")
    return load_model(args.model, dtype=args.dtype, device=args.device, heads=args.heads,
                      runtime=args.runtime, precision=args.precision, threads=args.threads,
                      log=_stderr)


def _tokenizer(model: Any, args: argparse.Namespace) -> Any:
    """The model's own tokenizer (a Hugging Face model's), else the one beside ``--model``."""
    from blockdraft.models import load_tokenizer

    tok = getattr(model, "tokenizer", None)
    return tok if tok is not None else load_tokenizer(args.model)


def _vocab_size(model: Any) -> int:
    return int(model.config.vocab_size)


def encode_prompt(tok: Any, text: str, chat: bool) -> list[int]:
    """The ids of a prompt: ``text`` encoded, or with ``chat`` one user turn in the model's
    chat template (ending with the assistant's turn opener).

    Raises:
        CliError: ``chat`` with a tokenizer without a chat template.
    """
    if not chat:
        return [int(i) for i in tok.encode(text)]
    if not getattr(tok, "has_chat_template", False):
        raise CliError("--chat: this model's tokenizer has no chat template (it is not a chat "
                       "model); drop --chat to decode the plain text")
    return [int(i) for i in tok.apply_chat_template([{"role": "user", "content": text}])]


def _model_name(args: argparse.Namespace) -> str:
    name = str(args.model)
    return Path(name).name if Path(name).exists() else name


def cmd_trace(args: argparse.Namespace) -> int:
    from blockdraft.core.signature import environment
    from blockdraft.oracle.record import record_trace

    if args.ids and args.chat:
        raise CliError("--chat wraps text prompts in the chat template; --ids prompts are ids")
    from blockdraft.oracle.trace.format import TRACE_FILES

    check_device(args.device)
    out = Path(args.output)
    output = claim_output(out, what="a trace", error=CliError, overwrite=args.overwrite,
                          own=TRACE_FILES)
    id_lines = read_id_lines(Path(args.prompts)) if args.ids else []  # checked before the load
    model = _load(args)
    if args.ids:
        vocab = _vocab_size(model)
        for i, line in enumerate(id_lines):
            if line.size and int(line.max()) >= vocab:
                raise CliError(f"{args.prompts}: prompt {i + 1} holds token id "
                               f"{int(line.max())}, outside the model's vocabulary [0, {vocab})")
        prompts = [p.tolist() for p in id_lines]
        eos = args.eos_id
    else:
        tok = _tokenizer(model, args)
        lines = read_texts([args.prompts])
        prompts = [encode_prompt(tok, line, args.chat) for line in lines]
        eos = tok.eos_id if args.eos_id is None else args.eos_id
    sig: dict[str, Any] = {"model": _model_name(args), "prompts": Path(args.prompts).name}
    if args.heads is not None:
        sig["heads"] = Path(args.heads).name
    if getattr(model, "heads_digest", None):  # which heads, whatever folder they came from
        sig["heads_digest"] = model.heads_digest
    if args.dtype is not None:
        sig["dtype"] = args.dtype
    if args.runtime != "torch":
        sig.update(runtime=args.runtime, precision=args.precision or args.dtype or "float32")
    if args.chat:
        sig["chat"] = True
    sig.update({"max_new_tokens": args.max_new_tokens, **environment(args.device)})
    with output.writing() as writing:  # --overwrite: the old trace stays until this one is
        trace = record_trace(model, prompts, writing.path,  # complete
                             max_new_tokens=args.max_new_tokens, eos_id=eos, K=args.K,
                             signature=sig, progress=progress_bar("tracing"))
    print(f"wrote {args.output}: {trace.num_examples} examples, {trace.num_positions} "
          f"positions, h={trace.h}, K={trace.K}")
    return 0


def _check_rescorer_model(path: Path, vocab_size: int, tok: Any) -> None:
    """A RescorerLM of another vocabulary would index outside its embedding or score other
    tokens: refuse it (its size, and its saved tokenizer's fingerprint when it has one)."""
    from blockdraft.models import load_tokenizer, read_model_config

    _, config, _ = read_model_config(path)
    if config.vocab_size != vocab_size:
        raise CliError(
            f"the rescoring LM {path} has V = {config.vocab_size} but the model has V = "
            f"{vocab_size}; train it with the model's tokenizer (blockdraft train --rescorer "
            "--tokenizer MODEL)")
    if not (path / "tokenizer.json").is_file() or tok is None:
        return
    if load_tokenizer(path).fingerprint() != tok.fingerprint():
        raise CliError(f"the rescoring LM {path} was trained with another tokenizer than the "
                       "model's (same V, different tokens)")


def cmd_decode(args: argparse.Namespace) -> int:
    from blockdraft.models import greedy_generate
    from blockdraft.verify import Criterion, decode

    utf8_argument(args.prompt, "--prompt")
    check_device(args.device)
    model = _load(args)
    tok = _tokenizer(model, args)
    prompt = encode_prompt(tok, args.prompt, args.chat)
    vocab = _vocab_size(model)
    rescorer: Any = None
    if args.lm:
        from blockdraft.rescorers.ngram import NgramLM, NgramRescorer

        lm = NgramLM(args.lm)
        lm.check_vocab(vocab, tok)
        rescorer = NgramRescorer(lm, alpha=args.alpha)
    elif args.rescorer_model:
        from blockdraft.rescorers.neural import NeuralRescorer

        _check_rescorer_model(Path(args.rescorer_model), vocab, tok)
        rescorer = NeuralRescorer(str(args.rescorer_model), alpha=args.alpha,
                                  backend=args.neural_backend)
    criterion = Criterion.parse(args.criterion)
    drafter = _lookup_drafter(model, criterion, rescorer, args) if args.lookup else None
    if drafter is not None:
        rescorer = None
    res = decode(model, prompt, rescorer=rescorer, k=args.k, p=args.p, criterion=criterion,
                 max_new_tokens=args.max_new_tokens, eos_id=tok.eos_id, device=args.device,
                 iad=args.iad, drafter=drafter)
    assert not isinstance(res, list)
    greedy_s = None
    if args.compare_greedy:
        import time

        t0 = time.perf_counter()
        ref = greedy_generate(model, prompt, args.max_new_tokens, eos_id=tok.eos_id)
        greedy_s = time.perf_counter() - t0
        if criterion.lossless and ref != res.tokens:
            at = next((i for i, (a, b) in enumerate(zip(ref, res.tokens, strict=False))
                       if a != b), min(len(ref), len(res.tokens)))
            dtype = str(getattr(model.config, "dtype", "") or "")
            hint = ("; in a reduced precision (here " + dtype + ") a forward over several "
                    "tokens can round differently from one-token forwards and flip a near-tie "
                    "(docs/real-models.md)") if dtype in ("bfloat16", "float16") else (
                   " (a bug: report it)")
            raise CliError(f"lossless decoding differs from greedy decoding at new token {at}"
                           + hint)
    text = tok.decode(res.tokens)
    # B = tokens / serial calls, and a speedup, are undefined when no token was generated
    # (--max-new-tokens 0): not 0.0, which would read as a measurement.
    undefined = None if res.tokens else NO_TOKENS
    speedup = None if greedy_s is None or undefined else greedy_s / res.wall_s
    if args.json:
        out: dict[str, object] = {
            "text": text, "tokens": res.tokens, "prompt_tokens": len(prompt),
            "block_efficiency": None if undefined else res.block_efficiency,
            "calls": res.calls, "wall_s": res.wall_s, "forward_s": res.forward_s,
            "draft_s": res.draft_s, "greedy_s": greedy_s, "criterion": str(criterion),
            "drafter": res.drafter, "stopped": res.stopped}
        if undefined:
            out["block_efficiency_reason"] = undefined
        print_json(out)
        return 0
    print(text)
    rows: list[tuple[str, object]] = [
        ("drafter", res.drafter), ("criterion", str(criterion)),
        ("tokens", len(res.tokens)), ("serial calls", res.calls),
        ("block efficiency B", "n/a" if undefined else res.block_efficiency),
        ("wall s", res.wall_s),
        ("  in model forwards", res.forward_s), ("  in drafting / rescoring", res.draft_s),
    ]
    if greedy_s is not None:
        rows += [("greedy wall s", greedy_s),
                 ("speedup over greedy", "n/a" if speedup is None else speedup)]
    print_table("decode", ["", "value"], rows,
                caption=f"n/a: {undefined}" if undefined else None)
    return 0


def _lookup_drafter(model: Any, criterion: Any, rescorer: Any, args: argparse.Namespace) -> Any:
    """``--lookup``: prompt lookup's draft beside the heads' (rescored) drafts; on a runtime
    that verifies one draft a step losslessly but not a token tree (ONNX Runtime int8, under
    a lossless criterion: the verifier's rule), prompt lookup's draft alone, said in a
    warning, or a refusal when the heads' draft was asked for explicitly (``--p``, ``--lm``).

    Raises:
        CliError: ``--lookup`` with ``--p`` > 1, ``--lm``, ``--rescorer-model`` or ``--iad``
            on such a runtime.
    """
    import warnings

    from blockdraft.core.errors import BlockdraftWarning
    from blockdraft.drafts import CombinedDrafter, HeadDrafter, LookupDrafter

    if bool(getattr(model, "exact_trees", True)) or not criterion.lossless:
        return CombinedDrafter(HeadDrafter(k=args.k, p=args.p, rescorer=rescorer),
                               LookupDrafter())
    precision = getattr(model, "precision", "this precision")
    asked = [flag for flag, given in (("--p", args.p > 1), ("--lm", args.lm),
                                      ("--rescorer-model", args.rescorer_model),
                                      ("--iad", args.iad)) if given]
    if asked:
        raise CliError(f"--lookup with {', '.join(asked)}: {precision} verifies one draft a "
                       "step losslessly, not the heads' drafts beside prompt lookup's (a token "
                       f"tree); drop {' and '.join(asked)} to decode with prompt lookup alone, "
                       "or use --precision float32")
    warnings.warn(f"--lookup on {precision}: one draft a step is verified losslessly, not two, "
                  "so prompt lookup drafts alone (the heads' draft is not verified beside it)",
                  BlockdraftWarning, stacklevel=2)
    return LookupDrafter()


def _model_arguments(p: argparse.ArgumentParser) -> None:
    """``--model``, ``--heads``, ``--dtype`` and ``--chat`` of ``trace`` and ``decode``."""
    p.add_argument("--model", required=True,
                   help="a blockdraft checkpoint folder, a known model name (smollm2), a "
                        "Hugging Face model folder or .gguf file (with --heads), or a Medusa "
                        "heads folder naming its base")
    p.add_argument("--heads", type=Path, default=None,
                   help="Medusa heads folder (any layout) for a Hugging Face model; overrides "
                        "the heads a known name brings")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default=None,
                   help="parameter dtype (default: a checkpoint as saved, a Hugging Face model "
                        "in float32; bfloat16 may break exact equality with greedy, see "
                        "docs/real-models.md)")
    p.add_argument("--runtime", choices=["torch", "onnxruntime", "static"], default="torch",
                   help="where the forward runs: PyTorch eager (default), ONNX Runtime (a "
                        "Hugging Face model exported once and cached; the fastest on a CPU) "
                        "or static (a Hugging Face model on a preallocated KV cache, in "
                        "--dtype float32|bfloat16; CUDA graphs on a GPU)")
    p.add_argument("--precision", choices=["float32", "int8"], default=None,
                   help="--runtime onnxruntime: float32 (default) or int8 (per-row int8 "
                        "activations, chunk-invariant: still lossless against its own greedy)")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="intra-op threads of the runtime (default: torch's setting)")
    p.add_argument("--chat", action="store_true",
                   help="wrap each prompt in the model's chat template as one user turn "
                        "(an error if the model has none)")


def add_parsers(sub: Any) -> None:
    """``train``, ``trace`` and ``decode``."""
    p = add_command(sub, "train", "train a BlockwiseLM (or a RescorerLM) and its BPE tokenizer",
                    cmd_train)
    p.add_argument("--corpus", nargs="+", default=None,
                   help="text files, one document a line (every mode but medusa)")
    p.add_argument("-o", "--out", required=True, type=Path, help="checkpoint directory")
    p.add_argument("--preset", default="small", choices=["tiny", "small", "base"])
    p.add_argument("--h", type=int, default=None,
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
    p.add_argument("--prompts", nargs="+", type=Path, default=None,
                   help="--mode medusa: JSON-lines files of training prompts")
    p.add_argument("--medusa-layers", type=int, default=1,
                   help="--mode medusa: ResBlocks per Medusa head (default 1)")
    p.add_argument("--max-prompts", type=int, default=None,
                   help="--mode medusa: training prompts to distil (default: all)")
    p.add_argument("--minutes", type=float, default=None,
                   help="--mode medusa: time box of the head training (minutes)")
    p.add_argument("--distill-minutes", type=float, default=None,
                   help="--mode medusa: time box of the distillation data step (minutes)")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default=None,
                   help="--mode medusa: the base's dtype while generating (default float32)")
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
    p.add_argument("--steps", type=int, default=None,
                   help="optimizer steps (default 2000; --mode medusa: its default)")
    p.add_argument("--batch-size", type=int, default=None,
                   help="sequences per step (default 32; --mode medusa: positions per step, "
                        "its default)")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--eval-fraction", type=float, default=0.01,
                   help="tail of the corpus held out for evaluation (default 0.01)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    p.add_argument("--overwrite", action="store_true",
                   help="replace what --out holds (without it an existing model is refused)")
    p.add_argument("--checkpoint-interval", type=int, default=200,
                   help="steps between resumable checkpoints (0: only at the end; default 200)")
    p.add_argument("--threads", type=positive_int, default=None, help="torch intra-op threads")
    p.add_argument("--device", type=device_name, default="cpu",
                   help="cpu (default), cuda, cuda:N, mps or xpu")
    p.add_argument("--json", action="store_true", help=JSON_HELP)

    p = add_command(sub, "trace",
                    "greedy-decode prompts and record a trace (docs/definitions.md sec. 6)",
                    cmd_trace)
    _model_arguments(p)
    p.add_argument("--prompts", required=True, type=Path,
                   help="one prompt per line (text, or token ids with --ids)")
    p.add_argument("-o", "--output", required=True, type=Path, help="trace directory")
    p.add_argument("--ids", action="store_true", help="prompts are token ids")
    p.add_argument("--max-new-tokens", type=positive_int, default=64)
    p.add_argument("--eos-id", type=non_negative_int, default=None,
                   help="end-of-text id (default: the tokenizer's)")
    p.add_argument("--K", type=positive_int, default=16, help="top-K kept per head (default 16)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing trace in -o (only once the new one is complete)")
    p.add_argument("--device", type=device_name, default="cpu",
                   help="cpu (default), cuda, cuda:N, mps or xpu")

    p = add_command(sub, "decode", "decode a prompt with blockwise parallel decoding", cmd_decode)
    _model_arguments(p)
    p.add_argument("--prompt", required=True, help="prompt text")
    p.add_argument("--max-new-tokens", type=non_negative_int, default=64)
    p.add_argument("--k", type=positive_int, default=16, help="lattice width (default 16)")
    p.add_argument("--p", type=positive_int, default=1,
                   help="drafts verified per step (default 1)")
    rescoring = p.add_mutually_exclusive_group()
    rescoring.add_argument("--lm", type=Path, default=None,
                           help="n-gram LM for global rescoring (not with --rescorer-model)")
    rescoring.add_argument("--rescorer-model", type=Path, default=None,
                           help="RescorerLM checkpoint for local neural rescoring (not with --lm)")
    p.add_argument("--neural-backend", choices=["torch", "onnx"], default="onnx")
    p.add_argument("--alpha", type=finite_float, default=1.0)
    p.add_argument("--criterion", default="exact",
                   help='acceptance criterion, e.g. "exact", "topk:k=4", "gad++:beta=5,tau=3"')
    p.add_argument("--iad", action="store_true", help="add an input-guided draft")
    p.add_argument("--lookup", action="store_true",
                   help="add the prompt-lookup draft (the longest recent n-gram match over the "
                        "prompt and the output) beside the heads' drafts (on int8, which "
                        "verifies one draft a step losslessly: prompt lookup alone)")
    p.add_argument("--compare-greedy", action="store_true",
                   help="also time plain greedy decoding (and check losslessness)")
    p.add_argument("--device", type=device_name, default="cpu",
                   help="cpu (default), cuda, cuda:N, mps or xpu")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
