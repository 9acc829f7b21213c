"""The CLI probe of the one rule for values and options (issue 42; ``blockdraft.cli.values``),
walking the command line's parser so that every command, the next one included, is held to it:

- every number option has a ranged type, and a value just outside the range is refused with
  exit 2, naming the option, the value and the range;
- every comma-separated list refuses an empty item (``4,,8``) and, unless it is a sequence
  (token ids), an item given twice (``4,4``); every option of several values refuses one
  given twice;
- every option that applies only in some modes is refused (exit 2, naming it) where the
  command line chose another mode, before any work: nothing is read, loaded or written.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from blockdraft.cli import main
from blockdraft.cli.parser import commands
from blockdraft.cli.values import Choice, ListAction, Number, Rule, Values, rules_of

COMMANDS = dict(commands())


def _valued(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    """The options and positionals that take a value (not flags, help, version)."""
    for action in parser._actions:
        if action.nargs == 0 or isinstance(action, argparse._SubParsersAction):
            continue
        if action.dest in ("help", "version"):
            continue
        yield action


def _name(action: argparse.Action) -> str:
    return "/".join(action.option_strings) or action.dest


def _inside(number: Number) -> str:
    """A value the type takes."""
    if number.minimum is not None:
        value = number.minimum
    elif number.above is not None:
        value = number.above + 1
    elif number.maximum is not None:
        value = number.maximum
    elif number.below is not None:
        value = number.below - 1
    else:
        value = 1
    return str(int(value)) if number.kind is int else str(float(value))


def _outside(number: Number) -> list[str]:
    """Values just outside the type's range (and a number that is not finite)."""
    out = []
    if number.minimum is not None:
        out.append(str(int(number.minimum) - 1) if number.kind is int
                   else str(number.minimum - 0.5))
    if number.above is not None:
        out.append(str(number.above))
    if number.maximum is not None:
        out.append(str(int(number.maximum) + 1) if number.kind is int
                   else str(number.maximum + 0.5))
    if number.below is not None:
        out.append(str(number.below))
    if number.kind is float:
        out.append("nan")
    return out


def _item(item: Any, i: int) -> str:
    """A valid ``i``-th distinct item of a list type."""
    if isinstance(item, Number):
        base = int(float(_inside(item)))
        return str(base + i) if item.kind is int else str(float(base + i))
    if isinstance(item, Choice):
        return item.choices[i % len(item.choices)]
    return f"item{i}"


def _fill(action: argparse.Action) -> list[str]:
    """Words a required argument takes (a path that need not exist where any is taken)."""
    if action.choices:
        return [str(next(iter(action.choices)))]
    kind = action.type
    if isinstance(kind, Number):
        return [_inside(kind)]
    if isinstance(kind, Values):
        return [_item(kind.item, 0)]
    return ["x"]


def _required(parser: argparse.ArgumentParser, skip: set[str]) -> list[str]:
    """The command's required arguments, filled; those in ``skip`` (given by the example)
    left out."""
    argv: list[str] = []
    for action in _valued(parser):
        if not action.required or skip & set(action.option_strings):
            continue
        argv += (_fill(action) if not action.option_strings
                 else [action.option_strings[-1], *_fill(action)])
    return argv


NUMBERS = [(name, _name(a), a) for name, p in COMMANDS.items() for a in _valued(p)
           if isinstance(a.type, Number)]
LISTS = [(name, _name(a), a) for name, p in COMMANDS.items() for a in _valued(p)
         if isinstance(a.type, Values)]
SEVERAL = [(name, _name(a), a) for name, p in COMMANDS.items() for a in _valued(p)
           if isinstance(a, ListAction) and a.unique]
RULES = [(name, f"{rule.option} ({' '.join(rule.example)})", rule)
         for name, p in COMMANDS.items() for rule in rules_of(p)]


