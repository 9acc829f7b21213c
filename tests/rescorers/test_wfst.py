"""The WFST backend: its layout, its cache, its semantics against brute force, and where and
how it differs from the exact backend (KenLM)."""

from __future__ import annotations

import itertools
import math
import os
from functools import lru_cache
from pathlib import Path

import kenlm
import numpy as np
import pynini
import pytest
import pywrapfst
from hypothesis import given, settings
from hypothesis import strategies as st

from blockdraft.lattice import SausageLattice
from blockdraft.lattice.synthetic import hits_heavy as hits_lattice
from blockdraft.rescorers.base import Rescorer, RescorerError
from blockdraft.rescorers.ngram import NgramLM, NgramRescorer
from blockdraft.rescorers.ngram.arpa import read_arpa
from blockdraft.rescorers.ngram.wfst import (
    BOS_CODE,
    UNK_LABEL,
    WfstRescorer,
    agreement,
    arpa_to_fst,
    build_ngram_wfst,
    default_cache_dir,
    load_ngram_wfst,
)
from blockdraft.rescorers.ngram.wfst.compiler import _vector_fst
from ngram_testlib import WordCorpus

LN10 = math.log(10.0)
TOL = 1e-4  # nats: OpenFst weights are float32


# ---------------------------------------------------------------------------- helpers
def random_lattice(rng: np.random.Generator, h: int, k: int, vocab: int) -> SausageLattice:
    tokens = np.array([rng.choice(vocab, k, replace=False) for _ in range(h)])
    scores = np.sort(np.log(rng.dirichlet(np.ones(k), size=h)), axis=1)[:, ::-1]
    return SausageLattice(tokens=tokens, scores=scores)


def all_paths(lattice: SausageLattice) -> list[tuple[float, tuple[int, ...]]]:
    slots = [lattice.slot(i) for i in range(lattice.h)]
    out = []
    for arcs in itertools.product(*[range(len(t)) for t, _ in slots]):
        toks = tuple(int(slots[i][0][a]) for i, a in enumerate(arcs))
        out.append((float(sum(slots[i][1][a] for i, a in enumerate(arcs))), toks))
    return out


class WfstSemantics:
    """The WFST's meaning, computed independently from the ARPA text: a string's LM cost is
    the cheapest derivation through explicit n-grams and epsilon back-offs (nats)."""

    def __init__(self, path: Path) -> None:
        self.prob: dict[tuple[str, ...], float] = {}
        self.backoff: dict[tuple[str, ...], float] = {}
        self.order = 0
        for g in read_arpa(path):
            self.prob[g.words] = g.log10_prob * LN10
            self.backoff[g.words] = g.log10_backoff * LN10
            self.order = max(self.order, g.order)
        self.histories = {w[:-1] for w in self.prob if len(w) >= 2}
        self.vocab = {w[0] for w in self.prob if len(w) == 1}
        self.cost = lru_cache(maxsize=None)(self._cost)

    def dest(self, words: tuple[str, ...]) -> tuple[str, ...]:
        words = words[max(0, len(words) - (self.order - 1)):] if self.order > 1 else ()
        for i in range(len(words)):
            if words[i:] in self.histories:
                return words[i:]
        return ()

    def start(self, context: list[int]) -> tuple[str, ...]:
        if not context:
            return ("<s>",) if ("<s>",) in self.histories else ()
        words = [str(t) for t in context]
        unknown = [i for i, w in enumerate(words) if w not in self.vocab]
        if unknown:
            words = words[unknown[-1] + 1:]
        return self.dest(tuple(words))

    def _cost(self, state: tuple[str, ...], tokens: tuple[int, ...]) -> float:
        if not tokens:
            return 0.0
        w = str(tokens[0]) if str(tokens[0]) in self.vocab else "<unk>"
        best = math.inf
        key = state + (w,)
        if key in self.prob:
            nxt = () if w == "<unk>" else self.dest(key)
            best = -self.prob[key] + self.cost(nxt, tokens[1:])
        if state:
            shorter = self.dest(state[1:])
            best = min(best, -self.backoff.get(state, 0.0) + self.cost(shorter, tokens))
        return best

    def lm(self, context: list[int], tokens: tuple[int, ...]) -> float:
        """ln-score (nats) of ``tokens`` after ``context`` under the WFST semantics."""
        return -self.cost(self.start(context), tuple(tokens))


