"""WFST backend of global n-gram rescoring (Kim et al. 2024, sec. 6.3 and 7.2).

The lattice, as a weighted acceptor, is composed with the n-gram LM as an OpenFst WFST; the
``p`` cheapest distinct strings of the result are the drafts.

Public surface:
    arpa_to_fst(arpa_path) -> pywrapfst.VectorFst
        the LM as a tropical WFST over token labels (layout below); start state = ``<s>``.
    build_ngram_wfst(arpa_path) -> NgramWfst
        that FST plus its :class:`ContextStates` (history -> state map), built from the file.
    load_ngram_wfst(arpa_path, cache_dir=None) -> NgramWfst
        :func:`build_ngram_wfst` through an on-disk cache keyed by the file's path, size, mtime.
    default_cache_dir() -> Path
        ``$BLOCKDRAFT_CACHE/wfst``, else ``~/.cache/blockdraft/wfst``.
    ContextStates
        ``.lookup(context) -> state``: the state the LM is in after a committed prefix.
    WfstRescorer(fst, alpha=1.0, context_states=None, unknown="unk")
    WfstRescorer.from_arpa(path, alpha=1.0, cache_dir=None, unknown="unk")
        ``.rescore(lattice, context, p) -> DraftBatch`` (the Rescorer protocol, source
        ``"ngram-wfst"``), for the ARPA LM or any tropical WFST over token labels.
    agreement(exact_batch, wfst_batch) -> bool
        True when two batches hold the same token rows in the same order.

Labels and weights (shared with :mod:`blockdraft.lattice.fst`): token id ``t`` is OpenFst
label ``t + LABEL_OFFSET`` = ``t + 1`` (label 0 is epsilon). Weights are tropical costs
``-ln p`` in nats: the ARPA file's log10 values are multiplied by ``-ln 10`` exactly once, here.

The LM WFST (the OpenGrm NGram layout, an acceptor):
    - states: one per history, i.e. per word sequence that is the context of some longer
      n-gram: the empty history (the unigram state), ``(<s>,)``, ..., up to ``order - 1``
      words. The start state is the ``(<s>,)`` state (the unigram state when the LM has no
      bigram after ``<s>``).
    - an arc per n-gram ``w_1..w_n``: from the state of ``w_1..w_{n-1}`` to the state of the
      longest suffix of ``w_1..w_n`` that is a history, label ``w_n``, cost
      ``-ln 10 * log10 P``.
    - an epsilon back-off arc from each non-empty history to the state of its longest proper
      suffix that is a history, cost ``-ln 10 * log10 backoff`` (0 when the file has none).
    - every state is final with cost 0: a draft is the middle of a text, not its end.
    - no ``</s>`` arcs (drafts are never scored with ``</s>``, as in :class:`NgramLM`) and no
      arcs ending in ``<s>``; but an n-gram ending in ``</s>`` still makes its history a state,
      since KenLM keeps that history (and charges its back-off weight). n-grams whose history
      holds ``</s>``, ``<unk>`` or a ``<s>`` that is not first are dropped (unreachable: KenLM
      resets its state after ``<unk>``).
    - ``<unk>``: the unigram state has an arc with the reserved label :data:`UNK_LABEL` and
      the ``<unk>`` unigram cost back to the unigram state (KenLM resets its state after an
      unknown word; KenLM's default ``-100`` log10 when the file has no ``<unk>``).

Unknown tokens (ids without a unigram in the LM) follow :class:`NgramLM`'s ``unknown`` policy:
``"unk"`` (default): the lattice arc of an unknown token outputs :data:`UNK_LABEL`, so the path
pays the back-off weights down to the unigram state plus ``P(<unk>)`` and resets the history,
which is exactly KenLM's score; ``"error"``: :class:`RescorerError` naming the token. A fixed
penalty (a float policy) is not supported by this backend (it would need an arc per state) and
raises at construction: use the exact backend for it. No path is ever dropped for holding an
unknown token. Context tokens the LM does not know reset the context, as in KenLM.

How this backend differs from the exact one (``NgramRescorer(..., backend="exact")``): the pip
wheel of pynini has no phi (failure) matcher, so back-off arcs are plain epsilons. A string
then has several derivations through the LM: the explicit n-gram, and routes that take back-off
arcs although the n-gram exists. Composition followed by ``rmepsilon`` and ``shortestpath``
scores each string by its cheapest derivation, which costs at most as much as the true
(explicit-n-gram) one: for every string, the WFST's LM ln-score is >= KenLM's (equal when no
back-off route is cheaper, e.g. when every back-off weight is 0 and explicit n-grams beat the
lower orders), never below. So the WFST can rank strings differently from the exact backend
and its ``lm_scores`` can exceed KenLM's. Strings are always distinct (``unique=True`` on the
projected, epsilon-free acceptor). Weights are float32 inside OpenFst: scores agree with a
float64 computation to about 1e-5 nats (lattice costs are shifted by each slot's best score so
they stay small).

Not thread-safe: :meth:`WfstRescorer.rescore` sets the start state of the shared LM FST for
each call (an O(1) change of the one VectorFst, never a copy of it). Use one rescorer per
thread.
"""

