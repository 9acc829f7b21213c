"""The sausage lattice of one BPD step (Kim et al. 2024, sec. 6.3, Fig. 4).

See docs/definitions.md sec. 3.

Slot ``i`` (1-based in the papers, row ``i - 1`` here) holds the top-``k`` tokens of head ``i``
with their natural-log probabilities, best first. A path picks one token per slot; distinct
paths are distinct strings because the tokens within a slot are distinct.

Public surface:
    SausageLattice(tokens, scores)      validated, immutable; ``[h, k]`` each
    SausageLattice.from_logits(logits, k, certain_first=True)    from one step's ``[h, V]``
    SausageLattice.from_logits_batch(logits, k, certain_first=True)  ``[B, h, V]`` -> list
    SausageLattice.from_topk(ids, scores, certain_first=True)   from ``[h, k]`` taken elsewhere
    .num_paths, .path_score(tokens), .best_paths(p)   (p-best 0-gram: head scores alone)
    .certain, .expand(prefix), .peek(prefix)     the searchable-lattice protocol
        (:mod:`blockdraft.lattice.search`: one best-first growth, one exact p-best)

Files, FST acceptors and drawings of a lattice live beside it (:mod:`blockdraft.lattice.io`,
:mod:`~blockdraft.lattice.fst`, :mod:`~blockdraft.lattice.draw`), which import this module.

Ragged slots: a slot may hold fewer than ``k`` arcs (slot 1 with ``certain_first``, or a head
whose vocabulary is masked with ``-inf``). Missing arcs are padding at the end of the row:
token ``-1`` and score ``-inf``. ``counts[i]`` is the number of real arcs in slot ``i``.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from blockdraft.core.arrays import as_numpy, readonly
from blockdraft.core.batch import DraftBatch
from blockdraft.core.checks import check_positive_int
from blockdraft.core.errors import BlockdraftError

PAD_TOKEN = -1
"""Token id of a padding arc (an absent arc at the end of a ragged slot)."""
_NO_ARCS = (np.zeros(0, dtype=np.int64), np.zeros(0))
_MOVED_METHODS = {
    "to_fst": "blockdraft.lattice.fst.lattice_to_fst(lattice)",
    "from_fst": "blockdraft.lattice.fst.lattice_from_fst(fst)",
    "save": "blockdraft.lattice.io.save_lattice(lattice, path)",
    "load": "blockdraft.lattice.io.load_lattice(path).lattice",
    "draw": "blockdraft.lattice.draw.draw_lattice(lattice, path)",
}


class LatticeError(BlockdraftError, ValueError):
    """A lattice was built from, or asked about, invalid input."""


def log_softmax(logits: np.ndarray, axis: int = -1) -> np.ndarray:
    """Natural-log softmax in float64; ``-inf`` logits stay ``-inf``."""
    z = np.asarray(logits, dtype=np.float64)
    m = np.max(z, axis=axis, keepdims=True)
    shifted = z - m
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def _raise_slot_error(i: int, tokens: np.ndarray, scores: np.ndarray) -> None:
    """Raise the :class:`LatticeError` that names what is wrong with slot ``i`` (0-based)."""
    k = tokens.size
    row_pad = tokens == PAD_TOKEN
    n = int(np.argmax(row_pad)) if row_pad.any() else k
    if n == 0:
        raise LatticeError(f"slot {i + 1} has no arcs (all padding)")
    if row_pad[n:].sum() != k - n:
        raise LatticeError(
            f"slot {i + 1}: padding ({PAD_TOKEN}) must come after all real arcs, "
            f"got tokens {tokens.tolist()}"
        )
    if not np.all(np.isneginf(scores[n:])):
        raise LatticeError(f"slot {i + 1}: padding arcs must have score -inf")
    real = scores[:n]
    if np.isneginf(real).any():
        raise LatticeError(
            f"slot {i + 1}: a real arc has score -inf; drop it (pad with {PAD_TOKEN}) instead"
        )
    if np.any(np.diff(real) > 0):
        raise LatticeError(f"slot {i + 1}: scores must be sorted best first, got {real.tolist()}")
    vals, cnt = np.unique(tokens[:n], return_counts=True)
    raise LatticeError(
        f"slot {i + 1}: token {int(vals[cnt > 1][0])} appears more than once; tokens within a "
        "slot must be distinct"
    )


class _LatticeType(type):
    """The metaclass that names the functions of the lattice's former classmethods."""

    def __getattr__(cls, name: str) -> Any:
        if name in _MOVED_METHODS:
            raise AttributeError(f"SausageLattice.{name} is gone: use {_MOVED_METHODS[name]} "
                                 "(the lattice's files, FSTs and drawings live beside it)")
        raise AttributeError(f"type object 'SausageLattice' has no attribute {name!r}")


