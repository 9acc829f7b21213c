"""``interpolate_arpa``: two n-gram LMs mixed into one ARPA back-off LM, checked through KenLM.

Every expected value is computed from the two input files with KenLM itself (never with the
code under test): a listed n-gram of the merged model must score exactly ``log10(lam P_a +
(1 - lam) P_b)``; an unlisted one the back-off of the merged file (read independently here);
every history must sum to 1 over the vocabulary. Two pairs of inputs: ``tiny`` (random ids,
orders 3 and 2, partly different vocabularies, small enough to check every history) and
``pydoc`` (the halves of the pydoc corpus, orders 3 and 4).
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from blockdraft.core.digest import sha256_file as file_sha256
from blockdraft.models.tokenizer import TokenizerInfo
from blockdraft.rescorers.base import RescorerError
from blockdraft.rescorers.ngram import NgramLM, native
from blockdraft.rescorers.ngram.arpa import read_arpa
from blockdraft.rescorers.ngram.records import write_vocab_record
from blockdraft.training.ngram import interpolate_arpa, train_ngram
from blockdraft.training.ngram.interpolate import INTERPOLATE_SUFFIXES, output_files
from ngram_testlib import WordCorpus

kenlm = pytest.importorskip("kenlm")

TOL = 1e-4  # log10: ARPA's rounding (8 digits written, float32 in KenLM)
Gram = tuple[str, ...]


@dataclass(frozen=True)
class Lm:
    """An ARPA file read two ways: KenLM, and its n-grams as written."""

    path: Path
    model: Any
    prob: dict[Gram, float]  # log10 P of each listed n-gram
    backoff: dict[Gram, float]  # log10 back-off of each listed n-gram (0 when absent)
    order: int
    vocab: frozenset[str]  # the words the model lists (<unk> included)

    @classmethod
    def load(cls, path: Path) -> Lm:
        prob, backoff, order = {}, {}, 0
        for g in read_arpa(path):
            prob[g.words] = g.log10_prob
            backoff[g.words] = g.log10_backoff
            order = max(order, g.order)
        vocab = frozenset(g[0] for g in prob if len(g) == 1)
        return cls(path, kenlm.Model(str(path)), prob, backoff, order, vocab)

    def histories(self) -> list[Gram]:
        """The empty history and every listed n-gram below the top order."""
        return [(), *(g for g in self.prob if len(g) < self.order)]

    def kenlm(self, gram: Gram) -> float:
        """KenLM's log10 P(gram[-1] | gram[:-1]) (``<s>`` first: the start of a sentence)."""
        state, out = kenlm.State(), kenlm.State()
        history = list(gram[:-1])
        if history[:1] == ["<s>"]:
            self.model.BeginSentenceWrite(state)
            history = history[1:]
        else:
            self.model.NullContextWrite(state)
        for w in history:
            self.model.BaseScore(state, w, out)
            state, out = out, state
        return float(self.model.BaseScore(state, gram[-1], out))

    def backed_off(self, gram: Gram) -> float:
        """log10 P(gram[-1] | gram[:-1]) by the ARPA back-off rule, from the file's values."""
        gram = gram[-self.order:]
        if gram in self.prob:
            return self.prob[gram]
        if len(gram) == 1:
            return self.prob[("<unk>",)]
        return self.backoff.get(gram[:-1], 0.0) + self.backed_off(gram[1:])


def mixture(a: Lm, b: Lm, lam: float, gram: Gram) -> float:
    """log10(lam P_a + (1 - lam) P_b) from KenLM's scores of the inputs; a word an input does
    not list has probability 0 there (the module's convention)."""
    p = (lam * 10 ** a.kenlm(gram) if gram[-1] in a.vocab else 0.0) + (
        (1 - lam) * 10 ** b.kenlm(gram) if gram[-1] in b.vocab else 0.0)
    return math.log10(p) if p > 0 else -math.inf


def unlisted(merged: Lm, rng: np.random.Generator, n: int) -> list[Gram]:
    """``n`` random n-grams the merged model does not list: a listed history (or random
    words) followed by a random word."""
    words = sorted(merged.vocab - {"<s>"})
    histories = merged.histories()
    out: list[Gram] = []
    while len(out) < n:
        if rng.random() < 0.7:
            h = histories[rng.integers(len(histories))]
        else:
            h = tuple(words[i] for i in rng.integers(len(words), size=rng.integers(1, 4)))
        gram = (*h, words[rng.integers(len(words))])
        if gram not in merged.prob:
            out.append(gram)
    return out


# ------------------------------------------------------------------------------ fixtures


