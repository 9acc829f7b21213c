"""What every command shares: the error class, rich tables, JSON, progress bars, argument
types and input readers, :func:`add_group` and :func:`add_command`."""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from blockdraft.cli.errors import CliError
from blockdraft.core.errors import BlockdraftError
from blockdraft.core.moved import moved_getattr

Command = Callable[[argparse.Namespace], int]


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


JSON_HELP = ("machine-readable output: strict JSON (a number that is not finite is written as "
             "null, with a <field>_reason string beside it)")


def print_json(obj: object) -> None:
    """``obj`` as strict JSON on stdout (RFC 8259: no ``NaN`` or ``Infinity``).

    A number that is not finite is written as ``null``, and the object holding it gets a
    ``<key>_reason`` string saying what it was (``"NaN"``, ``"Infinity"``, ``"-Infinity"``;
    for a list, the indices of its non-finite entries).
    """
    print(to_json(obj))


def to_json(obj: object) -> str:
    """The strict JSON text :func:`print_json` prints."""
    clean, reason = _finite(json.loads(json.dumps(obj, default=_json_default)))
    if reason is not None and isinstance(clean, dict):
        clean["value_reason"] = reason
    return json.dumps(clean, indent=2, allow_nan=False)


def _json_default(o: object) -> object:
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (np.integer, np.floating)):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, ToDict):
        return o.to_dict()
    raise TypeError(f"cannot serialise {type(o).__name__}")


@runtime_checkable
class ToDict(Protocol):
    """A record that serialises itself (every result record of blockdraft declares it)."""

    def to_dict(self) -> dict[str, Any]: ...


def _non_finite_name(x: float) -> str:
    return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")


def _finite(value: Any) -> tuple[Any, str | None]:
    """``value`` with non-finite floats as None, and a reason when it held any."""
    if isinstance(value, float) and not math.isfinite(value):
        return None, f"{_non_finite_name(value)}: not a finite number, written as null"
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        reasons: dict[str, str] = {}
        for key, item in value.items():
            out[key], why = _finite(item)
            if why is not None:
                reasons[f"{key}_reason"] = why
        for key, why in reasons.items():
            out.setdefault(key, why)
        return out, None
    if isinstance(value, list):
        items: list[Any] = []
        bad: list[str] = []
        for i, item in enumerate(value):
            if isinstance(item, float) and not math.isfinite(item):
                bad.append(f"[{i}] {_non_finite_name(item)}")
                items.append(None)
            else:
                clean, why = _finite(item)
                if why is not None:
                    bad.append(f"[{i}] {why}")
                items.append(clean)
        if bad:
            shown = "; ".join(bad[:10]) + ("; ..." if len(bad) > 10 else "")
            return items, f"non-finite numbers written as null: {shown}"
        return items, None
    return value, None


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


def read_text_file(path: Path, what: str = "file") -> str:
    """The UTF-8 text of ``path``, a byte-order mark at its start dropped (it would otherwise
    become a token of the first line).

    Raises:
        CliError: a missing file, or bytes that are not UTF-8 (naming the file, line and
            column, and what to do).
    """
    path = Path(path)
    if not path.is_file():
        raise CliError(f"{what} {path} does not exist" if not path.exists()
                       else f"{what} {path} is not a file")
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise CliError(
            f"{path}:{line}: byte {data[e.start:e.start + 1]!r} at column {col} is not UTF-8; "
            "re-encode the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)"
        ) from None


def read_id_lines(path: Path) -> list[np.ndarray]:
    """A file of whitespace-separated token ids, one sequence per line."""
    out = []
    text = read_text_file(path, "token-id file")
    for lineno, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        try:
            ids = np.array([int(x) for x in parts], dtype=np.int64)
        except (ValueError, OverflowError) as e:
            raise CliError(f"{path}:{lineno}: not a line of integer token ids ({e})") from e
        if int(ids.min()) < 0:
            raise CliError(f"{path}:{lineno}: token id {int(ids.min())} is negative; token ids "
                           "are >= 0")
        out.append(ids)
    return out


