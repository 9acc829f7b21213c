"""The trace analyses: ``oracle`` (B_oracle(k) and B_oracle(k)/B), ``repetition``
(consecutive repetition in drafts) and ``entropy`` (head entropies, h_max)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from blockdraft.cli.common import (
    JSON_HELP,
    add_command,
    add_overwrite,
    add_plot,
    check_plot,
    print_json,
    print_table,
    write_plot,
)
from blockdraft.cli.values import Rule, add_rules, int_list, number, out_of_range, positive_int


def _trace(path: Path) -> Any:
    from blockdraft.oracle import Trace

    return Trace.open(path)


def _sig_caption(trace: Any) -> str:
    return "signature: " + trace.signature_string()


def check_k(k: int, trace: Any) -> None:
    """``--k k`` against the trace's ``K`` (before any work).

    Raises:
        UsageError: ``k`` outside ``[1, K]``.
    """
    if not 1 <= k <= trace.K:
        raise out_of_range("--k", k, f"the trace keeps the top K = {trace.K} of each head",
                           1, trace.K)


def cmd_oracle(args: argparse.Namespace) -> int:
    from blockdraft.oracle import oracle_curve, plot_oracle_curve

    plot = check_plot(args)
    trace = _trace(args.trace)
    if args.k is None:
        ks = [1, 2, 4, 8, 16]  # those above the trace's K are dropped, K is added
    else:
        ks = args.k
        for k in ks:
            check_k(k, trace)
    curve = oracle_curve(trace, ks=ks)
    write_plot(plot, lambda path: plot_oracle_curve(curve, path))
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
    from blockdraft.drafts import DraftSpec
    from blockdraft.oracle import repetition, simulate

    trace = _trace(args.trace)
    rows = [("vanilla", repetition(simulate(trace, DraftSpec("heads"))))]
    if args.lm:
        from blockdraft.rescorers.ngram import NgramLM

        if args.k is not None:
            check_k(args.k, trace)
        lm = NgramLM(args.lm)
        lm.check_vocab(trace.V)
        alpha = 1.0 if args.alpha is None else args.alpha
        spec = DraftSpec("heads", k=args.k or min(16, trace.K), p=1, rescorer="ngram",
                         lm=str(args.lm), alpha=alpha)
        rows.append((f"{lm.order}-gram rescored (k={spec.k}, alpha={alpha})",
                     repetition(simulate(trace, spec, progress=True))))
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
    from blockdraft.drafts import DraftSpec
    from blockdraft.oracle import head_entropy, plot_entropy_densities, simulate

    plot = check_plot(args)
    trace = _trace(args.trace)
    visited = None if args.all_positions else simulate(trace, DraftSpec("heads"))
    stats = head_entropy(trace, visited)
    write_plot(plot, lambda path: plot_entropy_densities(stats, path))
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
    add_plot(p, "the curve")
    add_overwrite(p, "the --plot image", needs="--plot")
    p.add_argument("--json", action="store_true", help=JSON_HELP)

    p = add_command(sub, "repetition",
                    "consecutive repetition in drafts, vanilla vs n-gram rescored",
                    cmd_repetition)
    p.add_argument("trace", type=Path, help="trace directory")
    p.add_argument("--lm", type=Path, default=None,
                   help="an n-gram LM: also report the 1-best of the rescored lattice")
    p.add_argument("--k", type=positive_int, default=None,
                   help="with --lm: lattice width for rescoring, in [1, K] (default "
                        "min(16, K))")
    p.add_argument("--alpha", type=number(0.0), default=None,
                   help="with --lm: its weight, >= 0 (default 1)")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    add_rules(p, *(Rule(option, "applies only with --lm (the rescored drafts); add --lm, "
                                f"or drop {option}", lambda args: args.lm is not None,
                        (option, "2")) for option in ("--k", "--alpha")))

    p = add_command(sub, "entropy", "head entropies, their means and h_max", cmd_entropy)
    p.add_argument("trace", type=Path, help="trace directory")
    p.add_argument("--all-positions", action="store_true",
                   help="every position, not only those vanilla BPD visits")
    add_plot(p, "densities per head")
    add_overwrite(p, "the --plot image", needs="--plot")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
