"""The files ``blockdraft ngram train`` writes beside an n-gram LM, and their checks.

``<prefix>.vocab.json`` records the tokenizer the LM's token ids came from (name, ``V`` and a
fingerprint of its vocabulary; read and checked by :mod:`blockdraft.models.vocab_record`, the
one check :meth:`~blockdraft.rescorers.ngram.NgramLM.check_vocab` and a packaged drafting
recipe share); ``<prefix>.fingerprint.json`` records the ARPA/binary pair built together
(order, n-gram counts and both files' SHA-256), so a rebuilt or replaced file of the pair is
refused.

Public surface:
    VOCAB_RECORD_SUFFIX, vocab_record_path(lm), write_vocab_record(prefix, tokenizer),
        read_vocab_record(lm) -> TokenizerInfo | None
    FINGERPRINT_SUFFIX, fingerprint_path(lm), write_fingerprint(prefix, arpa, binary, counts)
    check_binary(binary)                     the binary is the one its fingerprint records
    check_arpa_pair(binary, arpa, *, order, unigrams)   the ARPA file is the binary's pair
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from blockdraft.core.digest import sha256_file
from blockdraft.core.files import write_text_atomic
from blockdraft.models.tokenizer import TokenizerInfo
from blockdraft.models.vocab_record import VOCAB_RECORD_SUFFIX, vocab_record_path
from blockdraft.models.vocab_record import read_vocab_record as _read_record
from blockdraft.rescorers.base import RescorerError
from blockdraft.rescorers.ngram.arpa import arpa_header

__all__ = [
    "FINGERPRINT_SUFFIX",
    "VOCAB_RECORD_SUFFIX",
    "check_arpa_pair",
    "check_binary",
    "fingerprint_path",
    "read_vocab_record",
    "vocab_record_path",
    "write_fingerprint",
    "write_vocab_record",
]


def write_vocab_record(out_prefix: str | Path, tokenizer: TokenizerInfo | None) -> Path | None:
    """Write (or, for None, remove a stale) ``<out_prefix>.vocab.json``; returns its path."""
    prefix = Path(out_prefix)
    path = prefix.with_name(prefix.name + VOCAB_RECORD_SUFFIX)
    if tokenizer is None:
        path.unlink(missing_ok=True)
        return None
    data = {"format": "blockdraft-ngram-vocab", "format_version": 1,
            "tokenizer": tokenizer.to_dict()}
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path


def read_vocab_record(lm_path: str | Path) -> TokenizerInfo | None:
    """The tokenizer recorded beside an LM, or None when there is no record
    (:func:`blockdraft.models.vocab_record.read_vocab_record`).

    Raises:
        RescorerError: a record that cannot be read.
    """
    return _read_record(lm_path, RescorerError)


FINGERPRINT_SUFFIX = ".fingerprint.json"
"""``<prefix>.fingerprint.json``: the ARPA/binary pair ``train_ngram`` built together."""


def fingerprint_path(lm_path: str | Path) -> Path:
    """``lm4.bin`` / ``lm4.arpa`` / ``lm4`` -> ``lm4.fingerprint.json`` beside it."""
    path = Path(lm_path)
    stem = path.stem if path.suffix in (".arpa", ".bin", ".binary", ".klm") else path.name
    return path.with_name(stem + FINGERPRINT_SUFFIX)


def write_fingerprint(
    out_prefix: str | Path, arpa: Path, binary: Path | None, counts: Sequence[int]
) -> Path:
    """Record the ARPA/binary pair just built: order, n-gram counts and both files' SHA-256."""
    prefix = Path(out_prefix)
    path = prefix.with_name(prefix.name + FINGERPRINT_SUFFIX)
    data = {
        "format": "blockdraft-ngram-fingerprint", "format_version": 1,
        "order": len(counts), "counts": [int(c) for c in counts],
        "arpa": arpa.name, "arpa_sha256": sha256_file(arpa),
        "binary": binary.name if binary is not None else None,
        "binary_sha256": sha256_file(binary) if binary is not None else None,
    }
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path