def monotone_arpa(rng: np.random.Generator, vocab: int = 6, order: int = 3) -> str:
    """An LM whose back-off routes can never beat explicit n-grams: every back-off weight is
    log10 1 = 0 and every explicit n-gram is likelier than its own suffix (so than all of
    them). Prefix- and suffix-closed, as lmplz writes. Not normalised; KenLM does not care."""
    grams: list[dict[tuple[str, ...], float]] = [
        {(str(t),): -float(rng.uniform(1.0, 2.0)) for t in range(vocab)}
    ]
    grams[0].update({("<s>",): -99.0, ("</s>",): -1.5, ("<unk>",): -3.0})
    for n in range(2, order + 1):
        contexts = sorted(g for g in grams[-1] if "</s>" not in g and "<unk>" not in g)
        cur: dict[tuple[str, ...], float] = {}
        for _ in range(vocab * 4):
            g = contexts[rng.integers(len(contexts))] + (str(rng.integers(vocab)),)
            suffix = g[1:]
            if suffix in grams[n - 2]:
                cur[g] = min(0.0, grams[n - 2][suffix] + float(rng.uniform(0.05, 0.6)))
        grams.append(cur)
    lines = ["\\data\\"] + [f"ngram {n}={len(g)}" for n, g in enumerate(grams, 1)] + [""]
    for n, g in enumerate(grams, 1):
        lines.append(f"\\{n}-grams:")
        for words, prob in sorted(g.items()):
            tail = "\t0" if n < order else ""
            lines.append(f"{prob:.6f}\t{' '.join(words)}{tail}")
        lines.append("")
    return "\n".join(lines + ["\\end\\", ""])


def kenlm_state(model: kenlm.Model, words: list[str], bos: bool) -> kenlm.State:
    state, nxt = kenlm.State(), kenlm.State()
    (model.BeginSentenceWrite if bos else model.NullContextWrite)(state)
    for w in words:
        model.BaseScore(state, w, nxt)
        state, nxt = nxt, state
    return state


# ---------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("wfst-cache")


@pytest.fixture(scope="module")
def monotone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("mono") / "mono.arpa"
    path.write_text(monotone_arpa(np.random.default_rng(7)), encoding="utf-8")
    return path


TRIGRAM = """\
\\data\\
ngram 1=6
ngram 2=5
ngram 3=2

\\1-grams:
-2.0\t<unk>\t0
-99\t<s>\t-0.5
-1.0\t</s>\t0
-0.5\t0\t-0.25
-0.7\t1\t-0.3
-0.9\t2\t-0.15

\\2-grams:
-0.3\t<s> 0\t-0.1
-0.2\t0 1\t-0.2
-0.4\t1 2
-0.6\t1 </s>
-0.8\t2 </s>

\\3-grams:
-0.1\t<s> 0 1
-0.05\t0 1 2

\\end\\
"""


# ---------------------------------------------------------------------------- layout
def test_binary_writer_matches_add_arc() -> None:
    rng = np.random.default_rng(0)
    n_states, n_arcs = 7, 40
    src = np.sort(rng.integers(0, n_states, n_arcs))
    label = rng.integers(0, 50, n_arcs)
    order = np.lexsort((label, src))
    src, label = src[order], label[order]
    cost = rng.normal(size=n_arcs)
    dst = rng.integers(0, n_states, n_arcs)
    got = _vector_fst(n_states, 3, src, label, cost, dst)
    ref = pywrapfst.VectorFst()
    ref.add_states(n_states)
    ref.set_start(3)
    for s in range(n_states):
        ref.set_final(s, 0.0)
    for a in range(n_arcs):
        ref.add_arc(int(src[a]), pywrapfst.Arc(int(label[a]), int(label[a]), cost[a], int(dst[a])))
    assert got.verify()
    assert pywrapfst.equal(got, ref)
    assert got.properties(pywrapfst.I_LABEL_SORTED, True) & pywrapfst.I_LABEL_SORTED


