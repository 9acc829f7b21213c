"""``blockdraft sweep TRACE``: a grid of drafting strategies simulated from one trace
(:mod:`blockdraft.oracle.sweep`), on one core, local worker processes (``--workers N``) or Ray
(``--ray`` starts a local Ray, ``--ray ADDRESS`` joins a cluster).

Per configuration it reports ``B``, the acceptance of each head's position ``P(n >= i)``, the
consecutive repetition of the winning drafts, drafts and tree nodes per step and, on a cost
curve (``--cost``), the simulated time and speedup over greedy decoding. A table by default,
``--json`` for machines, ``--plot FILE`` for ``B`` against each swept axis. Each finished
configuration is cached by its key (``--cache``, default ``$BLOCKDRAFT_CACHE/sweep``): the
same command run again after an interrupt goes on where it stopped, and a later grid reuses
every configuration it shares."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from blockdraft.cli.common import (
    JSON_HELP,
    CliError,
    add_command,
    add_overwrite,
    check_plot,
    print_json,
    print_table,
)
from blockdraft.cli.values import (
    finite_float,
    int_list,
    non_negative_int,
    positive_int,
)


def _words(choices: tuple[str, ...]) -> Any:
    def parse(text: str) -> list[str]:
        items = [x.strip() for x in text.split(",") if x.strip()]
        bad = [x for x in items if x not in choices]
        if not items or bad:
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated list of {', '.join(choices)}, got {text!r}")
        return items
    return parse


def _floats(text: str) -> list[float]:
    try:
        return [finite_float(x) for x in text.split(",") if x.strip()] or _no_values(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected comma-separated finite numbers, got "
                                         f"{text!r}") from None


def _no_values(text: str) -> list[float]:
    raise argparse.ArgumentTypeError(f"expected at least one value, got {text!r}")


def _paths(text: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"expected comma-separated paths, got {text!r}")
    return items


def grid_from_args(args: argparse.Namespace, trace: Any) -> Any:
    """The :class:`~blockdraft.oracle.sweep.Grid` of parsed ``sweep`` arguments (checked
    against the trace: its ``K``, the LM files there)."""
    from blockdraft.oracle.sweep import Grid

    rescorers: list[tuple[str, str]] = []
    for path in [p for group in args.lm or [] for p in group]:
        rescorers.append(("", "") if path == "none" else ("ngram", path))
    rescorers += [("neural", p) for group in args.neural or [] for p in group]
    for kind, path in rescorers:
        if kind and not Path(path).exists():
            raise CliError(f"--{'lm' if kind == 'ngram' else 'neural'} {path} does not exist")
    ks = args.k if args.k is not None else [min(8, trace.K)]
    too_wide = [k for k in ks if k > trace.K]
    if too_wide:
        raise CliError(f"--k {too_wide[0]}: the trace keeps the top K = {trace.K} of each head, "
                       f"so k must be in [1, {trace.K}]")
    return Grid(strategies=args.strategy, ks=ks, ps=args.p, alphas=args.alpha,
                rescorers=rescorers or [("", "")], trees=args.tree, budgets=args.budget)


def _engine(args: argparse.Namespace) -> Any:
    from blockdraft.cli.common import available_cores
    from blockdraft.oracle.sweep import Engine

    if args.ray is not None:
        address = None if args.ray == "local" else args.ray
        if address is not None and args.workers is not None:
            raise CliError("--workers sizes a local Ray or local processes; a cluster you join "
                           "(--ray ADDRESS) has its own")
        return Engine("ray", workers=args.workers or available_cores(), address=address,
                      retries=args.retries)
    if args.workers is None or args.workers == 1:
        return Engine("serial", retries=args.retries)
    return Engine("processes", workers=args.workers, retries=args.retries)


@contextlib.contextmanager
def _progress(total: int) -> Iterator[Any]:
    """A progress bar over configurations x positions on stderr (silent without a terminal)."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    console = Console(stderr=True)
    with Progress(TextColumn("sweep"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                  TimeRemainingColumn(), console=console, transient=True,
                  disable=not console.is_terminal) as bar:
        task = bar.add_task("sweep", total=total)
        yield lambda n: bar.advance(task, n)


def cmd_sweep(args: argparse.Namespace) -> int:
    from blockdraft.models.cost import read_cost_curve
    from blockdraft.oracle import Trace
    from blockdraft.oracle.plots import plot_sweep
    from blockdraft.oracle.sweep import ResultCache, default_cache_dir, sweep

    check_plot(args)
    if args.no_cache and args.cache is not None:
        raise CliError("--cache names the folder of the results --no-cache would not keep; "
                       "pass one of them")
    cost = read_cost_curve(args.cost, args.cost_variant) if args.cost else None
    if args.cost_variant and not args.cost:
        raise CliError("--cost-variant picks a row of the --cost file; give --cost too")
    trace = Trace.open(args.trace)
    settings = grid_from_args(args, trace).expand()
    engine = _engine(args)
    examples = (None if args.max_examples is None
                else range(min(args.max_examples, trace.num_examples)))
    cache = None if args.no_cache else ResultCache(args.cache or default_cache_dir())
    positions = int(trace.lengths[: args.max_examples].sum()) if examples is not None else (
        trace.num_positions)
    try:
        with _progress(len(settings) * positions) as advance:
            result = sweep(args.trace, settings, engine=engine, cache=cache, examples=examples,
                           shards=args.shards, threads=args.threads, progress=advance)
    except KeyboardInterrupt:
        if cache is not None:
            print(f"blockdraft: the configurations that finished are cached in {cache.folder}; "
                  "the same command goes on from there", file=sys.stderr)
        raise
    if args.plot:
        plot_sweep(result, args.plot)
    if args.json:
        print_json({"command": getattr(args, "command_line", ""), **result.to_dict(cost)})
        return 0
    h = trace.h
    columns = ["configuration", "B", f"P(n>=i) i=1..{h - 1}", "% rep", "drafts",
               "nodes"] + (["speedup"] if cost else [])
    rows = []
    for r in result.rows:
        rows.append([r.label, r.block_efficiency, " ".join(f"{a:.2f}" for a in r.head_acceptance),
                     r.pct_consecutive, r.mean_drafts, r.mean_nodes]
                    + ([r.speedup(cost)] if cost else []))
    caption = ["% rep: consecutive repeated tokens in the winning drafts; drafts, nodes: per "
               "step", f"engine {result.engine}, {result.wall_s:.1f} s; {result.computed} "
               "computed, "
               f"{len(result.rows) - result.computed} from the cache"
               + (f" ({cache.folder})" if cache is not None else ""),
               "signature: " + trace.signature_string()]
    if cost is not None:
        caption.append(f"speedup over greedy on the cost curve {args.cost} ({cost.device}), "
                       "prefills aside")
    if args.plot:
        caption.append(f"plot: {args.plot}")
    print_table(f"sweep over {args.trace} ({len(result.rows)} configurations, "
                f"{trace.num_examples if examples is None else len(examples)} examples)",
                columns, rows, caption="\n".join(caption))
    return 0


def add_parsers(sub: Any) -> None:
    """``sweep``."""
    from blockdraft.oracle.sweep import STRATEGIES, TREES

    p = add_command(sub, "sweep", "a grid of drafting strategies simulated from one trace "
                    "(serial, --workers N processes, or --ray)", cmd_sweep)
    p.add_argument("trace", type=Path, help="trace directory (blockdraft trace)")
    grid = p.add_argument_group("the grid (every combination; an axis that does not apply to "
                                "a strategy is dropped for it)")
    grid.add_argument("--strategy", type=_words(STRATEGIES), default=["heads"],
                      help="heads (the heads' p best drafts, rescored with --lm/--neural), "
                           "combined (the same plus prompt lookup's draft), tree (--tree), "
                           "lookup (prompt lookup alone), oracle (top-k oracle); default heads")
    grid.add_argument("--k", type=int_list, default=None,
                      help="lattice widths, e.g. 4,8,16 (default min(8, K))")
    grid.add_argument("--p", type=int_list, default=[1], help="drafts per step, e.g. 1,4,16")
    grid.add_argument("--alpha", type=_floats, default=[1.0],
                      help="LM weights of the rescorers, e.g. 0.5,1,2 (default 1)")
    grid.add_argument("--lm", type=_paths, nargs="+", action="extend", default=None,
                      help="n-gram LMs (ARPA or KenLM binary), separated by spaces or commas; "
                           "'none' for no rescorer beside them (default: none)")
    grid.add_argument("--neural", type=_paths, nargs="+", action="extend", default=None,
                      help="RescorerLM folders (blockdraft train --rescorer)")
    grid.add_argument("--tree", type=_words(TREES), default=["confidence"],
                      help="trees of --strategy tree: confidence, medusa, rescored (needs "
                           "--lm or --neural); default confidence")
    grid.add_argument("--budget", type=int_list, default=[16],
                      help="tree sizes N, nodes with the root (default 16)")
    run = p.add_argument_group("where it runs")
    run.add_argument("--workers", type=positive_int, default=None,
                     help="local worker processes (default 1: this process), or the CPUs of "
                          "a local Ray")
    run.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                     help="run on Ray (the blockdraft[ray] extra): alone, a local Ray of "
                          "--workers CPUs (default: every core); with an ADDRESS (auto, "
                          "HOST:PORT, ray://HOST:PORT), that cluster (the trace and LMs at "
                          "the same paths on every node)")
    run.add_argument("--retries", type=non_negative_int, default=2,
                     help="runs of a task again after its worker died (default 2)")
    run.add_argument("--shards", type=positive_int, default=None,
                     help="pieces each configuration is split into (default: one per 1,000 "
                          "positions, at most 8); results do not depend on it")
    run.add_argument("--threads", type=positive_int, default=1,
                     help="torch threads of a neural rescorer per worker (default 1)")
    run.add_argument("--max-examples", type=positive_int, default=None,
                     help="simulate the trace's first N examples only")
    run.add_argument("--cache", type=Path, default=None,
                     help="folder of the results by configuration key (default "
                          "$BLOCKDRAFT_CACHE/sweep, else ~/.cache/blockdraft/sweep)")
    run.add_argument("--no-cache", action="store_true",
                     help="compute every configuration and keep nothing")
    out = p.add_argument_group("what it reports")
    out.add_argument("--cost", type=Path, default=None,
                     help="a cost curve of benchmarks/results/costs (curve-*.json, or "
                          "costs.json with --cost-variant): adds the simulated speedup")
    out.add_argument("--cost-variant", default=None,
                     help="the row of a costs.json, e.g. onnxruntime:float32")
    out.add_argument("--plot", type=Path, default=None,
                     help="B against each swept axis as an image: .png, .pdf or .svg")
    add_overwrite(p, "the --plot image")
    out.add_argument("--json", action="store_true", help=JSON_HELP)
