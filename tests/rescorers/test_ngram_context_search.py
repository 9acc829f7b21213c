"""The context LM inside the exact p-best search: the native search, the Python search and brute
force (every path of the lattice scored token by token with the interpolated LM, from the
definitions) agree; ``context_weight = 0`` is the plain rescorer bit for bit; the rescorer's
incremental context LM equals a fresh one; the WFST backend's n-best re-ranking equals the
exact search where the exact answer is in its n-best list."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from pathlib import Path

import kenlm
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_ngram_context import RefWittenBell

from blockdraft.core.batch import DraftBatch
from blockdraft.lattice import SausageLattice
from blockdraft.lattice.synthetic import hits_heavy as hits_lattice
from blockdraft.rescorers.base import RescorerError
from blockdraft.rescorers.ngram import NgramLM, NgramRescorer
from blockdraft.rescorers.ngram import native as native_mod
from blockdraft.rescorers.ngram.wfst import WfstRescorer, nbest_size
from ngram_testlib import WordCorpus

LN10 = math.log(10.0)
TOL = 1e-9
ENGINES = ["native", "kenlm"] if native_mod.available() else ["kenlm"]
needs_native = pytest.mark.skipif(not native_mod.available(),
                                  reason="native library not built (run `make setup`)")


# ---------------------------------------------------------------------------- brute force
def kenlm_token_scores(model: kenlm.Model, order: int, context: Sequence[int],
                       path: Sequence[int], unk_ln: float | None) -> list[float]:
    """ln P_kenlm of each token of the path (the kenlm module, NgramLM's start convention)."""
    state, nxt = kenlm.State(), kenlm.State()
    if len(context) == 0:
        model.BeginSentenceWrite(state)
    else:
        model.NullContextWrite(state)
        for t in list(context)[-(order - 1):] if order > 1 else []:
            model.BaseScore(state, str(int(t)), nxt)
            state, nxt = nxt, state
    out = []
    for t in path:
        s = model.BaseScore(state, str(int(t)), nxt) * LN10
        if unk_ln is not None and str(int(t)) not in model:
            s = unk_ln
        out.append(s)
        state, nxt = nxt, state
    return out


def interpolated(kenlm_ln: float, pc: float, lam: float) -> float:
    """ln(lam P_ctx + (1 - lam) P_kenlm), straight from the formula."""
    p = lam * pc + (1.0 - lam) * math.exp(kenlm_ln)
    return math.log(p) if p > 0 else -math.inf


def brute_force(lattice: SausageLattice, model: kenlm.Model, order: int, context: np.ndarray,
                alpha: float, lam: float, ctx_order: int, unk_ln: float | None = None
                ) -> list[tuple[float, float, float, tuple[int, ...]]]:
    """Every path as (total, head, lm, tokens), best first."""
    ref = RefWittenBell(context.tolist(), ctx_order)
    slots = [lattice.slot(i) for i in range(lattice.h)]
    out = []
    for arcs in itertools.product(*[range(len(t)) for t, _ in slots]):
        toks = tuple(int(slots[i][0][a]) for i, a in enumerate(arcs))
        head = sum(float(slots[i][1][a]) for i, a in enumerate(arcs))
        kl = kenlm_token_scores(model, order, context, toks, unk_ln)
        hist = tuple(context.tolist())
        lm = 0.0
        for j, t in enumerate(toks):
            lm += interpolated(kl[j], ref.prob(t, hist + toks[:j]), lam)
        total = head + alpha * lm if alpha else head
        out.append((total, head, lm, toks))
    out.sort(key=lambda x: -x[0])
    return out


def close(a: float, b: float, tol: float = TOL) -> bool:
    return a == b or abs(a - b) <= tol


def assert_matches_brute(batch: DraftBatch, brute: list, p: int) -> None:
    n = min(p, len(brute))
    assert batch.p == n
    np.testing.assert_allclose(batch.scores, [b[0] for b in brute[:n]], rtol=0, atol=TOL)
    by_path = {b[3]: b for b in brute}
    rows = [tuple(r) for r in batch.tokens.tolist()]
    assert len(set(rows)) == n
    for row, total, head, lm in zip(rows, batch.scores, batch.head_scores, batch.lm_scores,
                                    strict=True):
        ref = by_path[row]
        assert close(total, ref[0]) and close(head, ref[1]) and close(lm, ref[2]), (row, ref)
    if n < len(brute):  # ties aside, exactly the top n
        cutoff = brute[n - 1][0]
        for b in brute:
            if b[3] not in set(rows):
                assert b[0] <= cutoff + TOL


def copy_case(rng: np.random.Generator, corpus: WordCorpus, h: int, k: int, *,
              vocab_extra: int = 0) -> tuple[SausageLattice, np.ndarray]:
    """A lattice over held-out text whose true span, and more, the context copies: the
    context is a 'prompt' holding the span's surroundings, some other text, then the tokens
    just before the span (so the context LM predicts the span, and the distractors are often
    in it too). ``vocab_extra`` > 0 puts ids the LM does not know into the lattice and context."""
    held = corpus.held_out
    pos = int(rng.integers(40, held.size - h - 20))
    lat = hits_lattice(rng, held[pos:pos + h], k, corpus.unigram,
                       certain_first=bool(rng.integers(2)))
    prompt = held[pos - 10:pos + h + 4]
    other = held[int(rng.integers(0, held.size - 30)):][:20]
    context = np.concatenate([prompt, other, held[pos - 3:pos]])
    if vocab_extra:
        unknown = corpus.vocab_size + 10 + np.arange(vocab_extra)
        tokens = lat.tokens.copy()
        scores = lat.scores
        for i in range(1, h):  # a slot's last real arc becomes an unknown id
            n = int((tokens[i] >= 0).sum())
            tokens[i, n - 1] = unknown[i % vocab_extra]
        lat = SausageLattice(tokens=tokens, scores=scores)
        context = np.concatenate([context[:10], unknown, context[10:], unknown[:1]])
    return lat, context


# ---------------------------------------------------------------------------- exact search
SHAPES = [(4, 4), (3, 5), (5, 3)]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("ctx_order", [1, 2, 3, 5])
@pytest.mark.parametrize("lam", [0.0, 0.3, 1.0])
def test_exact_search_matches_brute_force(engine: str, ctx_order: int, lam: float,
                                          arpa_lms: dict[int, Path],
                                          word_corpus: WordCorpus) -> None:
    lm = NgramLM(arpa_lms[3], engine=engine)
    model = kenlm.Model(str(arpa_lms[3]))
    rng = np.random.default_rng(ctx_order * 10 + int(lam * 10))
    for case, (h, k) in enumerate(SHAPES):
        lat, context = copy_case(rng, word_corpus, h, k)
        alpha = [1.0, 0.5, 2.0][case]
        brute = brute_force(lat, model, 3, context, alpha, lam, ctx_order)
        for p in (1, 4):
            for beam in ((0, 8) if engine == "native" else (8,)):
                r = NgramRescorer(lm, alpha=alpha, prune_beam=beam, context_weight=lam,
                                  context_order=ctx_order)
                assert_matches_brute(r.rescore(lat, context, p), brute, p)


@pytest.mark.parametrize("order", [2, 4, 5])
def test_native_equals_python_engine(order: int, arpa_lms: dict[int, Path],
                                     word_corpus: WordCorpus) -> None:
    """Native and Python searches: the same scores and, without pruning, the same number of
    (KenLM state, context state) pairs after each slot."""
    if not native_mod.available():
        pytest.skip("native library not built (run `make setup`)")
    nat_lm = NgramLM(arpa_lms[order], engine="native", bounds=False)
    py_lm = NgramLM(arpa_lms[order], engine="kenlm")
    rng = np.random.default_rng(order)
    for case in range(4):
        lat, context = copy_case(rng, word_corpus, 6, 5)
        kw = dict(alpha=1.0, context_weight=[0.3, 0.7][case % 2], context_order=4)
        nat = NgramRescorer(nat_lm, prune_beam=0, **kw)
        py = NgramRescorer(py_lm, **kw)
        for p in (1, 4, 16):
            a, b = nat.rescore(lat, context, p), py.rescore(lat, context, p)
            np.testing.assert_allclose(a.scores, b.scores, rtol=0, atol=TOL)
            np.testing.assert_allclose(a.lm_scores, b.lm_scores, rtol=0, atol=TOL)
            np.testing.assert_array_equal(nat.last_stats.states, py.last_stats.states)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("unknown", ["unk", -20.0])
def test_tokens_unknown_to_kenlm_stay_distinct_in_the_context_lm(
    engine: str, unknown: str | float, arpa_lms: dict[int, Path], word_corpus: WordCorpus
) -> None:
    """Ids the LM does not know are all KenLM's <unk> (index 0) but distinct tokens for the
    context LM: the brute force scores them as such."""
    lm = NgramLM(arpa_lms[3], engine=engine, unknown=unknown)
    model = kenlm.Model(str(arpa_lms[3]))
    rng = np.random.default_rng(5)
    unk_ln = unknown if isinstance(unknown, float) else None
    for _ in range(3):
        lat, context = copy_case(rng, word_corpus, 4, 4, vocab_extra=3)
        for lam in (0.3, 1.0):
            brute = brute_force(lat, model, 3, context, 1.0, lam, 3, unk_ln)
            r = NgramRescorer(lm, alpha=1.0, context_weight=lam, context_order=3)
            for p in (1, 4):
                assert_matches_brute(r.rescore(lat, context, p), brute, p)


@pytest.mark.parametrize("engine", ENGINES)
def test_weight_or_order_zero_is_the_plain_rescorer_bit_for_bit(
    engine: str, arpa_lms: dict[int, Path], word_corpus: WordCorpus
) -> None:
    lm = NgramLM(arpa_lms[4], engine=engine)
    plain = NgramRescorer(lm, alpha=0.8)
    off = [NgramRescorer(lm, alpha=0.8, context_weight=0.0, context_order=4),
           NgramRescorer(lm, alpha=0.8, context_weight=0.5, context_order=0)]
    rng = np.random.default_rng(3)
    for _ in range(5):
        lat, context = copy_case(rng, word_corpus, 5, 6)
        for p in (1, 4, 16):
            want = plain.rescore(lat, context, p)
            for r in off:
                got = r.rescore(lat, context, p)
                np.testing.assert_array_equal(got.tokens, want.tokens)
                np.testing.assert_array_equal(got.scores, want.scores)
                np.testing.assert_array_equal(got.lm_scores, want.lm_scores)
                np.testing.assert_array_equal(got.head_scores, want.head_scores)


@pytest.mark.parametrize("engine", ENGINES)
def test_context_lm_changes_the_drafts(engine: str, arpa_lms: dict[int, Path],
                                       word_corpus: WordCorpus) -> None:
    """The context LM matters on these cases: the copied span wins more often with it."""
    lm = NgramLM(arpa_lms[3], engine=engine)
    plain = NgramRescorer(lm, alpha=1.0)
    ctx = NgramRescorer(lm, alpha=1.0, context_weight=0.5)
    rng = np.random.default_rng(11)
    wins = [0, 0]
    for _ in range(20):
        lat, context = copy_case(rng, word_corpus, 5, 5)
        a, b = plain.rescore(lat, context, 1), ctx.rescore(lat, context, 1)
        span = context[10:10 + lat.h]  # the lattice's true path, copied in the prompt
        wins[0] += bool(np.array_equal(a.tokens[0], span))
        wins[1] += bool(np.array_equal(b.tokens[0], span))
    assert wins[1] > wins[0]


@pytest.mark.parametrize("engine", ENGINES)
def test_lm_scores_are_the_interpolated_lm(engine: str, arpa_lms: dict[int, Path],
                                           word_corpus: WordCorpus) -> None:
    lm = NgramLM(arpa_lms[4], engine=engine)
    r = NgramRescorer(lm, alpha=0.7, context_weight=0.4)
    rng = np.random.default_rng(8)
    lat, context = copy_case(rng, word_corpus, 5, 4)
    batch = r.rescore(lat, context, 8)
    np.testing.assert_allclose(r.draft_lm_scores(batch.tokens, context), batch.lm_scores,
                               rtol=0, atol=TOL)
    np.testing.assert_allclose(batch.scores, batch.head_scores + 0.7 * batch.lm_scores,
                               rtol=0, atol=TOL)


@pytest.mark.parametrize("engine", ENGINES)
def test_incremental_context_equals_a_fresh_rescorer(engine: str, arpa_lms: dict[int, Path],
                                                     word_corpus: WordCorpus) -> None:
    """A decode: the context grows by each step's accepted tokens (and once restarts with
    another text, once shrinks, once repeats): the rescorer counting only new tails gives
    exactly what a fresh rescorer gives."""
    lm = NgramLM(arpa_lms[3], engine=engine)
    kw = dict(alpha=1.0, context_weight=0.4, context_order=3)
    running = NgramRescorer(lm, **kw)
    held = word_corpus.held_out
    rng = np.random.default_rng(4)
    start, end = 200, 203
    steps = []
    for step in range(12):
        end += int(rng.integers(0, 4))
        if step == 5:
            start, end = 900, 930  # another text: rebuilt
        if step == 8:
            end -= 2  # a shorter context: rebuilt
        steps.append(held[start:end])
        if step == 9:
            steps.append(held[start:end])  # the same context twice
    for context in steps:
        lat = hits_lattice(rng, held[context.size + start: context.size + start + 4], 4,
                           word_corpus.unigram)
        fresh = NgramRescorer(lm, **kw)
        for p in (1, 4):
            a, b = running.rescore(lat, context, p), fresh.rescore(lat, context, p)
            np.testing.assert_array_equal(a.tokens, b.tokens)
            np.testing.assert_array_equal(a.scores, b.scores)
            np.testing.assert_array_equal(a.lm_scores, b.lm_scores)


@needs_native
@pytest.mark.parametrize("p", [1, 4, 16])
def test_bounded_search_equals_exhaustive_with_context(p: int, arpa_lms: dict[int, Path],
                                                       word_corpus: WordCorpus) -> None:
    """With a context LM the beam pre-pass, its memo, the future bounds and the batched KenLM
    probes still give exactly the exhaustive search's result, and still cut work."""
    lm = NgramLM(arpa_lms[4])
    rng = np.random.default_rng(200 + p)
    pruned = False
    for case in range(12):
        lat, context = copy_case(rng, word_corpus, 8, 12)
        kw = dict(alpha=1.0, context_weight=[0.2, 0.5, 1.0][case % 3], context_order=4)
        full = NgramRescorer(lm, prune_beam=0, **kw)
        for beam in (1, 8):
            bounded = NgramRescorer(lm, prune_beam=beam, **kw)
            a, b = full.rescore(lat, context, p), bounded.rescore(lat, context, p)
            np.testing.assert_allclose(a.scores, b.scores, rtol=0, atol=TOL)
            np.testing.assert_allclose(a.lm_scores, b.lm_scores, rtol=0, atol=TOL)
            pruned |= bool(bounded.last_stats.lookups.sum() < full.last_stats.lookups.sum())
    assert pruned


@needs_native
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), lam=st.sampled_from([0.05, 0.5, 0.95, 1.0]),
       ctx_order=st.integers(1, 6), p=st.integers(1, 6))
