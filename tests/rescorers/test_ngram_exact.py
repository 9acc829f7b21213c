"""The exact backend against brute force: enumerate all k^h paths, score each with KenLM."""

from __future__ import annotations

import itertools
import math

import kenlm
import numpy as np
import pytest

from blockdraft.lattice import SausageLattice
from blockdraft.lattice.synthetic import hits_heavy as hits_lattice
from blockdraft.rescorers.ngram import NgramLM, NgramRescorer
from blockdraft.rescorers.ngram import native as native_mod

LN10 = math.log(10.0)


def kenlm_path_score(model: kenlm.Model, order: int, context, path) -> float:
    """ln P(path | context) scored token by token with the kenlm module (brute force)."""
    state, nxt = kenlm.State(), kenlm.State()
    if len(context) == 0:
        model.BeginSentenceWrite(state)
    else:
        model.NullContextWrite(state)
        for t in list(context)[-(order - 1):]:
            model.BaseScore(state, str(int(t)), nxt)
            state, nxt = nxt, state
    total = 0.0
    for t in path:
        total += model.BaseScore(state, str(int(t)), nxt) * LN10
        state, nxt = nxt, state
    return total


def brute_force(lattice: SausageLattice, model, order, context, alpha):
    """All paths with (total, head, lm, tokens), best first."""
    out = []
    slots = [lattice.slot(i) for i in range(lattice.h)]
    for arcs in itertools.product(*[range(len(t)) for t, _ in slots]):
        toks = tuple(int(slots[i][0][a]) for i, a in enumerate(arcs))
        head = sum(float(slots[i][1][a]) for i, a in enumerate(arcs))
        lm = kenlm_path_score(model, order, context, toks)
        out.append((head + alpha * lm, head, lm, toks))
    out.sort(key=lambda x: -x[0])
    return out


def assert_matches_brute(batch, brute, p, tol=1e-4):
    n = min(p, len(brute))
    assert batch.p == n
    assert batch.exhausted == (p > len(brute))
    # Scores equal the brute-force top-n scores position by position.
    np.testing.assert_allclose(batch.scores, [b[0] for b in brute[:n]], atol=tol)
    # Every returned path is scored exactly as KenLM scores it.
    by_path = {b[3]: b for b in brute}
    for row, total, head, lm in zip(
        batch.tokens.tolist(), batch.scores, batch.head_scores, batch.lm_scores, strict=True
    ):
        ref = by_path[tuple(row)]
        assert abs(total - ref[0]) < tol and abs(head - ref[1]) < tol and abs(lm - ref[2]) < tol
    # Distinct strings, best first.
    assert len({tuple(r) for r in batch.tokens.tolist()}) == n
    assert np.all(np.diff(batch.scores) <= tol)
    # Ties aside, the set is exactly the top n: anything left out scores <= the n-th.
    if n < len(brute):
        returned = {tuple(r) for r in batch.tokens.tolist()}
        cutoff = brute[n - 1][0]
        for b in brute:
            if b[3] not in returned:
                assert b[0] <= cutoff + tol


ENGINES = (
    ["native", "native-nobound", "kenlm"] if native_mod.available() else ["kenlm"]
)
SHAPES = [(4, 4), (6, 3), (3, 8), (2, 5), (1, 6)]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("order", [2, 3, 4, 5])
def test_exact_matches_brute_force(engine, order, arpa_lms, word_corpus):
    beam = 0 if engine == "native-nobound" else 8
    lm = NgramLM(arpa_lms[order], engine=engine.split("-")[0])
    model = kenlm.Model(str(arpa_lms[order]))
    rng = np.random.default_rng(order)
    held = word_corpus.held_out
    for case, (h, k) in enumerate(SHAPES):
        pos = int(rng.integers(20, held.size - 20))
        lat = hits_lattice(rng, held[pos:pos + h], k, word_corpus.unigram)
        contexts = [held[:0], held[pos - 1:pos], held[pos - 12:pos]]
        alpha = [0.0, 0.5, 1.0, 2.5][case % 4]
        context = contexts[case % 3]
        brute = brute_force(lat, model, order, context, alpha)
        for p in sorted({1, 2, 7, len(brute), len(brute) + 5}):
            batch = NgramRescorer(lm, alpha=alpha, prune_beam=beam).rescore(lat, context, p)
            assert_matches_brute(batch, brute, p)


def test_native_and_python_engines_agree(arpa_lms, word_corpus):
    if not native_mod.available():
        pytest.skip("native library not built (run `make setup`)")
    # Without bounds and pruning, the native search meets exactly the Python search's states
    # and makes its lookups, less those from context-free states (a unigram match, no probe).
    nat = NgramRescorer(NgramLM(arpa_lms[4], engine="native", bounds=False), alpha=1.0,
                        prune_beam=0)
    py = NgramRescorer(NgramLM(arpa_lms[4], engine="kenlm"), alpha=1.0)
    rng = np.random.default_rng(7)
    held = word_corpus.held_out
    for _ in range(5):
        pos = int(rng.integers(10, held.size - 10))
        lat = hits_lattice(rng, held[pos:pos + 6], 6, word_corpus.unigram, certain_first=True)
        a = nat.rescore(lat, held[:pos], 16)
        b = py.rescore(lat, held[:pos], 16)
        np.testing.assert_allclose(a.scores, b.scores, atol=1e-9)
        np.testing.assert_array_equal(nat.last_stats.states, py.last_stats.states)
        assert np.all(nat.last_stats.lookups <= py.last_stats.lookups)


