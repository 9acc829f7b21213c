"""n-gram rescoring at a real model's vocabulary, V = 49,152 (SmolLM2): an ARPA LM over token
ids up to 49,151 (token id t is OpenFst label t + 1), lattices from full [h, V] head logits.
The exact search (native, with and without bounds, and the kenlm engine) equals brute force,
the WFST backend equals the exact search on an LM where back-off never wins, and the
vocabulary check accepts V = 49,152 and refuses smaller models."""

from __future__ import annotations

import itertools
import math
import time
from pathlib import Path

import numpy as np
import pytest

kenlm = pytest.importorskip("kenlm")

from blockdraft.lattice import SausageLattice  # noqa: E402
from blockdraft.rescorers.base import RescorerError  # noqa: E402
from blockdraft.rescorers.ngram import NgramLM, NgramRescorer  # noqa: E402
from blockdraft.rescorers.ngram import native as native_mod  # noqa: E402

V = 49_152
IDS = (0, 1, 17, 4095, 4096, 12_345, 30_000, 49_150, 49_151)
"""The LM's words: token ids across the whole vocabulary, both ends included."""
LN10 = math.log(10.0)
TOL = 1e-4


def monotone_arpa(rng: np.random.Generator, words: tuple[int, ...], order: int = 3) -> str:
    """A prefix- and suffix-closed LM whose back-off routes never beat an explicit n-gram
    (back-off weights 0, every n-gram likelier than its suffix): there the WFST backend's
    epsilon back-off gives exactly KenLM's scores."""
    vocab = [str(w) for w in words]
    grams: list[dict[tuple[str, ...], float]] = [
        {(w,): -float(rng.uniform(1.0, 2.0)) for w in vocab}]
    grams[0].update({("<s>",): -99.0, ("</s>",): -1.5, ("<unk>",): -3.0})
    for n in range(2, order + 1):
        contexts = sorted(g for g in grams[-1] if "</s>" not in g and "<unk>" not in g)
        cur: dict[tuple[str, ...], float] = {}
        for _ in range(len(vocab) * 4):
            g = contexts[rng.integers(len(contexts))] + (vocab[rng.integers(len(vocab))],)
            if g[1:] in grams[n - 2]:
                cur[g] = min(0.0, grams[n - 2][g[1:]] + float(rng.uniform(0.05, 0.6)))
        grams.append(cur)
    lines = ["\\data\\"] + [f"ngram {n}={len(g)}" for n, g in enumerate(grams, 1)] + [""]
    for n, g in enumerate(grams, 1):
        lines.append(f"\\{n}-grams:")
        for ws, prob in sorted(g.items()):
            lines.append(f"{prob:.6f}\t{' '.join(ws)}{chr(9) + '0' if n < order else ''}")
        lines.append("")
    return "\n".join(lines + ["\\end\\", ""])


