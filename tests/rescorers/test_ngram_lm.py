"""NgramLM: vocabulary conventions, unknown-token policies, bad input (train_ngram's own
tests: tests/training/ngram/test_ngram_train.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from blockdraft.lattice import SausageLattice
from blockdraft.rescorers import RescorerError
from blockdraft.rescorers.ngram import NgramLM, NgramRescorer
from blockdraft.rescorers.ngram import native as native_mod

TINY_ARPA = """
\\data\\
ngram 1=5
ngram 2=3

\\1-grams:
-1.0\t<unk>\t0
-99\t<s>\t-0.3
-1.0\t</s>\t0
-0.5\t{a}\t-0.2
-0.7\t{b}\t-0.1

\\2-grams:
-0.1\t<s> {a}
-0.2\t{a} {b}
-0.3\t{b} {a}

\\end\\
"""


def write_arpa(tmp_path, a="3", b="8", name="tiny.arpa"):
    path = tmp_path / name
    path.write_text(TINY_ARPA.format(a=a, b=b))
    return path


def test_order_vocab_and_hand_computed_scores(tmp_path):
    lm = NgramLM(write_arpa(tmp_path))
    assert lm.order == 2 and lm.vocab_size == 5 and lm.max_token_id == 8
    ln10 = math.log(10)
    # From <s>: P(3|<s>) = 10^-0.1; P(8|3) = 10^-0.2; P(3|8) = 10^-0.3.
    np.testing.assert_allclose(lm.score([3, 8, 3], []), np.array([-0.1, -0.2, -0.3]) * ln10,
                               atol=1e-6)
    # Backoff: P(8 | 8) is missing: bo(8) + P(8) = -0.1 - 0.7.
    np.testing.assert_allclose(lm.score([8], [8]), [-0.8 * ln10], atol=1e-6)
    assert lm.known([3, 8, 4, -1, 10**6]).tolist() == [True, True, False, False, False]


@pytest.mark.parametrize("engine", ["native", "kenlm"])
def test_unknown_token_policies(tmp_path, engine):
    if engine == "native" and not native_mod.available():
        pytest.skip("native library not built (run `make setup`)")
    path = write_arpa(tmp_path)
    ln10 = math.log(10)
    unk = NgramLM(path, engine=engine)
    # Token 5 is unknown: KenLM scores <unk> with its unigram, after backing off from 3.
    np.testing.assert_allclose(unk.score([5], [3]), [(-0.2 - 1.0) * ln10], atol=1e-6)
    pen = NgramLM(path, unknown=-1000.0, engine=engine)
    np.testing.assert_allclose(pen.score([5, 3], [3]), [-1000.0, pen.score([3], [5])[0]])
    err = NgramLM(path, unknown="error", engine=engine)
    with pytest.raises(RescorerError, match="token id 5 is not in the LM"):
        err.score([3, 5], [])
    lat = SausageLattice(tokens=np.array([[3, 5]]), scores=np.array([[-0.1, -0.2]]))
    with pytest.raises(RescorerError, match="token id 5"):
        NgramRescorer(err).rescore(lat, [8], 2)
    # The penalty is applied inside the search too.
    d = NgramRescorer(pen, alpha=1.0).rescore(lat, [8], 2)
    assert d.tokens[:, 0].tolist() == [3, 5]
    assert d.lm_scores[1] == pytest.approx(-1000.0)


def test_lm_over_words_needs_a_mapping(tmp_path):
    path = write_arpa(tmp_path, a="hello", b="world")
    with pytest.raises(RescorerError, match="not decimal token ids"):
        NgramLM(path)
    mapping = tmp_path / "vocab.json"
    mapping.write_text(json.dumps({"hello": 11, "world": 12, "other": 13}))
    lm = NgramLM(path, vocab=mapping)
    ref = NgramLM(write_arpa(tmp_path, a="11", b="12", name="ids.arpa"))
    np.testing.assert_allclose(lm.score([11, 12, 13], []), ref.score([11, 12, 13], []))
    tsv = tmp_path / "vocab.tsv"
    tsv.write_text("11\thello\n12\tworld\n")
    np.testing.assert_allclose(NgramLM(path, vocab=tsv).score([12, 11], [11]),
                               ref.score([12, 11], [11]))
    bad = tmp_path / "bad.tsv"
    bad.write_text("eleven\thello\n")
    with pytest.raises(RescorerError, match=r"bad.tsv:1: expected 'id<TAB>word'"):
        NgramLM(path, vocab=bad)


def test_check_vocab_catches_an_lm_from_another_tokenizer(tmp_path):
    lm = NgramLM(write_arpa(tmp_path, a="3", b="4100"))
    lm.check_vocab(5000)
    with pytest.raises(RescorerError, match="knows token id 4100, outside the model's"):
        lm.check_vocab(4096)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "KenLM could not load|no \\\\1-grams"),
        (TINY_ARPA.format(a="3", b="8").replace("\\end\\", "")[: len(TINY_ARPA) // 2],
         "KenLM could not load|no \\\\1-grams|malformed"),
        (TINY_ARPA.format(a="3", b="8").replace("-0.2\t3 8", "oops\t3 8"),
         "KenLM could not load|malformed"),
    ],
)
def test_malformed_or_truncated_arpa_files(tmp_path, text, match):
    path = tmp_path / "bad.arpa"
    path.write_text(text)
    with pytest.raises(RescorerError, match=match):
        NgramLM(path)


def test_missing_file_and_bad_options(tmp_path):
    with pytest.raises(RescorerError, match="does not exist"):
        NgramLM(tmp_path / "nope.arpa")
    path = write_arpa(tmp_path)
    with pytest.raises(RescorerError, match="unknown must be"):
        NgramLM(path, unknown="skip")
    with pytest.raises(RescorerError, match="log-prob <= 0"):
        NgramLM(path, unknown=3.0)
    with pytest.raises(RescorerError, match="engine must be"):
        NgramLM(path, engine="gpu")
    lm = NgramLM(path)
    with pytest.raises(RescorerError, match="alpha must be"):
        NgramRescorer(lm, alpha=-1)
    with pytest.raises(RescorerError, match="backend must be"):
        NgramRescorer(lm, backend="fast")
    lat = SausageLattice(tokens=np.array([[3]]), scores=np.array([[0.0]]))
    with pytest.raises(RescorerError, match="p must be a positive integer"):
        NgramRescorer(lm).rescore(lat, [], 0)
    with pytest.raises(RescorerError, match="negative token id"):
        NgramRescorer(lm).rescore(lat, [3, -2], 1)


def test_p_larger_than_the_number_of_paths_returns_all_and_says_so(tmp_path):
    lm = NgramLM(write_arpa(tmp_path))
    lat = SausageLattice(tokens=np.array([[3, 8], [8, 3]]), scores=np.log([[0.6, 0.4],
                                                                           [0.7, 0.3]]))
    d = NgramRescorer(lm).rescore(lat, [], 10)
    assert d.p == 4 and d.requested == 10 and d.exhausted