from __future__ import annotations

import hashlib
import math
import os
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from blockdraft.drafts.batch import DraftBatch
from blockdraft.lattice.fst import LABEL_OFFSET
from blockdraft.lattice.sausage import SausageLattice
from blockdraft.rescorers.base import RescorerError, as_context, check_p
from blockdraft.rescorers.ngram.arpa import arpa_header, read_arpa

LN10 = math.log(10.0)

UNK_LABEL = 2**31 - 2
"""Reserved OpenFst label of the LM's ``<unk>`` word (the largest label, so arcs stay sorted)."""

MAX_TOKEN_ID = UNK_LABEL - LABEL_OFFSET - 1
"""Largest token id this backend can label (its label must stay below :data:`UNK_LABEL`)."""

BOS_CODE, EOS_CODE, UNK_CODE = -1, -2, -3
"""Codes of ``<s>``, ``</s>``, ``<unk>`` in history word arrays (token ids are ``>= 0``)."""

KENLM_MISSING_UNK_LOG10 = -100.0
"""log10 P(<unk>) KenLM substitutes when an ARPA file lacks ``<unk>``."""

CACHE_FORMAT = 1
"""Bumped when the cached FST or side file layout changes (part of the cache key)."""

_SPECIAL_CODES = {"<s>": BOS_CODE, "</s>": EOS_CODE, "<unk>": UNK_CODE}
_FST_MAGIC = 2125659606  # OpenFst's kFstMagicNumber
_VECTOR_FST_VERSION = 2


def _pywrapfst() -> Any:
    try:
        import pywrapfst
    except ImportError as e:  # pragma: no cover - pynini is a dependency
        raise RescorerError(
            "the wfst backend needs pywrapfst (shipped with pynini): pip install pynini"
        ) from e
    return pywrapfst


# ---------------------------------------------------------------------------- history hashing
_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


def _hash_rows(words: np.ndarray) -> np.ndarray:
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


def _hash_words(words: Sequence[int]) -> int:
    """:func:`_hash_rows` of one short row, in plain Python (no numpy call overhead)."""
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
        h = _hash_rows(words)
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

    def known(self, tokens: Any) -> np.ndarray:
        """bool array (the shape of ``tokens``): which token ids the LM has a unigram for."""
        ids = np.asarray(tokens, dtype=np.int64)
        if self.known_tokens.size == 0:
            return np.zeros(ids.shape, dtype=bool)
        pos = np.minimum(np.searchsorted(self.known_tokens, ids), self.known_tokens.size - 1)
        return self.known_tokens[pos] == ids

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
        ctx = as_context(context)
        if ctx.size == 0:
            return self.bos_state, ((BOS_CODE,) if self.bos_state != self.null_state else ())
        unknown = np.flatnonzero(~self.known(ctx))
        if unknown.size:
            ctx = ctx[unknown[-1] + 1 :]
        words = ctx[max(0, ctx.size - (self.order - 1)) :].tolist()
        for cut in range(min(len(words), len(self.hashes)), 0, -1):
            suffix = words[len(words) - cut :]
            table = self.hashes[cut - 1]
            h = _hash_words(suffix)
            pos = int(table.searchsorted(np.uint64(h)))
            if pos < table.size and int(table[pos]) == h:
                if self.histories[cut - 1][pos].tolist() == suffix:
                    return int(self.states[cut - 1][pos]), tuple(suffix)
        return self.null_state, ()

    def lookup(self, context: Sequence[int] | np.ndarray | None) -> int:
        """The LM state after a committed prefix (see :meth:`match`)."""
        return self.match(context)[0]

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


