"""Mutations of valid files for the reader fuzzing harness (imported by module name).

A mutation is drawn by :func:`mutations` and applied to a copy of a folder of valid files by
:func:`apply`: truncate a file, flip a bit, delete or duplicate a byte range, insert bytes, edit
or delete a JSON field, or swap two files (two arrays of a trace, say). :func:`check_outcome`
is the property: the reader either returns an object equal to the original or raises the
room's error class; anything else fails the test with the mutation that caused it.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

JSON_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-2**40, 2**40), st.sampled_from([0, -1, 1, 2**63]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
    st.lists(st.integers(-3, 300), max_size=4), st.dictionaries(st.text(max_size=3),
                                                                st.integers(), max_size=2),
)


def files_of(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


@st.composite
def mutations(draw: st.DrawFn, folder: Path, json_files: bool = True,
              swap: bool = False) -> tuple[Any, ...]:
    """One mutation of a file of ``folder`` (the folder itself is never changed)."""
    names = files_of(folder)
    name = draw(st.sampled_from(names))
    size = (folder / name).stat().st_size
    kinds = ["truncate", "flip", "delete", "insert", "duplicate"]
    if json_files and name.endswith(".json"):
        kinds += ["json_set", "json_set", "json_delete"]
    if swap and len(names) > 1:
        kinds.append("swap")
    kind = draw(st.sampled_from(kinds))
    at = draw(st.integers(0, max(size - 1, 0)))
    if kind == "truncate":
        return (kind, name, at)
    if kind == "flip":
        return (kind, name, at, draw(st.integers(0, 7)))
    if kind in ("delete", "duplicate"):
        return (kind, name, at, draw(st.integers(1, 64)))
    if kind == "insert":
        return (kind, name, at, draw(st.binary(min_size=1, max_size=16)))
    if kind == "swap":
        return (kind, name, draw(st.sampled_from([n for n in names if n != name])))
    path = draw(st.lists(st.integers(0, 50), min_size=1, max_size=4))
    return (kind, name, path, draw(JSON_VALUES) if kind == "json_set" else None)


def _json_edit(obj: Any, path: list[int], value: Any, delete: bool) -> Any:
    """Follow ``path`` (indices modulo the children) and set or delete what it reaches."""
    parent: Any = None
    key: Any = None
    node = obj
    for step in path:
        if isinstance(node, dict) and node:
            parent, key = node, sorted(node)[step % len(node)]
        elif isinstance(node, list) and node:
            parent, key = node, step % len(node)
        else:
            break
        node = parent[key]
    if parent is None:
        return value if not delete else {}
    if delete:
        del parent[key]
    else:
        parent[key] = value
    return obj


def apply(folder: Path, mutation: tuple[Any, ...]) -> None:
    """Apply ``mutation`` to the files of ``folder`` in place."""
    kind, name = mutation[0], mutation[1]
    file = folder / name
    data = file.read_bytes()
    if kind == "truncate":
        file.write_bytes(data[: mutation[2]])
    elif kind == "flip":
        at, bit = mutation[2], mutation[3]
        if data:
            b = bytearray(data)
            b[at % len(b)] ^= 1 << bit
            file.write_bytes(bytes(b))
    elif kind == "delete":
        at, n = mutation[2], mutation[3]
        file.write_bytes(data[:at] + data[at + n:])
    elif kind == "duplicate":
        at, n = mutation[2], mutation[3]
        file.write_bytes(data[:at] + data[at:at + n] + data[at:])
    elif kind == "insert":
        file.write_bytes(data[: mutation[2]] + mutation[3] + data[mutation[2]:])
    elif kind == "swap":
        other = folder / mutation[2]
        tmp = file.with_name(file.name + ".swap")
        file.rename(tmp)
        other.rename(file)
        tmp.rename(other)
    elif kind in ("json_set", "json_delete"):
        obj = json.loads(data)
        obj = _json_edit(obj, mutation[2], mutation[3], kind == "json_delete")
        file.write_text(json.dumps(obj, allow_nan=True))
    else:  # pragma: no cover
        raise AssertionError(kind)


@contextmanager
def mutated_copy(folder: Path, mutation: tuple[Any, ...]) -> Iterator[Path]:
    """A mutated copy of ``folder`` in a fresh temporary folder (removed afterwards)."""
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        copy = Path(tmp) / folder.name
        shutil.copytree(folder, copy)
        apply(copy, mutation)
        yield copy


def check_outcome(load: Callable[[Path], Any], equal: Callable[[Any, Any], bool],
                  original: Any, copy: Path, error: type[BaseException],
                  mutation: tuple[Any, ...], allow_different: bool = False) -> str:
    """The property: ``load(copy)`` equals ``original`` or raises ``error``.

    ``allow_different``: a format without digests (an interchange format, or a file written
    before blockdraft recorded digests) cannot tell a flipped digit of a value from the real
    one; a valid object that differs is then allowed (and reported by the returned outcome,
    ``"different"``). Formats sealed with digests never pass it.
    """
    try:
        got = load(copy)
    except error:
        return "error"
    except Exception as e:  # noqa: BLE001 - the property is about exactly this
        raise AssertionError(
            f"{mutation}: {type(e).__name__} escaped the reader instead of "
            f"{error.__name__}: {e}"
        ) from e
    if equal(original, got):
        return "equal"
    assert allow_different, f"{mutation}: loaded a silently different object"
    return "different"
