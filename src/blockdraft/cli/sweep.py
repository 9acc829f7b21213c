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
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from blockdraft.cli.common import (
    JSON_HELP,
    CliError,
    add_command,
    add_overwrite,
    add_plot,
    check_plot,
    print_json,
    print_table,
    write_plot,
)
from blockdraft.cli.values import (
    ListAction,
    Rule,
    Values,
    add_rules,
    int_list,
    integer,
    non_negative_int,
    number,
    out_of_range,
    paths,
    positive_int,
    words,
)

DEFAULT_P = [1]
DEFAULT_ALPHA = [1.0]
DEFAULT_TREE = ["confidence"]
DEFAULT_BUDGET = [16]
DEFAULT_RETRIES = 2
DEFAULT_THREADS = 1
LATTICE = ("heads", "combined")
"""The strategies that draft the p best paths of the heads' lattice (``--p``, rescorers)."""
K_READERS = ("heads", "combined", "tree", "oracle")
"""The strategies that read ``k`` arcs per slot (``--k``)."""


def _rescorers(args: argparse.Namespace) -> list[tuple[str, str]]:
    """``(kind, path)`` of ``--lm`` (``none``: no rescorer) and ``--neural``."""
    out = [("", "") if path == "none" else ("ngram", path) for path in args.lm or []]
    return out + [("neural", path) for path in args.neural or []]


def grid_from_args(args: argparse.Namespace, trace: Any) -> Any:
    """The :class:`~blockdraft.oracle.sweep.Grid` of parsed ``sweep`` arguments, checked
    against the trace before any work: each ``--k`` against its ``K``, each ``--p`` against
    the paths of the widest lattice (``k`` arcs over the trace's ``h - 1`` drafted slots: a
    larger ``p`` would draft them all, under its own label), the LM files there.

    Raises:
        UsageError: a ``k`` or ``p`` the trace cannot hold.
        CliError: an LM file that does not exist.
    """
    from blockdraft.oracle.sweep import Grid

    rescorers = _rescorers(args)
    for kind, path in rescorers:
        if kind and not Path(path).exists():
            raise CliError(f"--{'lm' if kind == 'ngram' else 'neural'} {path} does not exist")
    ks = args.k if args.k is not None else [min(8, trace.K)]
    for k in ks:
        if k > trace.K:
            raise out_of_range("--k", k, f"the trace keeps the top K = {trace.K} of each head",
                               1, trace.K)
    ps = args.p if args.p is not None else DEFAULT_P
    if any(s in LATTICE for s in args.strategy):
        slots, widest = trace.h - 1, max(ks)
        for p in ps:  # a p no lattice of the grid holds: nothing would draft it
            if p > widest ** slots:
                raise out_of_range(
                    "--p", p, f"a lattice of k = {widest} arcs over the trace's h - 1 = "
                    f"{slots} drafted slots has {widest ** slots} paths", 1, widest ** slots)
    return Grid(strategies=args.strategy, ks=ks, ps=ps,
                alphas=args.alpha if args.alpha is not None else DEFAULT_ALPHA,
                rescorers=rescorers or [("", "")],
                trees=args.tree if args.tree is not None else DEFAULT_TREE,
                budgets=args.budget if args.budget is not None else DEFAULT_BUDGET)


def fit_paths(settings: Sequence[Any], trace: Any) -> tuple[Any, ...]:
    """The grid's settings with each ``p`` above its lattice's paths (``k`` arcs over the
    trace's ``h - 1`` drafted slots) lowered to them, said in one warning line: such a
    configuration drafts every path, and its row says so (``p`` = the paths, not the ``p``
    asked); a setting that becomes another one of the grid is simulated once."""
    import dataclasses
    import warnings

    from blockdraft.core.errors import BlockdraftWarning

    slots = trace.h - 1
    out: dict[Any, None] = {}
    lowered: dict[tuple[int, int], int] = {}
    for s in settings:
        count = s.k ** slots
        if s.strategy in LATTICE and s.p > count:
            lowered[(s.k, s.p)] = count
            s = dataclasses.replace(s, p=count)
        out.setdefault(s, None)
    if lowered:
        said = "; ".join(f"--p {p} with --k {k}: {n} path{'' if n == 1 else 's'}"
                         for (k, p), n in sorted(lowered.items()))
        warnings.warn(f"a lattice of k arcs over the trace's h - 1 = {slots} drafted slots "
                      f"has k^{slots} paths, fewer than p here ({said}); those configurations "
                      "draft every path and are reported with p = the paths",
                      BlockdraftWarning, stacklevel=2)
    return tuple(out)