def read_texts(files: Sequence[str | Path], flag: str = "--corpus",
               what: str = "text file") -> list[str]:
    """The non-empty lines of text files, in order.

    Raises:
        CliError: a file that cannot be read, or no non-empty line in any of them (naming
            ``flag`` and the files, in the words of the command typed).
    """
    out: list[str] = []
    for f in files:
        out += [ln for ln in read_text_file(Path(f), what).splitlines() if ln.strip()]
    if not out:
        named = " ".join(str(f) for f in files)
        raise CliError(f"{flag} {named}: no non-empty line to read; give a file of one "
                       f"{'prompt' if 'prompt' in what else 'text'} a line")
    return out


DTYPES = ("float32", "bfloat16", "float16")
"""The torch dtypes a command's ``--dtype`` takes."""


def default_of(function: Callable[..., Any], name: str) -> Any:
    """The default of ``function``'s parameter ``name``: the library's defaults are the CLI's."""
    import inspect

    return inspect.signature(function).parameters[name].default


def command_line(args: argparse.Namespace) -> str:
    """The command line as typed (:func:`blockdraft.cli.main` records it), for the records a
    run writes."""
    import shlex
    import sys

    return str(getattr(args, "command_line", "") or "blockdraft " + shlex.join(sys.argv[1:]))


def add_command(parent: Any, name: str, help_: str, func: Command) -> argparse.ArgumentParser:
    """A subcommand ``name`` of the subparsers ``parent`` that runs ``func(args)``."""
    p: argparse.ArgumentParser = parent.add_parser(name, help=help_, description=help_)
    p.set_defaults(func=func)
    return p


def add_overwrite(p: argparse.ArgumentParser, what: str, needs: str | None = None) -> None:
    """``--overwrite`` of a command that writes ``what``: without it an existing output is
    refused (:func:`blockdraft.core.outputs.claim_output`, the rule every command follows).
    ``needs``: the option that names an optional output (``--plot``): ``--overwrite`` without
    it applies to nothing, and is refused (:mod:`blockdraft.cli.values`)."""
    p.add_argument("--overwrite", action="store_true",
                   help=f"replace {what} if it exists (without --overwrite an existing one is "
                        "refused; the old one stays until the new one is complete)")
    if needs is not None:
        from blockdraft.cli.values import Rule, add_rules

        dest = needs.lstrip("-").replace("-", "_")
        add_rules(p, Rule("--overwrite", f"applies only with {needs} (it replaces {what}); "
                                         f"give {needs}, or drop --overwrite",
                          lambda args: getattr(args, dest, None) is not None,
                          ("--overwrite",)))


def plot_path(text: str) -> Path:
    """``--plot FILE`` (argparse type): a suffix the plots know (``.png``, ``.pdf``,
    ``.svg``), refused otherwise before any work."""
    from blockdraft.oracle.plots import plot_format

    try:
        plot_format(text)
    except BlockdraftError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return Path(text)


def add_plot(p: Any, what: str) -> None:
    """``--plot FILE`` on ``p`` (a parser or an argument group): ``what`` as an image."""
    p.add_argument("--plot", type=plot_path, default=None,
                   help=f"{what} as an image: .png, .pdf or .svg (by suffix)")


def check_plot(args: argparse.Namespace) -> Any:
    """The :class:`~blockdraft.core.outputs.Output` of ``--plot FILE`` (None without it):
    like every output, no existing file replaced without ``--overwrite``, checked before any
    work and again when the image is put in place (:func:`write_plot`)."""
    from blockdraft.core.outputs import claim_output

    if not args.plot:
        return None
    return claim_output(args.plot, what="the plot", error=CliError, overwrite=args.overwrite,
                        folder=False, flag="--plot")


def write_plot(output: Any, draw: Callable[[Path], object]) -> None:
    """Draw the image of :func:`check_plot`'s ``output`` (``draw(path)``), built beside
    ``--plot`` and renamed into place (no-op without ``--plot``)."""
    if output is None:
        return
    with output.writing() as writing:
        draw(writing.path)


