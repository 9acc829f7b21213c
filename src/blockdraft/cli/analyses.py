"""The trace analyses: ``oracle`` (B_oracle(k) and B_oracle(k)/B), ``repetition``
(consecutive repetition in drafts) and ``entropy`` (head entropies, h_max)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from blockdraft.cli.common import (
    JSON_HELP,
    CliError,
    add_command,
    add_overwrite,
    check_plot,
    print_json,
    print_table,
)
from blockdraft.cli.values import finite_float, int_list


def _trace(path: Path) -> Any:
    from blockdraft.oracle import Trace

    return Trace.open(path)


def _sig_caption(trace: Any) -> str:
    return "signature: " + trace.signature_string()


def cmd_oracle(args: argparse.Namespace) -> int:
    from blockdraft.oracle import oracle_curve, plot_oracle_curve

    check_plot(args)
    trace = _trace(args.trace)
    if args.k is None:
        ks = [1, 2, 4, 8, 16]  # those above the trace's K are dropped, K is added
    else:
        ks = args.k
        too_wide = [k for k in ks if not 1 <= k <= trace.K]
        if too_wide:
            raise CliError(f"--k {too_wide[0]}: the trace keeps the top K = {trace.K} of each "
                           f"head, so k must be in [1, {trace.K}]")
    curve = oracle_curve(trace, ks=ks)
    if args.plot:
        plot_oracle_curve(curve, args.plot)
    if args.json:
        print_json({"signature": dict(trace.signature), **curve.to_dict()})
        return 0
    print_table(
        f"oracle block efficiency ({trace.num_examples} examples, h={trace.h})",
        ["k", "B_oracle(k)", "B_oracle(k) / B"],
        [(int(k), float(b), float(r)) for k, b, r in
         zip(curve.ks, curve.b_oracle, curve.ratio, strict=True)],
        caption=f"vanilla B = {curve.b_vanilla:.3f}\n{_sig_caption(trace)}"
        + (f"\nplot: {args.plot}" if args.plot else ""),
    )
    return 0


def cmd_repetition(args: argparse.Namespace) -> int:
    from blockdraft.drafts.heads import HeadDrafter
    from blockdraft.oracle import repetition, simulate

    trace = _trace(args.trace)
    rows = [("vanilla", repetition(simulate(trace, HeadDrafter(k=1, p=1))))]
    if args.lm:
        from blockdraft.rescorers.ngram import NgramLM, NgramRescorer

        lm = NgramLM(args.lm)
        lm.check_vocab(trace.V)
        if args.k is None:
            args.k = min(16, trace.K)
        if not 1 <= args.k <= trace.K:
            raise CliError(f"--k {args.k}: the trace keeps the top K = {trace.K} of each "
                           f"head, so k must be in [1, {trace.K}]")
        drafter = HeadDrafter(k=args.k, p=1,
                              rescorer=NgramRescorer(lm, alpha=args.alpha))
        rows.append((f"{lm.order}-gram rescored (k={drafter.k}, alpha={args.alpha})",
                     repetition(simulate(trace, drafter, progress=True))))
    if args.json:
        print_json({"signature": dict(trace.signature),
                    "rows": [{"drafts": n, **r.to_dict()} for n, r in rows]})
        return 0
    print_table(
        "consecutive repetition in drafts (visited steps)",
        ["drafts", "% consecutive", "mean max run", "% drafts with repetition", "steps"],
        [(n, r.pct_consecutive, r.mean_max_run, r.pct_with_repetition, r.num_steps)
         for n, r in rows],
        caption=_sig_caption(trace),
    )
    return 0


def cmd_entropy(args: argparse.Namespace) -> int:
    from blockdraft.drafts.heads import HeadDrafter
    from blockdraft.oracle import head_entropy, plot_entropy_densities, simulate

    check_plot(args)
    trace = _trace(args.trace)
    visited = None if args.all_positions else simulate(trace, HeadDrafter(k=1, p=1))
    stats = head_entropy(trace, visited)
    if args.plot:
        plot_entropy_densities(stats, args.plot)
    if args.json:
        print_json({"signature": dict(trace.signature), "mean": stats.mean,
                    "h_max": stats.h_max, "positions": int(stats.entropy.shape[0])})
        return 0
    h = stats.mean.size
    q = (np.quantile(stats.entropy, [0.25, 0.5, 0.75], axis=0) if stats.entropy.size
         else np.full((3, h), np.nan))
    print_table(
        "head entropy (nats) over " + ("all positions" if args.all_positions
                                        else "the positions vanilla BPD visits"),
        ["head", "mean H", "25%", "median", "75%"],
        [(i + 1, float(stats.mean[i]), float(q[0, i]), float(q[1, i]), float(q[2, i]))
         for i in range(h)],
        caption=f"h_max = {stats.h_max}\n{_sig_caption(trace)}"
        + (f"\nplot: {args.plot}" if args.plot else ""),
    )
    return 0


def add_parsers(sub: Any) -> None:
    """``oracle``, ``repetition`` and ``entropy``."""
    p = add_command(sub, "oracle", "oracle block efficiency B_oracle(k) and B_oracle(k)/B",
                    cmd_oracle)
    p.add_argument("trace", type=Path, help="trace directory")
    p.add_argument("--k", type=int_list, default=None,
                   help="lattice widths in [1, K] (default 1,2,4,8,16 up to K; the trace's K "
                        "is added)")
    p.add_argument("--plot", type=Path, default=None,
                   help="write the curve as an image: .png, .pdf or .svg (by suffix)")
    add_overwrite(p, "the --plot image")
    p.add_argument("--json", action="store_true", help=JSON_HELP)

    p = add_command(sub, "repetition",
                    "consecutive repetition in drafts, vanilla vs n-gram rescored",
                    cmd_repetition)
    p.add_argument("trace", type=Path, help="trace directory")
    p.add_argument("--lm", type=Path, default=None,
                   help="an n-gram LM: also report the 1-best of the rescored lattice")
    p.add_argument("--k", type=int, default=None,
                   help="lattice width for rescoring, in [1, K] (default min(16, K))")
    p.add_argument("--alpha", type=finite_float, default=1.0)
    p.add_argument("--json", action="store_true", help=JSON_HELP)

    p = add_command(sub, "entropy", "head entropies, their means and h_max", cmd_entropy)
    p.add_argument("trace", type=Path, help="trace directory")
    p.add_argument("--all-positions", action="store_true",
                   help="every position, not only those vanilla BPD visits")
    p.add_argument("--plot", type=Path, default=None,
                   help="write densities per head as an image: .png, .pdf or .svg (by suffix)")
    add_overwrite(p, "the --plot image")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
