"""The WFST backend's fast paths against the plain OpenFst calls they replace.

* the lattice transducer written as OpenFst's binary layout = the one built arc by arc;
* the shortest-path reader over the binary layout = the arc-iterator reader;
* the pruned unique p-best (:func:`_unique_shortest`) = ``shortestpath(rmepsilon(composed),
  nshortest=p, unique=True)`` on the whole composed FST, on LMs with real back-off weights (where
  epsilon back-off derivations compete), with the pruning forced to retry and to fall back.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import pywrapfst

from blockdraft.lattice import SausageLattice
from blockdraft.lattice.fst import LABEL_OFFSET
from blockdraft.lattice.synthetic import hits_heavy as hits_lattice
from blockdraft.rescorers.ngram.wfst import UNK_LABEL, WfstRescorer
from blockdraft.rescorers.ngram.wfst import rescorer as wfst_rescorer
from ngram_testlib import WordCorpus

TOL = 1e-4  # nats: OpenFst weights are float32


def arc_by_arc(lattice: SausageLattice, olabels: np.ndarray, alpha: float) -> pywrapfst.VectorFst:
    """The lattice transducer built with one ``add_arc`` per arc (the reference): input
    label the arc's index in its slot + 1, output label the LM's label of its token."""
    h = lattice.h
    out = pywrapfst.VectorFst()
    out.add_states(h + 1)
    out.set_start(0)
    out.set_final(h)
    for i in range(h):
        scores = lattice.scores[i]
        costs = (-(scores - scores[0]) / alpha).tolist()
        for j in range(int(lattice.counts[i])):
            out.add_arc(i, pywrapfst.Arc(j + 1, int(olabels[i, j]), costs[j], i + 1))
    out.arcsort("olabel")
    return out


def random_padded_lattice(rng: np.random.Generator) -> SausageLattice:
    h, k = int(rng.integers(1, 9)), int(rng.integers(1, 17))
    tokens = np.array([rng.choice(5000, k, replace=False) for _ in range(h)])
    scores = np.sort(np.log(rng.dirichlet(np.ones(k), size=h)), axis=1)[:, ::-1]
    counts = rng.integers(1, k + 1, size=h)
    for i in range(h):
        tokens[i, counts[i]:] = -1
        scores[i, counts[i]:] = -np.inf
    return SausageLattice(tokens=tokens, scores=scores)


def same_paths(a: list[tuple[float, list[int]]], b: list[tuple[float, list[int]]]) -> None:
    assert [lab for _, lab in a] == [lab for _, lab in b]
    np.testing.assert_allclose([c for c, _ in a], [c for c, _ in b], atol=1e-5)


def test_binary_lattice_and_reader_equal_the_arc_by_arc_ones() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        lat = random_padded_lattice(rng)
        real = lat.tokens >= 0
        olabels = np.where(real, lat.tokens + LABEL_OFFSET, 0)
        olabels[real & (rng.random(olabels.shape) < 0.2)] = UNK_LABEL
        alpha = float(rng.choice([0.3, 1.0, 2.5]))
        fast = wfst_rescorer._lattice_fst(lat, olabels, alpha)
        ref = arc_by_arc(lat, olabels, alpha)
        assert str(fast) == str(ref)
        assert fast.start() == 0 and fast.num_states() == lat.h + 1
        assert fast.properties(pywrapfst.O_LABEL_SORTED, False) & pywrapfst.O_LABEL_SORTED
        for unique in (False, True):
            f = fast.copy()
            if unique:
                f.project("input")
            paths = pywrapfst.shortestpath(f, nshortest=int(rng.integers(1, 20)), unique=unique)
            same_paths(wfst_rescorer._read_paths(paths), wfst_rescorer._read_paths_iter(paths))


def full_unique(rescorer: WfstRescorer, lattice: SausageLattice, context: np.ndarray,
                p: int) -> list[tuple[float, list[int]]]:
    """The plain pipeline on the whole composed FST: compose, project, rmepsilon,
    shortestpath(unique=True); paths cheapest first."""
    lat = wfst_rescorer._lattice_fst(lattice, rescorer._olabels(lattice), rescorer.alpha)
    lm = rescorer.fst
    lm.set_start(rescorer.start_state(context))
    composed = pywrapfst.compose(lat, lm)
    composed.project("input")
    composed.rmepsilon()
    paths = wfst_rescorer._read_paths_iter(
        pywrapfst.shortestpath(composed, nshortest=p, unique=True))
    return sorted(paths, key=lambda c: c[0])


@pytest.mark.parametrize("order", [3, 4, 5])
@pytest.mark.parametrize("start", [None, 1e-3])
def test_pruned_unique_pbest_equals_the_full_search(
    order: int, start: float | None, arpa_lms: dict[int, Path], word_corpus: WordCorpus,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Same strings, same order, same costs as unique shortest paths over the whole FST; with a
    tiny first threshold every lattice retries and many fall back to the full search."""
    if start is not None:
        monkeypatch.setattr(wfst_rescorer, "PRUNE_START", start)
    rng = np.random.default_rng(order)
    held = word_corpus.held_out
    for alpha in (0.5, 1.0, 3.0):
        wfst = WfstRescorer.from_arpa(arpa_lms[order], alpha=alpha, cache_dir=tmp_path)
        for case in range(12):
            h, k = [(6, 8), (4, 12), (3, 3), (8, 5)][case % 4]
            pos = int(rng.integers(12, held.size - h))
            lat = hits_lattice(rng, held[pos:pos + h], k, word_corpus.unigram,
                               certain_first=bool(case % 2))
            context = held[pos - 12:pos] if case % 3 else held[:0]
            ps = {2, 7, 16, 40}
            if lat.num_paths <= 200:  # every path, and more than there are
                ps |= {lat.num_paths, lat.num_paths + 3}
            for p in sorted(ps):
                ref = full_unique(wfst, lat, context, p)
                got = wfst.rescore(lat, context, p)
                # scores = -(cost) in rescorer units, shifted by the slots' best scores
                shift = float(lat.scores[:, 0].sum())
                want = np.array([shift - alpha * c for c, _ in ref])
                np.testing.assert_allclose(got.scores, want, atol=TOL * 10)
                rows = [tuple(r) for r in got.tokens.tolist()]
                ref_rows = [tuple(int(lat.tokens[i, a - 1]) for i, a in enumerate(lab))
                            for _, lab in ref]
                if rows != ref_rows:  # only float32 ties may swap places
                    for j, (a, b) in enumerate(zip(rows, ref_rows, strict=True)):
                        if a != b:
                            near = np.abs(want - want[j]) < 1e-5
                            assert near.sum() > 1, (j, a, b)