def _engine(args: argparse.Namespace) -> Any:
    from blockdraft.cli.common import available_cores
    from blockdraft.oracle.sweep import Engine

    retries = DEFAULT_RETRIES if args.retries is None else args.retries
    if args.ray is not None:
        address = None if args.ray == "local" else args.ray
        return Engine("ray", workers=args.workers or available_cores(), address=address,
                      retries=retries)
    if args.workers is None or args.workers == 1:
        return Engine("serial", retries=retries)
    return Engine("processes", workers=args.workers, retries=retries)


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

    plot = check_plot(args)
    cost = read_cost_curve(args.cost, args.cost_variant) if args.cost else None
    trace = Trace.open(args.trace)
    settings = fit_paths(grid_from_args(args, trace).expand(), trace)
    engine = _engine(args)
    examples = (None if args.max_examples is None
                else range(min(args.max_examples, trace.num_examples)))
    cache = None if args.no_cache else ResultCache(args.cache or default_cache_dir())
    positions = int(trace.lengths[: args.max_examples].sum()) if examples is not None else (
        trace.num_positions)
    try:
        with _progress(len(settings) * positions) as advance:
            result = sweep(args.trace, settings, engine=engine, cache=cache, examples=examples,
                           shards=args.shards, progress=advance,
                           threads=DEFAULT_THREADS if args.threads is None else args.threads)
    except KeyboardInterrupt:
        if cache is not None:
            print(f"blockdraft: the configurations that finished are cached in {cache.folder}; "
                  "the same command goes on from there", file=sys.stderr)
        raise
    write_plot(plot, lambda path: plot_sweep(result, path))
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


def _any(args: argparse.Namespace, strategies: tuple[str, ...]) -> bool:
    return any(s in strategies for s in args.strategy)


def _rescored(args: argparse.Namespace) -> bool:
    return any(kind for kind, _ in _rescorers(args))


RULES = (
    Rule("--k", "applies to the heads, combined, tree and oracle strategies, and --strategy "
         "names none of them; drop --k, or add one of them",
         lambda a: _any(a, K_READERS), ("--strategy", "lookup", "--k", "4")),
    Rule("--p", "applies to the heads and combined strategies (drafts per step), and "
         "--strategy names neither; drop --p, or add one of them",
         lambda a: _any(a, LATTICE), ("--strategy", "tree", "--p", "4")),
    Rule("--lm", "applies to the heads and combined strategies and to --tree rescored, and "
         "--strategy names none of them; drop --lm, or add one of them",
         lambda a: _any(a, LATTICE) or ("tree" in a.strategy and "rescored" in (a.tree or [])),
         ("--strategy", "oracle", "--lm", "x.bin")),
    Rule("--neural", "applies to the heads and combined strategies and to --tree rescored, "
         "and --strategy names none of them; drop --neural, or add one of them",
         lambda a: _any(a, LATTICE) or ("tree" in a.strategy and "rescored" in (a.tree or [])),
         ("--strategy", "oracle", "--neural", "x")),
    Rule("--alpha", "weighs a rescorer, and no --lm or --neural names one; add --lm or "
         "--neural, or drop --alpha", _rescored, ("--alpha", "0.5")),
    Rule("--tree", "applies to --strategy tree, which --strategy does not name; add tree to "
         "--strategy, or drop --tree", lambda a: "tree" in a.strategy,
         ("--tree", "medusa")),
    Rule("--tree", "names the rescored tree, which an LM orders, and no --lm or --neural "
         "names one; add one of them, or drop rescored",
         lambda a: "rescored" not in a.tree or _rescored(a),
         ("--strategy", "tree", "--tree", "rescored")),
    Rule("--budget", "applies to --strategy tree (its nodes), which --strategy does not name; "
         "add tree to --strategy, or drop --budget", lambda a: "tree" in a.strategy,
         ("--budget", "8")),
    Rule("--workers", "sizes local worker processes or a local Ray, and a cluster you join "
         "(--ray ADDRESS) has its own; drop --workers, or run --ray alone",
         lambda a: a.ray in (None, "local"), ("--ray", "auto", "--workers", "2")),
    Rule("--retries", "runs a task again after its worker died, and without --workers N "
         "(N > 1) or --ray the sweep runs here, in no worker; drop --retries, or add "
         "--workers or --ray", lambda a: a.ray is not None or (a.workers or 1) > 1,
         ("--retries", "3")),
    Rule("--threads", "sets the torch threads of a neural rescorer, and no --neural names "
         "one; drop --threads, or add --neural", lambda a: bool(a.neural),
         ("--threads", "2")),
    Rule("--cache", "names the folder of the results --no-cache would not keep; pass one of "
         "them", lambda a: not a.no_cache, ("--cache", "c", "--no-cache")),
    Rule("--cost-variant", "picks a row of the --cost file; give --cost too",
         lambda a: a.cost is not None, ("--cost-variant", "onnxruntime:float32")),
)
"""The options of ``sweep`` that apply only in some modes (:mod:`blockdraft.cli.values`): a
grid axis that applies to none of the grid's strategies is refused, never silently dropped
(one that applies to some of them is dropped for the others: see the group's help)."""