def test_layout_of_a_small_trigram(tmp_path: Path) -> None:
    path = tmp_path / "tri.arpa"
    path.write_text(TRIGRAM, encoding="utf-8")
    lm = build_ngram_wfst(path)
    fst, cs = lm.fst, lm.states
    # histories: (), (<s>), (0), (1), (2) (extended by '2 </s>' only), (<s> 0), (0 1)
    assert lm.num_states == 7 and fst.verify()
    s = {hist: cs.find(np.array([[BOS_CODE if w == "<s>" else int(w) for w in hist]]))[0]
         for hist in [("<s>",), ("0",), ("1",), ("2",), ("<s>", "0"), ("0", "1")]}
    assert len(set(s.values())) == 6 and min(s.values()) >= 0
    s[()] = cs.null_state
    assert fst.start() == s[("<s>",)] == cs.bos_state
    arcs = {(st, a.ilabel): (float(a.weight), a.nextstate) for st in range(7)
            for a in fst.arcs(st)}
    assert all(float(fst.final(st)) == 0.0 for st in range(7))
    # unigram state: token t has label t + 1, <unk> the reserved label, no </s> or <s> arcs
    assert arcs[(s[()], 1)] == pytest.approx((0.5 * LN10, s[("0",)]))
    assert arcs[(s[()], 3)] == pytest.approx((0.9 * LN10, s[("2",)]))
    assert arcs[(s[()], UNK_LABEL)] == pytest.approx((2.0 * LN10, s[()]))
    assert fst.num_arcs(s[()]) == 4
    # n-gram arcs go to the longest suffix that is a history
    assert arcs[(s[("<s>",)], 1)] == pytest.approx((0.3 * LN10, s[("<s>", "0")]))
    assert arcs[(s[("<s>", "0")], 2)] == pytest.approx((0.1 * LN10, s[("0", "1")]))
    assert arcs[(s[("0", "1")], 3)] == pytest.approx((0.05 * LN10, s[("2",)]))
    assert arcs[(s[("1",)], 3)] == pytest.approx((0.4 * LN10, s[("2",)]))
    assert fst.num_arcs(s[("1",)]) == 2 and fst.num_arcs(s[("2",)]) == 1  # no </s> arcs
    # epsilon back-off arcs to the longest proper suffix that is a history
    assert arcs[(s[("<s>", "0")], 0)] == pytest.approx((0.1 * LN10, s[("0",)]))
    assert arcs[(s[("0", "1")], 0)] == pytest.approx((0.2 * LN10, s[("1",)]))
    assert arcs[(s[("<s>",)], 0)] == pytest.approx((0.5 * LN10, s[()]))
    assert arcs[(s[("1",)], 0)] == pytest.approx((0.3 * LN10, s[()]))
    assert arcs[(s[("2",)], 0)] == pytest.approx((0.15 * LN10, s[()]))
    assert pywrapfst.equal(arpa_to_fst(path), fst)
    # the context walk: longest history suffix, unknown tokens reset, empty = <s>
    assert cs.match([]) == (s[("<s>",)], (BOS_CODE,))
    assert cs.match([5, 0, 1]) == (s[("0", "1")], (0, 1))
    assert cs.match([1, 0]) == (s[("0",)], (0,))
    assert cs.match([0, 2]) == (s[("2",)], (2,))
    assert cs.match([2, 0, 2, 2]) == (s[("2",)], (2,))
    assert cs.match([0, 99]) == (s[()], ())  # 99 is unknown
    assert cs.match([99, 0]) == (s[("0",)], (0,))


def test_words_must_be_token_ids(tmp_path: Path) -> None:
    path = tmp_path / "w.arpa"
    path.write_text(TRIGRAM.replace("\t2\t", "\tcat\t").replace("1 2", "1 cat"), "utf-8")
    with pytest.raises(RescorerError, match="'cat' is not a decimal token id"):
        build_ngram_wfst(path)


