"""The record of the tokenizer a file of token ids was made with, and the one check against it.

An n-gram LM over token ids (``blockdraft ngram train --tokenizer MODEL``) keeps beside it
``<prefix>.vocab.json``: the tokenizer's name, ``V`` and the fingerprint of its vocabulary
(:class:`~blockdraft.models.tokenizer.TokenizerInfo`). Whoever pairs such a file with a model
checks it here, with the same words everywhere: ``decode --lm`` and ``sweep --lm``
(:meth:`blockdraft.rescorers.ngram.NgramLM.check_vocab`), ``heads package --ngram`` and a heads
folder's drafting recipe when a model is loaded (:mod:`blockdraft.models.hf.drafting`).

Public surface:
    VOCAB_RECORD_SUFFIX, vocab_record_path(lm)
    read_vocab_record(lm, error=ModelError) -> TokenizerInfo | None
    check_tokenizer_record(lm, record, vocab_size, tokenizer, error)
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

from blockdraft.core.errors import BlockdraftWarning
from blockdraft.models.errors import ModelError
from blockdraft.models.tokenizer import TokenizerInfo

VOCAB_RECORD_SUFFIX = ".vocab.json"
"""``<prefix>.vocab.json``: the tokenizer an LM's ids came from."""


def vocab_record_path(lm_path: str | Path) -> Path:
    """``lm4.bin`` / ``lm4.arpa`` / ``lm4`` -> ``lm4.vocab.json`` beside it."""
    path = Path(lm_path)
    stem = path.stem if path.suffix in (".arpa", ".bin", ".binary", ".klm") else path.name
    return path.with_name(stem + VOCAB_RECORD_SUFFIX)


def read_vocab_record(lm_path: str | Path, error: type[Exception] = ModelError
                      ) -> TokenizerInfo | None:
    """The tokenizer recorded beside an LM, or None when there is no record.

    Raises:
        error: a record that cannot be read (naming it).
    """
    path = vocab_record_path(lm_path)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return TokenizerInfo.from_dict(data["tokenizer"])
    except (OSError, ValueError, KeyError, TypeError, ModelError) as e:
        raise error(f"cannot read the LM's tokenizer record {path}: {e}") from e


def check_tokenizer_record(lm_path: str | Path, record: TokenizerInfo | None, vocab_size: int,
                           tokenizer: Any, error: type[Exception]) -> None:
    """Refuse an LM whose recorded tokenizer is not the model's: another ``V``, or (when
    ``tokenizer`` is given: a :class:`TokenizerInfo` or any blockdraft tokenizer) another
    vocabulary fingerprint. An LM without a record cannot be compared: with a ``tokenizer``
    that is a :class:`~blockdraft.core.errors.BlockdraftWarning` (one line).

    Args:
        lm_path: the LM file (named in the messages).
        record: its record (:func:`read_vocab_record`), or None.
        vocab_size: the model's ``V``.
        tokenizer: the model's tokenizer, or None (``V`` alone is compared).
        error: the caller's room's error class.

    Raises:
        error: naming both tokenizers and what to do.
    """
    name = Path(lm_path).name
    if record is None:
        if tokenizer is not None:
            warnings.warn(
                f"the LM {name} has no tokenizer record ({vocab_record_path(lm_path).name}), "
                "so its tokenizer cannot be checked against the model's: if it was trained "
                "over other token ids, rescoring is silently wrong; train it with blockdraft "
                "ngram train --tokenizer MODEL", BlockdraftWarning, stacklevel=3)
        return
    named = f" ({record.name})" if record.name else ""
    if record.vocab_size != vocab_size:
        raise error(
            f"the LM {name} was trained over a tokenizer{named} of V = {record.vocab_size} "
            f"tokens but the model's vocabulary has V = {vocab_size}; train the LM with the "
            "model's tokenizer (blockdraft ngram train --tokenizer MODEL)")
    if tokenizer is None:
        return
    if isinstance(tokenizer, TokenizerInfo):
        theirs = tokenizer
    else:
        info = getattr(tokenizer, "info", None)
        if not callable(info):
            raise error(f"tokenizer must be a TokenizerInfo or a blockdraft tokenizer, got "
                        f"{type(tokenizer).__name__}")
        theirs = info()
    if theirs.fingerprint != record.fingerprint:
        other = f" ({theirs.name})" if theirs.name else ""
        raise error(
            f"the LM {name} was trained over another tokenizer{named}, fingerprint "
            f"{record.fingerprint}, than the model's{other}, fingerprint {theirs.fingerprint} "
            f"(same V = {vocab_size}, different tokens); train the LM with the model's "
            "tokenizer")
