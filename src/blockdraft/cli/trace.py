"""``blockdraft trace``: greedy-decode prompts with a model and record a trace
(docs/definitions.md sec. 6), any model :func:`blockdraft.models.load_model` loads
(:mod:`blockdraft.cli.model_options`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from blockdraft.cli.common import (
    CliError,
    add_command,
    check_device,
    device_name,
    progress_bar,
    read_id_lines,
    read_texts,
)
from blockdraft.cli.model_options import (
    encode_prompt,
    load_from_args,
    model_arguments,
    model_name,
    model_tokenizer,
    vocab_size_of,
)
from blockdraft.cli.values import Rule, add_rules, non_negative_int, positive_int
from blockdraft.core.outputs import claim_output


def cmd_trace(args: argparse.Namespace) -> int:
    from blockdraft.core.signature import environment
    from blockdraft.oracle.record import record_trace
    from blockdraft.oracle.trace.format import TRACE_FILES

    check_device(args.device)
    out = Path(args.output)
    output = claim_output(out, what="a trace", error=CliError, overwrite=args.overwrite,
                          own=TRACE_FILES)
    id_lines = read_id_lines(Path(args.prompts)) if args.ids else []  # checked before the load
    model = load_from_args(args)
    if args.ids:
        vocab = vocab_size_of(model)
        for i, line in enumerate(id_lines):
            if line.size and int(line.max()) >= vocab:
                raise CliError(f"{args.prompts}: prompt {i + 1} holds token id "
                               f"{int(line.max())}, outside the model's vocabulary [0, {vocab})")
        prompts = [p.tolist() for p in id_lines]
        eos = args.eos_id
    else:
        tok = model_tokenizer(model, args)
        lines = read_texts([args.prompts], "--prompts", "prompt file")
        prompts = [encode_prompt(tok, line, args.chat) for line in lines]
        eos = tok.eos_id if args.eos_id is None else args.eos_id
    sig: dict[str, Any] = {"model": model_name(args), "prompts": Path(args.prompts).name}
    if args.heads is not None:
        sig["heads"] = Path(args.heads).name
    if model.heads_digest:  # which heads, whatever folder they came from
        sig["heads_digest"] = model.heads_digest
    if args.dtype is not None:
        sig["dtype"] = args.dtype
    if args.runtime != "torch":
        sig.update(runtime=args.runtime, precision=args.precision or args.dtype or "float32")
        if args.draft_precision is not None:  # the heads' weights (heads_digest holds them)
            sig["draft_precision"] = args.draft_precision
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


def add_parser(sub: Any) -> None:
    """``trace``."""
    p = add_command(sub, "trace",
                    "greedy-decode prompts and record a trace (docs/definitions.md sec. 6)",
                    cmd_trace)
    model_arguments(p)
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
    add_rules(p, Rule("--chat", "wraps text prompts in the chat template, and --ids prompts are "
                                "token ids; drop one of them", lambda a: not a.ids,
                      ("--ids", "--chat")))
