"""load_tokenizer: one entry for every tokenizer (blockdraft's BPE, a Hugging Face model's,
one saved beside a checkpoint), and vocabulary fingerprints that tell tokenizers apart."""

from __future__ import annotations

from pathlib import Path

import pytest

from blockdraft.models import (
    BlockwiseConfig,
    ModelError,
    RescorerLM,
    Tokenizer,
    TokenizerInfo,
    load_model,
    load_tokenizer,
    save_model,
)

TEXT = ["the cat sat on the mat", "a dog ran in the park", "the sun is hot"] * 5


@pytest.fixture(scope="module")
def bpe() -> Tokenizer:
    return Tokenizer.train(TEXT, vocab_size=280)


def test_blockdraft_tokenizers(bpe: Tokenizer, tmp_path: Path) -> None:
    file = bpe.save(tmp_path / "tok")
    for where in (file, tmp_path / "tok"):
        tok = load_tokenizer(where)
        assert isinstance(tok, Tokenizer) and tok.fingerprint() == bpe.fingerprint()
    model = RescorerLM(BlockwiseConfig.tiny(vocab_size=bpe.vocab_size, h=1))
    save_model(model, tmp_path / "ckpt", tokenizer=bpe)
    assert load_tokenizer(tmp_path / "ckpt").encode("the cat") == bpe.encode("the cat")
    info = bpe.info("bpe")
    assert info == TokenizerInfo.from_dict(info.to_dict()) and info.vocab_size == bpe.vocab_size
    other = Tokenizer.train(TEXT[:2], vocab_size=270)
    assert other.fingerprint() != bpe.fingerprint()
    with pytest.raises(ModelError, match="no tokenizer 'nope'"):
        load_tokenizer("nope")
    with pytest.raises(ModelError, match="not a tokenizer record"):
        TokenizerInfo.from_dict({"name": "x", "vocab_size": 0, "fingerprint": "a"})


def test_hugging_face_tokenizers(bpe: Tokenizer, tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from blockdraft.models.hf import HFTokenizer

    hf = PreTrainedTokenizerFast(tokenizer_object=bpe.backend, eos_token="<|endoftext|>")
    # the same vocabulary through either wrapper has the same fingerprint
    assert HFTokenizer(hf).fingerprint() == bpe.fingerprint()
    folder = tmp_path / "hf"
    LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=16, intermediate_size=32,
                                 num_hidden_layers=1, num_attention_heads=2,
                                 num_key_value_heads=1)).save_pretrained(folder)
    hf.save_pretrained(folder)
    tok = load_tokenizer(folder)
    assert isinstance(tok, HFTokenizer)
    assert tok.vocab_size == 300  # the model's V, past the tokenizer's own 280
    assert tok.encode("the cat") == bpe.encode("the cat")
    # a RescorerLM trained over it keeps it (tokenizer_config.json beside tokenizer.json)
    model = RescorerLM(BlockwiseConfig.tiny(vocab_size=300, h=1))
    save_model(model, tmp_path / "ckpt", tokenizer=tok)
    assert load_model(tmp_path / "ckpt").config.vocab_size == 300
    again = load_tokenizer(tmp_path / "ckpt")
    assert isinstance(again, HFTokenizer) and again.vocab_size == 300
    assert again.fingerprint() == tok.fingerprint()
    # a plain tokenizer folder saved by transformers
    hf.save_pretrained(tmp_path / "plain")
    assert isinstance(load_tokenizer(tmp_path / "plain"), HFTokenizer)
