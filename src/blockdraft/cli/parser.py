"""The ``blockdraft`` argument parser: one subcommand (or group of subcommands) per module,
each adding its own arguments; ``--help`` lists them in this order."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import blockdraft.cli.analyses as analyses
import blockdraft.cli.bench as bench
import blockdraft.cli.decode as decode
import blockdraft.cli.demo as demo
import blockdraft.cli.doctor as doctor
import blockdraft.cli.heads as heads
import blockdraft.cli.lattice as lattice
import blockdraft.cli.models as models
import blockdraft.cli.ngram as ngram
import blockdraft.cli.sweep as sweep
import blockdraft.cli.trace as trace


def build_parser() -> argparse.ArgumentParser:
    """The parser of every subcommand; ``args.func(args)`` runs the chosen one."""
    parser = argparse.ArgumentParser(
        prog="blockdraft",
        description="Refine the block drafts of blockwise parallel decoding.",
    )
    parser.add_argument("--version", action="version", version=doctor.version_line())
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    analyses.add_parsers(sub)  # oracle, repetition, entropy
    sweep.add_parsers(sub)  # sweep
    models.add_parsers(sub)  # train
    trace.add_parser(sub)  # trace
    decode.add_parser(sub)  # decode
    heads.add_parsers(sub)  # heads distill, heads train, heads curve
    demo.add_parser(sub)  # demo
    lattice.add_parsers(sub)  # rescore, lattice draw
    ngram.add_parsers(sub)  # ngram train
    bench.add_parsers(sub)  # bench rescore
    doctor.add_parser(sub)  # doctor
    return parser


def commands(parser: argparse.ArgumentParser | None = None, prefix: tuple[str, ...] = ()
             ) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every command's own parser, named as a user types it (``"heads distill"``), in the
    order ``--help`` lists them: the leaves of ``parser`` (default: :func:`build_parser`)."""
    parser = build_parser() if parser is None else parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, (*prefix, name))
            return
    yield " ".join(prefix), parser
