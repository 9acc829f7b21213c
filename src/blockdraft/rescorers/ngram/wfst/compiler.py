"""ARPA -> WFST: an n-gram LM over token ids compiled to an OpenFst acceptor.

The ARPA file's log10 values are multiplied by ``-ln 10`` exactly once, here, so every weight
is a tropical cost ``-ln p`` in nats (labels: see :mod:`.openfst`).

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

Public surface: :func:`build_ngram_wfst` (the FST and its :class:`~.history.ContextStates`),
:func:`arpa_to_fst` (the FST alone), :class:`NgramWfst`. :func:`~.cache.load_ngram_wfst` is
the same through an on-disk cache.
"""

from __future__ import annotations

import math
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from blockdraft.lattice.fst import LABEL_OFFSET
from blockdraft.rescorers.base import RescorerError
from blockdraft.rescorers.ngram.arpa import arpa_header, read_arpa
from blockdraft.rescorers.ngram.wfst.history import (
    BOS_CODE,
    EOS_CODE,
    UNK_CODE,
    ContextStates,
    hash_rows,
)
from blockdraft.rescorers.ngram.wfst.openfst import MAX_TOKEN_ID, UNK_LABEL, load_pywrapfst

LN10 = math.log(10.0)

KENLM_MISSING_UNK_LOG10 = -100.0
"""log10 P(<unk>) KenLM substitutes when an ARPA file lacks ``<unk>``."""

_SPECIAL_CODES = {"<s>": BOS_CODE, "</s>": EOS_CODE, "<unk>": UNK_CODE}
_FST_MAGIC = 2125659606  # OpenFst's kFstMagicNumber
_VECTOR_FST_VERSION = 2


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
    fst = load_pywrapfst()
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
        h = hash_rows(prefix)
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