def test_cache_is_keyed_by_file_and_survives_corruption(tmp_path: Path) -> None:
    path = tmp_path / "tri.arpa"
    path.write_text(TRIGRAM, encoding="utf-8")
    cdir = tmp_path / "cache"
    first = load_ngram_wfst(path, cdir)
    again = load_ngram_wfst(path, cdir)
    assert not first.from_cache and again.from_cache
    assert pywrapfst.equal(first.fst, again.fst)
    assert again.states.bos_state == first.states.bos_state
    for a, b in zip(first.states.histories, again.states.histories, strict=True):
        np.testing.assert_array_equal(a, b)
    assert sorted(p.suffix for p in cdir.iterdir()) == [".fst", ".npz"]
    # an edited file (new size and mtime) is converted again, beside the old entry
    path.write_text(TRIGRAM.replace("-0.05\t0 1 2", "-0.06\t0 1 2"), encoding="utf-8")
    os.utime(path, ns=(1, 1))
    edited = load_ngram_wfst(path, cdir)
    assert not edited.from_cache and len(list(cdir.iterdir())) == 4
    # a corrupt entry is rebuilt, not trusted
    for p in cdir.glob("*.fst"):
        p.write_bytes(b"garbage")
    assert not load_ngram_wfst(path, cdir).from_cache
    assert load_ngram_wfst(path, cdir).from_cache


def test_default_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("BLOCKDRAFT_CACHE", str(tmp_path))
    assert default_cache_dir() == tmp_path / "wfst"
    monkeypatch.delenv("BLOCKDRAFT_CACHE")
    assert default_cache_dir() == Path.home() / ".cache" / "blockdraft" / "wfst"


# ---------------------------------------------------------------------------- vs. exact
CASES = [(o, a) for o in (2, 3, 4, 5) for a in (0.5, 1.0, 2.0)]


@pytest.mark.parametrize(("order", "alpha"), CASES)
def test_distinct_strings_and_lm_never_below_exact(
    order: int, alpha: float, arpa_lms: dict[int, Path], word_corpus: WordCorpus, cache: Path
) -> None:
    """(a) distinct strings, (b) WFST ln-score >= KenLM's, (d) top-p = brute force under the
    WFST semantics; exact head scores; scores = head + alpha * lm; ragged p."""
    arpa = arpa_lms[order]
    wfst = WfstRescorer.from_arpa(arpa, alpha=alpha, cache_dir=cache)
    assert isinstance(wfst, Rescorer)
    lm = NgramLM(arpa)
    sem = WfstSemantics(arpa)
    rng = np.random.default_rng(order * 10 + int(alpha * 4))
    held = word_corpus.held_out
    for trial in range(4):
        h, k = (3, 3) if trial % 2 == 0 else (4, 2)
        pos = int(rng.integers(20, held.size - h))
        lattice = hits_lattice(rng, held[pos:pos + h], k, word_corpus.unigram)
        n_paths = lattice.num_paths
        paths = all_paths(lattice)
        for clen in (0, 1, 6):
            context = held[pos - clen:pos].tolist()
            brute = sorted(
                (head + alpha * sem.lm(context, toks) for head, toks in paths), reverse=True
            )
            for p in (1, 5, n_paths, n_paths + 3):
                got = wfst.rescore(lattice, np.array(context, dtype=np.int64), p)
                assert got.source == "ngram-wfst" and got.requested == p
                assert len(got) == min(p, n_paths)
                rows = [tuple(r) for r in got.tokens.tolist()]
                assert len(set(rows)) == len(rows)  # (a)
                assert np.all(np.diff(got.scores) <= 1e-12)
                for j, row in enumerate(rows):
                    assert got.head_scores[j] == pytest.approx(lattice.path_score(row), abs=1e-12)
                    exact = float(lm.score(row, context).sum())
                    assert got.lm_scores[j] >= exact - TOL  # (b)
                    assert got.lm_scores[j] == pytest.approx(sem.lm(context, row), abs=TOL)
                np.testing.assert_allclose(
                    got.scores, got.head_scores + alpha * got.lm_scores, atol=1e-9
                )
                np.testing.assert_allclose(got.scores, brute[:len(got)], atol=TOL)  # (d)


