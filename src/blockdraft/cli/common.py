"""What every command shares: the error class, rich tables, JSON, progress bars, argument
types and input readers, :func:`add_group` and :func:`add_command`."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from blockdraft.core.errors import BlockdraftError

Command = Callable[[argparse.Namespace], int]


class CliError(BlockdraftError):
    """A command could not run with the arguments it was given."""


def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def print_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[object]],
                caption: str | None = None) -> None:
    """A rich table on stdout."""
    from rich.table import Table

    table = Table(title=title, caption=caption, caption_justify="left")
    for i, c in enumerate(columns):
        table.add_column(c, justify="left" if i == 0 else "right")
    for r in rows:
        table.add_row(*[_fmt(v) for v in r])
    _console().print(table)


def _fmt(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


def print_json(obj: object) -> None:
    print(json.dumps(obj, indent=2, default=_json_default))


def _json_default(o: object) -> object:
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (np.integer, np.floating)):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "to_dict"):
        return o.to_dict()
    raise TypeError(f"cannot serialise {type(o).__name__}")


def progress_bar(description: str) -> Callable[[Iterable[Any]], Iterable[Any]]:
    """Wrap an iterable in a rich progress bar on stderr (silent when stderr is no TTY)."""

    def wrap(items: Iterable[Any]) -> Iterable[Any]:
        from rich.console import Console
        from rich.progress import track

        items = list(items)
        console = Console(stderr=True)
        return track(items, description=description, console=console,
                     disable=not console.is_terminal, transient=True)

    return wrap


def _csv_ints(text: str, what: str, minimum: int, allow_empty: bool) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated {what}, got {text!r}") from None
    if (not vals and not allow_empty) or any(v < minimum for v in vals):
        raise argparse.ArgumentTypeError(f"expected {what} >= {minimum}, got {text!r}")
    return vals


def int_list(text: str) -> list[int]:
    """``"1,2,4"`` -> ``[1, 2, 4]`` (argparse type): positive integers, at least one."""
    return _csv_ints(text, "positive integers", 1, allow_empty=False)


def id_list(text: str) -> list[int]:
    """``"17,4,99"`` -> token ids (argparse type; may be empty)."""
    return _csv_ints(text, "token ids", 0, allow_empty=True)


def read_id_lines(path: Path) -> list[np.ndarray]:
    """A file of whitespace-separated token ids, one sequence per line."""
    out = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                continue
            try:
                out.append(np.array([int(x) for x in parts], dtype=np.int64))
            except ValueError as e:
                raise CliError(f"{path}:{lineno}: not a line of integer token ids ({e})") from e
    return out


def read_texts(files: Sequence[str]) -> list[str]:
    """The non-empty lines of text files, in order."""
    out: list[str] = []
    for f in files:
        path = Path(f)
        if not path.is_file():
            raise CliError(f"corpus file {path} does not exist")
        out += [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    if not out:
        raise CliError("the corpus has no non-empty lines")
    return out


def add_command(parent: Any, name: str, help_: str, func: Command) -> argparse.ArgumentParser:
    """A subcommand ``name`` of the subparsers ``parent`` that runs ``func(args)``."""
    p: argparse.ArgumentParser = parent.add_parser(name, help=help_, description=help_)
    p.set_defaults(func=func)
    return p


def add_group(sub: Any, name: str, help_: str) -> Any:
    """A command group ``name`` (``blockdraft NAME ACTION``) of the subparsers ``sub``; returns
    its own subparsers, for :func:`add_command`. The chosen action is ``args.NAME_command``."""
    return sub.add_parser(name, help=help_).add_subparsers(
        dest=f"{name}_command", required=True, metavar="ACTION")
