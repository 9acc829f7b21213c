"""The one rule for the values and options of every command, in one place: each value is parsed
and checked once, where it enters (the argument parser), and a command line that cannot run is
refused with exit code 2 before any work.

- **A number outside its option's range is refused**, naming the value and the range
  (``argument --p: expected a positive integer (>= 1), got '0'``); so is a number that is not
  finite (``nan``, ``inf``). Every number option's type is a :class:`Number`.
- **A list names each value once.** ``--k 4,,8`` (an empty item) and ``--k 4,4`` (a value
  twice) are refused (:class:`Values`); so is a file given twice to an option that takes
  several (:class:`ListAction`). Sequences whose order and repeats mean something (token ids,
  one threshold per n-gram order) say so (``unique=False``) and refuse only empty items.
- **An option that does not apply to the mode the command line chose is refused**, never
  ignored (``heads distill --workers 3`` without ``--ray``): each command declares its
  :class:`Rule` s (:func:`add_rules`), and :func:`check_rules` applies them to the parsed
  arguments before the command runs.
- **A value that only an input can bound** (``--k`` against a trace's ``K``, ``--shortlist``
  against the base's vocabulary) is checked as soon as that input is open, before any work,
  and refused the same way: a :class:`UsageError` (exit 2), naming the option, the value and
  the range.

Exit codes (:func:`blockdraft.cli.main`): 2 for every invalid value and every conflict of
options; 1 for an error while running (a missing or damaged file, a model that does not fit).

Public surface:
    UsageError                               a command line that cannot run: exit 2
    Number(kind, minimum, maximum, above, below)   argparse type: a number in a range
    integer(minimum, maximum), number(minimum, maximum, above=, below=)
    positive_int, non_negative_int, finite_float, probability
    Values(item, unique=True, allow_empty=False)   argparse type: a comma-separated list
    Choice(choices), words(choices), int_list, id_list, paths, Weights(keys)
    ListAction                               an option of several values, each given once
    Rule(option, needs, applies, example)    an option that applies only in some modes
    add_rules(parser, *rules), check_rules(args)
    out_of_range(option, value, what, low, high) -> UsageError
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from blockdraft.cli.errors import CliError


class UsageError(CliError):
    """A command line that cannot run (a value out of range, options in conflict): exit 2,
    before any work."""


@dataclass(frozen=True)
class Number:
    """An argparse type: an integer or a finite number in a range.

    Attributes:
        kind: ``int`` or ``float``.
        minimum, maximum: the inclusive bounds (None: unbounded).
        above, below: exclusive bounds (``--lr``: a number > 0; a fraction < 1), or None.
    """

    kind: type = int
    minimum: float | None = None
    maximum: float | None = None
    above: float | None = None
    below: float | None = None

    @property
    def description(self) -> str:
        """What the option takes, as its error says it (``a positive integer (>= 1)``,
        ``an integer in [2, 5]``, ``a number > 0``, ``a number in [0, 1)``)."""
        if self.kind is int:
            lo, hi = self.minimum, self.maximum
            if lo is not None and hi is not None:
                return f"an integer in [{lo:g}, {hi:g}]"
            if lo == 1:
                return "a positive integer (>= 1)"
            if lo is not None:
                return f"an integer >= {lo:g}"
            return "an integer" if hi is None else f"an integer <= {hi:g}"
        low = (("[", self.minimum) if self.minimum is not None
               else ("(", self.above) if self.above is not None else None)
        high = (("]", self.maximum) if self.maximum is not None
                else (")", self.below) if self.below is not None else None)
        if low is not None and high is not None:
            return f"a number in {low[0]}{low[1]:g}, {high[1]:g}{high[0]}"
        if low is not None:
            return f"a number {'>=' if low[0] == '[' else '>'} {low[1]:g}"
        if high is not None:
            return f"a number {'<=' if high[0] == ']' else '<'} {high[1]:g}"
        return "a finite number"

    def inside(self, value: float) -> bool:
        """Whether ``value`` lies in the range."""
        return not ((self.minimum is not None and value < self.minimum)
                    or (self.maximum is not None and value > self.maximum)
                    or (self.above is not None and value <= self.above)
                    or (self.below is not None and value >= self.below))

    def __call__(self, text: str) -> Any:
        value: float
        try:
            value = int(text) if self.kind is int else float(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(
                f"expected {self.description}, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
        if not self.inside(value):
            raise argparse.ArgumentTypeError(f"expected {self.description}, got {text!r}")
        return value


def integer(minimum: int | None = None, maximum: int | None = None) -> Number:
    """An integer option's type: ``minimum <= value <= maximum``."""
    return Number(int, minimum, maximum)