def test_equals_exact_when_backoff_never_wins(monotone: Path, cache: Path) -> None:
    """(c) On an LM where no back-off route beats an explicit n-gram, WFST top-p == exact."""
    rng = np.random.default_rng(3)
    lm = NgramLM(monotone)
    sem = WfstSemantics(monotone)
    for alpha in (0.5, 1.0, 3.0):
        wfst = WfstRescorer.from_arpa(monotone, alpha=alpha, cache_dir=cache)
        exact = NgramRescorer(lm, alpha=alpha, backend="exact")
        for _ in range(6):
            lattice = random_lattice(rng, h=4, k=3, vocab=6)
            for context in ([], [2], [0, 1, 2, 3]):
                for _, toks in all_paths(lattice)[:20]:  # the premise of the test
                    assert sem.lm(context, toks) == pytest.approx(
                        float(lm.score(toks, context).sum()), abs=TOL
                    )
                for p in (1, 4, 81):
                    got = wfst.rescore(lattice, context, p)
                    want = exact.rescore(lattice, context, p)
                    # the same top p (float32 near-ties aside: compare scores row by row)
                    np.testing.assert_allclose(got.scores, want.scores, atol=TOL)
                    for row, lm_ln in zip(got.tokens.tolist(), got.lm_scores, strict=True):
                        exact_ln = float(lm.score(row, context).sum())
                        assert lm_ln == pytest.approx(exact_ln, abs=TOL)
                    if p == 1:
                        assert agreement(want, got)


def test_backoff_can_beat_the_explicit_ngram(tmp_path: Path) -> None:
    """The characterised difference, on a hand-made case: the explicit bigram '0 1' costs
    more than backing off from (0) and taking unigram '1', so the WFST scores '1' after '0'
    higher than KenLM does (and can rank it first where the exact backend does not)."""
    text = TRIGRAM.replace("-0.2\t0 1\t-0.2", "-1.9\t0 1\t-0.2")
    path = tmp_path / "beat.arpa"
    path.write_text(text, encoding="utf-8")
    lm = NgramLM(path)
    wfst = WfstRescorer.from_arpa(path, alpha=1.0, cache_dir=tmp_path)
    exact = NgramRescorer(lm, alpha=1.0)
    lattice = SausageLattice(tokens=np.array([[1, 2]]), scores=np.log(np.array([[0.55, 0.45]])))
    got, want = wfst.rescore(lattice, [0], 2), exact.rescore(lattice, [0], 2)
    kenlm_1 = -1.9 * LN10
    wfst_1 = (-0.25 - 0.7) * LN10  # back-off of (0) + unigram '1'
    assert want.tokens[:, 0].tolist() == [2, 1]  # exact: '2' after '0' is likelier
    assert got.tokens[:, 0].tolist() == [1, 2]  # WFST: the back-off route makes '1' win
    assert got.lm_scores[0] == pytest.approx(wfst_1, abs=TOL)
    assert want.lm_scores[1] == pytest.approx(kenlm_1, abs=TOL)
    assert not agreement(want, got)


@pytest.mark.parametrize("order", [2, 3, 4, 5])
def test_context_walk_is_kenlm_right_state(
    order: int, arpa_lms: dict[int, Path], word_corpus: WordCorpus, cache: Path
) -> None:
    """(e) The state found for a context is KenLM's right state after that context."""
    wfst = WfstRescorer.from_arpa(arpa_lms[order], cache_dir=cache)
    cs = wfst.context_states
    assert cs is not None and cs.order == order
    assert wfst.fst is wfst.lm.fst  # one owner: set_start never copies the LM
    model = kenlm.Model(str(arpa_lms[order]))
    rng = np.random.default_rng(order)
    text = np.concatenate([word_corpus.train[i] for i in range(0, 300, 3)])
    for source in (text, word_corpus.held_out):
        for _ in range(150):
            end = int(rng.integers(order, source.size))
            context = source[end - int(rng.integers(1, 8)):end]
            if rng.random() < 0.1:
                context = np.concatenate([context[:-1], [10**6], context[-1:]])
            state, history = cs.match(context)
            words = [str(t) for t in context.tolist()]
            full = kenlm_state(model, words[-(order - 1):], bos=False)
            assert kenlm_state(model, [str(t) for t in history], bos=False) == full
            assert tuple(context.tolist()[len(context) - len(history):]) == history
            assert state == wfst.start_state(context)
    assert cs.match([]) == (cs.bos_state, (BOS_CODE,))
    assert wfst.start_state([]) == cs.bos_state