# ---------------------------------------------------------------------------- ARPA -> WFST
@dataclass(frozen=True, eq=False)
class NgramWfst:
    """An ARPA LM compiled to a WFST.

    Attributes:
        fst: the ``pywrapfst`` VectorFst (tropical, arc-sorted on input labels).
        states: its :class:`ContextStates`.
        arpa: the ARPA file it came from.
        counts: n-grams per order declared by the file.
        seconds: wall time of the conversion, or of loading the cache.
        from_cache: whether it was read from the cache.
    """

    fst: Any
    states: ContextStates
    arpa: Path
    counts: tuple[int, ...]
    seconds: float
    from_cache: bool

    @property
    def num_states(self) -> int:
        """States of the FST."""
        return int(self.fst.num_states())

    @property
    def num_arcs(self) -> int:
        """Arcs of the FST (n-gram arcs + back-off arcs; a loop over states: diagnostics)."""
        return int(sum(self.fst.num_arcs(s) for s in range(self.num_states)))


class _Codes(dict[str, int]):
    """LM word -> word code (token id, or a special code), memoised; a bad word raises."""

    def __init__(self, path: Path) -> None:
        super().__init__(_SPECIAL_CODES)
        self.path = path

    def __missing__(self, word: str) -> int:
        if not (word.isascii() and word.isdigit()):
            raise RescorerError(
                f"{self.path}: the LM word {word!r} is not a decimal token id; the wfst backend "
                "needs an LM over token ids (as `blockdraft ngram train` writes)"
            )
        code = int(word)
        if code > MAX_TOKEN_ID:
            raise RescorerError(f"{self.path}: token id {code} exceeds {MAX_TOKEN_ID}")
        self[word] = code
        return code


def _read_orders(path: Path) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """Per order ``n``: word codes int64 ``[c_n, n]``, log10 probs and back-offs ``[c_n]``."""
    order = len(arpa_header(path))
    codes: list[list[int]] = [[] for _ in range(order)]
    probs: list[list[float]] = [[] for _ in range(order)]
    backs: list[list[float]] = [[] for _ in range(order)]
    get = _Codes(path).__getitem__
    for n, words, prob, backoff in read_arpa(path):
        codes[n - 1].extend(map(get, words))
        probs[n - 1].append(prob)
        backs[n - 1].append(backoff)
    words_by = [np.array(c, dtype=np.int64).reshape(-1, n) for n, c in enumerate(codes, 1)]
    return (
        words_by,
        [np.array(p, dtype=np.float64) for p in probs],
        [np.array(b, dtype=np.float64) for b in backs],
    )


def _vector_fst(
    num_states: int, start: int, src: np.ndarray, label: np.ndarray, cost: np.ndarray,
    dst: np.ndarray,
) -> Any:
    """A VectorFst acceptor from arc arrays sorted by ``(src, label)``, every state final (0).

    Writes OpenFst's binary VectorFst layout with numpy (header; per state: float32 final
    cost, int64 arc count, then per arc int32 ilabel, int32 olabel, float32 cost, int32
    nextstate) and reads it back through OpenFst: much faster than adding arcs from Python.
    """
    fst = _pywrapfst()
    n_arcs = int(src.size)
    counts = np.bincount(src, minlength=num_states).astype(np.int64)

    def _string(s: str) -> bytes:
        return struct.pack("<i", len(s)) + s.encode("ascii")

    expanded_mutable = int(fst.EXPANDED.value | fst.MUTABLE.value)
    header = (
        struct.pack("<i", _FST_MAGIC) + _string("vector") + _string("standard")
        + struct.pack("<iiQqqq", _VECTOR_FST_VERSION, 0, expanded_mutable, start, num_states,
                      n_arcs)
    )
    body = np.empty(3 * num_states + 4 * n_arcs, dtype="<i4")
    before = np.zeros(num_states, dtype=np.int64)
    np.cumsum(counts[:-1], out=before[1:])
    state_pos = 3 * np.arange(num_states, dtype=np.int64) + 4 * before
    narcs = counts.astype("<i8").view("<i4").reshape(num_states, 2)
    body[state_pos] = 0  # final cost 0.0 (float32 zero has all bits 0)
    body[state_pos + 1] = narcs[:, 0]
    body[state_pos + 2] = narcs[:, 1]
    arc_pos = 3 * (src.astype(np.int64) + 1) + 4 * np.arange(n_arcs, dtype=np.int64)
    body[arc_pos] = label
    body[arc_pos + 1] = label
    body[arc_pos + 2] = cost.astype("<f4").view("<i4")
    body[arc_pos + 3] = dst
    out = fst.Fst.read_from_string(header + body.tobytes())
    out.arcsort("ilabel")  # already sorted: this only records the property for compose
    return out