def _refused(capsys: Any, argv: list[str]) -> str:
    """``argv`` is refused by the parser (exit 2); its stderr."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2, (argv, err)
    return err


def test_every_value_has_a_checked_type() -> None:
    """No number without its range, no list without the list rule, anywhere."""
    bare = []
    for name, parser in COMMANDS.items():
        for action in _valued(parser):
            kind = action.type
            several = action.nargs in ("+", "*") or isinstance(
                action, (argparse._AppendAction, argparse._ExtendAction))
            if kind in (int, float):
                bare.append(f"{name} {_name(action)}: type={kind.__name__}")
            elif (isinstance(action.default, (int, float)) and not isinstance(
                    action.default, bool) and not isinstance(kind, Number)):
                bare.append(f"{name} {_name(action)}: a number without a ranged type")
            elif several and not isinstance(action, ListAction):
                bare.append(f"{name} {_name(action)}: several values without ListAction")
            elif isinstance(action.default, str) and "," in action.default:
                bare.append(f"{name} {_name(action)}: a list parsed by the command")
    assert bare == []


def test_the_walk_reaches_every_command() -> None:
    """Every command is walked, and the rule has something to prove in each group."""
    names = set(COMMANDS)
    assert {"sweep", "decode", "trace", "train", "heads distill", "heads train",
            "heads package", "heads label", "demo", "doctor", "ngram train",
            "bench rescore", "oracle", "repetition"} <= names
    probed = {n for n, _, _ in NUMBERS} | {n for n, _, _ in LISTS} | {n for n, _, _ in RULES}
    # commands whose values are all paths and switches: nothing numeric or listed to refuse
    assert names - probed <= {"doctor", "lattice draw", "heads archive"}, names - probed
    assert len(NUMBERS) > 60 and len(LISTS) >= 10 and len(RULES) > 40


@pytest.mark.parametrize("command,option,action", NUMBERS, ids=[f"{c} {o}" for c, o, _ in NUMBERS])
def test_a_number_out_of_range_is_refused(command: str, option: str,
                                          action: argparse.Action, capsys: Any) -> None:
    number = action.type
    assert isinstance(number, Number)
    flag = action.option_strings[-1] if action.option_strings else None
    for bad in _outside(number):
        argv = [*command.split(), *([flag] if flag else []), bad]
        err = _refused(capsys, argv)
        expected = ("expected a finite number" if bad == "nan"
                    else f"expected {number.description}")
        assert f"{expected}, got '{bad}'" in err and "argument" in err, err


@pytest.mark.parametrize("command,option,action", LISTS, ids=[f"{c} {o}" for c, o, _ in LISTS])
def test_a_list_refuses_an_empty_or_repeated_item(command: str, option: str,
                                                  action: argparse.Action, capsys: Any) -> None:
    kind = action.type
    assert isinstance(kind, Values)
    flag = action.option_strings[-1]
    a, b = _item(kind.item, 0), _item(kind.item, 1)
    err = _refused(capsys, [*command.split(), flag, f"{a},,{b}"])
    assert f"item 2 of '{a},,{b}' is empty" in err, err
    if kind.unique:
        err = _refused(capsys, [*command.split(), flag, f"{a},{a}"])
        assert f"'{a}' appears twice in '{a},{a}'" in err, err


@pytest.mark.parametrize("command,option,action", SEVERAL,
                         ids=[f"{c} {o}" for c, o, _ in SEVERAL])
def test_several_values_refuse_one_given_twice(command: str, option: str,
                                               action: argparse.Action, capsys: Any) -> None:
    words = _fill(action) if action.type is not None and not isinstance(
        action.type, type) else ["same"]
    value = words[0]
    if action.option_strings:
        repeat = ([action.option_strings[-1], value, action.option_strings[-1], value]
                  if action.nargs is None else [action.option_strings[-1], value, value])
    else:
        repeat = [value, value]
    err = _refused(capsys, [*command.split(), *repeat])
    assert f"'{value}' is given twice" in err, err


@pytest.mark.parametrize("command,label,rule", RULES, ids=[f"{c} {o}" for c, o, _ in RULES])
def test_an_option_where_it_does_not_apply_is_refused(
        command: str, label: str, rule: Rule, capsys: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Exit 2 naming the option, before any work: in an empty folder, with required paths
    that do not exist, nothing is read (no "does not exist") and nothing is made."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BLOCKDRAFT_CACHE", str(tmp_path / "cache"))
    parser = COMMANDS[command]
    given = {w for w in rule.example if w.startswith("-")}
    argv = [*command.split(), *_required(parser, given), *rule.example]
    capsys.readouterr()
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, (argv, err)
    assert err.startswith(f"blockdraft: error: {rule.option}") and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == [], "the command made something before refusing"
