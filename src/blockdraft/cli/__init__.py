"""The ``blockdraft`` command.

Subcommands (``blockdraft COMMAND --help`` for each):

    oracle TRACE            oracle block efficiency B_oracle(k) and the curve B_oracle(k)/B
    repetition TRACE        consecutive repetition in drafts, vanilla vs n-gram rescored
    entropy TRACE           head entropies, their means and h_max
    sweep TRACE             a grid of strategies simulated from a trace (processes or Ray)
    train                   train a BlockwiseLM (or RescorerLM) and its tokenizer
    heads distill           Medusa heads' data: the base's greedy answers and hidden states
    heads train             Medusa heads on a Hugging Face model, by self-distillation
    heads curve             trained heads' held-out accuracy against their training data
    trace                   greedy-decode prompts with a model and record a trace
    decode                  decode a prompt with BPD (any drafter, rescorer, criterion)
    rescore LATTICE         the p best drafts of a lattice file under an n-gram LM
    lattice draw LATTICE    a drawing like Kim et al. Fig. 4 (DOT, SVG, PNG)
    ngram train             a modified Kneser-Ney n-gram LM over token ids (ARPA + binary)
    bench rescore           p-best latency of the exact and WFST backends, side by side
    demo                    the whole pipeline on a small corpus (default: Python's own docs)
    doctor                  which optional parts are here (native search, lmplz, pynini, ...)

Human tables by default, ``--json`` for machines (strict JSON: a number that is not finite is
written as ``null`` with a ``<field>_reason`` string beside it), ``--plot FILE.png`` (or
``.pdf``/``.svg``) where a picture helps.
Exit codes: 0 success (the output complete), 1 error while running (one line on stderr: a
missing or damaged file, a model that does not fit), 2 a command line that cannot run (every
invalid value and every conflict of options, refused before any work: the one rule of
:mod:`blockdraft.cli.values`), 3 stopped early by a limit (``--max-tokens``, ``--minutes``,
``--max-prompts``: the output is sound but partial, and ``--resume`` goes on), 130 interrupted
(Ctrl-C or SIGTERM; outputs are left as they were). ``BLOCKDRAFT_DEBUG=1`` shows the traceback
of an unexpected error. blockdraft's warnings are one line each on stderr (``blockdraft:
warning:``), from every engine a command runs on (local workers and Ray tasks included).
Every command that writes a file or folder follows one rule
(:mod:`blockdraft.core.outputs`): an existing output (sidecars included) is refused unless
``--overwrite`` (or, where it can continue, ``--resume``); a folder holding files the command
does not write is refused, naming them; under ``--overwrite`` the old output stays until a
complete new one replaces it.

Modules: ``parser`` (the argument parser, assembled from each group's ``add_parsers``),
``common`` (output helpers, readers), ``values`` (the one rule for values and options: every
number's range, lists, the rules of options that apply only in some modes), one per command
group: ``analyses`` (oracle, repetition, entropy), ``sweep``, ``models`` (train), ``trace``,
``decode`` (with ``model_options``, the options of both), ``heads`` (the group, heads train,
curve; with ``heads_data``: prompts, questions, follow-ups, distill, label; ``heads_package``),
``demo``, ``lattice`` (rescore, lattice draw), ``ngram``, ``bench``, ``doctor``.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import sys
import threading
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

from blockdraft.cli.common import (
    CliError,
    clamp_threads,
    print_json,
    print_table,
    progress_bar,
    read_id_lines,
    read_texts,
)
from blockdraft.cli.parser import build_parser
from blockdraft.cli.values import UsageError, check_rules, id_list, int_list
from blockdraft.core.errors import BlockdraftError, BlockdraftWarning

__all__ = [
    "CliError",
    "UsageError",
    "build_parser",
    "id_list",
    "int_list",
    "main",
    "print_json",
    "print_table",
    "progress_bar",
    "read_id_lines",
    "read_texts",
]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 error, 2 usage, 3 stopped early, 130
    interrupted)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    # the command as typed, for the records a command writes (a README, a curve's Markdown)
    args.command_line = "blockdraft " + shlex.join(sys.argv[1:] if argv is None else argv)
    try:
        with _sigterm_as_interrupt(), _warnings_as_lines():
            check_rules(args)  # an option where it does not apply: refused before any work
            clamp_threads(args)
            return int(args.func(args))
    except UsageError as e:  # the command line cannot run: 2, like argparse's own refusals
        print(f"blockdraft: error: {_one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("blockdraft: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `blockdraft ... --json | head`
        sys.stderr.close()
        return 0
    except BlockdraftError as e:
        print(f"blockdraft: error: {_one_line(e)}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as e:
        print(f"blockdraft: error: {_one_line(e)}", file=sys.stderr)
        return 1
    except Exception as e:
        if os.environ.get("BLOCKDRAFT_DEBUG"):
            raise
        print(f"blockdraft: error: {_type_name(e)}: {_one_line(e)} (unexpected: please "
              "report it; BLOCKDRAFT_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 1


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def _type_name(e: BaseException) -> str:
    """``IndexError``, or with its module where the class is not a builtin (``struct.error``,
    not a bare ``error`` that reads as the line's own ``error:``)."""
    kind = type(e)
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"


@contextlib.contextmanager
def _warnings_as_lines() -> Iterator[None]:
    """blockdraft's own warnings (:class:`BlockdraftWarning`) as one line each on stderr,
    ``blockdraft: warning: ...``; other libraries' warnings as Python shows them."""
    with warnings.catch_warnings():
        show = warnings.showwarning

        def one_line(message: Warning | str, category: type[Warning], filename: str,
                     lineno: int, file: Any = None, line: str | None = None) -> None:
            if issubclass(category, BlockdraftWarning):
                print(f"blockdraft: warning: {' '.join(str(message).split())}", file=sys.stderr)
            else:
                show(message, category, filename, lineno, file, line)

        warnings.showwarning = one_line
        yield


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt while a command runs, so its ``finally`` blocks and
    atomic writers clean up as for Ctrl-C (in the main thread only: signals go there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt("terminated")

    old = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
