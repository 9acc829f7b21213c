"""train_ngram: orders, pruning, the discount fallback, and the options and corpora it refuses
(moved here from tests/rescorers/test_ngram_lm.py with the training code)."""

from __future__ import annotations

import pytest

from blockdraft.rescorers import RescorerError
from blockdraft.rescorers.ngram import NgramLM
from blockdraft.training.ngram import train_ngram
from blockdraft.training.ngram.train import arpa_counts


def test_train_ngram_orders_pruning_and_fallback(tmp_path, word_corpus):
    r2 = train_ngram(word_corpus.train, tmp_path / "o2", order=2)
    assert r2.order == 2 and len(r2.counts) == 2 and r2.binary.is_file()
    assert arpa_counts(r2.arpa) == r2.counts
    r4 = train_ngram(word_corpus.train, tmp_path / "o4", order=4, binary=False)
    r4p = train_ngram(word_corpus.train, tmp_path / "o4p", order=4, prune=(0, 0, 1, 1))
    assert r4.binary is None
    assert r4p.counts[2] < r4.counts[2] and r4p.counts[3] < r4.counts[3]
    assert r4p.counts[:2] == r4.counts[:2]
    # A tiny corpus needs --discount_fallback: it is retried with it and reported.
    tiny = train_ngram([[1, 2, 3, 1, 2, 4]], tmp_path / "tiny", order=3, binary=False)
    assert tiny.discount_fallback
    assert NgramLM(tiny.arpa).order == 3


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"order": 1}, "order must be an integer from 2 to 5"),
        ({"order": 6}, "order must be an integer from 2 to 5"),
        ({"order": 3, "prune": (1, 1, 1)}, "starting with 0"),
        ({"order": 3, "prune": (0, 2, 1)}, "non-decreasing"),
    ],
)
def test_train_ngram_rejects_bad_options(tmp_path, kwargs, match):
    with pytest.raises(RescorerError, match=match):
        train_ngram([[1, 2, 3]], tmp_path / "x", **kwargs)


def test_train_ngram_rejects_empty_and_negative_corpora(tmp_path):
    with pytest.raises(RescorerError, match="corpus is empty"):
        train_ngram([[], []], tmp_path / "e", order=2)
    with pytest.raises(RescorerError, match="negative token id"):
        train_ngram([[1, -3]], tmp_path / "n", order=2)
