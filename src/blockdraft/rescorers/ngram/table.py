"""A back-off n-gram LM as sorted arrays: every node of a draft tree scored in a few gathers,
on the host or on the model's device.

The exact p-best search (:mod:`~blockdraft.rescorers.ngram.native`) walks KenLM's state one word
at a time on the host. A drafter that runs on a GPU wants the opposite: the whole candidate tree
scored by a fixed number of array operations, with no host round trip. :class:`NgramTable` holds
an ARPA file's n-grams as one sorted ``int64`` key array per order (an n-gram's LM word indices
read as a base-``V`` number, ``V`` the LM's word count: exact, no hashing, as long as
``V ** order < 2 ** 63``; a 4-gram LM over SmolLM2's 49,152 tokens fits), with its natural-log
probabilities and back-off weights. A score is the textbook back-off, order by order from the
highest: ``ln P(w | h) = ln p(h_m, w) + sum of ln bo(h_j)`` for the longest stored n-gram
``(h_m, w)`` and every longer context ``h_j`` that is stored (a missing context backs off for
free). That is what KenLM computes; the tests check it equals :meth:`NgramLM.score
<blockdraft.rescorers.ngram.lm.NgramLM.score>` to float32 rounding (KenLM stores float32).

Conventions, as :class:`~blockdraft.rescorers.ngram.lm.NgramLM`'s: an empty context starts at
``<s>``, otherwise the state is the last ``order - 1`` context tokens; an unknown token scores
``<unk>``'s probability (or the LM's fixed ``unknown`` penalty) and the history restarts after
it, as KenLM's state does. Drafts are never scored with ``</s>``.

The same code runs on numpy arrays and, after :meth:`NgramTable.to`, on torch tensors of any
device (torch is imported only then).

Public surface:
    NgramTable.from_lm(lm) -> NgramTable         from an NgramLM's ARPA file (refused: a
                                                 binary without its ARPA file, keys over 63 bits)
    NgramTable.to(device) -> NgramTable          the arrays as torch tensors on ``device``
    NgramTable.histories(context, tokens, parents) -> int64 [N, order - 1]
    NgramTable.score_next(histories, words) -> float32 [B]        ln P(word | history)
    NgramTable.score_tree(context, tokens, parents) -> float32 [N]
                                                 every node given its ancestors and the context
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from blockdraft.rescorers.base import RescorerError, as_context
from blockdraft.rescorers.ngram.arpa import read_arpa

LN10 = math.log(10.0)
NONE = -1
"""A history slot with no word (before ``<s>``, or at or before an unknown token)."""


class _Ops:
    """The few array operations the lookups need, for numpy or torch."""

    def __init__(self, torch: Any = None, device: Any = None) -> None:
        self.torch, self.device = torch, device

    def asarray(self, x: Any, dtype: str) -> Any:
        if self.torch is None:
            return np.asarray(x, dtype=dtype)
        t = self.torch
        return t.as_tensor(np.asarray(x, dtype=dtype) if not t.is_tensor(x) else x,
                           dtype=getattr(t, dtype), device=self.device)

    def searchsorted(self, keys: Any, query: Any) -> Any:
        if self.torch is None:
            return np.searchsorted(keys, query)
        return self.torch.searchsorted(keys, query.contiguous())

    def zeros(self, n: int, dtype: str) -> Any:
        if self.torch is None:
            return np.zeros(n, dtype=dtype)
        return self.torch.zeros(n, dtype=getattr(self.torch, dtype), device=self.device)

    def rows(self, vec: np.ndarray, n: int) -> Any:
        """An int64 ``[n, len(vec)]`` array of ``n`` copies of the host vector ``vec``."""
        if self.torch is None:
            return np.tile(vec.astype(np.int64), (n, 1))
        return self.asarray(vec, "int64").expand(n, vec.size).clone()

    def arange(self, n: int) -> Any:
        """int64 ``[n]``: 0 .. n - 1, made where the arrays live (no host copy)."""
        if self.torch is None:
            return np.arange(n, dtype=np.int64)
        return self.torch.arange(n, dtype=self.torch.int64, device=self.device)

    def host(self, x: Any) -> np.ndarray:
        """``x`` as a host int64 numpy array (a device tensor is copied back)."""
        if self.torch is not None and self.torch.is_tensor(x):
            x = x.cpu()
        return np.asarray(x, dtype=np.int64)

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        return np.where(cond, a, b) if self.torch is None else self.torch.where(cond, a, b)

    def all_rows(self, x: Any) -> Any:
        return x.all(axis=1) if self.torch is None else x.all(dim=1)

    def cummax_right(self, x: Any) -> Any:
        """Running maximum from the right along axis 1."""
        if self.torch is None:
            return np.maximum.accumulate(x[:, ::-1], axis=1)[:, ::-1]
        return self.torch.flip(self.torch.cummax(self.torch.flip(x, (1,)), dim=1).values, (1,))


@dataclass(frozen=True, eq=False)
class NgramTable:
    """An n-gram LM as sorted key arrays (see the module docstring).

    Attributes:
        order: the LM's order ``N``.
        radix: the LM's word count ``V`` (with ``<unk>``, ``<s>``, ``</s>``): keys are base-V.
        keys: per order ``n = 1..N``, int64 ``[C_n]``, sorted: the n-grams' base-V numbers.
        ln_prob: per order, float32 ``[C_n]``: natural-log probabilities.
        ln_backoff: per order, float32 ``[C_n]``: natural-log back-off weights (0 where the
            file has none, and on the highest order).
        index: int64 ``[max_token_id + 1]``: token id -> LM word index (0: ``<unk>``).
        bos: the LM word index of ``<s>``.
        unk_ln: the fixed log-prob of an unknown token (nats), or None for ``<unk>``'s own.
    """

    order: int
    radix: int
    keys: tuple[Any, ...]
    ln_prob: tuple[Any, ...]
    ln_backoff: tuple[Any, ...]
    index: Any
    bos: int
    unk_ln: float | None = None
    ops: _Ops = field(default_factory=_Ops, repr=False)

    # ---- building -----------------------------------------------------------------------------

    @classmethod
    def from_lm(cls, lm: Any) -> NgramTable:
        """The table of an :class:`~blockdraft.rescorers.ngram.lm.NgramLM` (its ARPA file and
        its token-id -> word mapping).

        Raises:
            RescorerError: an LM without its ARPA file (a binary alone), an order whose keys do
                not fit 63 bits (``V ** order``), or an ARPA word the LM does not list.
        """
        arpa = lm.arpa_path()
        if arpa is None:
            raise RescorerError(f"{lm.path} is a KenLM binary without its ARPA file beside it "
                                f"({lm.path.with_suffix('.arpa').name}); the n-gram table reads "
                                "the ARPA file: put the ARPA file the binary was built from "
                                "beside it, or rebuild the pair with blockdraft ngram train")
        words = lm.words
        radix, order = len(words), int(lm.order)
        if radix ** order >= 2 ** 63:
            raise RescorerError(
                f"an order-{order} LM over {radix} words needs keys of "
                f"{math.log2(radix) * order:.0f} bits; the n-gram table holds base-V keys in 63 "
                f"bits (order <= {int(63 / math.log2(radix))} for this vocabulary): use the "
                "host search (NgramRescorer) for this LM")
        at = {w: i for i, w in enumerate(words)}
        grams: list[list[tuple[int, float, float]]] = [[] for _ in range(order)]
        for g in read_arpa(arpa):
            key = 0
            for w in g.words:
                i = at.get(w)
                if i is None:
                    raise RescorerError(f"{arpa}: the n-gram {' '.join(g.words)!r} has the word "
                                        f"{w!r}, which the LM {lm.path.name} does not list")
                key = key * radix + i
            grams[g.order - 1].append((key, g.log10_prob * LN10, g.log10_backoff * LN10))
        keys, probs, backoffs = [], [], []
        for n, rows in enumerate(grams, start=1):
            rows.sort()
            k = np.array([r[0] for r in rows], dtype=np.int64)
            if k.size > 1 and (np.diff(k) == 0).any():
                dup = int(k[1:][np.diff(k) == 0][0])
                raise RescorerError(f"{arpa}: an {n}-gram is listed twice (key {dup})")
            keys.append(k)
            probs.append(np.array([r[1] for r in rows], dtype=np.float32))
            backoffs.append(np.array([r[2] for r in rows], dtype=np.float32))
        bos = at.get("<s>")
        if bos is None:
            raise RescorerError(f"{arpa} has no <s>: it cannot start a text")
        index = np.asarray(lm.indices(np.arange(lm.max_token_id + 1)), dtype=np.int64)
        return cls(order=order, radix=radix, keys=tuple(keys), ln_prob=tuple(probs),
                   ln_backoff=tuple(backoffs), index=index, bos=int(bos), unk_ln=lm.unk_ln())

    def to(self, device: Any) -> NgramTable:
        """The same table as torch tensors on ``device`` (``"cpu"``, ``"cuda"``, ...)."""
        import torch

        ops = _Ops(torch, torch.device(device))
        return NgramTable(
            order=self.order, radix=self.radix,
            keys=tuple(ops.asarray(k, "int64") for k in self.keys),
            ln_prob=tuple(ops.asarray(p, "float32") for p in self.ln_prob),
            ln_backoff=tuple(ops.asarray(b, "float32") for b in self.ln_backoff),
            index=ops.asarray(self.index, "int64"), bos=self.bos, unk_ln=self.unk_ln, ops=ops)

    @property
    def nbytes(self) -> int:
        """Bytes the arrays take (keys, probabilities, back-offs, the token index)."""
        arrays = [*self.keys, *self.ln_prob, *self.ln_backoff, self.index]
        return int(sum(a.numel() * a.element_size() if self.ops.torch else a.nbytes
                       for a in arrays))

    # ---- lookups ------------------------------------------------------------------------------

    def _words(self, token_ids: Any) -> Any:
        """LM word indices of token ids (0: unknown, also for ids past the table)."""
        ops = self.ops
        ids = ops.asarray(token_ids, "int64")
        size = int(self.index.shape[0])
        inside = (ids >= 0) & (ids < size)
        clipped = ops.where(inside, ids, ids * 0)
        return ops.where(inside, self.index[clipped], ids * 0)

    def _find(self, n: int, key: Any) -> tuple[Any, Any]:
        """``(row, hit)`` of base-V keys among the stored n-grams of order ``n``."""
        keys = self.keys[n - 1]
        if keys.shape[0] == 0:
            return key * 0, key < key  # nothing stored: no hits
        row = self.ops.searchsorted(keys, key)
        row = self.ops.where(row < keys.shape[0], row, row * 0 + (keys.shape[0] - 1))
        return row, keys[row] == key

    def _restart_after_unknown(self, hist: Any) -> Any:
        """Slots at or before the last unknown word (index 0) of each history become NONE."""
        ops = self.ops
        width = hist.shape[1]
        pos = ops.arange(width)
        last_unk = ops.cummax_right(ops.where(hist == 0, pos + 0 * hist, 0 * hist - 1))
        return ops.where(pos <= last_unk, 0 * hist + NONE, hist)

    def score_next(self, histories: Any, words: Any) -> Any:
        """float32 ``[B]``: ln P(word_b | history_b) by back-off.

        Args:
            histories: int64 ``[B, order - 1]`` LM word indices, oldest first; ``NONE`` (-1)
                where there is no word (:meth:`histories` makes them).
            words: int64 ``[B]`` LM word indices (0: unknown).
        """
        ops, n_max, radix = self.ops, self.order, self.radix
        hist = ops.asarray(histories, "int64")
        word = ops.asarray(words, "int64")
        total = ops.zeros(int(word.shape[0]), "float32")
        found = word < 0  # all False
        for n in range(n_max, 0, -1):
            ctx = hist[:, hist.shape[1] - (n - 1):] if n > 1 else hist[:, :0]
            valid = ops.all_rows(ctx >= 0) if n > 1 else word >= 0
            ctx_key = word * 0
            for j in range(n - 1):
                ctx_key = ctx_key * radix + ops.where(ctx[:, j] >= 0, ctx[:, j], ctx[:, j] * 0)
            row, hit = self._find(n, ctx_key * radix + word)
            new = hit & valid & ~found
            total = ops.where(new, total + self.ln_prob[n - 1][row], total)
            found = found | new
            if n > 1:  # not found at this order: back off through this context, if stored
                brow, bhit = self._find(n - 1, ctx_key)
                step = ops.where(bhit & valid, self.ln_backoff[n - 2][brow], total * 0)
                total = ops.where(found, total, total + step)
        if self.unk_ln is not None:
            total = ops.where(word == 0, total * 0 + self.unk_ln, total)
        return total

    def histories(self, context: Sequence[int] | np.ndarray, tokens: Any,
                  parents: Any) -> Any:
        """int64 ``[N, order - 1]``: each node's history, the last ``order - 1`` words before
        it (the context's tail, then its ancestors' tokens), ``NONE`` where there is none.

        Args:
            context: the committed token ids before the tree (empty: the text starts at
                ``<s>``).
            tokens: int64 ``[N]`` token ids of the nodes.
            parents: int64 ``[N]``: each node's parent (-1: it follows the context), a parent
                before its child.
        """
        ops, width = self.ops, self.order - 1
        ctx = as_context(context)
        start = np.full(width, NONE, dtype=np.int64)
        if ctx.size == 0:
            if width:
                start[-1] = self.bos
        elif width:
            tail = ops.host(self._words(ctx[-width:]))
            start[width - tail.size:] = tail
        par = ops.host(parents).reshape(-1)
        n = par.size
        if n and ((par >= np.arange(n)) | (par < -1)).any():
            bad = int(np.flatnonzero((par >= np.arange(n)) | (par < -1))[0])
            raise RescorerError(f"node {bad}'s parent {int(par[bad])} does not come before it "
                                "(parents[u] must be -1 or < u)")
        words = self._words(tokens)
        hist = ops.rows(start, n)  # every node starts from the context's tail
        depth = np.zeros(n, dtype=np.int64)
        for u in range(n):  # depths on the host: the parents are small and host-side
            depth[u] = depth[par[u]] + 1 if par[u] >= 0 else 0
        if width == 0 or n == 0:
            return hist
        par_t = ops.asarray(par, "int64")
        for d in range(1, int(depth.max()) + 1):  # one level at a time: parents are done
            rows = ops.asarray(np.flatnonzero(depth == d), "int64")
            p = par_t[rows]
            shifted = hist[p][:, 1:]
            tail = words[p].reshape(-1, 1)
            cat = (np.concatenate([shifted, tail], axis=1) if ops.torch is None
                   else ops.torch.cat([shifted, tail], dim=1))
            hist[rows] = cat
        return self._restart_after_unknown(hist)

    def score_tree(self, context: Sequence[int] | np.ndarray, tokens: Any,
                   parents: Any) -> Any:
        """float32 ``[N]``: ln P(token_u | context, u's ancestors' tokens) for every node."""
        words = self._words(tokens)
        return self.score_next(self.histories(context, tokens, parents), words)
