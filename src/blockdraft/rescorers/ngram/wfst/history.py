"""LM histories of the WFST backend: word codes, their hashing, and the history -> state map.

A history is the word sequence an n-gram's last word follows (at most ``order - 1`` words).
Its words are stored as int64 codes: token ids (``>= 0``) and :data:`BOS_CODE`,
:data:`EOS_CODE`, :data:`UNK_CODE` for ``<s>``, ``</s>``, ``<unk>``. :class:`ContextStates`
finds the WFST state a committed context leaves the LM in, by hashing its suffixes
(:func:`hash_rows`, vectorised; :func:`hash_words`, one short row) and confirming each hit by
comparing the words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from blockdraft.rescorers.base import as_context

BOS_CODE, EOS_CODE, UNK_CODE = -1, -2, -3
"""Codes of ``<s>``, ``</s>``, ``<unk>`` in history word arrays (token ids are ``>= 0``)."""

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


def hash_rows(words: np.ndarray) -> np.ndarray:
    """uint64 ``[n]``: a hash of each row of an int64 ``[n, L]`` word-code array.

    FNV-1a over 64-bit words, seeded with ``L``, then the splitmix64 finaliser. Matches are
    always confirmed by comparing the words, so a collision can never give a wrong state.
    """
    n, length = words.shape
    with np.errstate(over="ignore"):
        h = np.full(n, _FNV_OFFSET ^ np.uint64(length), dtype=np.uint64)
        for j in range(length):
            h ^= np.ascontiguousarray(words[:, j], dtype=np.int64).view(np.uint64)
            h *= _FNV_PRIME
        h ^= h >> np.uint64(30)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(27)
        h *= np.uint64(0x94D049BB133111EB)
        h ^= h >> np.uint64(31)
    return h


_MASK64 = (1 << 64) - 1


def hash_words(words: Sequence[int]) -> int:
    """:func:`hash_rows` of one short row, in plain Python (no numpy call overhead)."""
    h = int(_FNV_OFFSET) ^ len(words)
    for w in words:
        h = ((h ^ (w & _MASK64)) * int(_FNV_PRIME)) & _MASK64
    h ^= h >> 30
    h = (h * 0xBF58476D1CE4E5B9) & _MASK64
    h ^= h >> 27
    h = (h * 0x94D049BB133111EB) & _MASK64
    return h ^ (h >> 31)


# ---------------------------------------------------------------------------- context states
@dataclass(frozen=True, eq=False)
class ContextStates:
    """The history -> state map of an LM WFST, for starting composition after a context.

    Attributes:
        order: the LM order ``N`` (histories have at most ``N - 1`` words).
        null_state: the state of the empty history (the unigram state).
        bos_state: the state of ``(<s>,)``, the start for an empty context (``null_state``
            when ``<s>`` is no history).
        histories: ``histories[L - 1]`` is int64 ``[m_L, L]``, the histories of ``L`` words
            as word codes (token ids, :data:`BOS_CODE` for ``<s>``), sorted by ``hashes``.
        hashes: ``hashes[L - 1]`` is uint64 ``[m_L]``, sorted, the hash of each history.
        states: ``states[L - 1]`` is int64 ``[m_L]``, the FST state of each history.
        known_tokens: int64, sorted: the token ids the LM has a unigram for.
    """

    order: int
    null_state: int
    bos_state: int
    histories: tuple[np.ndarray, ...]
    hashes: tuple[np.ndarray, ...]
    states: tuple[np.ndarray, ...]
    known_tokens: np.ndarray

    def find(self, words: np.ndarray) -> np.ndarray:
        """int64 ``[n]``: the state of each row of int64 ``[n, L]`` word codes, -1 if none."""
        words = np.asarray(words, dtype=np.int64)
        n, length = words.shape
        out = np.full(n, -1, dtype=np.int64)
        if n == 0 or length == 0 or length > len(self.hashes):
            return out
        table = self.hashes[length - 1]
        if table.size == 0:
            return out
        h = hash_rows(words)
        if n > 1024:  # sorted queries keep the binary searches in cache: ~4x faster
            order = np.argsort(h)
            pos = np.empty(n, dtype=np.int64)
            pos[order] = np.searchsorted(table, h[order])
        else:
            pos = np.searchsorted(table, h)
        pos = np.minimum(pos, table.size - 1)
        hit = table[pos] == h
        hit &= np.all(self.histories[length - 1][pos] == words, axis=1)
        out[hit] = self.states[length - 1][pos[hit]]
        return out

    def longest(self, words: np.ndarray, max_len: int) -> np.ndarray:
        """int64 ``[n]``: the state of the longest suffix (at most ``max_len`` words) of each
        row of int64 ``[n, L]`` word codes that is a history; ``null_state`` when none is."""
        words = np.asarray(words, dtype=np.int64)
        n, length = words.shape
        out = np.full(n, self.null_state, dtype=np.int64)
        todo = np.arange(n)
        for cut in range(min(length, max_len, len(self.hashes)), 0, -1):
            if todo.size == 0:
                break
            found = self.find(words[todo, length - cut :])
            hit = found >= 0
            out[todo[hit]] = found[hit]
            todo = todo[~hit]
        return out

    @cached_property
    def known_mask(self) -> np.ndarray:
        """bool ``[max known id + 1]``: ``known_mask[t]`` says whether the LM knows id ``t``."""
        mask = np.zeros(int(self.known_tokens[-1]) + 1 if self.known_tokens.size else 0,
                        dtype=bool)
        mask[self.known_tokens] = True
        mask.setflags(write=False)
        return mask

    def known(self, tokens: Any) -> np.ndarray:
        """bool array (the shape of ``tokens``): which token ids the LM has a unigram for."""
        ids = np.asarray(tokens, dtype=np.int64)
        mask = self.known_mask
        if mask.size == 0:
            return np.zeros(ids.shape, dtype=bool)
        out = mask.take(ids, mode="clip")  # ids outside [0, size) are fixed below
        outside = (ids < 0) | (ids >= mask.size)
        if outside.any():
            out[outside] = False
        return out

    def match(self, context: Sequence[int] | np.ndarray | None) -> tuple[int, tuple[int, ...]]:
        """The LM state after a committed prefix and the history it stands for.

        Semantics of :class:`NgramLM` / KenLM: an empty context is the ``<s>`` state; otherwise
        the state is that of the longest suffix of the context's last ``order - 1`` tokens that
        is a history (KenLM's right state), counting only tokens after the last unknown one
        (an unknown token resets the state).

        Returns:
            ``(state, history)``: ``history`` as token ids, oldest first (``BOS_CODE`` for
            ``<s>``; ``()`` for the unigram state).
        """
        return self._match(as_context(context))

    def _match(self, ctx: np.ndarray) -> tuple[int, tuple[int, ...]]:
        if ctx.size == 0:
            return self.bos_state, ((BOS_CODE,) if self.bos_state != self.null_state else ())
        # Only the last order - 1 tokens matter, and of those the ones after an unknown token.
        mask, size = self.known_mask, self.known_mask.size
        words = ctx[max(0, ctx.size - (self.order - 1)) :].tolist()
        for i in range(len(words) - 1, -1, -1):
            if not (words[i] < size and mask[words[i]]):
                words = words[i + 1 :]
                break
        for cut in range(min(len(words), len(self.hashes)), 0, -1):
            suffix = words[len(words) - cut :]
            table = self.hashes[cut - 1]
            h = hash_words(suffix)
            pos = int(table.searchsorted(np.uint64(h)))
            if pos < table.size and int(table[pos]) == h:
                if self.histories[cut - 1][pos].tolist() == suffix:
                    return int(self.states[cut - 1][pos]), tuple(suffix)
        return self.null_state, ()

    def lookup(self, context: Sequence[int] | np.ndarray | None) -> int:
        """The LM state after a committed prefix (see :meth:`match`)."""
        return self.match(context)[0]

    def lookup_checked(self, ctx: np.ndarray) -> int:
        """:meth:`lookup` of a context already validated by ``as_context``."""
        return self._match(ctx)[0]

    # ---------------------------------------------------------------- persistence
    def save(self, path: str | Path) -> None:
        """Write the map as a ``.npz`` file (numpy arrays only; no pickle)."""
        arrays: dict[str, np.ndarray] = {
            "meta": np.array([self.order, self.null_state, self.bos_state], dtype=np.int64),
            "known_tokens": self.known_tokens,
        }
        for i, (w, h, s) in enumerate(zip(self.histories, self.hashes, self.states, strict=True)):
            arrays[f"hist{i + 1}"] = w
            arrays[f"hash{i + 1}"] = h
            arrays[f"state{i + 1}"] = s
        with open(path, "wb") as f:
            np.savez(f, allow_pickle=False, **arrays)

    @classmethod
    def load(cls, path: str | Path) -> ContextStates:
        """Read a map written by :meth:`save`."""
        with np.load(path, allow_pickle=False) as z:
            order, null_state, bos_state = (int(x) for x in z["meta"])
            n = order - 1
            return cls(
                order=order,
                null_state=null_state,
                bos_state=bos_state,
                histories=tuple(z[f"hist{i}"] for i in range(1, n + 1)),
                hashes=tuple(z[f"hash{i}"] for i in range(1, n + 1)),
                states=tuple(z[f"state{i}"] for i in range(1, n + 1)),
                known_tokens=z["known_tokens"],
            )
