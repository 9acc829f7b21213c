"""``blockdraft decode``: one prompt with blockwise parallel decoding (any drafter, rescorer
and criterion), any model :func:`blockdraft.models.load_model` loads
(:mod:`blockdraft.cli.model_options`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from blockdraft.cli.common import (
    JSON_HELP,
    CliError,
    add_command,
    check_device,
    device_name,
    print_json,
    print_table,
    utf8_argument,
)
from blockdraft.cli.model_options import (
    encode_prompt,
    load_from_args,
    model_arguments,
    model_tokenizer,
    vocab_size_of,
)
from blockdraft.cli.values import Rule, add_rules, non_negative_int, number, positive_int
from blockdraft.models.capabilities import capabilities_of

if TYPE_CHECKING:
    from blockdraft.drafts import DraftSpec

NO_TOKENS = ("undefined: no token was generated (--max-new-tokens 0), so B = tokens / serial "
             "calls has nothing to measure")
"""The ``_reason`` of ``decode``'s block efficiency (and speedup) when it has no tokens."""


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
    if args.alpha is None:  # the defaults of the options that apply with a rescorer alone
        args.alpha = 1.0
    if args.neural_backend is None:
        args.neural_backend = "onnx"
    model = load_from_args(args)
    tok = model_tokenizer(model, args)
    prompt = encode_prompt(tok, args.prompt, args.chat)
    vocab = vocab_size_of(model)
    criterion = Criterion.parse(args.criterion)
    spec = _drafting_spec(vocab, tok, args)
    res = decode(model, prompt, drafter=spec, criterion=criterion,
                 max_new_tokens=args.max_new_tokens, eos_id=tok.eos_id, device=args.device)
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
            dtype = capabilities_of(model).precision
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


def _drafting_spec(vocab: int, tok: Any, args: argparse.Namespace) -> DraftSpec:
    """The :class:`~blockdraft.drafts.DraftSpec` the drafting options name (the factory builds
    it on the model): none of them is the model's default drafter, as ``decode(model, ids)``
    told nothing; ``--k``/``--p`` the heads' p best (``--k`` 16 unless given); ``--lm`` or
    ``--rescorer-model`` rescores them (an LM over another tokenizer refused by its record);
    ``--iad`` adds the input copy, ``--lookup`` prompt lookup's copy (the heads' drafts and the
    copy verified as one token tree; on ONNX Runtime int8 and q4, whose tree rows are not chain
    rows bit for bit, the tree's path is confirmed by a second forward: lossless, slower than
    one draft a step).

    Raises:
        CliError: an LM that does not fit the model.
    """
    from blockdraft.drafts import DraftSpec

    named = (args.k, args.p, args.lm, args.rescorer_model)
    if all(x is None for x in named) and not (args.iad or args.lookup):
        return DraftSpec("default")
    rescoring: dict[str, Any] = {}
    if args.lm:
        from blockdraft.rescorers.ngram import NgramLM

        NgramLM(args.lm).check_vocab(vocab, tok)  # the tokenizer's record too, not only V
        rescoring = {"rescorer": "ngram", "lm": str(args.lm), "alpha": args.alpha}
    elif args.rescorer_model:
        from blockdraft.rescorers.neural import NeuralRescorer

        _check_rescorer_model(Path(args.rescorer_model), vocab, tok)
        rescoring = {"rescorer": "given", "alpha": args.alpha,
                     "given": NeuralRescorer(str(args.rescorer_model), alpha=args.alpha,
                                             backend=args.neural_backend)}
    k, p = 16 if args.k is None else args.k, 1 if args.p is None else args.p
    if not args.lookup:
        return DraftSpec("iad" if args.iad else "heads", k=k, p=p, **rescoring)
    return DraftSpec("combined", k=k, p=p, **rescoring)


def criterion_spec(text: str) -> str:
    """``--criterion`` (argparse type): a criterion :meth:`Criterion.parse
    <blockdraft.verify.Criterion.parse>` reads, refused before any work otherwise."""
    from blockdraft.core.errors import BlockdraftError
    from blockdraft.verify import Criterion

    try:
        Criterion.parse(text)
    except BlockdraftError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def add_parser(sub: Any) -> None:
    """``decode``."""
    p = add_command(sub, "decode", "decode a prompt with blockwise parallel decoding", cmd_decode)
    model_arguments(p)
    p.add_argument("--prompt", required=True, help="prompt text")
    p.add_argument("--max-new-tokens", type=non_negative_int, default=64)
    p.add_argument("--k", type=positive_int, default=None,
                   help="lattice width (default 16 when any drafting option is given; with "
                        "none of --k, --p, --lm, --rescorer-model, --iad, --lookup: the "
                        "model's default drafter, what decode(model, ids) drafts with)")
    p.add_argument("--p", type=positive_int, default=None,
                   help="drafts verified per step (default 1)")
    rescoring = p.add_mutually_exclusive_group()
    rescoring.add_argument("--lm", type=Path, default=None,
                           help="n-gram LM for global rescoring (not with --rescorer-model)")
    rescoring.add_argument("--rescorer-model", type=Path, default=None,
                           help="RescorerLM checkpoint for local neural rescoring (not with --lm)")
    p.add_argument("--neural-backend", choices=["torch", "onnx"], default=None,
                   help="with --rescorer-model: where it runs (default onnx)")
    p.add_argument("--alpha", type=number(0.0), default=None,
                   help="with --lm or --rescorer-model: the LM's weight, >= 0 (default 1)")
    p.add_argument("--criterion", type=criterion_spec, default="exact",
                   help='acceptance criterion, e.g. "exact", "topk:k=4", "gad++:beta=5,tau=3"')
    p.add_argument("--iad", action="store_true", help="add an input-guided draft")
    p.add_argument("--lookup", action="store_true",
                   help="add the prompt-lookup draft (the longest recent n-gram match over the "
                        "prompt and the output) beside the heads' drafts (one token tree; on "
                        "int8 and q4 a second forward confirms its path: lossless, slower)")
    p.add_argument("--compare-greedy", action="store_true",
                   help="also time plain greedy decoding (and check losslessness)")
    p.add_argument("--device", type=device_name, default="cpu",
                   help="cpu (default), cuda, cuda:N, mps or xpu")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    add_rules(p, Rule("--neural-backend", "applies only with --rescorer-model (where it runs); "
                      "add --rescorer-model, or drop --neural-backend",
                      lambda a: a.rescorer_model is not None, ("--neural-backend", "torch")),
              Rule("--alpha", "weighs a rescoring LM, and neither --lm nor --rescorer-model "
                   "names one; add one of them, or drop --alpha",
                   lambda a: a.lm is not None or a.rescorer_model is not None,
                   ("--alpha", "0.5")),
              Rule("--iad", "adds the input copy beside the heads' drafts, and --lookup adds "
                   "prompt lookup's instead (one copy source a decode); drop one of them",
                   lambda a: not a.lookup, ("--iad", "--lookup")))