@st.composite
def small_lattices(draw: st.DrawFn, vocab: int = 8) -> SausageLattice:
    """1-4 slots of 1-3 arcs over ids 0..vocab-1 (ragged), scores with ties allowed."""
    h = draw(st.integers(1, 4))
    counts = [draw(st.integers(1, 3)) for _ in range(h)]
    k = max(counts)
    tokens = np.full((h, k), -1, dtype=np.int64)
    scores = np.full((h, k), -np.inf)
    for i, n in enumerate(counts):
        tokens[i, :n] = draw(st.lists(st.integers(0, vocab - 1), min_size=n, max_size=n,
                                      unique=True))
        scores[i, :n] = sorted(draw(st.lists(st.sampled_from([-4.0, -2.5, -1.0, -0.3, 0.0]),
                                             min_size=n, max_size=n)), reverse=True)
    return SausageLattice(tokens=tokens, scores=scores)


@pytest.fixture(scope="module")
def hand_lms(monotone: Path, tmp_path_factory: pytest.TempPathFactory, cache: Path) -> list:
    tri = tmp_path_factory.mktemp("tri") / "tri.arpa"
    tri.write_text(TRIGRAM, encoding="utf-8")
    return [
        (WfstRescorer.from_arpa(path, alpha=1.0, cache_dir=cache), NgramLM(path),
         WfstSemantics(path))
        for path in (tri, monotone)
    ]


@settings(max_examples=80, deadline=None)
@given(
    lattice=small_lattices(),
    context=st.lists(st.integers(0, 9), max_size=4),
    alpha=st.sampled_from([0.1, 0.5, 1.0, 2.5]),
    p=st.integers(1, 90),
    which=st.integers(0, 1),
)
def test_property_topp_is_brute_force_of_wfst_semantics(
    hand_lms: list, lattice: SausageLattice, context: list[int], alpha: float, p: int,
    which: int,
) -> None:
    """On hand-made LMs (with unknown ids 3..9 for the trigram): distinct strings, scores =
    the brute-force top p of the WFST semantics, LM score never below KenLM's."""
    base, lm, sem = hand_lms[which]
    wfst = WfstRescorer(base.fst, alpha=alpha, context_states=base.context_states)
    got = wfst.rescore(lattice, context, p)
    brute = sorted((head + alpha * sem.lm(context, toks) for head, toks in all_paths(lattice)),
                   reverse=True)
    assert len(got) == min(p, lattice.num_paths)
    rows = [tuple(r) for r in got.tokens.tolist()]
    assert len(set(rows)) == len(rows)
    np.testing.assert_allclose(got.scores, brute[:len(got)], atol=TOL)
    for row, lm_ln in zip(rows, got.lm_scores, strict=True):
        assert lm_ln >= float(lm.score(row, context).sum()) - TOL


