"""``blockdraft bench rescore``: p-best latency of the exact and WFST rescoring backends,
side by side."""

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
    print_json,
    print_table,
    progress_bar,
    read_id_lines,
)
from blockdraft.cli.values import (
    Rule,
    UsageError,
    add_rules,
    int_list,
    non_negative_int,
    number,
    positive_int,
    words,
)


def cmd_bench_rescore(args: argparse.Namespace) -> int:
    from blockdraft.core.digest import sha256_file
    from blockdraft.core.signature import environment, format_signature
    from blockdraft.rescorers.latency import bench_rescore, hits_source, random_source
    from blockdraft.rescorers.ngram import NgramLM, NgramRescorer
    from blockdraft.rescorers.ngram.records import check_arpa_pair

    if args.kind == "hits" and not args.heldout:
        raise UsageError("--kind hits needs --heldout FILE (held-out token ids)")
    lm = NgramLM(args.lm)
    if args.arpa is not None:
        if lm.is_arpa:
            if sha256_file(args.arpa) != sha256_file(args.lm):
                raise CliError(f"--arpa {args.arpa} is not the LM --lm {args.lm}; pass the "
                               "ARPA file of the --lm binary (or leave --arpa out)")
        else:
            check_arpa_pair(args.lm, args.arpa, order=lm.order, unigrams=lm.vocab_size)
    backends: dict[str, Any] = {}
    for b in args.backends:
        if b == "exact":
            backends[b] = NgramRescorer(lm, alpha=args.alpha)
        else:
            backends[b] = NgramRescorer(NgramLM(args.arpa or args.lm), alpha=args.alpha,
                                        backend="wfst")
    if args.kind == "hits":
        held = np.concatenate(read_id_lines(Path(args.heldout)))
        unigram = np.bincount(held, minlength=int(held.max()) + 1).astype(np.float64)
        source = hits_source(held, unigram / unigram.sum())
    else:
        source = random_source(lm.max_token_id + 1)
    rows = bench_rescore(backends, source, kind=args.kind, hs=args.h, ks=args.k, ps=args.p,
                         n=args.n, seed=args.seed,
                         reference="exact" if "exact" in backends else None,
                         progress=progress_bar("timing"))
    sig = format_signature({"lm": Path(args.lm).name,
                            **({"arpa": Path(args.arpa).name} if args.arpa else {}),
                            "order": lm.order, "engine": lm.engine, "kind": args.kind,
                            "alpha": args.alpha, "n": args.n, "seed": args.seed,
                            **environment()})
    if args.json:
        print_json({"signature": sig, "rows": [r.to_dict() for r in rows]})
        return 0
    names = list(backends)
    grid = sorted({(r.h, r.k, r.p) for r in rows})
    by = {(r.h, r.k, r.p, r.backend): r for r in rows}
    cols = ["h x k", "p"] + [f"{b} ms (median)" for b in names]
    if "exact" in names and len(names) > 1:
        cols += ["speedup", "agreement"]
    table_rows = []
    for h, k, p in grid:
        cells: list[object] = [f"{h}x{k}", p] + [by[(h, k, p, b)].median_ms for b in names]
        if "exact" in names and len(names) > 1:
            other = [b for b in names if b != "exact"][0]
            cells += [f"{by[(h, k, p, other)].median_ms / by[(h, k, p, 'exact')].median_ms:.1f}x",
                      f"{by[(h, k, p, other)].agreement:.0%}"]
        table_rows.append(cells)
    print_table("p-best rescoring latency", cols, table_rows, caption=sig)
    return 0


def add_parsers(sub: Any) -> None:
    """``bench rescore``."""
    bench = add_group(sub, "bench", "benchmarks")
    p = add_command(bench, "rescore", "p-best latency of the rescoring backends, side by side",
                    cmd_bench_rescore)
    p.add_argument("--lm", required=True, type=Path, help="ARPA file or KenLM binary")
    p.add_argument("--arpa", type=Path, default=None,
                   help="the ARPA file for the wfst backend when --lm is a binary")
    p.add_argument("--h", type=int_list, default=[4, 8, 16], help="slots (default 4,8,16)")
    p.add_argument("--k", type=int_list, default=[2, 4, 8, 16], help="arcs (default 2,4,8,16)")
    p.add_argument("--p", type=int_list, default=[1, 2, 4, 8, 16],
                   help="drafts (default 1,2,4,8,16)")
    p.add_argument("--kind", choices=["hits", "random"], default="random",
                   help="hits: true held-out tokens among frequency-drawn distractors "
                        "(needs --heldout); random: uniformly random tokens")
    p.add_argument("--heldout", type=Path, default=None,
                   help="held-out token ids (whitespace-separated) for --kind hits")
    p.add_argument("--backends", type=words(("exact", "wfst")), default=["exact", "wfst"],
                   help="comma-separated (default exact,wfst)")
    p.add_argument("--alpha", type=number(0.0), default=1.0, help="LM weight, >= 0")
    p.add_argument("--n", type=positive_int, default=100, help="lattices per (h, k) (default 100)")
    p.add_argument("--seed", type=non_negative_int, default=0)
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    add_rules(p, Rule("--heldout", "applies only with --kind hits (the held-out tokens the hits "
                                   "are drawn from); add --kind hits, or drop --heldout",
                      lambda a: a.kind == "hits", ("--heldout", "ids.txt")))
