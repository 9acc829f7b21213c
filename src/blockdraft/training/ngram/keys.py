"""n-gram keys: the word codes of an n-gram packed into one sortable byte string.

An n-gram of ``n`` words is a key of ``4 n`` bytes: each word's code plus 3 as 4 big-endian
bytes, so that keys compare as their words do, oldest word first (``<unk>`` < ``</s>`` <
``<s>`` < token 0 < token 1 ...). Exact (no two n-grams share a key), sorted with numpy and
found by binary search: the interpolation of two LMs (:mod:`.interpolate`) holds millions of
them in flat arrays.

Word codes: a token id is its own code; ``<s>``, ``</s>`` and ``<unk>`` have the negative
codes of :mod:`blockdraft.rescorers.ngram.wfst.history`.

Public surface:
    encode_keys(words int64 [c, n]) -> S{4n} [c];  decode_keys(keys, n) -> int64 [c, n]
    key_part(keys, n, start, stop) -> the keys of words start:stop of each key
    find_keys(keys, wanted) -> int64 [q]: each one's index in sorted keys, -1 if absent
    sorted_distinct(keys);  add_missing(keys, wanted) -> (keys, how many were added)
    WordCodes(path): ARPA word -> word code (memoised; a word that is not a token id raises)
    word_name(code) -> the ARPA word
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from blockdraft.rescorers.base import RescorerError
from blockdraft.rescorers.ngram.wfst.history import BOS_CODE, EOS_CODE, UNK_CODE

_SPECIAL = {"<s>": BOS_CODE, "</s>": EOS_CODE, "<unk>": UNK_CODE}
_NAMES = {code: word for word, code in _SPECIAL.items()}
_OFFSET = 3  # word code + 3 >= 0: the 4 bytes of a word in a key
_MAX_ID = 2**32 - 1 - _OFFSET


def encode_keys(words: np.ndarray) -> np.ndarray:
    """Keys ``S{4n}`` ``[c]`` of word codes int64 ``[c, n]``: each code + 3 as 4 big-endian
    bytes, so that keys compare as their rows do, oldest word first (``<unk>`` < ``</s>`` <
    ``<s>`` < token 0 < token 1 ...). Exact: no two rows share a key."""
    n = words.shape[1]
    return (words + _OFFSET).astype(">u4").view(f"S{4 * n}").reshape(-1)


def decode_keys(keys: np.ndarray, n: int) -> np.ndarray:
    """Word codes int64 ``[c, n]`` of ``n``-word keys (the inverse of :func:`encode_keys`)."""
    return keys.view(">u4").reshape(-1, n).astype(np.int64) - _OFFSET


def key_part(keys: np.ndarray, n: int, start: int, stop: int) -> np.ndarray:
    """The keys of words ``start:stop`` of each ``n``-word key (``1, n``: the suffixes,
    ``0, n - 1``: the histories)."""
    columns = np.ascontiguousarray(keys.view(np.uint8).reshape(-1, 4 * n)[:, 4 * start:4 * stop])
    return columns.view(f"S{4 * (stop - start)}").reshape(-1)


def find_keys(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """int64 ``[q]``: the index of each of ``wanted`` in the sorted distinct ``keys``, -1
    where it is not there."""
    if keys.size == 0:
        return np.full(wanted.size, -1, dtype=np.int64)
    pos = np.minimum(np.searchsorted(keys, wanted), keys.size - 1)
    return np.where(keys[pos] == wanted, pos, -1)


def sorted_distinct(keys: np.ndarray) -> np.ndarray:
    """The distinct keys, sorted (``np.unique`` is several times slower on byte strings)."""
    keys = np.sort(keys, kind="stable")
    first = np.ones(keys.size, dtype=bool)
    first[1:] = keys[1:] != keys[:-1]
    return keys[first]


def add_missing(keys: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, int]:
    """``keys`` with those of ``wanted`` it lacks added (sorted, distinct); and how many."""
    missing = wanted[find_keys(keys, wanted) < 0]
    if missing.size == 0:
        return keys, 0
    closed = sorted_distinct(np.concatenate([keys, missing]))
    return closed, closed.size - keys.size


class WordCodes(dict[str, int]):
    """ARPA word -> word code (a token id, or the code of ``<s>``, ``</s>``, ``<unk>``),
    memoised; a word that is not a token id raises."""

    def __init__(self, path: Path) -> None:
        super().__init__(_SPECIAL)
        self.path = path

    def __missing__(self, word: str) -> int:
        if not (word.isascii() and word.isdigit()):
            raise RescorerError(
                f"{self.path}: the LM word {word!r} is not a decimal token id; interpolation "
                "needs two LMs over token ids (as `blockdraft ngram train` writes them), "
                "plus <s>, </s> and <unk>"
            )
        code = int(word)
        if code > _MAX_ID:
            raise RescorerError(f"{self.path}: token id {code} exceeds {_MAX_ID}")
        self[word] = code
        return code


def word_name(code: int) -> str:
    """The ARPA word of a word code."""
    return _NAMES.get(code, str(code))
