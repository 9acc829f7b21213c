"""Global n-gram rescoring of a sausage lattice: the p best distinct drafts (Kim sec. 7.2).

A path's score (docs/definitions.md sec. 4, natural log):

    score(d) = sum_i [ head_i(d_i) + alpha * ln P_LM(d_i | context, d_<i) ]

Backends:
    ``"exact"``  the true backoff semantics of the LM: every score equals scoring the path with
                 KenLM directly, distinct strings, ties aside exactly the top p. Runs the native
                 C++ search (``engine="native"``) or the same algorithm in Python over the
                 ``kenlm`` module (``engine="kenlm"``).
    ``"wfst"``   the lattice acceptor composed with an OpenFst WFST of the ARPA file (OpenGrm
                 layout, epsilon backoff arcs) through pynini, then
                 ``shortestpath(nshortest=p, unique=True)``. Approximate: see
                 :mod:`blockdraft.rescorers.ngram.wfst`.

The exact search: slot by slot, partial paths are grouped by their KenLM right state (equal
states have identical futures, so only the p best partial paths of a state can reach the global
top p); expanding a state costs one LM lookup per arc of the next slot, and the partial paths
of a new state are a p-way merge of its incoming sorted lists.

The context LM (``context_weight = lam > 0``): the rescorer keeps a
:class:`~blockdraft.rescorers.ngram.context.ContextLM` of the committed text (the ``context``
argument of each call; when it extends the previous call's context only the new tail is
counted, else it is rebuilt) and the LM of the score above becomes

    P_LM(w | h) = lam * P_ctx(w | h) + (1 - lam) * P_kenlm(w | h),

so that n-grams the answer copies from its prompt (or from itself) and the heads' guesses
compete in one search. The exact backend interpolates inside the search (states are then
pairs: KenLM state, context-LM state), exactly; the WFST backend cannot (the tropical semiring
has no sum) and re-ranks its n-best list instead (:mod:`blockdraft.rescorers.ngram.wfst.context`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from blockdraft.core.batch import DraftBatch
from blockdraft.core.checks import check_int
from blockdraft.lattice.sausage import SausageLattice
from blockdraft.rescorers.base import RescorerError, as_context, check_p
from blockdraft.rescorers.ngram.context import (
    DEFAULT_ORDER,
    MAX_ORDER,
    ContextLM,
    check_weight,
    interpolate_ln,
    interpolate_one,
)
from blockdraft.rescorers.ngram.lm import LN10, NgramLM
from blockdraft.rescorers.ngram.native import MAX_RAW_ID, NativeContextLM, warn_python_search

BACKENDS = ("exact", "wfst")


@dataclass(frozen=True)
class SearchStats:
    """What one exact search did.

    Attributes:
        states: int64 ``[h]``, distinct LM states after each slot.
        lookups: int64 ``[h]``, LM lookups made for each slot.
    """

    states: np.ndarray
    lookups: np.ndarray


class NgramRescorer:
    """Rescore lattices with an n-gram LM: ``rescore(lattice, context, p) -> DraftBatch``.

    Args:
        lm: the :class:`NgramLM`.
        alpha: LM weight, ``>= 0`` (``0`` gives p-best 0-gram BPD).
        backend: ``"exact"`` or ``"wfst"``.
        wfst_cache: directory for the converted WFST (``"wfst"`` only; default: beside the ARPA
            file's cache in ``$BLOCKDRAFT_CACHE``).
        prune_beam: native exact search only: width of a cheap beam pre-pass whose p-th best
            complete path bounds the main search (a partial path whose score plus the best
            possible future falls below it is dropped). Exact for any value; 0 disables it.
        context_weight: ``lam`` in ``[0, 1]``, the weight of the context LM (see the module
            docstring); ``0`` (default) turns it off: then the results are bit for bit those
            of the rescorer without it. ``1`` scores with the context LM alone (a draft with
            a token never seen in the context scores ``-inf``).
        context_order: the context LM's order ``n`` (1 to 16, default 4); ``0`` also turns
            it off.

    The LM context is the last ``order - 1`` tokens of ``context``; an empty context starts
    from ``<s>``. The context LM counts all of ``context``.

    Not thread-safe with a context LM (it is updated by each call); use one rescorer per
    thread and per text.
    """

    def __init__(
        self,
        lm: NgramLM,
        alpha: float = 1.0,
        backend: str = "exact",
        *,
        wfst_cache: Any = None,
        prune_beam: int = 8,
        context_weight: float = 0.0,
        context_order: int = DEFAULT_ORDER,
    ) -> None:
        if not isinstance(lm, NgramLM):
            raise RescorerError(f"lm must be an NgramLM, got {type(lm).__name__}")
        alpha = float(alpha)
        if not np.isfinite(alpha) or alpha < 0:
            raise RescorerError(f"alpha must be a finite number >= 0, got {alpha}")
        if backend not in BACKENDS:
            raise RescorerError(f"backend must be one of {BACKENDS}, got {backend!r}")
        self.lm = lm
        self.alpha = alpha
        self.backend = backend
        self.prune_beam = check_int(prune_beam, "prune_beam", RescorerError, minimum=0)
        self.context_weight = check_weight(context_weight)
        self.context_order = check_int(context_order, "context_order", RescorerError,
                                       minimum=0, maximum=MAX_ORDER)
        native = self.backend == "exact" and self.lm.native_model is not None
        self._counted = _CountedText(NativeContextLM if native else ContextLM, self.context_order)
        self._wfst: Any = None
        if backend == "wfst":
            from blockdraft.rescorers.ngram.wfst import WfstRescorer

            if not lm.is_arpa:
                raise RescorerError(
                    f"the wfst backend converts an ARPA file; {lm.path} is a KenLM binary: "
                    "pass the ARPA file"
                )
            self._wfst = WfstRescorer.from_arpa(
                lm.path, alpha=alpha, cache_dir=wfst_cache, unknown=lm.unknown
            )
        self.last_stats: SearchStats | None = None

    def __repr__(self) -> str:
        extra = (f", context_weight={self.context_weight}, context_order={self.context_order}"
                 if self.uses_context else "")
        return f"NgramRescorer({self.lm!r}, alpha={self.alpha}, backend={self.backend!r}{extra})"

    @property
    def uses_context(self) -> bool:
        """Whether the context LM is on (``context_weight > 0`` and ``context_order > 0``)."""
        return self.context_weight > 0.0 and self.context_order > 0

    def rescore(
        self, lattice: SausageLattice, context: Sequence[int] | np.ndarray = (), p: int = 1
    ) -> DraftBatch:
        """The ``p`` best distinct paths of ``lattice``, best first (all of them, marked
        ``exhausted``, when it has fewer than ``p``).

        Args:
            lattice: the step's sausage lattice.
            context: the committed prefix's token ids, oldest first (may be empty).
            p: drafts wanted, ``>= 1``.

        Returns:
            A :class:`DraftBatch`: ``tokens`` int64 ``[p, h]``, ``scores`` = head + alpha * lm
            (nats), ``lm_scores`` the unweighted LM log-prob (nats) of each draft given the
            context: with the context LM, of the interpolated LM ``lam * P_ctx + (1 - lam) *
            P_kenlm``, token by token (the context LM's counts are those of ``context``; its
            history runs on into the draft).

        Raises:
            RescorerError: a bad argument; with the native context LM, a token id ``>= 2**32``.
        """
        if not isinstance(lattice, SausageLattice):
            raise RescorerError(f"expected a SausageLattice, got {type(lattice).__name__}")
        p = check_p(p)
        ctx = as_context(context)
        if self.uses_context:
            self._sync_context(ctx)
            if self.backend == "wfst":
                from blockdraft.rescorers.ngram.wfst.context import rerank_nbest

                return rerank_nbest(self._wfst, lattice, ctx, p,
                                    lambda tokens: self.draft_lm_scores(tokens, ctx))
        if self.backend == "wfst":
            return self._wfst.rescore_checked(lattice, ctx, p)
        if self.lm.native_model is not None:
            return self._rescore_native(lattice, ctx, p)
        return self._rescore_python(lattice, ctx, p)

    # ------------------------------------------------------------------ context LM
    @property
    def _context_lm(self) -> ContextLM | NativeContextLM | None:
        """The context LM of the last call's text (None before the first)."""
        return self._counted.lm

    def _sync_context(self, ctx: np.ndarray) -> None:
        """Bring the context LM to the text ``ctx`` (:meth:`_CountedText.sync`)."""
        self._counted.sync(ctx)

    def draft_lm_scores(self, tokens: np.ndarray, context: Sequence[int] | np.ndarray
                        ) -> np.ndarray:
        """float64 ``[p]``: the LM log-prob (nats) of each draft row of ``tokens`` ``[p, h]``
        given ``context``, scored directly (no search): KenLM's with this LM's ``unknown``
        policy, interpolated with the context LM when it is on (its counts those of
        ``context``).

        Raises:
            RescorerError: a bad argument (as :meth:`rescore`).
        """
        ctx = as_context(context)
        rows = np.asarray(tokens, dtype=np.int64).reshape(-1, np.shape(tokens)[-1])
        out = np.zeros(rows.shape[0])
        if self.uses_context:
            self._sync_context(ctx)
        cl = self._context_lm if self.uses_context else None
        for j, row in enumerate(rows):
            kenlm_ln = self.lm.score(row, ctx)
            if cl is None:
                out[j] = float(kenlm_ln.sum())
            else:
                probs = cl.continuation_probs(row)
                out[j] = float(interpolate_ln(kenlm_ln, probs, self.context_weight).sum())
        return out

    def path_scorer(self) -> RescorerPathScorer:
        """This rescorer's LM as a tree path scorer (``next_scores(path, context,
        candidates)``): the same interpolated LM, token by token (a cost-aware tree's LM
        evidence)."""
        return RescorerPathScorer(self)

    def check_vocab(self, vocab_size: int) -> None:
        """The LM's tokenizer check (:meth:`NgramLM.check_vocab`)."""
        self.lm.check_vocab(vocab_size)

    # ------------------------------------------------------------------ exact, native
    def _rescore_native(self, lattice: SausageLattice, ctx: np.ndarray, p: int) -> DraftBatch:
        lm = self.lm
        bos, ctx_idx = lm.start_checked(ctx)
        tokens = lattice.tokens
        words = lm.lattice_indices(tokens)  # padding arcs are never read (counts)
        assert lm.native_model is not None
        # The search returns min(p, paths) rows; the paths are counted only for a p so large
        # that its output arrays would matter.
        n = p if p <= 4096 else min(p, lattice.num_paths)
        cl = self._context_lm if self.uses_context else None
        if cl is not None and int(lattice.tokens.max()) >= MAX_RAW_ID:
            raise RescorerError(
                f"lattice token id {int(lattice.tokens.max())} is too large for the native "
                f"context LM (ids must be < {MAX_RAW_ID})"
            )
        assert cl is None or isinstance(cl, NativeContextLM)
        arcs, total, head, lm_ln, stats = lm.native_model.pbest(
            words, lattice.counts, lattice.scores, ctx_idx, bos, self.alpha, lm.unk_ln(), n,
            beam=self.prune_beam, context_lm=cl, context_weight=self.context_weight,
            raw=lattice.tokens,
        )
        self.last_stats = SearchStats(states=stats[:, 0], lookups=stats[:, 1])
        h, k = tokens.shape
        tokens = tokens.take(arcs + np.arange(0, h * k, k, dtype=np.int32))  # [n, h]
        return DraftBatch(
            tokens=tokens, scores=total, head_scores=head, lm_scores=lm_ln,
            alpha=self.alpha, requested=p, source="ngram-exact",
        )

    # ------------------------------------------------------------------ exact, Python
    def _rescore_python(self, lattice: SausageLattice, ctx: np.ndarray, p: int) -> DraftBatch:
        """The same search as the native code, over the ``kenlm`` module (slow, exact).

        With the context LM a bucket's key is the pair (KenLM state, context-LM state) and
        each LM term is :func:`~blockdraft.rescorers.ngram.context.interpolate_one`."""
        import kenlm

        lm = self.lm
        if lm.native_missing:  # chosen for want of the library, not asked for: say so, once
            warn_python_search()
        cl = self._context_lm if self.uses_context else None
        assert cl is None or isinstance(cl, ContextLM)
        lam = self.context_weight
        log1m = math.log1p(-lam) if lam < 1.0 else -math.inf
        model = lm.kenlm_model()
        bos, _ = lm.start(ctx)
        lm.indices(np.where(lattice.tokens >= 0, lattice.tokens, 0))  # unknown='error' check
        unk = lm.unk_ln()
        state = kenlm.State()
        if bos:
            model.BeginSentenceWrite(state)
        else:
            model.NullContextWrite(state)
            for t in ctx[-(lm.order - 1):].tolist() if lm.order > 1 else []:
                nxt = kenlm.State()
                model.BaseScore(state, lm.word(int(t)), nxt)
                state = nxt
        # A bucket: (KenLM state, context-LM state, list of partial paths best first); a path
        # is (total, head, lm, arcs tuple).
        buckets: list[tuple[Any, Any, list[tuple[float, float, float, tuple[int, ...]]]]] = [
            (state, cl.state(cl.tail) if cl is not None else None, [(0.0, 0.0, 0.0, ())])
        ]
        n_states, n_lookups = [], []
        for i in range(lattice.h):
            toks, scs = lattice.slot(i)
            words = [lm.word(int(t)) for t in toks.tolist()]
            raw = toks.tolist()
            known = lm.known(toks)
            incoming: dict[Any, list[list[tuple[float, float, float, tuple[int, ...]]]]] = {}
            states: dict[Any, tuple[Any, Any]] = {}
            lookups = 0
            for st, cst, paths in buckets:
                for a, w in enumerate(words):
                    out = kenlm.State()
                    lm_ln = model.BaseScore(st, w, out) * LN10
                    lookups += 1
                    if unk is not None and not known[a]:
                        lm_ln = unk
                    hs = float(scs[a])
                    key: Any = out
                    cnext = None
                    if cl is None:
                        delta = hs + self.alpha * lm_ln
                    else:
                        pc, cnext = cl.step(cst, raw[a])
                        lm_ln = interpolate_one(lm_ln, pc, lam, log1m)
                        delta = hs + self.alpha * lm_ln if self.alpha else hs  # no 0 * -inf
                        key = (out, cnext)
                    ext = [
                        (tot + delta, hd + hs, lmp + lm_ln, arcs + (a,))
                        for tot, hd, lmp, arcs in paths
                    ]
                    states.setdefault(key, (out, cnext))
                    incoming.setdefault(key, []).append(ext)
            buckets = [
                (*states[key], heapq.nlargest(p, _merge(lists), key=lambda x: x[0]))
                for key, lists in incoming.items()
            ]
            n_states.append(len(buckets))
            n_lookups.append(lookups)
        finals = heapq.nlargest(p, _merge([paths for _, _, paths in buckets]),
                                key=lambda x: x[0])
        self.last_stats = SearchStats(
            states=np.array(n_states, dtype=np.int64), lookups=np.array(n_lookups, dtype=np.int64)
        )
        arcs = np.array([f[3] for f in finals], dtype=np.int64)
        tokens = lattice.tokens[np.arange(lattice.h)[None, :], arcs]
        return DraftBatch(
            tokens=tokens,
            scores=np.array([f[0] for f in finals]),
            head_scores=np.array([f[1] for f in finals]),
            lm_scores=np.array([f[2] for f in finals]),
            alpha=self.alpha, requested=p, source="ngram-exact",
        )


class _CountedText:
    """A context LM and the text it has counted, kept in step with a growing context.

    :meth:`sync` counts only the new tail when the context extends the text held (checked
    exactly), else rebuilds the LM from the whole context. The text is a buffer grown
    geometrically (``_text[:_len]``), so following a decode costs O(1) copies per token.

    Args:
        factory: the context-LM class (``ContextLM`` or ``NativeContextLM``).
        order: its order ``n``.
    """

    def __init__(self, factory: type[ContextLM] | type[NativeContextLM], order: int) -> None:
        self._factory = factory
        self._order = order
        self.lm: ContextLM | NativeContextLM | None = None
        self._text = np.zeros(0, dtype=np.int64)
        self._len = 0

    def sync(self, ctx: np.ndarray) -> ContextLM | NativeContextLM:
        """The context LM of ``ctx`` (validated int64 ids).

        Raises:
            RescorerError: ids the LM cannot hold; nothing of them is counted and the next
                call rebuilds.
        """
        n = self._len
        held = self.lm
        if held is not None and ctx.size >= n and np.array_equal(ctx[:n], self._text[:n]):
            new = ctx[n:]
        else:
            held = self.lm = self._factory(self._order)
            self._len, n, new = 0, 0, ctx
        if new.size == 0:
            return held
        try:
            if isinstance(held, NativeContextLM):
                held.extend(new)
            else:
                held.extend_checked(new)
        except RescorerError:
            self.lm = None
            raise
        if self._text.size < ctx.size:
            grown = np.zeros(max(ctx.size, 2 * self._text.size, 256), dtype=np.int64)
            grown[:n] = self._text[:n]
            self._text = grown
        self._text[n:ctx.size] = new
        self._len = int(ctx.size)
        return held


def _merge(lists: list[list[Any]]) -> list[Any]:
    out: list[Any] = []
    for lst in lists:
        out.extend(lst)
    return out


class RescorerPathScorer:
    """An :class:`NgramRescorer`'s LM scoring tree paths: ``next_scores(path, context,
    candidates)`` is ``ln P(c | context, path)`` under the rescorer's LM, interpolated with its
    context LM when that is on (its counts those of ``context``, its history running on into
    ``path``), natural log; equal to the last token of :meth:`NgramRescorer.draft_lm_scores`
    of ``path + [c]``."""

    def __init__(self, rescorer: NgramRescorer) -> None:
        from blockdraft.rescorers.ngram.path_scorer import NgramPathScorer

        self.rescorer = rescorer
        self._ngram = NgramPathScorer(rescorer.lm)
        # A Python context LM (its states walk a tree), whatever the rescorer's backend holds.
        self._counted = _CountedText(ContextLM, rescorer.context_order)

    def next_scores(self, path: Sequence[int] | np.ndarray, context: Sequence[int] | np.ndarray,
                    candidates: Sequence[int] | np.ndarray) -> np.ndarray:
        """float64 ``[c]``: ``ln P(c | context, path)`` of every candidate."""
        prefix = np.asarray(path, dtype=np.int64)
        ngram_ln = self._ngram.next_scores(prefix.tolist(), context, candidates)
        r = self.rescorer
        if not r.uses_context:
            return ngram_ln
        r._sync_context(as_context(context))
        held = r._context_lm
        assert held is not None
        probs = [float(held.continuation_probs(np.append(prefix, c))[-1])
                 for c in np.asarray(candidates, dtype=np.int64).tolist()]
        return interpolate_ln(ngram_ln, probs, r.context_weight)

    def score_tree(self, tokens: np.ndarray, parents: np.ndarray,
                   context: Sequence[int] | np.ndarray) -> np.ndarray:
        """float64 ``[N]``: ``ln P(token_u | context, u's ancestors)`` of every node of a token
        tree (``parents[u] < u``, the root's ``-1``), in one walk: the n-gram LM's scores
        (:meth:`NgramPathScorer.score_tree`, its engine's) and one context-LM step per node.
        Equal to :meth:`next_scores` node by node."""
        ctx = as_context(context)
        toks = np.asarray(tokens, dtype=np.int64)
        par = np.asarray(parents, dtype=np.int64).tolist()
        r = self.rescorer
        out = self._ngram.score_tree(toks, np.asarray(parents, dtype=np.int64), ctx)
        if not r.uses_context:
            return out
        held = self._counted.sync(ctx)
        assert isinstance(held, ContextLM)
        cstates: list[Any] = []
        probs = np.empty(toks.size)
        root = held.state(held.tail)
        for u, t in enumerate(toks.tolist()):
            probs[u], st = held.step(root if par[u] < 0 else cstates[par[u]], t)
            cstates.append(st)
        return interpolate_ln(out, probs, r.context_weight)

    def check_vocab(self, vocab_size: int) -> None:
        """The rescorer's LM's tokenizer check."""
        self.rescorer.lm.check_vocab(vocab_size)

    def score(self, tokens: Sequence[int] | np.ndarray,
              context: Sequence[int] | np.ndarray = ()) -> np.ndarray:
        """float64 ``[n]``: ``ln P(token_i | context, tokens_<i)``."""
        out = np.empty(len(tokens))
        seq = np.asarray(tokens, dtype=np.int64)
        for i in range(seq.size):
            out[i] = self.next_scores(seq[:i], context, seq[i:i + 1])[0]
        return out