@dataclass(frozen=True, eq=False)
class SausageLattice(metaclass=_LatticeType):
    """An ``h``-slot sausage lattice with up to ``k`` arcs per slot.

    Attributes:
        tokens: int64 ``[h, k]``, token ids, best first per slot, distinct within a slot;
            padding (``-1``) only after the real arcs.
        scores: float64 ``[h, k]``, natural-log probabilities (higher is better), non-increasing
            along each slot; ``-inf`` exactly at padding.

    Raises:
        LatticeError: on a shape, dtype, ordering, duplicate, NaN or padding violation; the
            message names the offending slot and value.
    """

    tokens: np.ndarray
    scores: np.ndarray

    def __post_init__(self) -> None:
        tokens = as_numpy(self.tokens)
        scores = as_numpy(self.scores)
        if tokens.ndim != 2:
            raise LatticeError(f"tokens must be a 2-D [h, k] array, got shape {tokens.shape}")
        if scores.shape != tokens.shape:
            raise LatticeError(
                f"scores shape {scores.shape} does not match tokens shape {tokens.shape}"
            )
        h, k = tokens.shape
        if h == 0:
            raise LatticeError("a lattice needs at least one slot (h >= 1), got h = 0")
        if k == 0:
            raise LatticeError("a lattice needs at least one arc per slot (k >= 1), got k = 0")
        if tokens.dtype.kind not in "iu":
            if tokens.dtype.kind == "f" and np.all(np.isfinite(tokens)) and np.all(
                tokens == np.round(tokens)
            ):
                tokens = tokens.astype(np.int64)
            else:
                raise LatticeError(f"tokens must be integer ids, got dtype {tokens.dtype}")
        tokens = tokens.astype(np.int64)
        scores = scores.astype(np.float64)
        if np.isnan(scores).any():
            i, j = np.argwhere(np.isnan(scores))[0]
            raise LatticeError(f"score of slot {i + 1}, arc {j + 1} is NaN")
        if np.isposinf(scores).any():
            i, j = np.argwhere(np.isposinf(scores))[0]
            raise LatticeError(f"score of slot {i + 1}, arc {j + 1} is +inf")
        pad = tokens == PAD_TOKEN
        if (tokens < PAD_TOKEN).any():
            i, j = np.argwhere(tokens < PAD_TOKEN)[0]
            raise LatticeError(
                f"token id {tokens[i, j]} in slot {i + 1} is negative; ids are >= 0 "
                f"({PAD_TOKEN} marks padding)"
            )
        # Vectorised checks; the loop below only runs to name the first offending slot.
        neginf = np.isneginf(scores)
        real = ~pad
        with np.errstate(invalid="ignore"):
            rising = np.diff(scores, axis=1) > 0  # (h, k-1); NaN (-inf - -inf) is False
        ordered = np.sort(tokens, axis=1)
        bad = (
            pad[:, 0]  # no arcs
            | (pad[:, :-1] & real[:, 1:]).any(axis=1)  # a real arc after padding
            | (pad & ~neginf).any(axis=1)  # padding with a finite score
            | (real & neginf).any(axis=1)  # a real arc scored -inf
            | (rising & real[:, 1:]).any(axis=1)  # not best first
            | ((ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] != PAD_TOKEN)).any(axis=1)
        )
        for i in np.flatnonzero(bad)[:1]:
            _raise_slot_error(int(i), tokens[i], scores[i])
        object.__setattr__(self, "tokens", readonly(tokens))
        object.__setattr__(self, "scores", readonly(scores))

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_logits(cls, logits: Any, k: int, certain_first: bool = True) -> SausageLattice:
        """The top-``k`` lattice of one step's head logits.

        Args:
            logits: ``[h, V]`` numpy array or torch tensor of raw logits (any float dtype).
                ``-inf`` masks a token; NaN and ``+inf`` are errors.
            k: arcs per slot, ``1 <= k <= V``.
            certain_first: keep slot 1 as the argmax alone (the certain token,
                docs/definitions.md sec. 2);
                ``False`` keeps its top ``k`` too (analysis only).

        Returns:
            A lattice whose scores are ``log_softmax(logits)`` (nats, float64). Arcs are
            ordered by logit (``log_softmax`` shifts a row by a constant), ties broken by the
            smaller token id.

        Raises:
            LatticeError: on a bad shape, NaN/+inf logits, a slot with every logit ``-inf``,
                or ``k`` outside ``[1, V]``.
        """
        z = as_numpy(logits)
        if z.ndim != 2:
            raise LatticeError(
                f"from_logits expects [h, V] logits, got shape {z.shape}; use "
                "from_logits_batch for [B, h, V]"
            )
        return cls.from_logits_batch(z[None], k, certain_first)[0]

    @classmethod
    def from_logits_batch(
        cls, logits: Any, k: int, certain_first: bool = True
    ) -> list[SausageLattice]:
        """One lattice per row of ``[B, h, V]`` logits (see :meth:`from_logits`)."""
        z = as_numpy(logits)
        if z.ndim != 3:
            raise LatticeError(f"from_logits_batch expects [B, h, V] logits, got {z.shape}")
        b, h, v = z.shape
        if h == 0:
            raise LatticeError("logits have h = 0 heads; a lattice needs h >= 1")
        if v == 0:
            raise LatticeError("logits have an empty vocabulary (V = 0)")
        k = check_positive_int(k, "k", LatticeError)
        if k > v:
            raise LatticeError(f"k = {k} exceeds the vocabulary size V = {v}; use k <= {v}")
        if z.dtype.kind not in "fiu":
            raise LatticeError(f"logits must be numbers, got dtype {z.dtype}")
        if z.dtype not in (np.float32, np.float64):
            z = z.astype(np.float32 if z.dtype.kind == "f" else np.float64)  # exact widening
        if np.isnan(z).any():
            idx = tuple(int(i) for i in np.argwhere(np.isnan(z))[0])
            raise LatticeError(f"logits contain NaN (first at [batch, head, token] = {idx})")
        if np.isposinf(z).any():
            idx = tuple(int(i) for i in np.argwhere(np.isposinf(z))[0])
            raise LatticeError(f"logits contain +inf (first at [batch, head, token] = {idx})")
        top = np.max(z, axis=-1, keepdims=True)  # (B, h, 1)
        if np.isneginf(top).any():
            bi, hi = (int(i) for i in np.argwhere(np.isneginf(top[..., 0]))[0])
            raise LatticeError(f"every logit of head {hi + 1} (batch row {bi}) is -inf")
        # log Z per row in float64; the selection runs on the logits themselves (log_softmax
        # only shifts a row, so it keeps the order), which is several times cheaper than
        # normalising all V entries first.
        top64 = top.astype(np.float64)
        log_z = top64 + np.log(np.sum(np.exp(z - top64), axis=-1, keepdims=True))  # (B, h, 1)
        # Top k by (logit desc, token id asc): argpartition, then an exact sort of the k.
        part = np.argpartition(z, v - k, axis=-1)[..., v - k:]  # (B, h, k), unordered
        part_logits = np.take_along_axis(z, part, axis=-1)
        order = np.lexsort((part, -part_logits), axis=-1)
        top_ids = np.take_along_axis(part, order, axis=-1).astype(np.int64)
        # argpartition may pick among tied boundary logits arbitrarily; make the choice the
        # smallest ids by re-selecting when the k-th logit has ties outside the selection.
        top_ids = _fix_boundary_ties(z, top_ids, k)
        top_scores = np.take_along_axis(z, top_ids, axis=-1).astype(np.float64) - log_z
        return [cls.from_topk(top_ids[i], top_scores[i], certain_first) for i in range(b)]

    @classmethod
    def from_topk(cls, ids: np.ndarray, scores: np.ndarray,
                  certain_first: bool = True) -> SausageLattice:
        """The lattice of each head's top ``k`` taken elsewhere (on the model's device).

        Args:
            ids: int ``[h, k]``, each head's ``k`` best tokens, ordered by (logit desc, id
                asc) as :meth:`from_logits` orders them.
            scores: float ``[h, k]``, their ``log_softmax`` (nats); ``-inf`` marks a masked
                token (it becomes padding).
            certain_first: keep slot 1 as its argmax alone.
        """
        top_ids = np.array(ids, dtype=np.int64)
        top_scores = np.array(scores, dtype=np.float64)
        top_ids[np.isneginf(top_scores)] = PAD_TOKEN
        if certain_first:
            top_ids[0, 1:] = PAD_TOKEN
            top_scores[0, 1:] = -np.inf
        return cls(tokens=top_ids, scores=top_scores)

    # ------------------------------------------------------------------ properties
    @property
    def h(self) -> int:
        """Number of slots (heads)."""
        return int(self.tokens.shape[0])

    @property
    def k(self) -> int:
        """Maximum arcs per slot (the array width)."""
        return int(self.tokens.shape[1])

    @cached_property
    def counts(self) -> np.ndarray:
        """int64 ``[h]``: real arcs per slot (read-only)."""
        c = np.sum(self.tokens != PAD_TOKEN, axis=1).astype(np.int64)
        c.setflags(write=False)
        return c

    @property
    def num_paths(self) -> int:
        """Number of paths (exact Python int; ``k^h`` without padding)."""
        return math.prod(int(c) for c in self.counts)

    def slot(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """The real arcs of slot ``i`` (0-based): ``(tokens [n], scores [n])``."""
        n = int(self.counts[i])
        return self.tokens[i, :n], self.scores[i, :n]

    def arc_index(self, path: Any) -> np.ndarray:
        """Arc index per slot of a path given as token ids ``[h]``.

        Raises:
            LatticeError: if the path has the wrong length or a token is not in its slot.
        """
        path = np.asarray(path).reshape(-1)
        if path.shape[0] != self.h:
            raise LatticeError(f"path has {path.shape[0]} tokens, the lattice {self.h} slots")
        out = np.empty(self.h, dtype=np.int64)
        for i, tok in enumerate(path.tolist()):
            hits = np.flatnonzero(self.slot(i)[0] == tok)
            if hits.size == 0:
                raise LatticeError(
                    f"token {tok} is not in slot {i + 1} (holds {self.slot(i)[0].tolist()})"
                )
            out[i] = hits[0]
        return out

    def path_score(self, path: Any, *, missing: float | None = None) -> float:
        """Sum of the head scores (nats) along a path given as token ids ``[h]``.

        Args:
            path: ``h`` token ids, one per slot.
            missing: the score to return when a token is not among its slot's arcs (e.g.
                ``-inf`` for a draft copied from elsewhere); None raises instead.

        Raises:
            LatticeError: a wrong length, or a token outside its slot with ``missing=None``.
        """
        path = np.asarray(path).reshape(-1)
        if missing is not None and path.shape[0] == self.h:
            hit = self.tokens == path[:, None]  # (h, k): arc j of slot i holds path[i]
            if not hit.any(axis=1).all():
                return float(missing)
        arcs = self.arc_index(path)
        return float(np.sum(self.scores[np.arange(self.h), arcs]))

    def vanilla(self) -> np.ndarray:
        """int64 ``[h]``: the top arc of every slot (the vanilla BPD draft)."""
        return self.tokens[:, 0].copy()

    # ------------------------------------------------------------------ p-best 0-gram
    def best_paths(self, p: int) -> DraftBatch:
        """The ``p`` best paths by head scores alone ("p-best 0-gram BPD"), best first.

        Exact lazy k-best enumeration of a sum of independent slot scores: a heap of rank
        vectors, each popped vector spawning its successors by bumping one slot at or after
        the last slot it bumped (so every vector is generated once). ``O(p h log p)``.
        Ties are broken by the lexicographically smaller rank vector. When the lattice has
        fewer than ``p`` paths, all are returned and the batch is ``exhausted``.
        """
        p = check_positive_int(p, "p", LatticeError)
        counts = self.counts.tolist()
        sc = self.scores
        h = self.h
        start = (0,) * h
        best_total = float(np.sum(sc[:, 0]))
        heap: list[tuple[float, tuple[int, ...], int]] = [(-best_total, start, 0)]
        out_ranks: list[tuple[int, ...]] = []
        out_scores: list[float] = []
        while heap and len(out_ranks) < p:
            neg, ranks, first = heapq.heappop(heap)
            out_ranks.append(ranks)
            out_scores.append(-neg)
            for j in range(first, h):
                r = ranks[j]
                if r + 1 < counts[j]:
                    nxt = ranks[:j] + (r + 1,) + ranks[j + 1 :]
                    total = -neg - sc[j, r] + sc[j, r + 1]
                    heapq.heappush(heap, (-total, nxt, j))
        ranks_arr = np.array(out_ranks, dtype=np.int64)
        tokens = self.tokens[np.arange(h)[None, :], ranks_arr]
        head = self.scores[np.arange(h)[None, :], ranks_arr].sum(axis=1)
        return DraftBatch(
            tokens=tokens,
            scores=head,
            head_scores=head,
            lm_scores=np.zeros(len(out_ranks)),
            alpha=0.0,
            requested=int(p),
            source="lattice",
        )

    # ------------------------------------------------------------------ as a searchable lattice
    @property
    def certain(self) -> int:
        """The certain token ``d_1`` (slot 1's top arc)."""
        return int(self.tokens[0, 0])

    def expand(self, prefix: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """The arcs after ``prefix`` (a path's first tokens): slot ``len(prefix) + 1``'s real
        arcs ``(ids int64 [n], log-probs float64 [n])``, best first, whatever the prefix's
        tokens (the heads guess independently); none past the last slot. The protocol every
        search of :mod:`blockdraft.lattice.search` reads, for sausages and tree lattices
        alike."""
        depth = len(prefix)
        if depth >= self.h:
            return _NO_ARCS
        return self.slot(depth)

    def peek(self, prefix: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`expand`: a sausage's arcs cost nothing to read."""
        return self.expand(prefix)

    def __getattr__(self, name: str) -> Any:
        """The methods that became functions of the modules beside this one (so that they
        import this module, not the reverse) fail naming the function."""
        if name in _MOVED_METHODS:
            raise AttributeError(f"SausageLattice.{name} is gone: use "
                                 f"{_MOVED_METHODS[name]} (the lattice's files, FSTs and "
                                 "drawings live beside it)")
        raise AttributeError(f"'SausageLattice' object has no attribute {name!r}")

    def __repr__(self) -> str:
        return f"SausageLattice(h={self.h}, k={self.k}, num_paths={self.num_paths})"


def _fix_boundary_ties(z: np.ndarray, ids: np.ndarray, k: int) -> np.ndarray:
    """Make top-k selection deterministic when the k-th logit is tied outside the selection.

    ``argpartition`` picks an arbitrary subset among equal boundary logits; the definitions ask for
    reproducible lattices, so among tokens tied at the boundary we keep the smallest ids.
    Rows without such ties (almost all) are left untouched. ``ids`` ``[..., k]`` are sorted
    by (logit desc, id asc) and are fixed in place.
    """
    kth = np.take_along_axis(z, ids[..., -1:], axis=-1)  # (..., 1)
    n_ge = np.sum(z >= kth, axis=-1)
    for found in np.argwhere(n_ge > k):
        idx = tuple(int(i) for i in found)
        row = z[idx]
        ids[idx] = np.lexsort((np.arange(row.size), -row))[:k]
    return ids