def test_alpha_zero_is_pbest_zero_gram(arpa_lms, word_corpus):
    lm = NgramLM(arpa_lms[3])
    rng = np.random.default_rng(3)
    lat = hits_lattice(rng, word_corpus.held_out[100:105], 5, word_corpus.unigram)
    a = NgramRescorer(lm, alpha=0.0).rescore(lat, word_corpus.held_out[:100], 20)
    b = lat.best_paths(20)
    np.testing.assert_allclose(a.scores, b.scores, atol=1e-12)
    np.testing.assert_allclose(a.head_scores, b.head_scores, atol=1e-12)


def test_only_last_order_minus_one_context_tokens_matter(arpa_lms, word_corpus):
    lm = NgramLM(arpa_lms[3])
    r = NgramRescorer(lm, alpha=1.0)
    rng = np.random.default_rng(5)
    held = word_corpus.held_out
    lat = hits_lattice(rng, held[300:304], 4, word_corpus.unigram)
    a = r.rescore(lat, held[250:300], 8)
    b = r.rescore(lat, held[298:300], 8)
    np.testing.assert_allclose(a.scores, b.scores, atol=1e-12)
    # ... but the empty context is the sentence start, which differs from a one-token context.
    c = r.rescore(lat, [], 8)
    d = r.rescore(lat, held[299:300], 8)
    assert not np.allclose(c.lm_scores, d.lm_scores)


def test_binary_and_arpa_give_the_same_drafts(arpa_lms, word_corpus):
    arpa = arpa_lms[4]
    binary = arpa.with_suffix(".bin")
    rng = np.random.default_rng(11)
    held = word_corpus.held_out
    lat = hits_lattice(rng, held[40:48], 8, word_corpus.unigram, certain_first=True)
    a = NgramRescorer(NgramLM(arpa)).rescore(lat, held[:40], 16)
    b = NgramRescorer(NgramLM(binary)).rescore(lat, held[:40], 16)
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_allclose(a.scores, b.scores, atol=1e-5)


def test_lm_score_matches_kenlm_full_score(arpa_lms, word_corpus):
    """NgramLM.score from <s> agrees with kenlm's own full_scores (without </s>)."""
    lm = NgramLM(arpa_lms[4])
    model = kenlm.Model(str(arpa_lms[4]))
    toks = word_corpus.held_out[:30]
    ours = lm.score(toks, context=[])
    theirs = [s for s, _, _ in model.full_scores(" ".join(map(str, toks)), eos=False)]
    np.testing.assert_allclose(ours, np.array(theirs) * LN10, atol=1e-5)


@pytest.mark.parametrize("p", [1, 4, 16])
def test_bounded_search_equals_exhaustive_search(p, arpa_lms, word_corpus):
    """The bound-pruned native search returns exactly what the exhaustive one does."""
    if not native_mod.available():
        pytest.skip("native library not built (run `make setup`)")
    lm = NgramLM(arpa_lms[4])
    full = NgramRescorer(lm, alpha=1.0, prune_beam=0)
    rng = np.random.default_rng(100 + p)
    held = word_corpus.held_out
    pruned_somewhere = False
    for beam in (1, 2, 8):
        bounded = NgramRescorer(lm, alpha=1.0, prune_beam=beam)
        for _ in range(15):
            pos = int(rng.integers(10, held.size - 10))
            lat = hits_lattice(rng, held[pos:pos + 8], 12, word_corpus.unigram,
                               certain_first=True)
            a = full.rescore(lat, held[:pos], p)
            b = bounded.rescore(lat, held[:pos], p)
            np.testing.assert_allclose(a.scores, b.scores, atol=1e-9)
            pruned_somewhere |= bool(
                bounded.last_stats.lookups.sum() < full.last_stats.lookups.sum()
            )
    assert pruned_somewhere  # the bound really cuts work on some lattice


@pytest.mark.parametrize("order", [2, 3, 5])
def test_bounds_change_the_work_not_the_result(order, arpa_lms, word_corpus):
    """With bounds the search skips KenLM probes for token pairs that end no n-gram (and
    prunes); scores must stay bit-for-bit those of plain KenLM lookups."""
    if not native_mod.available():
        pytest.skip("native library not built (run `make setup`)")
    plain = NgramRescorer(NgramLM(arpa_lms[order], bounds=False), alpha=0.7, prune_beam=0)
    fast = NgramRescorer(NgramLM(arpa_lms[order], bounds=True), alpha=0.7)
    rng = np.random.default_rng(order)
    held = word_corpus.held_out
    fewer = False
    for i in range(20):
        pos = int(rng.integers(10, held.size - 10))
        lat = hits_lattice(rng, held[pos:pos + 7], 9, word_corpus.unigram,
                           certain_first=bool(i % 2))
        ctx = held[:pos] if i % 3 else held[:0]
        for p in (1, 5):
            a, b = plain.rescore(lat, ctx, p), fast.rescore(lat, ctx, p)
            np.testing.assert_array_equal(a.tokens, b.tokens)
            np.testing.assert_array_equal(a.scores, b.scores)
            np.testing.assert_array_equal(a.lm_scores, b.lm_scores)
            fewer |= bool(fast.last_stats.lookups.sum() < plain.last_stats.lookups.sum())
    assert fewer