def build_ngram_wfst(arpa_path: str | Path) -> NgramWfst:
    """Compile an ARPA LM over token ids to a WFST (layout in the module docstring).

    Args:
        arpa_path: the ARPA file; its words must be decimal token ids (plus ``<s>``,
            ``</s>``, ``<unk>``).

    Returns:
        :class:`NgramWfst` with the FST (start state ``<s>``) and its history map.

    Raises:
        ArpaFormatError: a malformed or truncated file (see :mod:`.arpa`).
        RescorerError: a word that is not a token id, a missing file.
    """
    t0 = time.perf_counter()
    path = Path(arpa_path)
    words_by, probs_by, backs_by = _read_orders(path)
    order = len(words_by)
    # n-grams whose history a draft can reach: no </s> or <unk> in it, <s> only first. An
    # n-gram ending in </s> still makes its history a state (KenLM charges that history's
    # back-off weight), it only gets no arc.
    keep = []
    for w in words_by:
        prefix = w[:, :-1]
        k = ~np.any((prefix == EOS_CODE) | (prefix == UNK_CODE), axis=1)
        k &= ~np.any(prefix[:, 1:] == BOS_CODE, axis=1)
        keep.append(k)
    words_by = [w[k] for w, k in zip(words_by, keep, strict=True)]
    probs_by = [p[k] for p, k in zip(probs_by, keep, strict=True)]
    backs_by = [b[k] for b, k in zip(backs_by, keep, strict=True)]

    # Histories of L words: the distinct prefixes of the (L+1)-grams. State 0: empty history.
    null_state, next_state = 0, 1
    hists: list[np.ndarray] = []
    hashes: list[np.ndarray] = []
    states: list[np.ndarray] = []
    src_by = [np.zeros(words_by[0].shape[0], dtype=np.int64)]  # arc sources, per order
    for length in range(1, order):
        prefix = words_by[length][:, :length]
        h = _hash_rows(prefix)
        uniq, first, inverse = np.unique(h, return_index=True, return_inverse=True)
        rows = prefix[first]
        if not np.array_equal(rows[inverse], prefix):
            raise RescorerError(f"{path}: a 64-bit history hash collision; please report it")
        ids = next_state + np.arange(uniq.size, dtype=np.int64)
        next_state += uniq.size
        hists.append(rows)
        hashes.append(uniq)
        states.append(ids)
        src_by.append(ids[inverse])
    unigrams = words_by[0][:, 0]
    known_tokens = np.unique(unigrams[unigrams >= 0])
    provisional = ContextStates(
        order=order, null_state=null_state, bos_state=null_state, histories=tuple(hists),
        hashes=tuple(hashes), states=tuple(states), known_tokens=known_tokens,
    )
    bos = int(provisional.find(np.array([[BOS_CODE]], dtype=np.int64))[0]) if order > 1 else -1
    cstates = ContextStates(
        order=order, null_state=null_state, bos_state=bos if bos >= 0 else null_state,
        histories=tuple(hists), hashes=tuple(hashes), states=tuple(states),
        known_tokens=known_tokens,
    )

    srcs, labels, costs, dsts = [], [], [], []
    # n-gram arcs
    for n in range(1, order + 1):
        w, prob = words_by[n - 1], probs_by[n - 1]
        last = w[:, -1]
        arc = (last != BOS_CODE) & (last != EOS_CODE) & np.isfinite(prob)
        w, last, src = w[arc], last[arc], src_by[n - 1][arc]
        is_unk = last == UNK_CODE
        dst = cstates.longest(w, order - 1)
        dst[is_unk] = null_state
        srcs.append(src)
        labels.append(np.where(is_unk, UNK_LABEL, last + LABEL_OFFSET))
        costs.append(-LN10 * prob[arc])
        dsts.append(dst)
    if not np.any(unigrams == UNK_CODE):
        srcs.append(np.array([null_state]))
        labels.append(np.array([UNK_LABEL]))
        costs.append(np.array([-LN10 * KENLM_MISSING_UNK_LOG10]))
        dsts.append(np.array([null_state]))
    # back-off arcs: history -> its longest proper suffix that is a history. The states of
    # the L-word histories are the block base + row index (rows in hash order).
    for length in range(1, order):
        rows, ids = hists[length - 1], states[length - 1]
        base = int(ids[0]) if ids.size else 0
        backoff = np.zeros(rows.shape[0])  # log10; 0 for a history the file does not list
        listed = cstates.find(words_by[length - 1])
        hit = listed >= 0
        backoff[listed[hit] - base] = backs_by[length - 1][hit]
        dst = (
            cstates.longest(rows[:, 1:], length - 1) if length > 1
            else np.full(rows.shape[0], null_state, dtype=np.int64)
        )
        srcs.append(ids)
        labels.append(np.zeros(rows.shape[0], dtype=np.int64))
        costs.append(-LN10 * backoff)
        dsts.append(dst)
    src = np.concatenate(srcs).astype(np.int64)
    label = np.concatenate(labels).astype(np.int64)
    cost = np.concatenate(costs).astype(np.float64)
    dst = np.concatenate(dsts).astype(np.int64)
    sort = np.lexsort((label, src))
    fst = _vector_fst(
        next_state, cstates.bos_state, src[sort], label[sort], cost[sort], dst[sort]
    )
    return NgramWfst(
        fst=fst, states=cstates, arpa=path, counts=arpa_header(path),
        seconds=time.perf_counter() - t0, from_cache=False,
    )


