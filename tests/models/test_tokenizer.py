"""Tokenizer: training round trip, save/load, GPT-2 files (real and synthetic), errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from blockdraft.models import ModelError, Tokenizer
from blockdraft.models.tokenizer import read_gpt2_merges

GPT2_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "gpt2_tokenizer"


@pytest.fixture(scope="module")
def pydoc_text() -> str:
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics))[:60_000]


@pytest.fixture(scope="module")
def trained(pydoc_text: str) -> Tokenizer:
    return Tokenizer.train([pydoc_text], vocab_size=400)


def test_train_round_trip(trained: Tokenizer, pydoc_text: str) -> None:
    assert trained.vocab_size == 400
    assert trained.eos_id == 0 and trained.pad_id == 1
    ids = trained.encode(pydoc_text[:5000])
    assert len(ids) < 5000 / 2  # merges learnt: well under one token per byte
    assert all(0 <= i < trained.vocab_size for i in ids)
    assert trained.decode(ids) == pydoc_text[:5000]
    odd = "  tabs\tand ünïcode — 🚀\r\n<|endoftext|>"
    assert trained.decode(trained.encode(odd)) == odd
    assert trained.eos_id in trained.encode(odd)
    assert trained.decode([5, trained.eos_id], skip_special_tokens=True) == trained.decode([5])
    assert trained.encode_batch(["a b", odd]) == [trained.encode("a b"), trained.encode(odd)]


def test_train_from_files(tmp_path: Path, pydoc_text: str) -> None:
    f = tmp_path / "a.txt"
    f.write_text(pydoc_text[:20_000], encoding="utf-8")
    tok = Tokenizer.train([f], vocab_size=300)
    assert tok.decode(tok.encode("def f(x): return x")) == "def f(x): return x"
    with pytest.raises(ModelError, match="not found"):
        Tokenizer.train([tmp_path / "missing.txt"])


def test_save_load(trained: Tokenizer, tmp_path: Path) -> None:
    path = trained.save(tmp_path / "tok")
    assert path.name == "tokenizer.json"
    for where in (tmp_path / "tok", path):
        again = Tokenizer.load(where)
        assert again.vocab_size == trained.vocab_size and again.eos_id == trained.eos_id
        assert again.encode("Hello, world") == trained.encode("Hello, world")


@pytest.mark.parametrize("corpus", [[], [""], ["ok", 3], "a single string"])
def test_train_errors(corpus: object) -> None:
    with pytest.raises(ModelError):
        Tokenizer.train(corpus, vocab_size=300)  # type: ignore[arg-type]


def test_errors(trained: Tokenizer, tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="vocab_size"):
        Tokenizer.train(["abc"], vocab_size=10)
    with pytest.raises(ModelError, match="no tokenizer"):
        Tokenizer.load(tmp_path)
    with pytest.raises(ModelError, match="outside the vocabulary"):
        trained.decode([trained.vocab_size])
    with pytest.raises(ModelError, match="expects a str"):
        trained.encode(b"bytes")  # type: ignore[arg-type]
    (tmp_path / "tokenizer.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ModelError, match="not a valid tokenizer"):
        Tokenizer.load(tmp_path)


def _synthetic_gpt2(tmp_path: Path, version_line: bool) -> Path:
    """A GPT-2-style vocabulary over a few byte symbols, with two merges."""
    symbols = ["Ġ", "t", "h", "e", "a"]
    vocab = {s: i for i, s in enumerate(symbols)}
    vocab.update({"Ġt": 5, "he": 6, "<|endoftext|>": 7})
    (tmp_path / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    lines = (["#version: 0.2"] if version_line else []) + ["Ġ t", "h e", ""]
    (tmp_path / "merges.txt").write_text("\n".join(lines), encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize("version_line", [False, True])
def test_synthetic_gpt2_files(tmp_path: Path, version_line: bool) -> None:
    tok = Tokenizer.load(_synthetic_gpt2(tmp_path, version_line))
    assert read_gpt2_merges(tmp_path / "merges.txt") == [("Ġ", "t"), ("h", "e")]
    assert tok.vocab_size == 8 and tok.eos_id == 7 and tok.pad_id is None
    assert tok.encode(" the") == [5, 6]  # the first merge (Ġ t) is kept
    assert tok.encode("<|endoftext|>") == [7]
    assert tok.decode([5, 6, 4]) == " thea"


def test_synthetic_gpt2_errors(tmp_path: Path) -> None:
    _synthetic_gpt2(tmp_path, False)
    (tmp_path / "merges.txt").write_text("Ġ t\nh e x\n", encoding="utf-8")
    with pytest.raises(ModelError, match="line 2"):
        Tokenizer.load(tmp_path)
    (tmp_path / "merges.txt").write_text("Ġ q\n", encoding="utf-8")
    with pytest.raises(ModelError, match="missing from"):
        Tokenizer.load(tmp_path)


@pytest.mark.needs_data
def test_real_gpt2_files() -> None:
    if not (GPT2_DIR / "gpt2_vocab.json").is_file():
        pytest.skip(f"the GPT-2 tokenizer files are absent from {GPT2_DIR} (shared data)")
    tok = Tokenizer.load(GPT2_DIR)
    assert tok.vocab_size == 50257
    assert tok.eos_id == 50256
    assert tok.encode(" the") == [262]
    assert tok.encode("Hello") == [15496]
    assert tok.encode("<|endoftext|>") == [50256]
    assert tok.encode(" t") == [tok.token_to_id("Ġt")]  # the first merge, Ġ t, is kept
    assert read_gpt2_merges(GPT2_DIR / "gpt2_merges.txt")[0] == ("Ġ", "t")
    text = "Hello world, the test of GPT-2's BPE."
    assert tok.encode("Hello world, the test") == [15496, 995, 11, 262, 1332]
    assert tok.decode(tok.encode(text)) == text
