"""Tests of blockdraft.lattice.fst: lattice <-> pynini acceptor."""

from __future__ import annotations

import itertools
import math
from typing import Literal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pynini = pytest.importorskip("pynini")
import pywrapfst  # noqa: E402  (ships with pynini)

from blockdraft.lattice import LatticeError, SausageLattice  # noqa: E402
from blockdraft.lattice.fst import (  # noqa: E402
    LABEL_OFFSET,
    MAX_TOKEN,
    label_to_token,
    lattice_from_fst,
    lattice_to_fst,
    token_to_label,
)


# ---------------------------------------------------------------------------- helpers
@st.composite
def lattices(draw: st.DrawFn, float32: bool = True, max_h: int = 4, max_k: int = 4):
    """Random lattices, canonical order (score desc, ties by token id), ragged slots."""
    h = draw(st.integers(1, max_h))
    k = draw(st.integers(1, max_k))
    tokens = np.full((h, k), -1, dtype=np.int64)
    scores = np.full((h, k), -np.inf)
    for i in range(h):
        n = draw(st.integers(1, k))
        toks = draw(st.lists(st.integers(0, 60), min_size=n, max_size=n, unique=True))
        width: Literal[32, 64] = 32 if float32 else 64
        scs = draw(
            st.lists(st.floats(-40.0, 0.0, width=width), min_size=n, max_size=n)
        )
        order = np.lexsort((np.array(toks), -np.array(scs, dtype=np.float64)))
        tokens[i, :n] = np.array(toks)[order]
        scores[i, :n] = np.array(scs, dtype=np.float64)[order]
    return SausageLattice(tokens=tokens, scores=scores)


def same(a: SausageLattice, b: SausageLattice) -> bool:
    return (
        a.tokens.shape == b.tokens.shape
        and np.array_equal(a.tokens, b.tokens)
        and np.array_equal(a.scores, b.scores)
    )


def sausage_fst(slots, *, order=None, weight_type="standard", final_cost=0.0):
    """A sausage acceptor from [(labels, costs), ...]; ``order`` renumbers the states."""
    h = len(slots)
    fst = pynini.Fst(weight_type)
    for _ in range(h + 1):
        fst.add_state()
    ids = list(range(h + 1)) if order is None else list(order)
    fst.set_start(ids[0])
    fst.set_final(ids[h], pynini.Weight(fst.weight_type(), final_cost))
    for i, (labels, costs) in enumerate(slots):
        for lab, c in zip(labels, costs, strict=True):
            w = pynini.Weight(fst.weight_type(), c)
            fst.add_arc(ids[i], pynini.Arc(lab, lab, w, ids[i + 1]))
    return fst


def fst_paths(fst) -> list[tuple[tuple[int, ...], float]]:
    it = fst.paths()
    out = []
    while not it.done():
        out.append((tuple(it.ilabels()), float(it.weight())))
        it.next()
    return out


# ---------------------------------------------------------------------------- labels
def test_label_offset_helpers() -> None:
    assert LABEL_OFFSET == 1
    assert token_to_label(0) == 1 and label_to_token(1) == 0
    assert label_to_token(token_to_label(12345)) == 12345
    assert token_to_label(MAX_TOKEN) == 2**31 - 1
    with pytest.raises(LatticeError, match="-1"):
        token_to_label(-1)
    with pytest.raises(LatticeError, match=str(MAX_TOKEN + 1)):
        token_to_label(MAX_TOKEN + 1)
    with pytest.raises(LatticeError, match="epsilon"):
        label_to_token(0)


def test_token_too_large_for_a_label() -> None:
    lat = SausageLattice(tokens=np.array([[MAX_TOKEN + 1]]), scores=np.array([[-1.0]]))
    with pytest.raises(LatticeError, match="no OpenFst label"):
        lattice_to_fst(lat)


# ---------------------------------------------------------------------------- layout
def test_layout_of_the_acceptor() -> None:
    lat = SausageLattice(
        tokens=np.array([[7, -1, -1], [3, 0, 9], [5, 2, -1]]),
        scores=np.array([[-0.5, -np.inf, -np.inf], [-0.25, -1.5, -2.0], [-1.0, -3.0, -np.inf]]),
    )
    fst = lattice_to_fst(lat)
    assert isinstance(fst, pynini.Fst)
    assert fst.arc_type() == "standard"
    assert fst.num_states() == 4 and fst.start() == 0
    assert float(fst.final(3)) == 0.0
    assert all(math.isinf(float(fst.final(s))) for s in range(3))
    assert fst.properties(pywrapfst.ACCEPTOR | pywrapfst.I_LABEL_SORTED, True) == (
        pywrapfst.ACCEPTOR | pywrapfst.I_LABEL_SORTED
    )
    for i in range(3):
        arcs = list(fst.arcs(i))
        assert {a.nextstate for a in arcs} == {i + 1}
        labels = [a.ilabel for a in arcs]
        assert labels == sorted(labels)  # arc-sorted by ilabel, not by weight
        toks, scs = lat.slot(i)
        want = {int(t) + 1: -float(s) for t, s in zip(toks, scs, strict=True)}
        assert {a.ilabel: float(a.weight) for a in arcs} == want