@dataclass(frozen=True)
class Pair:
    a: Lm
    b: Lm
    folder: Path

    def merge(self, lam: float, name: str | None = None) -> Lm:
        arpa = output_files(self.folder / (name or f"mix-{lam:g}"))[0]
        if not arpa.exists():
            interpolate_arpa(self.a.path, self.b.path, lam, arpa.with_suffix(""))
        return Lm.load(arpa)


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory, word_corpus: WordCorpus
          ) -> dict[str, Pair]:
    from blockdraft.training.ngram.train import find_kenlm_tool

    try:
        find_kenlm_tool("lmplz")
        find_kenlm_tool("build_binary")
    except RescorerError as e:
        pytest.skip(f"KenLM's tools are not built ({e}); run `make setup`")
    root = tmp_path_factory.mktemp("interpolate")
    rng = np.random.default_rng(0)
    tiny_a = [rng.integers(0, 30, size=rng.integers(3, 12)) for _ in range(300)]
    tiny_b = [rng.integers(10, 45, size=rng.integers(3, 12)) for _ in range(300)]
    half = len(word_corpus.train) // 2
    out = {}
    for name, (seqs_a, order_a), (seqs_b, order_b) in (
            ("tiny", (tiny_a, 3), (tiny_b, 2)),
            ("pydoc", (word_corpus.train[:half], 3), (word_corpus.train[half:], 4))):
        folder = root / name
        a = train_ngram(seqs_a, folder / "a", order=order_a).arpa
        b = train_ngram(seqs_b, folder / "b", order=order_b).arpa
        out[name] = Pair(Lm.load(a), Lm.load(b), folder)
    return out


# ------------------------------------------------------------------------------ the maths


@pytest.mark.parametrize("name", ["tiny", "pydoc"])
def test_every_listed_ngram_is_the_mixture(name: str, pairs: dict[str, Pair]) -> None:
    pair = pairs[name]
    lam = 0.3
    merged = pair.merge(lam)
    grams = [g for g in merged.prob if g[-1] != "<s>"]  # <s>: a placeholder, never predicted
    got = np.array([merged.kenlm(g) for g in grams])
    want = np.array([mixture(pair.a, pair.b, lam, g) for g in grams])
    np.testing.assert_allclose(got, want, atol=TOL, rtol=0)
    # the file says so too (KenLM reads what was written)
    np.testing.assert_allclose([merged.prob[g] for g in grams], want, atol=TOL, rtol=0)


def test_the_listed_ngrams_are_the_union(pairs: dict[str, Pair]) -> None:
    pair = pairs["pydoc"]
    merged = pair.merge(0.3)
    assert merged.order == max(pair.a.order, pair.b.order) == 4
    assert set(merged.prob) == set(pair.a.prob) | set(pair.b.prob)
    assert merged.vocab == pair.a.vocab | pair.b.vocab


@pytest.mark.parametrize("name", ["tiny", "pydoc"])
def test_unlisted_ngrams_back_off_and_approximate_the_mixture(
        name: str, pairs: dict[str, Pair]) -> None:
    """An unlisted n-gram gets the merged model's back-off (exactly), which approximates the
    mixture: measured here, as SRILM documents for its static mixtures."""
    pair = pairs[name]
    lam = 0.3
    merged = pair.merge(lam)
    grams = unlisted(merged, np.random.default_rng(1), 3000)
    got = np.array([merged.kenlm(g) for g in grams])
    np.testing.assert_allclose(got, [merged.backed_off(g) for g in grams], atol=TOL, rtol=0)
    gap = np.abs(got - np.array([mixture(pair.a, pair.b, lam, g) for g in grams]))
    print(f"{name}: |merged - mixture| on {len(grams)} unlisted n-grams, log10: mean "
          f"{gap.mean():.3f}, median {np.median(gap):.3f}, 90% {np.quantile(gap, 0.9):.3f}, "
          f"max {gap.max():.3f}")
    # an approximation: not exact, but the bulk is close and none is far off
    assert gap.max() > 0.01
    assert np.median(gap) < 0.1 and np.quantile(gap, 0.9) < 0.5 and gap.max() < 2.0


@pytest.mark.parametrize("name", ["tiny", "pydoc"])
def test_every_history_sums_to_one(name: str, pairs: dict[str, Pair]) -> None:
    pair = pairs[name]
    merged = pair.merge(0.3)
    words = sorted(merged.vocab - {"<s>"})  # </s> and <unk> included
    histories = merged.histories()
    rng = np.random.default_rng(2)
    if name == "pydoc":  # 8k words: a sample of each order's histories
        by_order: dict[int, list[Gram]] = {}
        for h in histories:
            by_order.setdefault(len(h), []).append(h)
        histories = [hs[i] for hs in by_order.values()
                     for i in rng.choice(len(hs), size=min(len(hs), 8), replace=False)]
    histories += [g[:-1] for g in unlisted(merged, rng, 10)]  # unlisted histories too
    for h in histories:
        total = sum(10 ** merged.kenlm((*h, w)) for w in words)
        assert total == pytest.approx(1.0, abs=TOL), h