def test_property_native_equals_brute_force(seed: int, lam: float, ctx_order: int, p: int,
                                            arpa_lms: dict[int, Path],
                                            word_corpus: WordCorpus) -> None:
    """Random small lattices over a few frequent tokens and contexts made of the same tokens
    (many shared n-grams, many context states)."""
    rng = np.random.default_rng(seed)
    common = np.argsort(-word_corpus.unigram)[:8]
    h, k = int(rng.integers(1, 5)), int(rng.integers(1, 5))
    tokens = np.array([rng.choice(common, k, replace=False) for _ in range(h)])
    scores = np.sort(np.log(rng.dirichlet(np.ones(k), size=h)), axis=1)[:, ::-1]
    lat = SausageLattice(tokens=tokens, scores=scores)
    context = rng.choice(common, size=int(rng.integers(0, 40)))
    lm = NgramLM(arpa_lms[4])
    model = kenlm.Model(str(arpa_lms[4]))
    brute = brute_force(lat, model, 4, context, 1.0, lam, ctx_order)
    r = NgramRescorer(lm, alpha=1.0, context_weight=lam, context_order=ctx_order)
    assert_matches_brute(r.rescore(lat, context, p), brute, p)


def test_bad_context_arguments_raise(arpa_lms: dict[int, Path]) -> None:
    lm = NgramLM(arpa_lms[2])
    for bad in (-0.1, 1.5, float("nan"), "x"):
        with pytest.raises(RescorerError, match="context_weight"):
            NgramRescorer(lm, context_weight=bad)
    for bad_order in (-1, 17, 2.5):
        with pytest.raises(RescorerError, match="context_order"):
            NgramRescorer(lm, context_weight=0.5, context_order=bad_order)