def test_rejects_non_lattice() -> None:
    with pytest.raises(LatticeError, match="SausageLattice"):
        lattice_to_fst(np.zeros((2, 2)))  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- round trips
@settings(max_examples=60, deadline=None)
@given(lattices(float32=True))
def test_round_trip_is_exact_for_float32_scores(lat: SausageLattice) -> None:
    fst = lattice_to_fst(lat)
    assert same(lattice_from_fst(fst, k=lat.k), lat)
    # Without k the width is the widest slot: the same lattice with trailing padding trimmed.
    width = int(lat.counts.max())
    back = lattice_from_fst(fst)
    assert back.k == width
    assert np.array_equal(back.tokens, lat.tokens[:, :width])
    assert np.array_equal(back.scores, lat.scores[:, :width])


def test_k_pads_and_is_checked() -> None:
    lat = SausageLattice(
        tokens=np.array([[4, 5], [6, -1]]), scores=np.array([[-1.0, -2.0], [-3.0, -np.inf]])
    )
    fst = lattice_to_fst(lat)
    assert lattice_from_fst(fst, k=4).tokens.tolist() == [[4, 5, -1, -1], [6, -1, -1, -1]]
    with pytest.raises(LatticeError, match="slot 1 has 2 arcs, more than k = 1"):
        lattice_from_fst(fst, k=1)
    with pytest.raises(LatticeError, match="positive integer"):
        lattice_from_fst(fst, k=0)


def test_round_trip_rounds_float64_scores_to_float32() -> None:
    rng = np.random.default_rng(3)
    lat = SausageLattice.from_logits(rng.normal(size=(5, 300)) * 3, k=6)
    back = lattice_from_fst(lattice_to_fst(lat))
    assert np.array_equal(back.tokens, lat.tokens)
    f32 = np.where(lat.tokens >= 0, lat.scores.astype(np.float32).astype(np.float64), -np.inf)
    assert np.array_equal(back.scores, f32)
    assert not np.array_equal(back.scores, lat.scores)  # float64 really was rounded


def test_ties_come_back_ordered_by_token_id() -> None:
    lat = SausageLattice(tokens=np.array([[9, 4, 6]]), scores=np.array([[-1.0, -1.0, -2.0]]))
    back = lattice_from_fst(lattice_to_fst(lat))
    assert back.tokens.tolist() == [[4, 9, 6]]
    assert back.scores.tolist() == [[-1.0, -1.0, -2.0]]


def test_ragged_slots_round_trip() -> None:
    logits = np.random.default_rng(0).normal(size=(3, 10))
    logits[2, 3:] = -np.inf  # head 3 has 3 live tokens
    lat = SausageLattice.from_logits(logits.astype(np.float32), k=5)  # slot 1 certain
    assert lat.counts.tolist() == [1, 5, 3]
    fst = lattice_to_fst(lat)
    assert [fst.num_arcs(s) for s in range(4)] == [1, 5, 3, 0]  # padding not written
    back = lattice_from_fst(fst)
    assert back.counts.tolist() == [1, 5, 3]
    assert np.array_equal(back.tokens, lat.tokens)
    assert np.all(np.isneginf(back.scores[lat.tokens < 0]))


def test_any_state_numbering() -> None:
    slots = [([3, 8], [0.5, 0.25]), ([1], [2.0]), ([5, 6, 7], [1.0, 0.0, 3.0])]
    fst = sausage_fst(slots, order=[3, 0, 2, 1])  # start 3 -> 0 -> 2 -> final 1
    lat = lattice_from_fst(fst)
    assert lat.tokens.tolist() == [[7, 2, -1], [0, -1, -1], [5, 4, 6]]
    assert lat.scores[0, :2].tolist() == [-0.25, -0.5]
    assert lat.scores[2].tolist() == [-0.0, -1.0, -3.0]


@pytest.mark.parametrize("weight_type", ["log", "log64"])
def test_log_semiring_costs_are_read_too(weight_type: str) -> None:
    fst = sausage_fst([([1, 2], [0.5, 1.5])], weight_type=weight_type)
    lat = lattice_from_fst(fst)
    assert lat.tokens.tolist() == [[0, 1]] and lat.scores.tolist() == [[-0.5, -1.5]]


# ---------------------------------------------------------------------------- path algebra
@settings(max_examples=25, deadline=None)
@given(lattices(float32=True, max_h=3, max_k=3))
def test_paths_of_the_fst_are_the_lattice_paths(lat: SausageLattice) -> None:
    paths = fst_paths(lattice_to_fst(lat))
    assert len(paths) == lat.num_paths
    want = {tuple(int(t) + 1 for t in p) for p in itertools.product(
        *(lat.slot(i)[0] for i in range(lat.h))
    )}
    assert {labels for labels, _ in paths} == want
    for labels, cost in paths:
        score = lat.path_score([label_to_token(x) for x in labels])
        assert cost == pytest.approx(-score, rel=1e-6, abs=1e-5)