# ---------------------------------------------------------------------------- unknown tokens
def test_unknown_tokens_follow_kenlm_unk(arpa_lms: dict[int, Path], cache: Path) -> None:
    arpa = arpa_lms[3]
    lm = NgramLM(arpa)
    big = lm.max_token_id + 10
    lattice = SausageLattice(
        tokens=np.array([[big, 3], [big + 1, big + 2], [5, big + 3]]),
        scores=np.log(np.array([[0.6, 0.4], [0.7, 0.3], [0.5, 0.5]])),
    )
    wfst = WfstRescorer.from_arpa(arpa, alpha=1.0, cache_dir=cache)
    for context in ([], [3, 4], [big]):
        got = wfst.rescore(lattice, context, 8)
        assert len(got) == 8  # no path is dropped for holding an unknown token
        for row, lm_ln in zip(got.tokens.tolist(), got.lm_scores, strict=True):
            exact = float(lm.score(row, context).sum())
            assert lm_ln >= exact - TOL
            if all(t >= big for t in row):  # only <unk>: back-off chains, then resets
                assert lm_ln == pytest.approx(exact, abs=TOL)
    only_unknown = SausageLattice(tokens=np.array([[big], [big + 1]]), scores=np.zeros((2, 1)))
    for context in ([], [3, 4, 5]):
        got = wfst.rescore(only_unknown, context, 1)
        exact = float(lm.score(got.tokens[0], context).sum())
        assert got.lm_scores[0] == pytest.approx(exact, abs=TOL)
    strict = WfstRescorer.from_arpa(arpa, alpha=1.0, cache_dir=cache, unknown="error")
    with pytest.raises(RescorerError, match=f"token id {big} .slot 1. is not in the LM"):
        strict.rescore(lattice, [], 1)
    known = SausageLattice(tokens=np.array([[3, 4]]), scores=np.log([[0.5, 0.5]]))
    assert len(strict.rescore(known, [big, 3, 4], 2)) == 2  # only the last order-1 count
    with pytest.raises(RescorerError, match=f"context token id {big} is not in the LM"):
        strict.rescore(known, [3, big], 1)
    with pytest.raises(RescorerError, match=f"token id {big} is not in the LM"):
        NgramRescorer(NgramLM(arpa, unknown="error")).rescore(known, [3, big], 1)  # the same
    with pytest.raises(RescorerError, match="needs backend='exact'"):
        WfstRescorer.from_arpa(arpa, cache_dir=cache, unknown=-10.0)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- user FSTs
def test_user_grammar_restricts_the_drafts() -> None:
    """(f) A grammar acceptor: only its strings come out, ranked by head - alpha * cost."""
    rng = np.random.default_rng(11)
    lattice = random_lattice(rng, h=3, k=4, vocab=20)
    paths = all_paths(lattice)
    chosen = [paths[i] for i in rng.choice(len(paths), 4, replace=False)]
    weights = [0.0, 1.5, 0.25, 3.0]
    grammar = pynini.union(*[
        pynini.accep("".join(f"[{t + 1}]" for t in toks), weight=w)
        for (_, toks), w in zip(chosen, weights, strict=True)
    ] + [pynini.accep("[1][2]")]).optimize()  # a string of the wrong length: never matches
    start_before = grammar.start()
    for alpha in (0.5, 2.0):
        got = WfstRescorer(grammar, alpha=alpha).rescore(lattice, [1, 2, 3], p=10)
        want = sorted(
            ((head - alpha * w, toks, -w) for (head, toks), w in zip(chosen, weights, strict=True)),
            reverse=True,
        )
        assert len(got) == 4 and got.exhausted and got.requested == 10
        assert [tuple(r) for r in got.tokens.tolist()] == [t for _, t, _ in want]
        np.testing.assert_allclose(got.scores, [s for s, _, _ in want], atol=TOL)
        np.testing.assert_allclose(got.lm_scores, [lm for _, _, lm in want], atol=TOL)
    assert grammar.start() == start_before
    nothing = pynini.accep("[1][1][1]")
    with pytest.raises(RescorerError, match="accepts no path"):
        WfstRescorer(nothing).rescore(lattice, [], 1)


def test_user_fst_is_copied_and_sorted_not_mutated() -> None:
    fst = pywrapfst.VectorFst()
    fst.add_states(2)
    fst.set_start(0)
    fst.set_final(1, 0.0)
    for label in (5, 3, 4):
        fst.add_arc(0, pywrapfst.Arc(label, label, 0.1 * label, 1))
    before = [a.ilabel for a in fst.arcs(0)]
    r = WfstRescorer(fst, alpha=1.0)
    lattice = SausageLattice(tokens=np.array([[2, 3, 4]]), scores=np.log([[0.5, 0.3, 0.2]]))
    got = r.rescore(lattice, [], 3)
    assert got.tokens[:, 0].tolist() == [2, 3, 4]  # labels 3, 4, 5
    assert [a.ilabel for a in fst.arcs(0)] == before == [5, 3, 4]