@pytest.fixture(scope="module")
def arpa(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bigv") / "lm3.arpa"
    path.write_text(monotone_arpa(np.random.default_rng(11), IDS), encoding="utf-8")
    return path


def lattice(rng: np.random.Generator, h: int, k: int) -> SausageLattice:
    """Head logits over all V tokens; the LM's words boosted so each slot's top-k mixes known
    and unknown ids."""
    logits = rng.normal(size=(h, V)).astype(np.float32)
    boost = rng.choice(np.asarray(IDS), size=(h, k - 1))
    for i in range(h):
        logits[i, boost[i]] += 8.0 + rng.uniform(0, 1, size=k - 1).astype(np.float32)
    return SausageLattice.from_logits(logits, k=k)


def kenlm_score(model: object, context: list[int], path: tuple[int, ...]) -> float:
    state, nxt = kenlm.State(), kenlm.State()
    if not context:
        model.BeginSentenceWrite(state)  # type: ignore[attr-defined]
    else:
        model.NullContextWrite(state)  # type: ignore[attr-defined]
        for t in context[-2:]:
            model.BaseScore(state, str(t), nxt)  # type: ignore[attr-defined]
            state, nxt = nxt, state
    total = 0.0
    for t in path:
        total += model.BaseScore(state, str(t), nxt) * LN10  # type: ignore[attr-defined]
        state, nxt = nxt, state
    return total


ENGINES = [("native", True), ("native", False), ("kenlm", False)] if native_mod.available() \
    else [("kenlm", False)]


@pytest.mark.parametrize(("engine", "bounds"), ENGINES)
def test_exact_search_at_v_49152_equals_brute_force(arpa: Path, engine: str,
                                                    bounds: bool) -> None:
    lm = NgramLM(arpa, engine=engine, bounds=bounds)
    assert lm.max_token_id == 49_151
    lm.check_vocab(V)
    with pytest.raises(RescorerError, match="knows token id 49151"):
        lm.check_vocab(V - 1)
    model = kenlm.Model(str(arpa))
    rng = np.random.default_rng(5)
    for _ in range(4):
        lat = lattice(rng, h=4, k=3)
        assert lat.tokens.max() < V
        for context in ([], [49_151], [17, 30_000, 4096], [5, 6]):
            slots = [lat.slot(i) for i in range(lat.h)]
            brute = []
            for arcs in itertools.product(*[range(len(t)) for t, _ in slots]):
                toks = tuple(int(slots[i][0][a]) for i, a in enumerate(arcs))
                head = sum(float(slots[i][1][a]) for i, a in enumerate(arcs))
                brute.append((head + kenlm_score(model, context, toks), toks))
            brute.sort(key=lambda x: -x[0])
            for p in (1, 5):
                got = NgramRescorer(lm, alpha=1.0).rescore(lat, context, p)
                np.testing.assert_allclose(got.scores, [b[0] for b in brute[:p]], atol=TOL)
                for row, lm_ln in zip(got.tokens.tolist(), got.lm_scores, strict=True):
                    assert lm_ln == pytest.approx(kenlm_score(model, context, tuple(row)),
                                                  abs=TOL)


def test_wfst_backend_at_v_49152_equals_exact(arpa: Path, tmp_path: Path) -> None:
    pytest.importorskip("pywrapfst")
    from blockdraft.rescorers.ngram.wfst import WfstRescorer

    lm = NgramLM(arpa)
    exact = NgramRescorer(lm, alpha=1.0, backend="exact")
    wfst = WfstRescorer.from_arpa(arpa, alpha=1.0, cache_dir=tmp_path)
    assert wfst.context_states is not None
    assert wfst.context_states.known(np.asarray([49_151, 0, 49_149])).tolist() == [
        True, True, False]
    rng = np.random.default_rng(9)
    for _ in range(4):
        lat = lattice(rng, h=4, k=3)
        for context in ([], [49_150, 49_151], [12_345]):
            for p in (1, 4):
                got = wfst.rescore(lat, context, p)
                want = exact.rescore(lat, context, p)
                np.testing.assert_allclose(got.scores, want.scores, atol=TOL)
                assert got.tokens.max() < V


def test_a_step_at_v_49152_is_fast(arpa: Path) -> None:
    """Nothing in the lattice or the search is dense in V beyond the top-k of the logits: a
    step's lattice and 16-best search at h = 6, k = 16 take milliseconds, not seconds."""
    lm = NgramLM(arpa)
    rescorer = NgramRescorer(lm, alpha=1.0)
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(6, V)).astype(np.float32)
    rescorer.rescore(SausageLattice.from_logits(logits, k=16), [17, 4096], 16)  # warm-up
    t0 = time.perf_counter()
    for _ in range(5):
        lat = SausageLattice.from_logits(logits, k=16)
        rescorer.rescore(lat, [17, 4096], 16)
    assert (time.perf_counter() - t0) / 5 < 0.5