@pytest.mark.parametrize("lam, same, other", [(1.0, "a", "b"), (0.0, "b", "a")])
def test_weight_one_is_a_and_zero_is_b(lam: float, same: str, other: str,
                                       pairs: dict[str, Pair]) -> None:
    pair = pairs["tiny"]
    merged = pair.merge(lam)
    lm, rest = getattr(pair, same), getattr(pair, other)
    grams = [g for g in merged.prob if g[-1] != "<s>"]
    grams += unlisted(merged, np.random.default_rng(3), 2000)
    known = [g for g in grams if g[-1] in lm.vocab]
    np.testing.assert_allclose([merged.kenlm(g) for g in known], [lm.kenlm(g) for g in known],
                               atol=TOL, rtol=0)
    # a word only the other input lists has probability 0 (written -99)
    foreign = [g for g in grams if g[-1] not in lm.vocab]
    assert foreign and all(g[-1] in rest.vocab for g in foreign)
    assert max(merged.kenlm(g) for g in foreign) < -90


def test_orders_and_arguments_swap(pairs: dict[str, Pair]) -> None:
    """mix(a, b, lam) and mix(b, a, 1 - lam) are one model."""
    pair = pairs["tiny"]
    one = pair.merge(0.25)
    swapped = Pair(pair.b, pair.a, pair.folder).merge(0.75, "swapped")
    assert one.prob.keys() == swapped.prob.keys()
    for g, p in one.prob.items():
        assert swapped.prob[g] == pytest.approx(p, abs=TOL)
        assert swapped.backoff[g] == pytest.approx(one.backoff[g], abs=TOL)


# ------------------------------------------------------------------------------ inputs KenLM
# would not take as they are


ARPA_UNCLOSED = """\\data\\
ngram 1=6
ngram 2=2
ngram 3=1

\\1-grams:
-1.0\t<unk>\t0
0\t<s>\t-0.3
-0.7\t</s>\t0
-0.6\t1\t-0.2
-0.6\t2\t-0.2
-0.9\t3\t-0.1

\\2-grams:
-0.2\t<s> 1\t-0.1
-0.3\t1 2

\\3-grams:
-0.1\t1 2 3

\\end\\
"""


def test_unclosed_inputs_are_closed(tmp_path: Path, pairs: dict[str, Pair]) -> None:
    """An input listing ``1 2 3`` without ``2 3`` (its suffix): the merge lists it, with the
    mixture's probability, so that KenLM finds ``1 2 3``."""
    a = tmp_path / "a.arpa"
    a.write_text(ARPA_UNCLOSED)
    b = pairs["tiny"].b.path
    r = interpolate_arpa(a, b, 0.5, tmp_path / "mix", binary=False)
    merged, lm_b = Lm.load(r.arpa), pairs["tiny"].b
    assert ("2", "3") not in lm_b.prob and ("2", "3") in merged.prob
    assert r.added == (0, 1, 0)
    # b lists none of these words: the mixture is half of a's back-off probability (read
    # from the file: KenLM itself would miss "1 2 3" in a, behind the missing "2 3")
    a_prob = {("1", "2", "3"): -0.1, ("2", "3"): -0.2 + -0.9, ("1", "2"): -0.3}
    for g, p in a_prob.items():
        assert merged.kenlm(g) == pytest.approx(p + math.log10(0.5), abs=TOL)


# ------------------------------------------------------------------------------ files


def test_files_record_and_tokenizer(tmp_path: Path, pairs: dict[str, Pair]) -> None:
    pair = pairs["tiny"]
    tok = TokenizerInfo("tok", 64, "0123456789abcdef")
    with records(pair, (tok, tok)):
        r = interpolate_arpa(pair.a.path, pair.b.path, 0.4, tmp_path / "mix")
    assert [r.arpa, r.binary, r.vocab_record, r.record] == [
        p for p in output_files(tmp_path / "mix") if not p.name.endswith("fingerprint.json")]
    assert r.tokenizer == tok
    record = json.loads(r.record.read_text())
    assert record["weight"] == 0.4 and record["order"] == 3
    assert record["counts"] == list(r.counts)
    for key, src in (("a", pair.a.path), ("b", pair.b.path)):
        assert record[key]["path"] == str(src.resolve())
        assert record[key]["sha256"] == file_sha256(src)
    lm = NgramLM(r.binary if native.available() else r.arpa)  # kenlm lists no binary's words
    assert lm.tokenizer == tok and lm.order == 3
    merged = Lm.load(r.arpa)
    ids = [1, 12, 20, 40]
    want = [merged.kenlm(("<s>", "1")), merged.kenlm(("<s>", "1", "12")),
            merged.kenlm(("1", "12", "20")), merged.kenlm(("12", "20", "40"))]
    np.testing.assert_allclose(lm.score(ids), np.array(want) * math.log(10), atol=1e-4)