@needs_native
def test_native_refuses_ids_beyond_uint32(arpa_lms: dict[int, Path]) -> None:
    lm = NgramLM(arpa_lms[2], engine="native")
    r = NgramRescorer(lm, context_weight=0.5)
    big = SausageLattice(tokens=np.array([[1, 2**32]]), scores=np.array([[-0.1, -2.0]]))
    small = SausageLattice(tokens=np.array([[1, 2]]), scores=np.array([[-0.1, -2.0]]))
    with pytest.raises(RescorerError, match="too large"):
        r.rescore(big, [1, 2, 3], 1)
    with pytest.raises(RescorerError, match="too large"):
        r.rescore(small, [1, 2**32], 1)
    # the failed update left nothing half-counted: the next call rebuilds
    want = NgramRescorer(lm, context_weight=0.5).rescore(small, [1, 2], 2)
    got = r.rescore(small, [1, 2], 2)
    np.testing.assert_array_equal(got.scores, want.scores)


# ---------------------------------------------------------------------------- WFST backend
def test_wfst_reranking_equals_exact_when_the_answer_is_in_its_nbest(
    arpa_lms: dict[int, Path], word_corpus: WordCorpus, tmp_path: Path
) -> None:
    """The WFST's n-best list re-ranked with the interpolated LM: where the exact top p are all
    among the WFST's own top max(4p, 16), the re-ranked result is the exact one."""
    pytest.importorskip("pynini")
    arpa = arpa_lms[3]
    lm = NgramLM(arpa)
    rng = np.random.default_rng(21)
    compared = reranked = 0
    for case in range(16):
        lat, context = copy_case(rng, word_corpus, 4, 4)
        lam = [0.1, 0.3, 0.6, 1.0][case % 4]
        exact = NgramRescorer(lm, alpha=1.0, context_weight=lam, context_order=3)
        wfst = NgramRescorer(lm, alpha=1.0, backend="wfst", wfst_cache=tmp_path,
                             context_weight=lam, context_order=3)
        plain_wfst = WfstRescorer.from_arpa(arpa, alpha=1.0, cache_dir=tmp_path)
        for p in (1, 4):
            want = exact.rescore(lat, context, p)
            got = wfst.rescore(lat, context, p)
            assert got.p == want.p and got.source == "ngram-wfst"
            # the returned drafts are scored exactly, whatever the ranking
            np.testing.assert_allclose(got.lm_scores, exact.draft_lm_scores(got.tokens,
                                                                             context),
                                       rtol=0, atol=TOL)
            nbest = plain_wfst.rescore(lat, context, nbest_size(p))
            pool = {tuple(r) for r in nbest.tokens.tolist()}
            if all(tuple(r) in pool for r in want.tokens.tolist()):
                compared += 1
                reranked += not np.array_equal(got.tokens, nbest.tokens[:p])
                np.testing.assert_allclose(got.scores, want.scores, rtol=0, atol=TOL)
                for row, s in zip(want.tokens.tolist(), want.scores, strict=True):
                    # same strings up to ties
                    if sum(close(s, t) for t in want.scores) == 1:
                        assert row in got.tokens.tolist()
    assert compared >= 10
    assert reranked >= 5  # the context LM changed the WFST's own ranking there


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("lam", [0.0, 0.4])
def test_path_scorer_is_the_rescorers_lm_token_by_token(engine: str, lam: float,
                                                       arpa_lms: dict[int, Path],
                                                       word_corpus: WordCorpus) -> None:
    """What the cost-aware tree reads of a rescorer: the same interpolated LM as its drafts'
    lm_scores, one token after a path, for several candidates at once."""
    lm = NgramLM(arpa_lms[4], engine=engine)
    r = NgramRescorer(lm, alpha=0.7, context_weight=lam)
    scorer = r.path_scorer()
    rng = np.random.default_rng(11)
    for _ in range(3):
        lat, context = copy_case(rng, word_corpus, 5, 4)
        rows = r.rescore(lat, context, 4).tokens
        for row in rows:
            for cut in range(1, row.size):
                want = [r.draft_lm_scores(np.append(row[:cut], c)[None], context)[0]
                        - r.draft_lm_scores(row[:cut][None], context)[0]
                        for c in lat.tokens[cut][lat.tokens[cut] >= 0]]
                got = scorer.next_scores(row[:cut], context, lat.tokens[cut][lat.tokens[cut] >= 0])
                np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)
        np.testing.assert_allclose(scorer.score(rows[0], context).sum(),
                                   r.draft_lm_scores(rows[:1], context)[0], atol=1e-9)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("lam", [0.0, 0.4, 1.0])