@settings(max_examples=40, deadline=None)
@given(lattices(float32=True, max_h=5, max_k=4))
def test_shortest_path_is_the_best_path(lat: SausageLattice) -> None:
    best = lat.best_paths(1)
    (labels, cost), = fst_paths(pynini.shortestpath(lattice_to_fst(lat)))
    tokens = [label_to_token(x) for x in labels]
    # Ties may pick another best path; its score must equal the best score.
    assert lat.path_score(tokens) == pytest.approx(best.scores[0], rel=1e-6, abs=1e-5)
    assert cost == pytest.approx(-best.scores[0], rel=1e-6, abs=1e-5)


def test_shortest_path_tokens_without_ties() -> None:
    rng = np.random.default_rng(11)
    lat = SausageLattice.from_logits(rng.normal(size=(6, 40)).astype(np.float32) * 2, k=4)
    (labels, cost), = fst_paths(pynini.shortestpath(lattice_to_fst(lat)))
    best = lat.best_paths(1)
    assert [label_to_token(x) for x in labels] == best.tokens[0].tolist()
    assert cost == pytest.approx(-best.scores[0], rel=1e-6)


# ---------------------------------------------------------------------------- bad input
def _branching():
    fst = sausage_fst([([1, 2], [0.0, 1.0]), ([3], [0.0])])
    extra = fst.add_state()
    fst.add_arc(0, pywrapfst.Arc(5, 5, pywrapfst.Weight.one("tropical"), extra))
    fst.add_arc(extra, pywrapfst.Arc(3, 3, pywrapfst.Weight.one("tropical"), 2))
    return fst


def _with_arc(src, ilabel, olabel, dst, cost=0.0, slots=None):
    fst = sausage_fst(slots or [([1, 2], [0.0, 1.0]), ([3], [0.0])])
    fst.add_arc(src, pywrapfst.Arc(ilabel, olabel, pywrapfst.Weight("tropical", cost), dst))
    return fst


def _final_in_middle():
    fst = sausage_fst([([1], [0.0]), ([3], [0.0])])
    fst.set_final(1)
    return fst


def _dead_end():
    fst = sausage_fst([([1], [0.0]), ([3], [0.0])])
    fst.set_final(2, pywrapfst.Weight.zero("tropical"))
    return fst


def _unreachable():
    fst = sausage_fst([([1], [0.0])])
    fst.add_state()
    return fst


def _loop(edges):
    """States 0..2 (2 final, off the loop); ``edges`` as (src, dst) with labels 1, 2, ..."""
    fst = pywrapfst.VectorFst()
    for _ in range(3):
        fst.add_state()
    fst.set_start(0)
    fst.set_final(2)
    for lab, (src, dst) in enumerate(edges, start=1):
        fst.add_arc(src, pywrapfst.Arc(lab, lab, pywrapfst.Weight.one("tropical"), dst))
    return fst


def _only_empty_string():
    fst = pywrapfst.VectorFst()
    fst.add_state()
    fst.set_start(0)
    fst.set_final(0)
    return fst


BAD_FSTS = {
    "not an fst": (lambda: "0 1 1 1", "expects a pynini/pywrapfst FST"),
    "empty": (lambda: pywrapfst.VectorFst(), "no start state"),
    "branching": (_branching, "different states"),
    "epsilon": (lambda: _with_arc(0, 0, 0, 1), "epsilon"),
    "transducer": (lambda: _with_arc(0, 4, 5, 1), "ilabel 4 != olabel 5"),
    "duplicate label": (lambda: _with_arc(0, 2, 2, 1, cost=3.0), "token 1 .label 2."),
    "infinite cost": (lambda: _with_arc(0, 9, 9, 1, cost=math.inf), "cost inf"),
    "cycle": (lambda: _with_arc(1, 4, 4, 0, slots=[([1], [0.0]), ([3], [0.0])]),
              "different states"),
    "self loop": (lambda: _loop([(0, 0)]), "back to state 0, a cycle"),
    "back edge": (lambda: _loop([(0, 1), (1, 0)]), "back to state 0, a cycle"),
    "final in the middle": (_final_in_middle, "final but has arcs"),
    "dead end": (_dead_end, "dead end"),
    "final weight": (lambda: sausage_fst([([1], [0.0])], final_cost=0.75),
                     "weight 0.75.*fold_final_weight"),
    "unreachable state": (_unreachable, "connect"),
    "only the empty string": (_only_empty_string, "empty string"),
}


@pytest.mark.parametrize("case", sorted(BAD_FSTS))
def test_bad_fsts_raise(case: str) -> None:
    build, match = BAD_FSTS[case]
    with pytest.raises(LatticeError, match=match):
        lattice_from_fst(build())


def test_fold_final_weight() -> None:
    fst = sausage_fst([([1, 2], [0.5, 1.0]), ([3, 4], [0.25, 2.0])], final_cost=0.75)
    lat = lattice_from_fst(fst, fold_final_weight=True)
    assert lat.scores[0].tolist() == [-0.5, -1.0]
    assert lat.scores[1].tolist() == [-1.0, -2.75]
    # every string keeps its total cost
    for labels, cost in fst_paths(fst):
        assert lat.path_score([label_to_token(x) for x in labels]) == -cost
