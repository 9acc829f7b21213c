"""The WFST rescorer: a lattice composed with an LM (or any tropical WFST over token labels).

The lattice, as a weighted transducer, is composed with the n-gram LM as an OpenFst WFST
(:mod:`.compiler`); the ``p`` cheapest distinct strings of the result are the drafts.

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

Speed, without changing the result of ``compose``, ``project``, ``rmepsilon``,
``shortestpath(nshortest=p, unique=True)``: the lattice FST is written as OpenFst's binary
layout and read back in one call, the paths are read from the result's binary layout, and for
``p > 1`` the unique-path search (a lazy determinization of the whole composed FST) runs on
the composed FST pruned to the paths within a threshold of the best, a threshold that grows
until the ``p`` strings found provably are the top ``p`` (:func:`_unique_shortest`); ``p = 1``
needs neither ``rmepsilon`` nor ``unique`` (one path is one string).

Not thread-safe: :meth:`WfstRescorer.rescore` sets the start state of the shared LM FST for
each call (an O(1) change of the one VectorFst, never a copy of it). Use one rescorer per
thread.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from blockdraft.core.batch import DraftBatch
from blockdraft.lattice.fst import LABEL_OFFSET
from blockdraft.lattice.sausage import SausageLattice
from blockdraft.rescorers.base import RescorerError, as_context, check_p
from blockdraft.rescorers.ngram.wfst.cache import load_ngram_wfst
from blockdraft.rescorers.ngram.wfst.compiler import NgramWfst
from blockdraft.rescorers.ngram.wfst.history import ContextStates
from blockdraft.rescorers.ngram.wfst.openfst import MAX_TOKEN_ID, UNK_LABEL, load_pywrapfst

_FST_MAGIC = 2125659606  # OpenFst's kFstMagicNumber
_HEADER_TAIL = struct.Struct("<iiQqqq")  # version, flags, properties, start, states, arcs
_STATE = struct.Struct("<fq")  # final cost, number of arcs
_ARC_DTYPE = np.dtype([("ilabel", "<i4"), ("olabel", "<i4"), ("cost", "<f4"), ("next", "<i4")])
_EXPANDED_MUTABLE = 0x1 | 0x2  # OpenFst's kExpanded | kMutable (all other properties unknown)
_ZERO = float("inf")  # tropical Zero: a non-final state


def _fst_string(s: str) -> bytes:
    return struct.pack("<i", len(s)) + s.encode("ascii")


_VECTOR_HEADER = _fst_string("vector") + _fst_string("standard")


def _lattice_fst(lattice: SausageLattice, olabels: np.ndarray, alpha: float) -> Any:
    """The lattice as a transducer: slot ``i`` arcs go from state ``i`` to ``i + 1``.

    Input label: the arc's index in its slot plus one (the tokens of a slot are distinct, so
    distinct label strings are distinct token strings, and a path's labels give its arcs
    directly); output label: ``olabels`` (the LM's label for the token: ``t + LABEL_OFFSET``,
    or :data:`UNK_LABEL` for a token the LM does not know).

    Not :func:`blockdraft.lattice.fst.lattice_to_fst`: that one is an acceptor with costs
    ``-score``, and this needs a transducer (the ``<unk>`` output labels) with scaled,
    shifted costs. Cost: ``-(score - best score of the slot) / alpha`` (nats, >= 0): the
    per-slot shift is the same for every path, so it keeps the ranking of
    ``head + alpha * lm`` while keeping float32 costs small. Arc-sorted on output labels for
    composition.

    Built as OpenFst's binary VectorFst layout with numpy and read back in one call (the
    same FST that adding the arcs one by one gives, without a Python call per arc).
    """
    fst = load_pywrapfst()
    h, k = lattice.h, lattice.k
    # Every [h, k] position as an arc record; padding (at the end of a slot) is cut below.
    arcs = np.empty((h, k), dtype=_ARC_DTYPE)
    arcs["ilabel"] = np.arange(1, k + 1, dtype=np.int32)
    arcs["olabel"] = olabels
    scores = lattice.scores
    with np.errstate(invalid="ignore"):  # padding: -inf - best
        arcs["cost"] = (scores[:, :1] - scores) / alpha
    arcs["next"] = np.arange(1, h + 1, dtype=np.int32)[:, None]
    raw = arcs.tobytes()
    counts = lattice.counts.tolist()
    # Per state: its final cost (Zero but for the last) and arc count, then its arcs.
    pieces = [struct.pack("<i", _FST_MAGIC), _VECTOR_HEADER,
              _HEADER_TAIL.pack(2, 0, _EXPANDED_MUTABLE, 0, h + 1, sum(counts))]
    row = 16 * k
    for i, n in enumerate(counts):
        pieces.append(_STATE.pack(_ZERO, n))
        pieces.append(raw[i * row:i * row + 16 * n])
    pieces.append(_STATE.pack(0.0, 0))
    out = fst.Fst.read_from_string(b"".join(pieces))
    out.arcsort("olabel")
    return out


def _read_paths(paths_fst: Any) -> list[tuple[float, list[int]]]:
    """``(cost, input labels)`` of each path of a ``shortestpath`` result, in its order.

    Costs are summed in float64 from the float32 arc weights (plus the final weight), arc by
    arc along the path. Reads the FST's binary serialisation (one call into OpenFst) rather
    than an arc iterator per state; other layouts fall back to :func:`_read_paths_iter`.
    """
    data = paths_fst.write_to_string()
    pos = 4
    kinds = []
    for _ in range(2):
        (n,) = struct.unpack_from("<i", data, pos)
        kinds.append(data[pos + 4:pos + 4 + n])
        pos += 4 + n
    if struct.unpack_from("<i", data, 0)[0] != _FST_MAGIC or kinds != [b"vector", b"standard"]:
        return _read_paths_iter(paths_fst)
    _, flags, _, start, num_states, _ = _HEADER_TAIL.unpack_from(data, pos)
    if flags & 0x7:  # symbol tables or aligned arcs: not this simple layout
        return _read_paths_iter(paths_fst)
    pos += _HEADER_TAIL.size
    if start < 0:
        return []
    # The body as 32-bit words, read both as ints and as floats: per state a float32 final
    # cost and an int64 arc count (3 words), then 4 words per arc (ilabel, olabel, cost, next).
    body = np.frombuffer(data, dtype="<i4", offset=pos)
    ints = body.tolist()
    floats = body.view("<f4").tolist()
    offset = [0] * num_states
    q = 0
    for state in range(num_states):
        offset[state] = q
        q += 3 + 4 * (ints[q + 1] + (ints[q + 2] << 32))
    q = offset[start]
    n_first = ints[q + 1]
    if n_first == 0:  # the empty string (cannot happen for h >= 1)
        return [(floats[q], [])]
    out: list[tuple[float, list[int]]] = []
    for j in range(n_first):
        a = q + 3 + 4 * j
        cost = floats[a + 2]
        labels = [ints[a]] if ints[a] else []
        state = ints[a + 3]
        while True:
            r = offset[state]
            if ints[r + 1] == 0:
                cost += floats[r]
                break
            a = r + 3  # the path's one arc out of this state
            cost += floats[a + 2]
            if ints[a]:
                labels.append(ints[a])
            state = ints[a + 3]
        out.append((cost, labels))
    return out


def _read_paths_iter(paths_fst: Any) -> list[tuple[float, list[int]]]:
    """:func:`_read_paths` through OpenFst's arc iterators (any FST layout)."""
    fst = load_pywrapfst()
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