def test_score_tree_equals_next_scores_node_by_node(engine: str, lam: float,
                                                    arpa_lms: dict[int, Path],
                                                    word_corpus: WordCorpus) -> None:
    from blockdraft.core.tree import DraftTree

    lm = NgramLM(arpa_lms[3], engine=engine)
    scorer = NgramRescorer(lm, context_weight=lam, context_order=3).path_scorer()
    rng = np.random.default_rng(5)
    for _ in range(4):
        lat, context = copy_case(rng, word_corpus, 5, 3)
        batch = lat.best_paths(6)
        same = batch.tokens[batch.tokens[:, 0] == batch.tokens[0, 0]]  # one root
        tree = DraftTree(tokens=same[0], parents=np.arange(-1, same.shape[1] - 1),
                         scores=np.zeros(same.shape[1]))
        if same.shape[0] > 1:
            tree = DraftTree.from_drafts(DraftBatch(
                tokens=same, scores=np.zeros(len(same)), head_scores=np.zeros(len(same)),
                lm_scores=np.zeros(len(same)), requested=len(same)))
        got = scorer.score_tree(tree.tokens, tree.parents, context)
        for u in range(1, tree.num_nodes):
            path = tree.path_tokens(int(tree.parents[u]))
            want = scorer.next_scores(path, context, tree.tokens[u:u + 1])[0]
            assert close(got[u], want, 1e-9) or got[u] == want == -math.inf
        context = np.append(context, lat.tokens[:, 0][lat.tokens[:, 0] >= 0])  # the next step
