"""``blockdraft heads package``: heads with what they draft with, a shortlist and a drafting
recipe (:func:`blockdraft.training.heads.package.package_heads`), so ``decode(model, ids)``
uses them. Every file the package holds is read back before it is put in place, with the
readers ``load_model`` and ``decode`` use, the n-gram LM against the base's tokenizer: what
packages loads. ``--shortlist`` follows the one rule of ``heads train --shortlist``: at most
the base's vocabulary, refused (exit 2) otherwise."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from blockdraft.cli.common import (
    JSON_HELP,
    CliError,
    add_command,
    command_line,
    print_json,
    print_table,
)
from blockdraft.cli.values import Rule, add_rules, out_of_range, positive_int
from blockdraft.core.outputs import claim_output

PACKAGE_FILES = ("config.json", "medusa_lm_head.safetensors", "prefix_heads.safetensors",
                 "eagle.safetensors", "shortlist.safetensors", "acceptance.json", "ngram",
                 "README.md", "curve.json", "curve.png")
"""What ``heads package`` writes in its folder."""


def base_tokenizer(base: str, shortlist: int | None = None) -> Any:
    """The tokenizer of the base ``base`` (its vocabulary: the token ids the heads draft);
    with ``shortlist``, that size checked against it, before any work: the one rule of
    ``heads train --shortlist`` and ``heads package --shortlist``.

    Raises:
        UsageError: a shortlist larger than the base's vocabulary.
    """
    from blockdraft.models import load_tokenizer

    tok = load_tokenizer(base)
    vocab = int(tok.vocab_size)
    if shortlist is not None and shortlist > vocab:
        raise out_of_range("--shortlist", shortlist, f"the base {base} has a vocabulary of "
                           f"V = {vocab} tokens", 1, vocab)
    return tok


def check_shortlist_size(size: int, base: str) -> None:
    """``--shortlist size`` against the vocabulary of ``base`` (:func:`base_tokenizer`)."""
    base_tokenizer(base, size)


def cmd_heads_package(args: argparse.Namespace) -> int:
    import json

    from blockdraft.models.hf.drafting import CONFIG_KEY
    from blockdraft.models.hf.formats import read_heads_config
    from blockdraft.training import heads
    from blockdraft.training.heads.package import (
        TREE_LATTICE_LAYOUTS,
        folder_layout,
        package_heads,
    )
    from blockdraft.training.heads.shortlist import (
        frequency_shortlist,
        shortlist_record,
        token_counts,
    )

    out = Path(args.out)
    output = claim_output(out, what="heads", error=CliError, overwrite=args.overwrite,
                          own=PACKAGE_FILES)
    recipe = None
    if args.recipe is not None:
        try:
            recipe = json.loads(Path(args.recipe).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise CliError(f"cannot read the recipe {args.recipe}: {e}") from e
        if not isinstance(recipe, dict):
            raise CliError(f"{args.recipe} must hold a JSON object of recipe settings")
    if folder_layout(args.heads) in TREE_LATTICE_LAYOUTS:  # their own config names the base
        base = str(json.loads((Path(args.heads) / "config.json").read_text(encoding="utf-8"))
                   .get("base_model_name_or_path") or "smollm2")
    else:
        base = read_heads_config(args.heads).base_model or "smollm2"
    try:
        carried = json.loads((Path(args.heads) / "config.json").read_text(encoding="utf-8"))
        carries_lm = bool((carried.get(CONFIG_KEY) or {}).get("ngram"))
    except (OSError, ValueError, AttributeError):
        carries_lm = False
    # the base's tokenizer: the shortlist's vocabulary, and what a packaged LM is checked by
    tok: Any = (base_tokenizer(base, args.shortlist)
                if args.shortlist or args.ngram is not None or carries_lm else None)
    ids = info = None
    if args.shortlist:
        dset = heads.open_distill_set(args.data)
        counts = token_counts(dset.answers("train"), int(tok.vocab_size))
        if not counts.sum():
            raise CliError(f"{args.data} holds no training answers yet: distil some first")
        eos = [int(tok.eos_id)] if tok.eos_id is not None else []
        try:
            ids = frequency_shortlist(counts, args.shortlist, always=eos)
        except Exception as e:  # a TrainingError naming the size
            raise CliError(str(e)) from e
        info = shortlist_record(counts, ids, counted_on=Path(args.data).name,
                                command=command_line(args))
    with output.writing() as writing:  # every file read back before it is put in place
        package_heads(args.heads, writing.path, shortlist=ids, shortlist_info=info,
                      ngram=args.ngram, acceptance=args.acceptance, recipe=recipe,
                      tokenizer=tok, shown=out)
    summary = {"out": str(out), "shortlist": None if ids is None else int(ids.size),
               "coverage": None if info is None else info["coverage"],
               "ngram": None if args.ngram is None else str(args.ngram),
               "acceptance": None if args.acceptance is None else str(args.acceptance),
               "recipe": recipe}
    if args.json:
        print_json(summary)
        return 0
    print_table(f"packaged heads: {out}", ["part", "value"],
                [(k, "-" if v is None else str(v)) for k, v in summary.items() if k != "out"])
    return 0


def add_parser(group: Any) -> None:
    """``heads package`` in the ``heads`` group."""
    p = add_command(group, "package",
                    "the heads with a shortlist and a drafting recipe (what decode(model, ids) "
                    "drafts with)", cmd_heads_package)
    p.add_argument("heads", type=Path,
                   help="a heads folder of heads train (Medusa version 2, prefix heads or a "
                        "draft layer)")
    p.add_argument("--data", type=Path, default=None,
                   help="a distillation set whose training answers the shortlist counts")
    p.add_argument("--shortlist", type=positive_int, default=None,
                   help="draft over this many most frequent answer tokens (e.g. 8192)")
    p.add_argument("--ngram", type=Path, default=None,
                   help="an n-gram LM (KenLM binary) over the base's token ids to package")
    p.add_argument("--acceptance", type=Path, default=None,
                   help="acceptance tables (JSON, from benchmarks/tune_drafting.py)")
    p.add_argument("--recipe", type=Path, default=None,
                   help="the tuned settings (recipe.json of benchmarks/tune_drafting.py)")
    p.add_argument("-o", "--out", required=True, type=Path, help="the heads folder to write")
    p.add_argument("--overwrite", action="store_true",
                   help="replace what -o holds (only once the new folder is complete)")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    add_rules(p, Rule("--shortlist", "counts the tokens of a distillation set's training "
                      "answers: give the set with --data", lambda a: a.data is not None,
                      ("--shortlist", "512")),
              Rule("--data", "is read to count the --shortlist, and no --shortlist is asked "
                   "for; add --shortlist N, or drop --data", lambda a: a.shortlist is not None,
                   ("--data", "set")))
