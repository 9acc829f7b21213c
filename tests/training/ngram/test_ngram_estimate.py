"""The built-in modified Kneser-Ney estimator: equal to KenLM's lmplz up to float rounding
(where lmplz is built), a proper distribution on its own, and the native binary writer equal to
build_binary byte for byte."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from blockdraft.cli import main
from blockdraft.rescorers.base import RescorerError
from blockdraft.rescorers.ngram import native
from blockdraft.rescorers.ngram.arpa import read_arpa
from blockdraft.training.ngram.estimate import estimate_kneser_ney
from blockdraft.training.ngram.train import find_kenlm_tool, train_ngram

TOLERANCE = 2e-6
"""log10 units: lmplz computes in float32 and writes the shortest float32; the estimator computes
in float64 and writes 9 significant digits."""


def _tool(name: str) -> Path:
    try:
        return find_kenlm_tool(name)
    except RescorerError as e:
        pytest.skip(f"KenLM's {name} is not built ({e}); run `make setup`")


def _model(path: Path) -> dict[tuple[str, ...], tuple[float, float]]:
    return {g.words: (g.log10_prob, g.log10_backoff) for g in read_arpa(path)}


def _corpus(seed: int) -> tuple[list[np.ndarray], int, list[int] | None]:
    """Small Zipf-distributed corpora of every shape: few or many words, short and long lines,
    every order, some pruned, some needing the fallback discounts."""
    rng = np.random.default_rng(seed)
    v = int(rng.integers(3, 60))
    seqs = [rng.zipf(1.5, size=int(rng.integers(1, 15))) % v
            for _ in range(int(rng.integers(1, 80)))]
    order = int(rng.integers(2, 6))
    prune = None
    if seed % 3 == 0:
        prune = [0, *sorted(int(x) for x in rng.integers(0, 3, size=int(rng.integers(1, order))))]
    return seqs, order, prune


def _assert_equal(ours: Path, theirs: Path) -> None:
    a, b = _model(ours), _model(theirs)
    assert set(a) == set(b), sorted(set(a) ^ set(b))[:5]
    worst = max(max(abs(a[k][0] - b[k][0]), abs(a[k][1] - b[k][1])) for k in a)
    assert worst <= TOLERANCE, worst


@pytest.mark.parametrize("seed", range(24))
def test_equal_to_lmplz_on_small_corpora(tmp_path, seed):
    _tool("lmplz")
    seqs, order, prune = _corpus(seed)
    ours = train_ngram(seqs, tmp_path / "ours", order=order, prune=prune, binary=False)
    theirs = train_ngram(seqs, tmp_path / "lmplz", order=order, prune=prune, binary=False,
                         estimator="lmplz")
    assert ours.counts == theirs.counts
    assert ours.discount_fallback == theirs.discount_fallback
    assert (ours.estimator, theirs.estimator) == ("builtin", "lmplz")
    _assert_equal(ours.arpa, theirs.arpa)


@pytest.mark.parametrize(("order", "prune"), [(2, None), (3, None), (4, None), (5, None),
                                              (4, (0, 0, 1, 1)), (5, (0, 1, 1, 2))])
def test_equal_to_lmplz_on_the_pydoc_corpus(tmp_path, word_corpus, order, prune):
    _tool("lmplz")
    ours = train_ngram(word_corpus.train, tmp_path / "ours", order=order, prune=prune,
                       binary=False)
    theirs = train_ngram(word_corpus.train, tmp_path / "lmplz", order=order, prune=prune,
                         binary=False, estimator="lmplz")
    assert ours.counts == theirs.counts and not ours.discount_fallback
    _assert_equal(ours.arpa, theirs.arpa)


@pytest.mark.parametrize("prune", [None, (0, 1, 1)])
def test_every_context_is_a_distribution(tmp_path, prune):
    """Without lmplz: for every context the LM lists (and the empty one), the probabilities of
    all words but <s>, backing off as KenLM does, sum to one."""
    kenlm = pytest.importorskip("kenlm")
    rng = np.random.default_rng(7)
    seqs = [rng.zipf(1.3, size=int(rng.integers(2, 12))) % 23 for _ in range(300)]
    r = train_ngram(seqs, tmp_path / "lm", order=3, prune=prune, binary=False)
    model = kenlm.Model(str(r.arpa))
    listed = _model(r.arpa)
    words = [w[0] for w in listed if len(w) == 1 and w[0] != "<s>"]
    contexts = [()] + [w for w in listed if len(w) < 3 and w[-1] not in ("</s>", "<unk>")]
    for ctx in contexts:
        total = 0.0
        for w in words:
            state, out = kenlm.State(), kenlm.State()
            if ctx and ctx[0] == "<s>":
                model.BeginSentenceWrite(state)
                rest = ctx[1:]
            else:
                model.NullContextWrite(state)
                rest = ctx
            for c in rest:
                model.BaseScore(state, c, out)
                state, out = out, state
            total += 10.0 ** model.BaseScore(state, w, out)
        assert math.isclose(total, 1.0, abs_tol=1e-4), (ctx, total)


def test_fallback_discounts_where_lmplz_needs_them(tmp_path):
    r = train_ngram([[1, 2, 3, 1, 2, 4]], tmp_path / "tiny", order=3, binary=False)
    assert r.discount_fallback and r.command.endswith("--discount_fallback")
    m = estimate_kneser_ney([np.array([1, 2, 3, 1, 2, 4])], 3)
    assert (0.5, 1.0, 1.5) in m.discounts


def test_the_native_writer_is_build_binary_byte_for_byte(tmp_path, word_corpus):
    tool = _tool("build_binary")
    if not native.can_write_binary():
        pytest.skip("the native library is not built (run `make setup`)")
    ours = train_ngram(word_corpus.train, tmp_path / "native", order=3)
    theirs = train_ngram(word_corpus.train, tmp_path / "tool", order=3, build_binary=tool)
    assert ours.binary is not None and theirs.binary is not None
    assert ours.binary.read_bytes() == theirs.binary.read_bytes()


def test_cli_estimator_choice(tmp_path, capsys):
    ids = tmp_path / "ids.txt"
    rng = np.random.default_rng(3)
    ids.write_text("\n".join(" ".join(map(str, (rng.zipf(1.4, 9) % 40).tolist()))
                             for _ in range(200)) + "\n")
    assert main(["ngram", "train", "--ids", str(ids), "--order", "3", "-o",
                 str(tmp_path / "lm"), "--no-binary", "--json"]) == 0
    out = capsys.readouterr().out
    assert '"estimator": "builtin"' in out and "blockdraft-kneser-ney -o 3" in out
    with pytest.raises(SystemExit):
        main(["ngram", "train", "--ids", str(ids), "-o", str(tmp_path / "x"),
              "--estimator", "srilm"])


def test_bad_estimator_and_negative_ids_are_refused(tmp_path):
    with pytest.raises(RescorerError, match="estimator must be one of"):
        train_ngram([[1, 2]], tmp_path / "a", order=2, estimator="srilm")
    with pytest.raises(RescorerError, match="negative token id: -3"):
        train_ngram([[1, -3]], tmp_path / "b", order=2)
