"""HFTokenizer: blockdraft's tokenizer interface over a transformers tokenizer, and the chat
template (a clear error without one)."""

from __future__ import annotations

from typing import Any

import pytest

from blockdraft.models.errors import ModelError
from blockdraft.models.hf import HFTokenizer

TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }} {% endfor %}"
            "{% if add_generation_prompt %}<assistant>{% endif %}")


def word_tokenizer(chat: bool) -> Any:
    """A word-level transformers tokenizer: w0..w59, four role tags, <unk> and <eos>."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = [f"w{i}" for i in range(60)] + ["<user>", "<assistant>", "<unk>", "<eos>"]
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<eos>", unk_token="<unk>")
    if chat:
        tok.chat_template = TEMPLATE
    return tok


def test_the_interface_of_blockdraft_tokenizers() -> None:
    tok = HFTokenizer(word_tokenizer(chat=False), vocab_size=100)
    assert tok.vocab_size == len(tok) == 100  # the model's V, padded past the tokenizer's 64
    assert tok.eos_id == 63 and tok.pad_id is None and tok.bos_id is None
    assert tok.encode("w1 w2 w3") == [1, 2, 3]
    assert tok.encode_batch(["w4", "w5 w6"]) == [[4], [5, 6]]
    assert tok.decode([1, 2, 63]) == "w1 w2 <eos>"
    assert tok.decode([1, 2, 63], skip_special_tokens=True) == "w1 w2"
    assert tok.id_to_token(7) == "w7" and tok.token_to_id("w7") == 7
    assert tok.token_to_id("nope") is None
    assert HFTokenizer(tok).vocab_size == 64  # re-wrapping takes the backend's own size
    with pytest.raises(ModelError, match=r"outside the vocabulary \[0, 100\)"):
        tok.decode([100])
    with pytest.raises(ModelError, match="encode expects a str"):
        tok.encode(b"w1")  # type: ignore[arg-type]
    with pytest.raises(ModelError, match="not this model's tokenizer"):
        HFTokenizer(word_tokenizer(chat=False), vocab_size=50)


def test_chat_template() -> None:
    tok = HFTokenizer(word_tokenizer(chat=True))
    assert tok.has_chat_template
    messages = [{"role": "user", "content": "w1 w2"}]
    assert tok.apply_chat_template(messages) == [60, 1, 2, 61]
    assert tok.apply_chat_template(messages, add_generation_prompt=False) == [60, 1, 2]
    plain = HFTokenizer(word_tokenizer(chat=False))
    with pytest.raises(ModelError, match="has no chat template"):
        plain.apply_chat_template(messages)
