"""Tests of blockdraft.lattice.io: the lattice file format (JSON) and JSON Lines."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blockdraft.lattice import LatticeError, SausageLattice
from blockdraft.lattice.io import (
    FORMAT_NAME,
    SUPPORTED_VERSIONS,
    LatticeFile,
    iter_lattices,
    lattice_from_dict,
    lattice_to_dict,
    load_lattice,
    save_lattice,
    save_lattices,
)


def ragged() -> SausageLattice:
    return SausageLattice(
        tokens=np.array([[7, -1, -1], [3, 0, 9], [5, 2, -1]]),
        scores=np.array([[-0.1, -np.inf, -np.inf], [-0.25, -1.5, -2.0], [-1.0, -3.0, -np.inf]]),
    )


def same(a: SausageLattice, b: SausageLattice) -> bool:
    return (
        a.tokens.shape == b.tokens.shape
        and np.array_equal(a.tokens, b.tokens)
        and np.array_equal(a.scores, b.scores)
    )


@st.composite
def lattices(draw: st.DrawFn) -> SausageLattice:
    h, k = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    tokens = np.full((h, k), -1, dtype=np.int64)
    scores = np.full((h, k), -np.inf)
    for i in range(h):
        n = draw(st.integers(1, k))
        tokens[i, :n] = draw(
            st.lists(st.integers(0, 2**40), min_size=n, max_size=n, unique=True)
        )
        scs = draw(st.lists(st.floats(-1e6, 0.0, allow_subnormal=True), min_size=n, max_size=n))
        scores[i, :n] = sorted(scs, reverse=True)
    return SausageLattice(tokens=tokens, scores=scores)


# ---------------------------------------------------------------------------- round trips
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lat=lattices(), context=st.lists(st.integers(0, 10**9), max_size=5))
def test_round_trip_is_bit_exact(tmp_path: Path, lat: SausageLattice, context: list[int]) -> None:
    path = tmp_path / "lat.json"
    ref = lat.tokens[:, 0] + 1
    save_lattice(lat, path, context=context, reference=ref, meta={"seed": 3, "name": "é"})
    got = load_lattice(path)
    assert same(got.lattice, lat)
    assert got.context.dtype == np.int64 and got.context.tolist() == context
    assert got.reference is not None and got.reference.tolist() == ref.tolist()
    assert got.meta == {"seed": 3, "name": "é"}


def test_optional_fields_default(tmp_path: Path) -> None:
    path = tmp_path / "lat.json"
    save_lattice(ragged(), path)
    got = load_lattice(path)
    assert got.context.shape == (0,) and got.context.dtype == np.int64
    assert got.reference is None and got.meta == {}
    assert set(json.loads(path.read_text())) == {"format", "version", "h", "k", "slots"}
    assert same(load_lattice(path).lattice, ragged())


def test_file_layout_ragged_slots_are_shorter_lists(tmp_path: Path) -> None:
    path = tmp_path / "lat.json"
    save_lattice(ragged(), path, reference=[7, 3, 4])
    obj = json.loads(path.read_text())
    assert obj["format"] == FORMAT_NAME and obj["version"] == 1
    assert (obj["h"], obj["k"]) == (3, 3)
    assert obj["slots"][0] == {"tokens": [7], "scores": [-0.1]}
    assert obj["slots"][2] == {"tokens": [5, 2], "scores": [-1.0, -3.0]}
    assert "Infinity" not in path.read_text() and "-1," not in path.read_text()
    assert obj["reference"] == [7, 3, 4]


def test_width_is_kept_when_every_slot_is_ragged(tmp_path: Path) -> None:
    lat = SausageLattice(
        tokens=np.array([[1, -1, -1]]), scores=np.array([[-0.5, -np.inf, -np.inf]])
    )
    save_lattice(lat, tmp_path / "w.json")
    assert load_lattice(tmp_path / "w.json").lattice.k == 3


def test_save_is_atomic_and_validates_first(tmp_path: Path) -> None:
    path = tmp_path / "lat.json"
    save_lattice(ragged(), path)
    before = path.read_bytes()
    with pytest.raises(LatticeError, match="reference has 2 tokens but the lattice has h = 3"):
        save_lattice(ragged(), path, reference=[1, 2])
    with pytest.raises(LatticeError, match="JSON"):
        save_lattice(ragged(), path, meta={"x": object()})
    with pytest.raises(LatticeError, match="negative token id -3"):
        save_lattice(ragged(), path, context=[1, -3])
    with pytest.raises(LatticeError, match="meta must be a mapping"):
        save_lattice(ragged(), path, meta=[1])  # type: ignore[arg-type]
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lat.json"]  # no temp files left


# ---------------------------------------------------------------------------- JSON Lines
def test_jsonl_round_trip(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    lats = SausageLattice.from_logits_batch(rng.normal(size=(4, 3, 20)), k=3)
    items: list[SausageLattice | LatticeFile] = [
        lats[0],
        LatticeFile(
            lats[1], context=np.array([4, 5]), reference=np.array([1, 2, 3]), meta={"i": 1}
        ),
        lats[2],
        LatticeFile(lats[3]),
    ]
    path = tmp_path / "many.jsonl"
    assert save_lattices(iter(items), path) == 4
    assert len(path.read_text().splitlines()) == 4
    got = list(iter_lattices(path))
    assert len(got) == 4
    for g, lat in zip(got, lats, strict=True):
        assert same(g.lattice, lat)
    assert got[1].reference is not None and got[1].reference.tolist() == [1, 2, 3]
    assert got[1].context.tolist() == [4, 5]
    assert got[1].meta == {"i": 1} and got[0].reference is None


def test_jsonl_trailing_blank_lines_ok_inner_blank_line_not(tmp_path: Path) -> None:
    path = tmp_path / "many.jsonl"
    save_lattices([ragged(), ragged()], path)
    lines = path.read_text().splitlines()
    path.write_text(lines[0] + "\n" + lines[1] + "\n\n  \n")
    assert len(list(iter_lattices(path))) == 2
    path.write_text(lines[0] + "\n\n" + lines[1] + "\n")
    with pytest.raises(LatticeError, match=r"many\.jsonl:2: blank line"):
        list(iter_lattices(path))


def test_jsonl_error_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "many.jsonl"
    save_lattices([ragged(), ragged(), ragged()], path)
    lines = path.read_text().splitlines()
    lines[2] = lines[2].replace('"version":1', '"version":7')
    path.write_text("\n".join(lines) + "\n")
    it = iter_lattices(path)
    next(it), next(it)  # lazily: the first two lines are fine
    with pytest.raises(LatticeError, match=r"many\.jsonl:3: unsupported .* version 7"):
        next(it)


def test_jsonl_save_failure_leaves_target_untouched(tmp_path: Path) -> None:
    path = tmp_path / "many.jsonl"
    path.write_text("old\n")
    with pytest.raises(LatticeError, match="item 1: expected a SausageLattice"):
        save_lattices([ragged(), "not a lattice", ragged()], path)  # type: ignore[list-item]
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["many.jsonl"]


def test_lattice_file_validates() -> None:
    with pytest.raises(LatticeError, match="reference has 1 tokens"):
        LatticeFile(ragged(), reference=np.array([1]))
    with pytest.raises(LatticeError, match="SausageLattice"):
        LatticeFile(np.zeros((2, 2)))  # type: ignore[arg-type]
    rec = LatticeFile(ragged(), context=[1, 2])  # type: ignore[arg-type]  # lists accepted
    assert rec.context.dtype == np.int64 and not rec.context.flags.writeable


# ---------------------------------------------------------------------------- bad files
def good() -> dict:
    return lattice_to_dict(ragged(), context=[1, 2], reference=[7, 3, 5], meta={"a": 1})


def edit(**changes):
    def make() -> str:
        obj = good()
        for key, value in changes.items():
            if value is DROP:
                del obj[key]
            else:
                obj[key] = value
        return json.dumps(obj)

    return make


def edit_slot(i: int, **changes):
    def make() -> str:
        obj = good()
        obj["slots"][i].update(changes)
        return json.dumps(obj)

    return make


DROP = object()

BAD_FILES = {
    "not json": (lambda: "hello, lattice", "not valid JSON"),
    "empty file": (lambda: "", "not valid JSON"),
    "truncated": (lambda: json.dumps(good())[:70], "not valid JSON .the file looks truncated."),
    "not an object": (lambda: "[1, 2, 3]", "expected a JSON object, got list"),
    "wrong format name": (edit(format="kaldi.lattice"), "format is 'kaldi.lattice'"),
    "no format": (edit(format=DROP), "format is None"),
    "unknown version": (edit(version=2), r"unsupported blockdraft.lattice version 2.*reads "
                                         r"version\(s\) 1"),
    "bool version": (edit(version=True), "unsupported .* version True"),
    "missing slots": (edit(slots=DROP), r"missing required field\(s\) \['slots'\]"),
    "missing h": (edit(h=DROP), r"missing required field\(s\) \['h'\]"),
    "unknown field": (edit(extra=1), r"unknown field\(s\) \['extra'\].*meta"),
    "h mismatch": (edit(h=4), "h = 4 but the file has 3 slots"),
    "h not int": (edit(h="3"), "h must be a positive integer"),
    "k too small": (edit(k=2), "slot 2: 3 arcs but k = 2"),
    "k zero": (edit(k=0), "k must be a positive integer"),
    "length mismatch": (edit_slot(1, scores=[-0.25, -1.5]), "slot 2: 3 tokens but 2 scores"),
    "nan score": (lambda: json.dumps(good()).replace("-1.5", "NaN"), r"slot 2: scores\[1\] = nan"),
    "infinite score": (lambda: json.dumps(good()).replace("-2.0", "-Infinity"),
                       r"slot 2: scores\[2\] = -inf.*shorter list"),
    "string score": (edit_slot(0, scores=["-0.1"]),
                     r"slot 1: scores\[0\] = '-0.1' is not a number"),
    "float token": (edit_slot(2, tokens=[5, 2.0]), r"slot 3: tokens\[1\] = 2.0 is not an integer"),
    "bool token": (edit_slot(2, tokens=[True, 2]), r"slot 3: tokens\[0\] = True is not an integer"),
    "negative token": (edit_slot(2, tokens=[5, -1]), r"slot 3: tokens\[1\] = -1 is out of range"),
    "huge token": (edit_slot(2, tokens=[5, 2**64]), "out of range"),
    "empty slot": (edit_slot(0, tokens=[], scores=[]), "slot 1: no arcs"),
    "slot not object": (lambda: json.dumps({**good(), "slots": [[7], [3], [5]]}),
                        "slot 1: a slot is an object"),
    "slot extra key": (edit_slot(1, weights=[]), "slot 2: a slot is an object with exactly"),
    "unsorted scores": (edit_slot(1, scores=[-1.5, -0.25, -2.0]), "slot 2: scores must be sorted"),
    "duplicate tokens": (edit_slot(1, tokens=[3, 0, 3]), "slot 2: token 3 appears more than once"),
    "short reference": (edit(reference=[7, 3]), "reference has 2 tokens but h = 3"),
    "float reference": (edit(reference=[7, 3, 0.5]), r"reference\[2\] = 0.5 is not an integer"),
    "bad context": (edit(context="1 2"), "context must be a list"),
    "meta not object": (edit(meta=[1]), "meta must be a JSON object"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_files_raise_with_the_path(tmp_path: Path, case: str) -> None:
    make, match = BAD_FILES[case]
    path = tmp_path / "bad.json"
    path.write_text(make(), encoding="utf-8")
    with pytest.raises(LatticeError, match=match) as info:
        load_lattice(path)
    assert str(info.value).startswith(str(path))


def test_good_fixture_is_good(tmp_path: Path) -> None:
    # The bad cases above are edits of this object: it must load, or they prove nothing.
    path = tmp_path / "good.json"
    path.write_text(json.dumps(good()))
    assert same(load_lattice(path).lattice, ragged())


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "bin.json"
    path.write_bytes(b"\xff\xfe\x00{")
    with pytest.raises(LatticeError, match="not UTF-8"):
        load_lattice(path)


def test_missing_file_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_lattice(tmp_path / "nope.json")


def test_supported_versions_and_from_dict() -> None:
    assert SUPPORTED_VERSIONS == (1,)
    rec = lattice_from_dict(good())
    assert same(rec.lattice, ragged()) and rec.context.tolist() == [1, 2]
    with pytest.raises(LatticeError, match="^here: h = 4"):
        lattice_from_dict({**good(), "h": 4}, where="here")
