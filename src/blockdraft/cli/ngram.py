"""``blockdraft ngram train``: a modified Kneser-Ney n-gram LM over token ids (built in or lmplz);
``blockdraft ngram interpolate``: two of them mixed into one (static interpolation)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from blockdraft.cli.common import (
    JSON_HELP,
    CliError,
    add_command,
    add_group,
    add_overwrite,
    print_json,
    print_table,
    read_id_lines,
    read_text_file,
)


def cmd_ngram_train(args: argparse.Namespace) -> int:
    from blockdraft.core.outputs import claim_output
    from blockdraft.core.signature import human_count
    from blockdraft.training.ngram import LM_SUFFIXES, train_ngram

    _check_train_arguments(args)
    # an LM at the prefix (any of its files) is replaced only when told, and as a whole
    output = claim_output(args.output, what="a new n-gram LM", error=CliError,
                          overwrite=args.overwrite, folder=False, prefix=True,
                          sidecars=LM_SUFFIXES)
    info = None
    if args.tokenizer:
        from blockdraft.models import load_tokenizer

        tok = load_tokenizer(args.tokenizer)
        info = tok.info(str(args.tokenizer))
    seqs: list[np.ndarray] = []
    if args.ids:
        for f in args.ids:
            seqs += read_id_lines(Path(f))
    elif args.text:
        lines = []
        for f in args.text:
            lines += [ln for ln in read_text_file(Path(f), "text file").splitlines()
                      if ln.strip()]
        seqs = [np.asarray(ids, dtype=np.int64) for ids in tok.encode_batch(lines)]
    if args.distilled:
        from blockdraft.training.heads import open_distill_set

        answers = open_distill_set(args.distilled).answers("train")
        if not answers:
            raise CliError(f"the distillation set {args.distilled} has no finished training "
                           "shard; run blockdraft heads distill first")
        seqs += [a.astype(np.int64) for a in answers]
    with output.writing() as writing:  # built beside it, its files renamed in together
        r = train_ngram(seqs, writing.path, order=args.order, prune=args.prune,
                        memory=args.memory, binary=not args.no_binary,
                        estimator=args.estimator, tokenizer=info)
    r = dataclasses.replace(r, arpa=writing.final(r.arpa), binary=(
        None if r.binary is None else writing.final(r.binary)), vocab_record=(
        None if r.vocab_record is None else writing.final(r.vocab_record)))
    if args.json:
        print_json({"arpa": r.arpa, "binary": r.binary, "order": r.order, "counts": r.counts,
                    "tokens": r.tokens, "discount_fallback": r.discount_fallback,
                    "seconds": r.seconds, "command": r.command, "estimator": r.estimator,
                    "tokenizer": None if info is None else info.to_dict()})
        return 0
    print_table(
        f"n-gram LM ({human_count(r.num_ngrams)} n-grams, {human_count(r.tokens)} tokens)",
        ["order", "n-grams"], [(i + 1, c) for i, c in enumerate(r.counts)],
        caption=f"ARPA {r.arpa}\nbinary {r.binary}\n{r.command}"
        + (f"\ntokenizer {info.name} (V = {info.vocab_size}, fingerprint {info.fingerprint}) "
           f"recorded in {r.vocab_record}" if info is not None else "")
        + ("\n(--discount_fallback was needed)" if r.discount_fallback else "")
        + f"\n{r.seconds:.1f} s",
    )
    return 0


def cmd_ngram_interpolate(args: argparse.Namespace) -> int:
    from blockdraft.core.outputs import claim_output
    from blockdraft.core.signature import human_count
    from blockdraft.training.ngram import INTERPOLATE_SUFFIXES, interpolate_arpa

    output = claim_output(args.output, what="a mixed n-gram LM", error=CliError,
                          overwrite=args.overwrite, folder=False, prefix=True,
                          sidecars=INTERPOLATE_SUFFIXES)
    with output.writing() as writing:  # built beside it, its files renamed in together
        r = interpolate_arpa(args.a, args.b, args.weight, writing.path, progress=not args.json)
    r = dataclasses.replace(r, arpa=writing.final(r.arpa), binary=(
        None if r.binary is None else writing.final(r.binary)), vocab_record=(
        None if r.vocab_record is None else writing.final(r.vocab_record)),
        record=writing.final(r.record))
    if args.json:
        print_json({"arpa": r.arpa, "binary": r.binary, "record": r.record, "a": r.a,
                    "b": r.b, "weight": r.weight, "order": r.order, "counts": r.counts,
                    "added": r.added, "seconds": r.seconds,
                    "tokenizer": None if r.tokenizer is None else r.tokenizer.to_dict()})
        return 0
    print_table(
        f"mixed n-gram LM ({human_count(r.num_ngrams)} n-grams, {r.weight:g} x {r.a.name} + "
        f"{1 - r.weight:g} x {r.b.name})",
        ["order", "n-grams"], [(i + 1, c) for i, c in enumerate(r.counts)],
        caption=f"ARPA {r.arpa}\nbinary {r.binary}\nrecord {r.record}"
        + (f"\ntokenizer {r.tokenizer.name} (fingerprint {r.tokenizer.fingerprint}) recorded "
           f"in {r.vocab_record}" if r.tokenizer is not None else "")
        + (f"\n{sum(r.added)} n-grams added to close the listed set" if any(r.added) else "")
        + f"\n{r.seconds:.1f} s",
    )
    return 0


def _check_train_arguments(args: argparse.Namespace) -> None:
    """What ``ngram train`` needs besides its types and rules, before any work.

    Raises:
        UsageError: no training sequences; ``--prune`` thresholds that do not fit ``--order``.
    """
    from blockdraft.cli.values import UsageError

    if not (args.text or args.ids or args.distilled):
        raise UsageError("give the training sequences: --text FILE..., --ids FILE... and/or "
                         "--distilled FOLDER")
    prune = args.prune or []
    if prune and (len(prune) > args.order or prune[0] != 0
                  or any(b < a for a, b in zip(prune, prune[1:], strict=False))):
        raise UsageError(f"--prune {' '.join(map(str, prune))}: expected at most --order "
                         f"{args.order} thresholds, non-decreasing, the first 0 (unigrams are "
                         "never pruned), e.g. 0 0 1 1")


def add_parsers(sub: Any) -> None:
    """``ngram train``, ``ngram interpolate``."""
    from blockdraft.cli.values import (
        ListAction,
        Rule,
        add_rules,
        integer,
        non_negative_int,
        probability,
    )

    ng = add_group(sub, "ngram", "n-gram LM tools")
    p = add_command(ng, "train", "train a modified Kneser-Ney n-gram LM over token ids "
                    "(ARPA + KenLM binary)", cmd_ngram_train)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--text", action=ListAction, help="text files, one document per line")
    src.add_argument("--ids", action=ListAction, help="files of whitespace-separated token ids")
    p.add_argument("--distilled", type=Path, default=None,
                   help="a distillation set (blockdraft heads distill): add the base model's "
                        "own answers of its training split (never the held-out one) as "
                        "sequences, alone or beside --text/--ids")
    p.add_argument("--tokenizer",
                   help="the token ids' tokenizer: a model name (smollm2), a Hugging Face "
                        "model folder or .gguf file, a blockdraft model folder, a tokenizer.json "
                        "or a GPT-2 vocab/merges dir; recorded beside the LM (PREFIX.vocab.json) "
                        "so a model with another tokenizer refuses it")
    p.add_argument("--order", type=integer(2, 5), default=4,
                   help="n-gram order, 2 to 5 (default 4)")
    p.add_argument("-o", "--output", required=True, type=Path,
                   help="output prefix: writes PREFIX.arpa and PREFIX.bin")
    p.add_argument("--prune", type=non_negative_int, action=ListAction, unique=False,
                   default=None,
                   help="drop n-grams seen at most this often, one threshold per order as "
                        "lmplz --prune, e.g. 0 0 1 1")
    p.add_argument("--estimator", choices=["builtin", "lmplz"], default="builtin",
                   help="builtin (default: lmplz's estimate in memory, nothing to install) or "
                        "lmplz (KenLM's tool, sorts on disk: corpora too large for memory; "
                        "`make setup` builds it)")
    p.add_argument("--memory", default="1G",
                   help="lmplz and build_binary memory cap -S (default 1G; the built-in "
                        "estimator does not use it)")
    p.add_argument("--no-binary", action="store_true", help="skip the KenLM binary")
    add_rules(p, Rule("--text", "needs --tokenizer (a model name such as smollm2, a model or "
                      "tokenizer folder, a tokenizer.json or a .gguf file) to read the text "
                      "as token ids", lambda a: a.tokenizer is not None, ("--text", "t.txt")))
    add_overwrite(p, "an LM at the -o prefix (PREFIX.arpa, .bin, .vocab.json, "
                     ".fingerprint.json)")
    p.add_argument("--json", action="store_true", help=JSON_HELP)

    p = add_command(ng, "interpolate",
                    "mix two n-gram LMs into one ARPA back-off LM: P = weight * P_A + "
                    "(1 - weight) * P_B on every n-gram either lists, back-off weights "
                    "renormalised (SRILM's ngram -mix-lm)", cmd_ngram_interpolate)
    p.add_argument("a", type=Path, help="the first ARPA file (share WEIGHT)")
    p.add_argument("b", type=Path, help="the second ARPA file (share 1 - WEIGHT); its order "
                                        "may differ")
    p.add_argument("--weight", type=probability, required=True,
                   help="the share of A, from 0 to 1 (1 reproduces A, 0 reproduces B)")
    p.add_argument("-o", "--output", required=True, type=Path,
                   help="output prefix: writes PREFIX.arpa, PREFIX.bin, PREFIX.mixture.json "
                        "(what was mixed) and, when the inputs carry one, PREFIX.vocab.json")
    add_overwrite(p, "an LM at the -o prefix (PREFIX.arpa, .bin, .vocab.json, "
                     ".fingerprint.json, .mixture.json)")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
