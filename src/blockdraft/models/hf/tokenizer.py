"""`HFTokenizer`: a Hugging Face tokenizer with the interface of blockdraft's ``Tokenizer``.

The CLI and the decode helpers use ``encode``, ``decode``, ``vocab_size``, ``eos_id`` (and
``pad_id``, ``encode_batch``, ``id_to_token``, ``token_to_id``, ``save``); this wrapper offers
them over any ``transformers`` tokenizer, plus the model's chat template.

Public surface:
    load_hf_tokenizer(folder, vocab_size=None) -> HFTokenizer   AutoTokenizer of a local folder
    HFTokenizer(tokenizer, vocab_size=None)
        .encode(text) -> list[int]        no special tokens added (as blockdraft's Tokenizer)
        .decode(ids, skip_special_tokens=False) -> str
        .apply_chat_template(messages, add_generation_prompt=True) -> list[int]
        .vocab_size, .eos_id, .pad_id, .bos_id, .has_chat_template, .backend
        .vocabulary(), .fingerprint(), .info(name)   (as every blockdraft tokenizer)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from blockdraft.models.errors import ModelError
from blockdraft.models.tokenizer import BaseTokenizer


class HFTokenizer(BaseTokenizer):
    """A ``transformers`` tokenizer seen through blockdraft's tokenizer interface.

    Args:
        tokenizer: a ``transformers`` tokenizer (``AutoTokenizer.from_pretrained(...)``).
        vocab_size: the model's vocabulary ``V`` (rows of its ``lm_head``), which may exceed
            the tokenizer's own size (padded embedding matrices); default: the tokenizer's
            size. Every id in ``[0, V)`` is valid for the model; ids the tokenizer does not
            know decode to nothing.

    Raises:
        ModelError: when the tokenizer has more tokens than ``vocab_size``.
    """

    __slots__ = ()

    def __init__(self, tokenizer: Any, vocab_size: int | None = None) -> None:
        if isinstance(tokenizer, HFTokenizer):
            tokenizer = tokenizer.backend
        if not callable(getattr(tokenizer, "encode", None)) or not callable(
            getattr(tokenizer, "decode", None)
        ):
            raise ModelError(
                f"expected a transformers tokenizer, got {type(tokenizer).__name__}"
            )
        own = len(tokenizer)
        if vocab_size is not None and own > vocab_size:
            raise ModelError(
                f"the tokenizer has {own} tokens but the model's vocabulary has V = "
                f"{vocab_size}; it is not this model's tokenizer"
            )
        self._backend = tokenizer
        self._vocab_size = int(vocab_size if vocab_size is not None else own)

    # ---- properties --------------------------------------------------------------------------

    @property
    def eos_id(self) -> int | None:
        """The end-of-sequence id (for a chat model, its end of turn: SmolLM2's
        ``<|im_end|>``), or None when the tokenizer names none."""
        return _optional_id(self._backend.eos_token_id)

    @property
    def pad_id(self) -> int | None:
        """The padding id, or None."""
        return _optional_id(self._backend.pad_token_id)

    @property
    def bos_id(self) -> int | None:
        """The beginning-of-sequence id, or None."""
        return _optional_id(self._backend.bos_token_id)

    @property
    def has_chat_template(self) -> bool:
        """Whether the tokenizer carries a chat template."""
        return bool(getattr(self._backend, "chat_template", None))

    # ---- use ---------------------------------------------------------------------------------

    def _encode(self, text: str) -> list[int]:
        return [int(i) for i in self._backend.encode(text, add_special_tokens=False)]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """:meth:`encode` of each text (one batched call of the backend).

        Raises:
            ModelError: when an item is not a string.
        """
        texts = list(texts)
        for text in texts:
            if not isinstance(text, str):
                raise ModelError(f"encode_batch expects strings, got {type(text).__name__}")
        if not texts:
            return []
        out = self._backend(texts, add_special_tokens=False)["input_ids"]
        return [[int(i) for i in ids] for ids in out]

    def id_to_token(self, token_id: int) -> str:
        """The vocabulary entry of ``token_id``.

        Raises:
            ModelError: when the tokenizer does not know the id.
        """
        token = self._backend.convert_ids_to_tokens(int(token_id))
        if token is None:
            raise ModelError(f"token id {token_id} is not in the tokenizer's vocabulary")
        return str(token)

    def token_to_id(self, token: str) -> int | None:
        """The id of a vocabulary entry, or None."""
        i = self._backend.convert_tokens_to_ids(token)
        unk = self._backend.unk_token_id
        if i is None or (unk is not None and i == unk and token != self._backend.unk_token):
            return None
        return int(i)

    def vocabulary(self) -> dict[str, int]:
        """``{token string: id}``, added and special tokens included."""
        return {str(t): int(i) for t, i in self._backend.get_vocab().items()}

    def apply_chat_template(
        self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True
    ) -> list[int]:
        """The token ids of a chat, formatted by the model's own template.

        Args:
            messages: ``[{"role": "user", "content": "..."}, ...]``.
            add_generation_prompt: end with the assistant's turn opener, so the model answers.

        Raises:
            ModelError: when the tokenizer has no chat template, or the messages do not fit it.
        """
        if not self.has_chat_template:
            raise ModelError(
                "this model's tokenizer has no chat template (it is not a chat/instruct "
                "model); pass plain text with encode(text) instead of chat messages"
            )
        try:
            out = self._backend.apply_chat_template(
                list(messages), add_generation_prompt=add_generation_prompt, tokenize=True
            )
        except (TypeError, ValueError, KeyError) as e:
            raise ModelError(f"the chat template rejected the messages: {e}") from e
        if isinstance(out, Mapping) or hasattr(out, "input_ids"):
            out = out["input_ids"]  # transformers 5 returns a BatchEncoding
        return [int(i) for i in out]

    def save(self, directory: str | Path) -> Path:
        """Write the tokenizer's files into ``directory`` (created); returns it."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self._backend.save_pretrained(str(directory))
        return directory

    def __repr__(self) -> str:
        return (f"HFTokenizer({type(self._backend).__name__}, vocab_size={self._vocab_size}, "
                f"eos_id={self.eos_id})")


def _optional_id(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return int(value[0]) if value else None
    return int(value)


def load_hf_tokenizer(folder: str | Path, vocab_size: int | None = None) -> HFTokenizer:
    """The ``transformers`` tokenizer saved in a local folder (``AutoTokenizer``), wrapped.

    Args:
        folder: a folder with ``tokenizer_config.json`` / ``tokenizer.json`` (a Hugging Face
            model folder, or one written by :meth:`HFTokenizer.save`).
        vocab_size: the model's ``V`` (default: the tokenizer's own size).

    Raises:
        ModelError: transformers is missing, or cannot read a tokenizer there.
    """
    from blockdraft.models.hf.loading import require

    require("transformers")
    from transformers import AutoTokenizer

    try:
        backend = AutoTokenizer.from_pretrained(str(folder))
        # a damaged tokenizer_config.json (model_max_length "") loads, then fails every call
        backend.encode("a b", add_special_tokens=False)
    except Exception as e:  # tokenizers raises a bare Exception on a damaged tokenizer.json
        raise ModelError(f"transformers could not load a tokenizer from {str(folder)!r} "
                         f"({type(e).__name__}: {e}); are its tokenizer files complete?"
                         ) from e
    return HFTokenizer(backend, vocab_size=vocab_size)