def number(minimum: float | None = None, maximum: float | None = None, *,
           above: float | None = None, below: float | None = None) -> Number:
    """A finite number option's type: ``minimum <= value <= maximum`` (``above < value <
    below``)."""
    return Number(float, minimum, maximum, above, below)


positive_int = integer(1)
"""An integer >= 1."""
non_negative_int = integer(0)
"""An integer >= 0."""
finite_float = number()
"""Any finite number."""
probability = number(0.0, 1.0)
"""A number in [0, 1]."""


@dataclass(frozen=True)
class Choice:
    """An argparse type (or a list's item): one of ``choices``."""

    choices: tuple[str, ...]

    @property
    def description(self) -> str:
        return f"one of {', '.join(self.choices)}"

    def __call__(self, text: str) -> str:
        if text not in self.choices:
            raise argparse.ArgumentTypeError(f"expected {self.description}, got {text!r}")
        return text


@dataclass(frozen=True)
class Text:
    """A list's item that is any non-empty text (a path)."""

    description: str = "a path"

    def __call__(self, text: str) -> str:
        return text


@dataclass(frozen=True)
class Values:
    """An argparse type: comma-separated items (``"4,8,16"``), each parsed by ``item``.

    Attributes:
        item: the type of one item (a :class:`Number`, :class:`Choice` or :class:`Text`).
        unique: refuse an item given twice (a grid's axis); False for a sequence whose repeats
            mean something (token ids).
        allow_empty: ``""`` is the empty list (token ids of an empty context).
    """

    item: Number | Choice | Text
    unique: bool = True
    allow_empty: bool = False

    def __call__(self, text: str) -> list[Any]:
        if not text.strip():
            if self.allow_empty:
                return []
            raise argparse.ArgumentTypeError(
                f"expected {self.item.description}, comma-separated, got {text!r}")
        out: list[Any] = []
        parts = text.split(",")
        for i, part in enumerate(parts, 1):
            part = part.strip()
            if not part:
                raise argparse.ArgumentTypeError(
                    f"item {i} of {text!r} is empty; separate the values by single commas")
            try:
                value = self.item(part)
            except argparse.ArgumentTypeError as e:
                where = f" (item {i} of {text!r})" if len(parts) > 1 else ""
                raise argparse.ArgumentTypeError(f"{e}{where}") from None
            if self.unique and value in out:
                raise argparse.ArgumentTypeError(
                    f"{part!r} appears twice in {text!r}; name each value once")
            out.append(value)
        return out