def _read_fingerprint(fp: Path, redo: str) -> tuple[str | None, str | None]:
    """``(arpa_sha256, binary_sha256)`` recorded in a fingerprint file."""
    try:
        rec = json.loads(fp.read_text(encoding="utf-8"))
        want_arpa, want_bin = rec["arpa_sha256"], rec["binary_sha256"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise RescorerError(f"cannot read the LM's fingerprint {fp}: {e}; {redo}") from e
    if not all(x is None or isinstance(x, str) for x in (want_arpa, want_bin)):
        raise RescorerError(f"cannot read the LM's fingerprint {fp}: hashes must be strings; "
                            f"{redo}")
    return want_arpa, want_bin


def check_binary(binary: str | Path) -> None:
    """Refuse a KenLM binary that is not the one ``train_ngram`` built beside its
    ``<prefix>.fingerprint.json`` (rebuilt, replaced, or corrupted since); no-op without one.

    Raises:
        RescorerError: naming the binary, the fingerprint and what to do.
    """
    binary = Path(binary)
    fp = fingerprint_path(binary)
    if not fp.is_file():
        return
    redo = f"rebuild it (blockdraft ngram train -o {binary.with_suffix('')})"
    _, want_bin = _read_fingerprint(fp, redo)
    if want_bin != sha256_file(binary):
        raise RescorerError(
            f"the KenLM binary {binary} is not the one recorded in {fp.name} (rebuilt, replaced "
            f"or corrupted since: its SHA-256 differs); {redo}, or delete {fp.name} to use it "
            "as it is"
        )


def check_arpa_pair(binary: str | Path, arpa: str | Path, *, order: int | None = None,
                    unigrams: int | None = None) -> None:
    """Refuse an ARPA file that is not the one a KenLM binary was built from.

    With ``<prefix>.fingerprint.json`` beside the binary (written by ``train_ngram``), both
    files' SHA-256 must be the recorded ones. Without it, the ARPA header must agree with what
    the binary says of itself (``order``, ``unigrams`` = words including ``<unk>``, ``<s>``,
    ``</s>``) when given; a pair built elsewhere is otherwise taken on trust.

    Raises:
        RescorerError: naming both files and what to do.
    """
    binary, arpa = Path(binary), Path(arpa)
    redo = (f"rebuild both from one run (blockdraft ngram train -o {binary.with_suffix('')}), "
            "or load the binary without bounds (bounds=False)")
    fp = fingerprint_path(binary)
    if fp.is_file():
        want_arpa, want_bin = _read_fingerprint(fp, redo)
        if want_bin != sha256_file(binary) or want_arpa != sha256_file(arpa):
            raise RescorerError(
                f"the ARPA file {arpa} and the KenLM binary {binary} are not the pair recorded "
                f"in {fp.name} (one of them was rebuilt or replaced since); the exact search's "
                f"bounds from a stale ARPA file give wrong p-best drafts: {redo}"
            )
        return
    try:
        counts = arpa_header(arpa)
    except RescorerError as e:
        raise RescorerError(f"the ARPA file {arpa} beside the KenLM binary {binary} cannot be "
                            f"read ({e}); {redo}") from e
    if order is not None and len(counts) != order:
        raise RescorerError(
            f"the ARPA file {arpa} is of order {len(counts)} but the KenLM binary {binary} of "
            f"order {order}: they are not the same model; {redo}"
        )
    if unigrams is not None:
        # the binary adds <unk> when the ARPA file has none
        if counts[0] not in (unigrams, unigrams - 1):
            raise RescorerError(
                f"the ARPA file {arpa} has {counts[0]} unigrams but the KenLM binary {binary} "
                f"{unigrams} words: they are not the same model; {redo}"
            )