def test_argument_errors(tmp_path: Path, monotone: Path) -> None:
    fst = pynini.accep("[2]")
    with pytest.raises(RescorerError, match="alpha must be"):
        WfstRescorer(fst, alpha=-1.0)
    with pytest.raises(RescorerError, match="alpha must be"):
        WfstRescorer(fst, alpha=float("nan"))
    with pytest.raises(RescorerError, match="tropical"):
        WfstRescorer(pywrapfst.arcmap(fst, map_type="to_log"))
    with pytest.raises(RescorerError, match="no start state"):
        WfstRescorer(pywrapfst.VectorFst())
    with pytest.raises(RescorerError, match="pywrapfst or pynini FST"):
        WfstRescorer("not an fst")
    r = WfstRescorer(fst)
    lattice = SausageLattice(tokens=np.array([[1]]), scores=np.zeros((1, 1)))
    with pytest.raises(RescorerError, match="p must be"):
        r.rescore(lattice, [], 0)
    with pytest.raises(RescorerError, match="SausageLattice"):
        r.rescore(np.zeros((1, 1)), [], 1)  # type: ignore[arg-type]
    with pytest.raises(RescorerError, match="does not exist"):
        WfstRescorer.from_arpa(tmp_path / "nope.arpa", cache_dir=tmp_path)


def test_alpha_zero_is_the_lattice_pbest(monotone: Path, cache: Path) -> None:
    lattice = random_lattice(np.random.default_rng(5), h=3, k=3, vocab=6)
    got = WfstRescorer.from_arpa(monotone, alpha=0.0, cache_dir=cache).rescore(lattice, [1], 7)
    want = lattice.best_paths(7)
    np.testing.assert_array_equal(got.tokens, want.tokens)
    np.testing.assert_allclose(got.scores, want.scores)
    assert got.source == "ngram-wfst" and not got.lm_scores.any()


def test_ngram_rescorer_wfst_backend(monotone: Path, tmp_path: Path) -> None:
    """The contract NgramRescorer relies on: from_arpa(path, alpha, cache_dir).rescore(...)."""
    lattice = random_lattice(np.random.default_rng(9), h=3, k=3, vocab=6)
    r = NgramRescorer(NgramLM(monotone), alpha=1.0, backend="wfst", wfst_cache=tmp_path)
    got = r.rescore(lattice, [1, 2], 3)
    want = NgramRescorer(NgramLM(monotone), alpha=1.0).rescore(lattice, [1, 2], 3)
    assert got.source == "ngram-wfst" and agreement(want, got)
    assert any(p.suffix == ".fst" for p in tmp_path.iterdir())


# ---------------------------------------------------------------------------- agreement
def test_agreement_rate_on_hits_heavy_lattices(
    arpa_lms: dict[int, Path], word_corpus: WordCorpus, cache: Path
) -> None:
    """exact vs WFST on 50 hits-heavy 6x8 lattices of the 4-gram LM (printed with -s)."""
    arpa = arpa_lms[4]
    wfst = WfstRescorer.from_arpa(arpa, alpha=1.0, cache_dir=cache)
    exact = NgramRescorer(NgramLM(arpa), alpha=1.0)
    rng = np.random.default_rng(2024)
    held = word_corpus.held_out
    agree = {1: 0, 4: 0}
    n = 50
    for _ in range(n):
        pos = int(rng.integers(10, held.size - 6))
        lattice = hits_lattice(rng, held[pos:pos + 6], 8, word_corpus.unigram)
        context = held[pos - 10:pos]
        for p in agree:
            agree[p] += agreement(exact.rescore(lattice, context, p),
                                  wfst.rescore(lattice, context, p))
    rates = {p: a / n for p, a in agree.items()}
    print(f"\nexact-vs-wfst agreement, 4-gram pydoc LM, 50 hits-heavy 6x8 lattices: {rates}")
    assert rates[1] >= 0.5