def add_group(sub: Any, name: str, help_: str) -> Any:
    """A command group ``name`` (``blockdraft NAME ACTION``) of the subparsers ``sub``; returns
    its own subparsers, for :func:`add_command`. The chosen action is ``args.NAME_command``."""
    return sub.add_parser(name, help=help_).add_subparsers(
        dest=f"{name}_command", required=True, metavar="ACTION")


STOPPED_EARLY = 3
"""The exit code of a command whose output a limit (``--max-tokens``, ``--minutes``) left
partial: sound, and continued by ``--resume`` (0 is for a complete output only)."""


def stopped_early(message: str) -> int:
    """Say on stderr, in one line, that the output is partial and how to go on; returns
    :data:`STOPPED_EARLY` (a command's exit code)."""
    import sys

    print(f"blockdraft: stopped early: {' '.join(message.split())}", file=sys.stderr)
    return STOPPED_EARLY


def available_cores() -> int:
    """The CPU cores this process may run on (its affinity where the system tells)."""
    import os

    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def clamp_threads(args: argparse.Namespace) -> None:
    """``--threads`` above the cores this process may use is lowered to them, with a warning
    (more threads than cores only make each step slower: a spinning pool starves the
    others); checked once, for every command, before it runs."""
    import warnings

    from blockdraft.core.errors import BlockdraftWarning

    threads = getattr(args, "threads", None)
    cores = available_cores()
    if isinstance(threads, int) and threads > cores:
        warnings.warn(f"--threads {threads} is more than the {cores} CPU core(s) this process "
                      f"may use; using {cores}", BlockdraftWarning, stacklevel=2)
        args.threads = cores


_DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu")


def device_name(text: str) -> str:
    """A torch device string (argparse type): ``cpu``, ``cuda``, ``cuda:N``, ``mps``, ``xpu``."""
    kind, _, index = text.partition(":")
    if kind not in _DEVICE_TYPES or (index and not index.isdigit()) or (kind == "cpu" and index):
        raise argparse.ArgumentTypeError(
            f"unknown device {text!r}; use cpu, cuda, cuda:N (a GPU index), mps or xpu")
    return text


def check_device(name: str) -> str:
    """``name`` if this machine has that device, else a :class:`CliError` saying what to do
    (instead of torch's AssertionError from deep inside a model)."""
    kind, _, index = name.partition(":")
    if kind == "cpu":
        return name
    import torch

    if kind == "cuda":
        if not torch.cuda.is_available():
            why = ("this torch was built without CUDA" if torch.version.cuda is None
                   else "no CUDA GPU is visible")
            raise CliError(f"--device {name}: CUDA is not available ({why}); use --device cpu")
        count = torch.cuda.device_count()
        if index and int(index) >= count:
            raise CliError(f"--device {name}: this machine has {count} CUDA device(s), "
                           f"cuda:0 to cuda:{count - 1}")
        return name
    backend = torch.backends.mps if kind == "mps" else getattr(torch, kind, None)
    if backend is None or not backend.is_available():
        raise CliError(f"--device {name}: that device is not available here; use --device cpu")
    return name


def utf8_argument(text: str, flag: str) -> str:
    """``text`` from the command line if it is valid UTF-8; bytes that were not (Python keeps
    them as surrogate escapes) get a :class:`CliError` naming the flag and the byte."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        bad = text[e.start].encode("utf-8", "surrogateescape")
        raise CliError(f"{flag}: byte {bad!r} at character {e.start} is not UTF-8; pass UTF-8 "
                       "text (check the terminal's locale, or put the text in a UTF-8 file)"
                       ) from None
    return text


__getattr__ = moved_getattr("blockdraft.cli.common", {
    name: (f"blockdraft.cli.values.{name}", "the one rule for values and options")
    for name in ("positive_int", "non_negative_int", "finite_float", "int_list", "id_list")})