def arpa_to_fst(arpa_path: str | Path) -> Any:
    """The LM of an ARPA file as a tropical ``pywrapfst`` VectorFst (see the module docstring).

    Args:
        arpa_path: the ARPA file (words: decimal token ids).

    Returns:
        The FST, arc-sorted on input labels, start state ``<s>``. Use
        :func:`build_ngram_wfst` to also get the history -> state map.

    Raises:
        ArpaFormatError: a malformed or truncated file.
        RescorerError: a word that is not a token id, a missing file.
    """
    return build_ngram_wfst(arpa_path).fst


def default_cache_dir() -> Path:
    """``$BLOCKDRAFT_CACHE/wfst`` when the variable is set, else ``~/.cache/blockdraft/wfst``."""
    env = os.environ.get("BLOCKDRAFT_CACHE")
    return Path(env) / "wfst" if env else Path.home() / ".cache" / "blockdraft" / "wfst"


def _cache_paths(path: Path, cache_dir: Path) -> tuple[Path, Path]:
    st = path.stat()
    key = f"{CACHE_FORMAT}|{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    digest = hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    stem = f"{path.stem}-{digest}"
    return cache_dir / f"{stem}.fst", cache_dir / f"{stem}.npz"


def load_ngram_wfst(arpa_path: str | Path, cache_dir: str | Path | None = None) -> NgramWfst:
    """:func:`build_ngram_wfst`, cached on disk.

    The binary ``.fst`` and the ``.npz`` history map are stored under ``cache_dir`` (default
    :func:`default_cache_dir`) with a name keyed by the ARPA file's resolved path, size and
    mtime (and the cache format), so an edited file is converted again. Files are written to
    a temporary name and renamed, so concurrent processes never read half a file; an
    unreadable cache entry is rebuilt.

    Args:
        arpa_path: the ARPA file.
        cache_dir: where to keep converted LMs.

    Returns:
        :class:`NgramWfst` (``from_cache`` says whether the cache was used).

    Raises:
        ArpaFormatError, RescorerError: as :func:`build_ngram_wfst`; an unwritable cache dir.
    """
    path = Path(arpa_path)
    if not path.is_file():
        raise RescorerError(f"ARPA file {path} does not exist")
    cdir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    fst_path, npz_path = _cache_paths(path, cdir)
    if fst_path.is_file() and npz_path.is_file():
        t0 = time.perf_counter()
        try:
            fst = _pywrapfst().Fst.read(str(fst_path))
            cstates = ContextStates.load(npz_path)
        except Exception:  # a corrupt or foreign cache entry: rebuilt below
            pass
        else:
            return NgramWfst(
                fst=fst, states=cstates, arpa=path, counts=arpa_header(path),
                seconds=time.perf_counter() - t0, from_cache=True,
            )
    built = build_ngram_wfst(path)
    try:
        cdir.mkdir(parents=True, exist_ok=True)
        tmp = f".tmp{os.getpid()}"
        built.states.save(npz_path.with_name(npz_path.name + tmp))
        built.fst.write(str(fst_path.with_name(fst_path.name + tmp)))
        os.replace(npz_path.with_name(npz_path.name + tmp), npz_path)
        os.replace(fst_path.with_name(fst_path.name + tmp), fst_path)
    except OSError as e:
        raise RescorerError(
            f"cannot write the WFST cache under {cdir}: {e}; set cache_dir or $BLOCKDRAFT_CACHE"
        ) from e
    return built


