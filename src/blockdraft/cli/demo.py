"""``blockdraft demo``: runs :func:`blockdraft.demo.run_demo` and prints its two tables (the
models on held-out text, then block efficiency per drafting strategy)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from blockdraft.cli.common import JSON_HELP, add_command, print_json, print_table


def cmd_demo(args: argparse.Namespace) -> int:
    from blockdraft.demo import run_demo

    def log(msg: str) -> None:
        print(f"[demo] {msg}", file=sys.stderr, flush=True)

    res = run_demo(args.corpus, args.out, num_examples=args.examples, seed=args.seed,
                   stop_at_eos=args.stop_at_eos, threads=args.threads,
                   progress=sys.stderr.isatty(), log=log)
    if args.json:
        print_json(res.to_dict())
        return 0
    h = len(res.heldout_loss)
    model_rows: list[tuple[object, ...]] = [
        (f"head {i + 1}", res.heldout_loss[i], f"{100 * res.heldout_accuracy[i]:.1f}%")
        for i in range(h)
    ]
    model_rows += [("rescoring LM", res.rescorer_loss, None),
                   ("4-gram LM", res.ngram_loss, None),
                   ("unigram (for scale)", res.unigram_loss, None)]
    source = "trained in this run" if res.trained else "loaded from the cache"
    print_table(
        f"the models ({source}), on held-out text",
        ["", "loss (nats/token)", "top-1"], model_rows,
        caption=f"consecutive repeats in vanilla drafts: {res.vanilla_repetition:.1f}% "
        "(high values mean greedy loops, which inflate B)\n"
        f"sample, held-out prompt 1: {res.sample_prompt!r}\n"
        f"  greedy continuation: {res.sample_output!r}",
    )
    agree = all(r.agrees for r in res.rows)
    rows = [(r.strategy, r.block_efficiency, f"{100 * r.relative:+.1f}%",
             f"{r.offline_block_efficiency:.3f}{'' if r.agrees else ' *'}",
             r.wall_s, None if r.speedup is None else f"{r.speedup:.2f}x")
            for r in res.rows]
    settings = "".join(f"\n  {r.strategy}: {r.settings}" for r in res.rows)
    print_table(
        f"block efficiency B, exact criterion (each output checked equal to greedy "
        f"decoding), {res.num_examples} held-out prompts, {res.generated_tokens} tokens, "
        f"h = {h}",
        ["drafts", "B", "vs vanilla", "offline B", "wall s", "vs greedy"], rows,
        caption=("" if agree else "* online decode and offline simulation differ "
                 "(a numerical tie or a bug)\n")
        + f"offline B: simulated over the trace {res.trace_dir} (the oracle's only B); "
        f"greedy decoding took {res.greedy_s:.2f} s\n"
        f"lattice drawing: {res.lattice_png}\ncache: {res.cache_dir}\n"
        f"signature: {res.signature}|<row settings>{settings}\n"
        f"{res.seconds:.1f} s ({res.train_s:.1f} s training), {res.threads} torch thread(s)",
    )
    return 0


def add_parser(sub: Any) -> None:
    """``demo``."""
    p = add_command(sub, "demo",
                    "train a small blockwise model on a corpus (default: Python's own docs), "
                    "decode held-out prompts with every drafting strategy, print B", cmd_demo)
    p.add_argument("--corpus", type=Path, default=None,
                   help="a text file (default: pydoc_data.topics, shipped with Python)")
    p.add_argument("--out", type=Path, default=Path("demo-output"),
                   help="where the lattice drawing, trace and demo.json go "
                        "(default ./demo-output)")
    p.add_argument("--examples", type=int, default=8, help="held-out prompts (default 8)")
    p.add_argument("--seed", type=int, default=0,
                   help="the split and the training (part of the cache key; default 0)")
    p.add_argument("--stop-at-eos", action="store_true",
                   help="stop each decode at EOS (default: EOS is a paragraph separator and "
                        "every prompt gets 48 new tokens)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads (default: the cores not already busy)")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