def test_a_failed_merge_leaves_the_old_files(tmp_path: Path, pairs: dict[str, Pair]) -> None:
    pair = pairs["tiny"]
    prefix = tmp_path / "mix"
    interpolate_arpa(pair.a.path, pair.b.path, 0.4, prefix)
    before = {p.name: p.read_bytes() for p in output_files(prefix) if p.exists()}
    false = tmp_path / "false"
    false.write_text("#!/bin/sh\necho no space left >&2\nexit 1\n")
    false.chmod(0o755)
    with pytest.raises(RescorerError, match="build_binary failed.*no space left"):
        interpolate_arpa(pair.a.path, pair.b.path, 0.6, prefix, build_binary=false)
    assert {p.name: p.read_bytes() for p in output_files(prefix) if p.exists()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*before, "false"])
    # a merge without a binary removes the old one (it is not the new ARPA file's pair)
    interpolate_arpa(pair.a.path, pair.b.path, 0.6, prefix, binary=False)
    assert not prefix.with_suffix(".bin").exists()
    assert INTERPOLATE_SUFFIXES[-1] == ".mixture.json"


# ------------------------------------------------------------------------------ refusals


@pytest.mark.parametrize("weight", [1.5, -0.1, float("nan"), "0.5", True, None])
def test_a_bad_weight_is_refused_by_value(weight: Any, tmp_path: Path,
                                          pairs: dict[str, Pair]) -> None:
    pair = pairs["tiny"]
    with pytest.raises(RescorerError, match=r"weight must be .*\[0, 1\].*got " +
                       re.escape(repr(weight))):
        interpolate_arpa(pair.a.path, pair.b.path, weight, tmp_path / "mix")
    assert list(tmp_path.iterdir()) == []


def test_missing_folder_and_binary_inputs_are_refused(tmp_path: Path,
                                                      pairs: dict[str, Pair]) -> None:
    a = pairs["tiny"].a.path
    with pytest.raises(RescorerError, match=r"ARPA file .*nope\.arpa does not exist"):
        interpolate_arpa(a, tmp_path / "nope.arpa", 0.5, tmp_path / "mix")
    with pytest.raises(RescorerError, match="is a folder"):
        interpolate_arpa(tmp_path, a, 0.5, tmp_path / "mix")
    with pytest.raises(RescorerError, match=r"a\.bin is not an ARPA file"):
        interpolate_arpa(a, a.with_suffix(".bin"), 0.5, tmp_path / "mix")
    words = tmp_path / "words.arpa"
    words.write_text(ARPA_UNCLOSED.replace("\t3\t", "\tcat\t").replace("1 2 3", "1 2 cat"))
    with pytest.raises(RescorerError, match="'cat' is not a decimal token id"):
        interpolate_arpa(a, words, 0.5, tmp_path / "mix")
    assert not any(p.name.startswith("mix") for p in tmp_path.iterdir())


@contextlib.contextmanager
def records(pair: Pair, tokenizers: Sequence[TokenizerInfo | None]) -> Iterator[None]:
    """The inputs with these tokenizer records beside them, for the block."""
    for src, rec in zip((pair.a.path, pair.b.path), tokenizers, strict=True):
        write_vocab_record(src.with_suffix(""), rec)
    try:
        yield
    finally:
        for src in (pair.a.path, pair.b.path):
            write_vocab_record(src.with_suffix(""), None)


@pytest.mark.parametrize("tokenizers, match", [
    ((TokenizerInfo("gpt2", 64, "aaaaaaaaaaaaaaaa"), TokenizerInfo("llama", 64,
                                                                   "bbbbbbbbbbbbbbbb")),
     "different tokenizers: gpt2 .*aaaaaaaaaaaaaaaa.* llama .*bbbbbbbbbbbbbbbb"),
    ((TokenizerInfo("gpt2", 64, "aaaaaaaaaaaaaaaa"), None),
     r"a\.arpa was trained over the tokenizer gpt2 .*b\.arpa has no tokenizer record"),
    ((None, TokenizerInfo("gpt2", 64, "aaaaaaaaaaaaaaaa")),
     r"b\.arpa was trained over the tokenizer gpt2 .*a\.arpa has no tokenizer record"),
])
def test_inputs_of_other_tokenizers_are_refused(tokenizers: Sequence[TokenizerInfo | None],
                                                match: str, tmp_path: Path,
                                                pairs: dict[str, Pair]) -> None:
    pair = pairs["tiny"]
    with records(pair, tokenizers):
        with pytest.raises(RescorerError, match=match):
            interpolate_arpa(pair.a.path, pair.b.path, 0.5, tmp_path / "mix")
    assert list(tmp_path.iterdir()) == []