# ---------------------------------------------------------------------------- rescoring
def _lattice_fst(lattice: SausageLattice, olabels: np.ndarray, alpha: float) -> Any:
    """The lattice as a transducer: slot ``i`` arcs go from state ``i`` to ``i + 1``.

    Input label: token ``t`` as ``t + LABEL_OFFSET``; output label: ``olabels`` (the LM's
    label for the token: the same, or :data:`UNK_LABEL` for a token the LM does not know).

    Not :func:`blockdraft.lattice.fst.lattice_to_fst`: that one is an acceptor with costs
    ``-score``, and this needs a transducer (the ``<unk>`` output labels) with scaled,
    shifted costs; building it directly costs the same as building that one. Cost:
    ``-(score - best score of the slot) / alpha`` (nats, >= 0): the per-slot shift is the same
    for every path, so it keeps the ranking of ``head + alpha * lm`` while keeping float32
    costs small. Arc-sorted on output labels for composition.
    """
    fst = _pywrapfst()
    h = lattice.h
    out = fst.VectorFst()
    out.reserve_states(h + 1)
    out.add_states(h + 1)
    out.set_start(0)
    out.set_final(h)
    arc = fst.Arc
    counts = lattice.counts
    for i in range(h):
        toks = lattice.tokens[i].tolist()
        scores = lattice.scores[i]
        costs = (-(scores - scores[0]) / alpha).tolist()
        labs = olabels[i].tolist()
        out.reserve_arcs(i, int(counts[i]))
        for j in range(int(counts[i])):
            out.add_arc(i, arc(toks[j] + LABEL_OFFSET, labs[j], costs[j], i + 1))
    out.arcsort("olabel")
    return out


def _read_paths(paths_fst: Any) -> list[tuple[float, list[int]]]:
    """``(cost, input labels)`` of each path of a ``shortestpath`` result, in its order.

    Costs are summed in float64 from the float32 arc weights (plus the final weight).
    """
    fst = _pywrapfst()
    start = paths_fst.start()
    if start == fst.NO_STATE_ID:
        return []
    out: list[tuple[float, list[int]]] = []
    first_arcs = list(paths_fst.arcs(start))
    if not first_arcs:  # the empty string (cannot happen for h >= 1)
        return [(float(paths_fst.final(start)), [])]
    for first in first_arcs:
        cost = float(first.weight)
        labels = [first.ilabel] if first.ilabel else []
        state = first.nextstate
        while True:
            arcs = list(paths_fst.arcs(state))
            if not arcs:
                cost += float(paths_fst.final(state))
                break
            a = arcs[0]
            cost += float(a.weight)
            if a.ilabel:
                labels.append(a.ilabel)
            state = a.nextstate
        out.append((cost, labels))
    return out