@dataclass(frozen=True)
class Weights:
    """An argparse type: ``KIND=NUMBER,...`` -> ``{kind: number}``, each kind one of ``keys``
    and named once, each number in ``value``'s range, at least one of them > 0."""

    keys: tuple[str, ...]
    value: Number = field(default_factory=lambda: number(0.0))

    def __call__(self, text: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for pair in Values(Text("KIND=NUMBER"), unique=False)(text):
            key, sep, raw = pair.partition("=")
            key = key.strip()
            if not sep or key not in self.keys:
                raise argparse.ArgumentTypeError(
                    f"expected KIND=NUMBER with KIND one of {', '.join(self.keys)}, got "
                    f"{pair!r}")
            if key in out:
                raise argparse.ArgumentTypeError(
                    f"{key!r} appears twice in {text!r}; name each kind once")
            try:
                out[key] = self.value(raw.strip())
            except argparse.ArgumentTypeError as e:
                raise argparse.ArgumentTypeError(f"{key}: {e}") from None
        if not any(v > 0 for v in out.values()):
            raise argparse.ArgumentTypeError(f"expected at least one weight > 0, got {text!r}")
        return out


def words(choices: Sequence[str]) -> Values:
    """A comma-separated list of ``choices``, each at most once."""
    return Values(Choice(tuple(choices)))


int_list = Values(positive_int)
"""``"1,2,4"`` -> ``[1, 2, 4]``: positive integers, at least one, each once."""
id_list = Values(non_negative_int, unique=False, allow_empty=True)
"""``"17,4,99"`` -> token ids (a sequence: repeats allowed; may be empty)."""
paths = Values(Text())
"""``"a.bin,b.bin"`` -> paths, each once."""


class ListAction(argparse.Action):
    """An option (or positional) of several values, ``nargs="+"``, an ``append`` or an
    ``extend``: every value it is given, in order, flattened one level when its type returns
    lists (``--lm a.bin,b.bin c.bin``), each at most once unless ``unique=False``
    (``ngram train --prune 0 0 1``).

    Raises (through the parser: exit 2):
        argparse.ArgumentError: a value given twice.
    """

    def __init__(self, option_strings: Sequence[str], dest: str, *, unique: bool = True,
                 **kwargs: Any) -> None:
        kwargs.setdefault("nargs", "+")
        super().__init__(option_strings, dest, **kwargs)
        self.unique = unique

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        current = getattr(namespace, self.dest, None)
        items = list(current) if isinstance(current, list) else []
        new = values if isinstance(values, list) else [values]
        for value in new:
            for item in value if isinstance(value, list) else [value]:
                if self.unique and item in items:
                    raise argparse.ArgumentError(
                        self, f"{str(item)!r} is given twice; name each value once")
                items.append(item)
        setattr(namespace, self.dest, items)


def _given(value: Any) -> bool:
    return value is not None and value is not False and value != []


@dataclass(frozen=True)
class Rule:
    """An option that applies only where ``applies(args)`` holds (refused elsewhere).

    Attributes:
        option: the option as typed (``"--workers"``).
        needs: the rest of the message after the option and its value, a predicate
            (``"applies only with --ray (it counts the Ray actors); add --ray, or drop
            --workers"``), or a function of the parsed arguments that words it.
        applies: whether the option applies to the parsed arguments.
        example: words that give the option where it does not apply, besides the command's
            required arguments (for the CLI probe: ``("--workers", "3")``).
        dest: the attribute (default: from ``option``).
        given: whether the parsed value counts as given (default: not None, False or []).
    """

    option: str
    needs: str | Callable[[argparse.Namespace], str]
    applies: Callable[[argparse.Namespace], bool]
    example: tuple[str, ...]
    dest: str = ""
    given: Callable[[Any], bool] = field(default=_given)

    @property
    def attribute(self) -> str:
        return self.dest or self.option.lstrip("-").replace("-", "_")


def add_rules(parser: argparse.ArgumentParser, *rules: Rule) -> None:
    """Declare ``rules`` of the command ``parser`` (checked by :func:`check_rules`)."""
    parser.set_defaults(option_rules=(*(parser.get_default("option_rules") or ()), *rules))


def rules_of(parser: argparse.ArgumentParser) -> tuple[Rule, ...]:
    """The rules :func:`add_rules` declared on ``parser``."""
    return tuple(parser.get_default("option_rules") or ())


def _shown(value: Any) -> str:
    if value is True:
        return ""
    if isinstance(value, list):
        return " " + " ".join(",".join(map(str, v)) if isinstance(v, list) else str(v)
                              for v in value)
    return f" {value}"


def check_rules(args: argparse.Namespace) -> None:
    """Refuse an option given where it does not apply (the rules of the chosen command).

    Raises:
        UsageError: naming the option as typed, its value and what it needs.
    """
    for rule in getattr(args, "option_rules", ()):
        value = getattr(args, rule.attribute, None)
        if rule.given(value) and not rule.applies(args):
            needs = rule.needs if isinstance(rule.needs, str) else rule.needs(args)
            raise UsageError(f"{rule.option}{_shown(value)} {needs}")


def out_of_range(option: str, value: Any, what: str, low: Any, high: Any) -> UsageError:
    """The :class:`UsageError` of a value that an input bounds: ``--k 9: the trace keeps the
    top K = 8 of each head, so it must be in [1, 8]``."""
    return UsageError(f"{option} {value}: {what}, so it must be in [{low}, {high}]")