def add_parsers(sub: Any) -> None:
    """``sweep``."""
    from blockdraft.oracle.sweep import STRATEGIES, TREES

    p = add_command(sub, "sweep", "a grid of drafting strategies simulated from one trace "
                    "(serial, --workers N processes, or --ray)", cmd_sweep)
    p.add_argument("trace", type=Path, help="trace directory (blockdraft trace)")
    grid = p.add_argument_group("the grid (every combination; an axis that does not apply to "
                                "a strategy is dropped for it)")
    grid.add_argument("--strategy", type=words(STRATEGIES), default=["heads"],
                      help="heads (the heads' p best drafts, rescored with --lm/--neural), "
                           "combined (the same plus prompt lookup's draft), tree (--tree), "
                           "lookup (prompt lookup alone), oracle (top-k oracle); default heads")
    grid.add_argument("--k", type=int_list, default=None,
                      help="lattice widths, e.g. 4,8,16 (default min(8, K))")
    grid.add_argument("--p", type=int_list, default=None,
                      help="drafts per step, e.g. 1,4,16 (default 1; at most k^(h-1), the "
                           "paths of the lattice)")
    grid.add_argument("--alpha", type=Values(number(0.0)), default=None,
                      help="LM weights of the rescorers, >= 0, e.g. 0.5,1,2 (default 1)")
    grid.add_argument("--lm", type=paths, action=ListAction, default=None,
                      help="n-gram LMs (ARPA or KenLM binary), separated by spaces or commas; "
                           "'none' for no rescorer beside them (default: none)")
    grid.add_argument("--neural", type=paths, action=ListAction, default=None,
                      help="RescorerLM folders (blockdraft train --rescorer)")
    grid.add_argument("--tree", type=words(TREES), default=None,
                      help="trees of --strategy tree: confidence, medusa, rescored (needs "
                           "--lm or --neural); default confidence")
    grid.add_argument("--budget", type=Values(integer(2)), default=None,
                      help="tree sizes N, nodes with the root, >= 2 (default 16)")
    run = p.add_argument_group("where it runs")
    run.add_argument("--workers", type=positive_int, default=None,
                     help="local worker processes (default 1: this process), or the CPUs of "
                          "a local Ray")
    run.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                     help="run on Ray (the blockdraft[ray] extra): alone, a local Ray of "
                          "--workers CPUs (default: every core); with an ADDRESS (auto, "
                          "HOST:PORT, ray://HOST:PORT), that cluster (the trace and LMs at "
                          "the same paths on every node)")
    run.add_argument("--retries", type=non_negative_int, default=None,
                     help="runs of a task again after its worker died (default 2)")
    run.add_argument("--shards", type=positive_int, default=None,
                     help="pieces each configuration is split into (default: one per 1,000 "
                          "positions, at most 8); results do not depend on it")
    run.add_argument("--threads", type=positive_int, default=None,
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
    add_plot(out, "B against each swept axis")
    add_overwrite(p, "the --plot image", needs="--plot")
    out.add_argument("--json", action="store_true", help=JSON_HELP)
    add_rules(p, *RULES)
