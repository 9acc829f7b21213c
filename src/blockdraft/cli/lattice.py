"""The lattice commands: ``rescore`` (the p best drafts of a lattice file under an n-gram LM)
and ``lattice draw`` (a drawing like Kim et al. Fig. 4)."""

from __future__ import annotations

import argparse
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
)
from blockdraft.cli.values import id_list, number, positive_int
from blockdraft.core.outputs import claim_output


def cmd_rescore(args: argparse.Namespace) -> int:
    from blockdraft.lattice.io import load_lattice
    from blockdraft.rescorers.ngram import NgramLM, NgramRescorer

    lf = load_lattice(args.lattice)
    context = np.asarray(args.context, dtype=np.int64) if args.context is not None else lf.context
    lm = NgramLM(args.lm)
    drafts = NgramRescorer(lm, alpha=args.alpha, backend=args.backend).rescore(
        lf.lattice, context, args.p
    )
    # the exact search's engine: "native" (C++) or "kenlm" (Python over the kenlm module)
    engine = lm.engine if args.backend == "exact" else None
    note = (f"the lattice has {lf.lattice.num_paths} paths, fewer than p = {args.p}: all returned"
            if drafts.exhausted else None)
    if args.json:
        print_json({"tokens": drafts.tokens, "scores": drafts.scores,
                    "head_scores": drafts.head_scores, "lm_scores": drafts.lm_scores,
                    "alpha": drafts.alpha, "backend": args.backend, "engine": engine,
                    "requested": args.p, "exhausted": drafts.exhausted, "context": context})
        return 0
    print_table(
        f"{drafts.p}-best drafts ({args.backend}{'' if engine is None else ', ' + engine} "
        f"search, alpha={args.alpha}, order-{lm.order} LM)",
        ["rank", "draft (token ids)", "score", "head", "LM"],
        [(i + 1, " ".join(map(str, drafts.tokens[i].tolist())), drafts.scores[i],
          drafts.head_scores[i], drafts.lm_scores[i]) for i in range(drafts.p)],
        caption=note,
    )
    return 0


def cmd_lattice_draw(args: argparse.Namespace) -> int:
    from blockdraft.lattice.draw import draw_lattice
    from blockdraft.lattice.io import load_lattice

    output = claim_output(args.output, what="the drawing", error=CliError,
                          overwrite=args.overwrite, folder=False)
    lf = load_lattice(args.lattice)
    reference = lf.reference if args.reference is None else np.asarray(args.reference)
    labels = None
    if args.tokenizer:
        from blockdraft.models.tokenizer import Tokenizer

        tok = Tokenizer.load(args.tokenizer)

        def labels(t: int) -> str:
            return tok.decode([t])

    with output.writing() as writing:  # built beside -o, renamed into place
        draw_lattice(lf.lattice, writing.path, reference=reference, labels=labels)
    print(f"wrote {args.output}")
    return 0


def add_parsers(sub: Any) -> None:
    """``rescore`` and ``lattice draw``."""
    p = add_command(sub, "rescore", "the p best drafts of a lattice file under an n-gram LM",
                    cmd_rescore)
    p.add_argument("lattice", type=Path, help="lattice file (blockdraft.lattice JSON)")
    p.add_argument("--lm", required=True, type=Path, help="ARPA file or KenLM binary")
    p.add_argument("--p", type=positive_int, default=16,
                   help="drafts wanted (default 16; a lattice of fewer paths returns them all, "
                        "and says so)")
    p.add_argument("--alpha", type=number(0.0), default=1.0,
                   help="LM weight, >= 0 (default 1.0)")
    p.add_argument("--backend", choices=["exact", "wfst"], default="exact")
    p.add_argument("--context", type=id_list, default=None,
                   help="comma-separated context token ids (default: the file's context)")
    p.add_argument("--json", action="store_true", help=JSON_HELP)

    lat = add_group(sub, "lattice", "lattice tools")
    p = add_command(lat, "draw", "draw a lattice like Kim et al. Fig. 4", cmd_lattice_draw)
    p.add_argument("lattice", type=Path)
    p.add_argument("-o", "--output", required=True, type=Path,
                   help="output file: .dot, .svg, .png or .pdf")
    p.add_argument("--reference", type=id_list, default=None,
                   help="comma-separated token ids of a path to highlight (default: the "
                        "file's reference)")
    p.add_argument("--tokenizer", type=Path, default=None, help="label arcs with token text")
    add_overwrite(p, "the drawing at -o")