PRUNE_START = 4.0
"""First pruning threshold of :func:`_unique_shortest` (cost units of the composed FST)."""
PRUNE_GROWTH = 4.0
PRUNE_TRIES = 4
PRUNE_MARGIN = 1e-3
"""Float32 slack (cost units): a pruned search is trusted only below threshold - margin."""


def _unique_shortest(composed: Any, p: int, num_paths: int) -> list[tuple[float, list[int]]]:
    """The ``p`` cheapest distinct strings of ``composed`` (an acceptor): exactly what
    ``shortestpath(rmepsilon(composed), nshortest=p, unique=True)`` returns, cheaper.

    ``unique=True`` determinizes (lazily) the whole epsilon-free FST, most of which lies far
    from the best paths. Pruning first to the paths within a threshold ``T`` of the best
    (``prune(weight=T)``) keeps the cheapest derivation of every string whose cost is
    ``<= best + T``, and the costs of those strings are unchanged. So when the pruned FST's
    ``p``-th distinct string costs at most ``best + T`` (less a float32 margin), those ``p``
    strings are the top ``p`` of the full FST (any other string costs more than ``best +
    T``); otherwise ``T`` grows and, after a few tries, the full FST is searched.
    """
    wrap = load_pywrapfst()
    if p < num_paths:
        full = composed.num_states()
        threshold = PRUNE_START
        for _ in range(PRUNE_TRIES):
            pruned = wrap.prune(composed, weight=threshold)
            if pruned.num_states() >= full:
                break  # nothing pruned: the full search below is the same work
            pruned.rmepsilon()
            paths = _read_paths(wrap.shortestpath(pruned, nshortest=p, unique=True))
            paths.sort(key=lambda c: c[0])
            if len(paths) == p and paths[-1][0] <= paths[0][0] + threshold - PRUNE_MARGIN:
                return paths
            threshold *= PRUNE_GROWTH
    composed.rmepsilon()
    return _read_paths(wrap.shortestpath(composed, nshortest=p, unique=True))


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
        wrap = load_pywrapfst()
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

    @cached_property
    def _label_map(self) -> np.ndarray:
        """int64 ``[max known id + 1]``: the LM's label of each token id (``UNK_LABEL`` when
        the LM does not know it)."""
        assert self.context_states is not None
        mask = self.context_states.known_mask
        return np.where(mask, np.arange(mask.size, dtype=np.int64) + LABEL_OFFSET, UNK_LABEL)

    def _olabels(self, lattice: SausageLattice) -> np.ndarray:
        tokens = lattice.tokens
        top = int(tokens.max())  # every slot holds a real token
        if top > MAX_TOKEN_ID:
            raise RescorerError(f"token id {top} exceeds {MAX_TOKEN_ID}")
        pad = tokens < 0
        if self.context_states is None:
            return np.where(pad, 0, tokens + LABEL_OFFSET)
        labels = self._label_map
        if top < labels.size:
            olabels = labels.take(tokens, mode="clip")  # padding reads labels[0]: zeroed
        else:
            olabels = np.full(tokens.shape, UNK_LABEL, dtype=np.int64)
            inside = ~pad & (tokens < labels.size)
            olabels[inside] = labels[tokens[inside]]
        olabels[pad] = 0
        if self.unknown == "error":
            unknown = olabels == UNK_LABEL
            if unknown.any():
                i, j = np.argwhere(unknown)[0]
                raise RescorerError(
                    f"token id {int(tokens[i, j])} (slot {i + 1}) is not in the LM "
                    "(unknown='error'); use unknown='unk' to score it as <unk>"
                )
        return olabels

    def path_scorer(self) -> None:
        """None: a WFST scores whole paths by composition, not a tree node by node (rate a
        cost-aware tree's nodes with the n-gram rescorer's exact path scorer instead)."""
        return None

    def check_vocab(self, vocab_size: int) -> None:
        """Raise when the FST knows a token id outside ``[0, vocab_size)`` (an LM over another
        tokenizer; a user FST without context states is not checked).

        Raises:
            RescorerError: naming the id and the vocabulary.
        """
        if self.context_states is None:
            return
        known = np.flatnonzero(self.context_states.known_mask)
        if known.size and int(known[-1]) >= vocab_size:
            raise RescorerError(
                f"the WFST's LM knows token id {int(known[-1])}, outside the model's vocabulary "
                f"of {vocab_size}; was it trained with another tokenizer?")

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
        return self.rescore_checked(lattice, as_context(context), check_p(p))

    def rescore_checked(self, lattice: SausageLattice, ctx: np.ndarray, p: int) -> DraftBatch:
        """:meth:`rescore` of arguments already validated (``as_context``, ``check_p``)."""
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
        wrap = load_pywrapfst()
        lat = _lattice_fst(lattice, olabels, self.alpha)
        self._fst.set_start(self._start if cs is None else cs.lookup_checked(ctx))
        # No trimming: every state of a sausage composed with an LM reaches the end; a state
        # that does not is never on a shortest path (and the pruning below trims anyway).
        composed = wrap.compose(lat, self._fst, connect=False)
        composed.project("input")
        if p == 1:  # one path is one string: no need to remove epsilons and determinize
            paths = _read_paths(wrap.shortestpath(composed, nshortest=1))
        else:
            paths = _unique_shortest(composed, p, lattice.num_paths)
        if not paths:
            raise RescorerError(
                "the WFST accepts no path of the lattice (a grammar that rejects every draft?)"
            )
        paths.sort(key=lambda c: c[0])  # stable: OpenFst's order among float32 ties
        h, k = lattice.h, lattice.k
        cost = np.array([c for c, _ in paths], dtype=np.float64)
        # Input labels are arc indices + 1: flat positions in the [h, k] lattice arrays.
        at = np.array([lab for _, lab in paths], dtype=np.int64).reshape(-1, h)
        at += np.arange(-1, h * k - 1, k)
        tokens = lattice.tokens.take(at)
        head = lattice.scores.take(at).sum(axis=1)
        shift = float(lattice.scores[:, 0].sum())
        # cost = sum_i -(s_i - best_i) / alpha + L, with L = -lm the LM cost (nats):
        lm = -(cost + (head - shift) / self.alpha)
        return DraftBatch(
            tokens=tokens, scores=head + self.alpha * lm, head_scores=head, lm_scores=lm,
            alpha=self.alpha, requested=p, source="ngram-wfst",
        )