class WfstRescorer:
    """Rescore lattices by WFST composition: ``rescore(lattice, context, p) -> DraftBatch``.

    Args:
        fst: a tropical (``"standard"`` arc type) ``pywrapfst``/``pynini`` FST over token labels
            (token ``t`` = label ``t + 1``): an n-gram LM, a grammar, anything. Its costs are
            ``-ln P`` (nats). It is copied (cheaply, sharing storage) and arc-sorted on input
            labels if it is not already; the caller's FST is never modified.
        alpha: LM weight, finite, ``>= 0``; ``0`` returns the lattice's own p best
            (``lattice.best_paths(p)``) without composing.
        context_states: the FST's history -> state map (from :func:`build_ngram_wfst`). Without
            one, composition always starts at the FST's start state and the context is ignored
            (a grammar, or an LM compiled elsewhere); unknown-token handling is then off too
            (every token keeps its own label).
        unknown: with ``context_states``: ``"unk"`` (KenLM's ``<unk>`` semantics) or
            ``"error"``; see the module docstring.

    Attributes:
        alpha, context_states, unknown.

    Raises:
        RescorerError: a bad ``alpha``, an FST that is not tropical or has no start state, an
            unsupported ``unknown`` policy.

    Not thread-safe: each call sets the shared FST's start state.
    """

    def __init__(
        self,
        fst: Any,
        alpha: float = 1.0,
        context_states: ContextStates | None = None,
        *,
        unknown: str = "unk",
    ) -> None:
        self._setup(fst, alpha, context_states, unknown, copy=True)

    def _setup(
        self, fst: Any, alpha: float, context_states: ContextStates | None, unknown: Any,
        copy: bool,
    ) -> None:
        wrap = _pywrapfst()
        if not isinstance(fst, wrap.Fst):
            raise RescorerError(f"fst must be a pywrapfst or pynini FST, got {type(fst).__name__}")
        if fst.arc_type() != "standard":
            raise RescorerError(
                f"fst must have tropical ('standard') arcs, got {fst.arc_type()!r}; convert it "
                "with pywrapfst.arcmap(fst, map_type='to_std')"
            )
        if fst.start() == wrap.NO_STATE_ID:
            raise RescorerError("fst has no start state (an empty FST accepts nothing)")
        alpha = float(alpha)
        if not math.isfinite(alpha) or alpha < 0:
            raise RescorerError(f"alpha must be a finite number >= 0, got {alpha}")
        if not (isinstance(unknown, str) and unknown in ("unk", "error")):
            raise RescorerError(
                f"the wfst backend supports unknown='unk' or 'error', got {unknown!r}; a fixed "
                "unknown-token penalty needs backend='exact'"
            )
        if context_states is not None and not isinstance(context_states, ContextStates):
            raise RescorerError(
                f"context_states must be a ContextStates, got {type(context_states).__name__}"
            )
        # A copy shares the FST's storage until one of them is mutated; from_arpa owns its FST
        # and skips it so that set_start never triggers a copy-on-write of the big LM.
        own = fst.copy() if copy else fst
        if not own.properties(wrap.I_LABEL_SORTED, True) & wrap.I_LABEL_SORTED:
            own.arcsort("ilabel")  # on a copy: makes it private, the caller's FST is untouched
        self._fst = own
        self._start = int(own.start())
        self.alpha = alpha
        self.context_states = context_states
        self.unknown = unknown

    @classmethod
    def from_arpa(
        cls,
        path: str | Path,
        alpha: float = 1.0,
        cache_dir: str | Path | None = None,
        *,
        unknown: str | float = "unk",
    ) -> WfstRescorer:
        """A rescorer for an ARPA LM over token ids, converted once and cached.

        Args:
            path: the ARPA file.
            alpha: LM weight, ``>= 0``.
            cache_dir: where the converted WFST is cached (:func:`load_ngram_wfst`).
            unknown: ``"unk"`` or ``"error"`` (see the module docstring).

        Returns:
            The rescorer; ``.lm`` holds the :class:`NgramWfst` metadata (conversion time,
            counts, whether the cache was used).

        Raises:
            ArpaFormatError: a malformed ARPA file.
            RescorerError: see :class:`WfstRescorer` and :func:`build_ngram_wfst`.
        """
        lm = load_ngram_wfst(path, cache_dir)
        obj = cls.__new__(cls)
        obj._setup(lm.fst, alpha, lm.states, unknown, copy=False)
        obj.lm = lm  # the same FST object as obj.fst: one owner, so set_start never copies
        return obj

    lm: NgramWfst | None = None

    @property
    def fst(self) -> Any:
        """The FST composed with (shared; do not mutate)."""
        return self._fst

    def __repr__(self) -> str:
        src = f"{self.lm.arpa}" if self.lm is not None else "user fst"
        return f"WfstRescorer({src}, alpha={self.alpha}, unknown={self.unknown!r})"

    def start_state(self, context: Sequence[int] | np.ndarray | None) -> int:
        """The state composition starts from after ``context`` (see :meth:`ContextStates.match`;
        the FST's own start state when there is no history map)."""
        if self.context_states is None:
            return self._start
        return self.context_states.lookup(context)

    def _olabels(self, lattice: SausageLattice) -> np.ndarray:
        tokens = lattice.tokens
        real = tokens >= 0
        if real.any() and int(tokens.max()) > MAX_TOKEN_ID:
            raise RescorerError(f"token id {int(tokens.max())} exceeds {MAX_TOKEN_ID}")
        olabels = np.where(real, tokens + LABEL_OFFSET, 0)
        cs = self.context_states
        if cs is not None:
            unknown = real & ~cs.known(tokens)
            if unknown.any():
                if self.unknown == "error":
                    i, j = np.argwhere(unknown)[0]
                    raise RescorerError(
                        f"token id {int(tokens[i, j])} (slot {i + 1}) is not in the LM "
                        "(unknown='error'); use unknown='unk' to score it as <unk>"
                    )
                olabels[unknown] = UNK_LABEL
        return olabels

    def rescore(
        self, lattice: SausageLattice, context: Sequence[int] | np.ndarray = (), p: int = 1
    ) -> DraftBatch:
        """The ``p`` best distinct paths under ``head + alpha * lm``, best first.

        Args:
            lattice: the step's sausage lattice.
            context: the committed prefix's token ids, oldest first (may be empty: ``<s>``).
            p: drafts wanted, ``>= 1``.

        Returns:
            A :class:`DraftBatch` (``source="ngram-wfst"``, ``requested=p``, fewer rows when
            fewer than ``p`` paths survive): ``head_scores`` exact from the lattice (nats),
            ``lm_scores`` the WFST's unweighted ln-score of each path (its cheapest derivation:
            see the module docstring), ``scores = head + alpha * lm``. With ``alpha == 0`` the
            lattice's own p best and ``lm_scores`` zeros.

        Raises:
            RescorerError: a bad argument, an unknown token with ``unknown="error"`` (in the
                lattice, or in the context's last ``order - 1`` tokens, as :class:`NgramLM`),
                or a user FST that accepts no path of the lattice.
        """
        if not isinstance(lattice, SausageLattice):
            raise RescorerError(f"expected a SausageLattice, got {type(lattice).__name__}")
        p = check_p(p)
        ctx = as_context(context)
        olabels = self._olabels(lattice)
        cs = self.context_states
        if self.unknown == "error" and cs is not None and cs.order > 1 and ctx.size:
            tail = ctx[-(cs.order - 1):]  # what NgramLM.start looks up
            missing = tail[~cs.known(tail)]
            if missing.size:
                raise RescorerError(
                    f"context token id {int(missing[0])} is not in the LM (unknown='error'); "
                    "use unknown='unk' to score it as <unk>"
                )
        if self.alpha == 0.0:
            best = lattice.best_paths(p)
            return DraftBatch(
                tokens=best.tokens, scores=best.scores, head_scores=best.head_scores,
                lm_scores=np.zeros(best.p), alpha=0.0, requested=p, source="ngram-wfst",
            )
        wrap = _pywrapfst()
        lat = _lattice_fst(lattice, olabels, self.alpha)
        self._fst.set_start(self.start_state(ctx))
        composed = wrap.compose(lat, self._fst)
        composed.project("input")
        if p == 1:  # one path is one string: no need to remove epsilons and determinize
            paths = _read_paths(wrap.shortestpath(composed, nshortest=1))
        else:
            composed.rmepsilon()
            paths = _read_paths(wrap.shortestpath(composed, nshortest=p, unique=True))
        if not paths:
            raise RescorerError(
                "the WFST accepts no path of the lattice (a grammar that rejects every draft?)"
            )
        paths.sort(key=lambda c: c[0])  # stable: OpenFst's order among float32 ties
        h = lattice.h
        cost = np.array([c for c, _ in paths], dtype=np.float64)
        labels = np.array([lab for _, lab in paths], dtype=np.int64).reshape(-1, h)
        tokens = labels - LABEL_OFFSET
        arcs = np.empty_like(tokens)
        for i in range(h):
            slot_tokens = lattice.slot(i)[0]
            index = {int(t): a for a, t in enumerate(slot_tokens.tolist())}
            arcs[:, i] = [index[int(t)] for t in tokens[:, i].tolist()]
        head = lattice.scores[np.arange(h)[None, :], arcs].sum(axis=1)
        shift = float(lattice.scores[:, 0].sum())
        # cost = sum_i -(s_i - best_i) / alpha + L, with L = -lm the LM cost (nats):
        lm = -(cost + (head - shift) / self.alpha)
        return DraftBatch(
            tokens=tokens, scores=head + self.alpha * lm, head_scores=head, lm_scores=lm,
            alpha=self.alpha, requested=p, source="ngram-wfst",
        )


def agreement(exact_batch: DraftBatch, wfst_batch: DraftBatch) -> bool:
    """Whether two rescorers agree: the same token rows, in the same order.

    Args:
        exact_batch: e.g. the exact backend's drafts.
        wfst_batch: e.g. this backend's drafts for the same lattice, context and ``p``.

    Returns:
        True when both hold the same number of drafts and equal ``tokens`` row by row.
    """
    return exact_batch.tokens.shape == wfst_batch.tokens.shape and bool(
        np.array_equal(exact_batch.tokens, wfst_batch.tokens)
    )
