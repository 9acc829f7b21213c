"""`ContextLM`: an n-gram LM of the committed text itself (prompt + answer so far).

Prompt lookup works because an answer copies n-grams of its prompt and of itself. The context
LM lets the n-gram rescorer know that: its counts are those of the committed token ids, updated
after each accepted step, and :class:`~blockdraft.rescorers.ngram.NgramRescorer` interpolates it
with the static KenLM LM inside the exact p-best search,

    P(w | h) = lam * P_ctx(w | h) + (1 - lam) * P_kenlm(w | h),

so that a copied span and the heads' guesses compete in one search.

Estimates: interpolated Witten-Bell of order ``n``, over raw token ids. With, for a history
``h`` (a token tuple of length ``0 .. n-1``) and a token ``w``,

    c(h w)   the number of times ``h w`` occurs in the text (an n-gram count of order |h|+1),
    c(h)     = sum_w c(h w): the times ``h`` occurs *followed by a token* (an occurrence of
             ``h`` at the very end of the text does not count),
    t(h)     the number of distinct tokens that follow ``h``,
    h'       ``h`` without its oldest token,

the probability of ``w`` after a history is, taking its last ``n - 1`` tokens as ``h``,

    P_WB(w | ())  = c(w) / c(())             (unigram ML over the text; 0 for an empty text)
    P_WB(w | h)   = (c(h w) + t(h) P_WB(w | h')) / (c(h) + t(h))    when c(h) > 0
    P_WB(w | h)   = P_WB(w | h')                                    when c(h) = 0.

There is no floor: a token never seen in the text has ``P_ctx = 0`` (the KenLM part of the
interpolation carries it). For every history the estimates sum to 1 over the text's tokens.

State: ``P_WB(w | h)`` depends on ``h`` only through its *state*, the longest suffix of ``h``
(at most ``n - 1`` tokens) with ``c > 0`` (every longer suffix backs off to it). The state
after ``h w`` is a suffix of ``state(h) w``, so a search can carry states instead of
histories: :meth:`ContextLM.step`.

Counts are those of the committed text only: scoring a draft continues the history into the
draft's own tokens, never its counts.

Public surface:
    ContextLM(order=4)                      an empty context LM of order ``n``
    ContextLM.from_tokens(tokens, order=4)  built from a text
    .extend(tokens)                         add the n-grams ending at each new token,
                                            O(new tokens x n)
    .counts(m)                              read-only {n-gram: count} of order ``m``
    .history_counts(h) -> (c(h), t(h))
    .prob(token, history) -> P_ctx          the definition above (any history)
    .state(history) -> tuple                the longest suffix of it with c > 0
    .step(state, token) -> (P_ctx, state)   one token after a state
    .continuation_probs(tokens) -> [n]      P_ctx of each token after the text and the
                                            tokens before it
    interpolate_ln(kenlm_ln, ctx_prob, weight) -> ln(lam P_ctx + (1 - lam) P_kenlm)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from blockdraft.core.checks import check_int, check_token_ids
from blockdraft.rescorers.base import RescorerError

MAX_ORDER = 16
"""Largest context-LM order (the native search walks a fixed-size suffix chain)."""

DEFAULT_ORDER = 4

State = tuple[int, ...]
"""A context-LM state: the longest suffix of the history with ``c > 0``."""


class ContextLM:
    """Interpolated Witten-Bell n-gram counts over a growing text of token ids.

    Args:
        order: ``n``, 1 to :data:`MAX_ORDER` (1: the unigram ML estimate alone).

    Attributes:
        order: ``n``.

    Not thread-safe (:meth:`extend` mutates it).

    Raises:
        RescorerError: a bad order.
    """

    def __init__(self, order: int = DEFAULT_ORDER) -> None:
        self.order = check_int(order, "context LM order", RescorerError, minimum=1,
                               maximum=MAX_ORDER)
        # _grams[m - 1]: order-m n-gram -> count; _hist: history -> [c(h), t(h)]
        self._grams: list[dict[State, int]] = [{} for _ in range(self.order)]
        self._hist: dict[State, list[int]] = {(): [0, 0]}
        self._tail: State = ()  # the text's last n - 1 tokens
        self._size = 0

    @classmethod
    def from_tokens(cls, tokens: Sequence[int] | np.ndarray, order: int = DEFAULT_ORDER
                    ) -> ContextLM:
        """The context LM of a text (token ids, oldest first)."""
        out = cls(order)
        out.extend(tokens)
        return out

    def __len__(self) -> int:
        """Tokens of the text so far."""
        return self._size

    def __repr__(self) -> str:
        return f"ContextLM(order={self.order}, tokens={self._size})"

    @property
    def tail(self) -> State:
        """The text's last ``n - 1`` tokens (fewer at its start)."""
        return self._tail

    # ------------------------------------------------------------------ counts
    def extend(self, tokens: Sequence[int] | np.ndarray) -> None:
        """Append tokens to the text: adds the n-grams (orders 1..n) ending at each.

        Raises:
            RescorerError: tokens that are not non-negative integer ids.
        """
        self.extend_checked(check_token_ids(tokens, "context tokens", RescorerError))

    def extend_checked(self, tokens: np.ndarray) -> None:
        """:meth:`extend` of int64 ids already validated."""
        n, grams, hist = self.order, self._grams, self._hist
        tail = self._tail
        for w in tokens.tolist():
            for m in range(1, min(n, len(tail) + 1) + 1):
                u = tail[len(tail) - (m - 1):]
                g = u + (w,)
                d = grams[m - 1]
                c = d.get(g, 0)
                d[g] = c + 1
                st = hist.get(u)
                if st is None:
                    st = hist[u] = [0, 0]
                st[0] += 1
                if c == 0:
                    st[1] += 1
            tail = (tail + (w,))[-(n - 1):] if n > 1 else ()
        self._tail = tail
        self._size += len(tokens)

    def counts(self, m: int) -> Mapping[State, int]:
        """Read-only ``{n-gram: count}`` of order ``m`` (1..n) over the text."""
        m = check_int(m, "n-gram order", RescorerError, minimum=1, maximum=self.order)
        return MappingProxyType(self._grams[m - 1])

    def history_counts(self, history: Sequence[int]) -> tuple[int, int]:
        """``(c(h), t(h))`` of a history of at most ``n - 1`` tokens (see the module doc)."""
        st = self._hist.get(tuple(int(t) for t in history))
        return (st[0], st[1]) if st is not None else (0, 0)

    # ------------------------------------------------------------------ probabilities
    def _key(self, history: Sequence[int]) -> State:
        if self.order == 1:
            return ()
        return tuple(int(t) for t in history)[-(self.order - 1):]

    def prob(self, token: int, history: Sequence[int] = ()) -> float:
        """``P_ctx(token | history)``: the Witten-Bell estimate of the module docstring
        (only the last ``n - 1`` tokens of the history matter). A probability, not a log."""
        h = self._key(history)
        grams, hist = self._grams, self._hist
        w = int(token)
        root = hist[()]
        p = grams[0].get((w,), 0) / root[0] if root[0] else 0.0
        for j in range(1, len(h) + 1):
            u = h[len(h) - j:]
            st = hist.get(u)
            if st is None or st[0] == 0:
                continue  # c(u) = 0: P(w | u) = P(w | u')
            c, t = st
            p = (grams[j].get(u + (w,), 0) + t * p) / (c + t)
        return p

    def state(self, history: Sequence[int] = ()) -> State:
        """The longest suffix of the history's last ``n - 1`` tokens with ``c > 0``."""
        h = self._key(history)
        hist = self._hist
        for j in range(len(h), 0, -1):
            st = hist.get(h[len(h) - j:])
            if st is not None and st[0] > 0:
                return h[len(h) - j:]
        return ()

    def step(self, state: State, token: int) -> tuple[float, State]:
        """``(P_ctx(token | state), the state after it)``: one token of a search."""
        return self.prob(token, state), self.state(state + (int(token),))

    def continuation_probs(self, tokens: Sequence[int] | np.ndarray) -> np.ndarray:
        """float64 ``[n]``: ``P_ctx`` of each token after the text and the tokens before it
        (the history runs on into ``tokens``; the counts stay those of the text)."""
        state = self.state(self._tail)
        out = np.zeros(len(tokens))
        for i, w in enumerate(np.asarray(tokens, dtype=np.int64).tolist()):
            out[i], state = self.step(state, w)
        return out


def check_weight(weight: Any) -> float:
    """The interpolation weight ``lam`` as a float in ``[0, 1]``, or a RescorerError."""
    try:
        lam = float(weight)
    except (TypeError, ValueError) as e:
        raise RescorerError(f"context_weight must be a number in [0, 1], got {weight!r}") from e
    if not 0.0 <= lam <= 1.0:
        raise RescorerError(f"context_weight must be in [0, 1], got {lam}")
    return lam


def interpolate_ln(kenlm_ln: Any, ctx_prob: Any, weight: float) -> np.ndarray:
    """float64: ``ln(lam * P_ctx + (1 - lam) * exp(kenlm_ln))`` elementwise, in nats.

    The formula of the exact searches (same operations, so the same floats): with
    ``P_ctx = 0`` it is ``log1p(-lam) + kenlm_ln`` (``-inf`` when ``lam = 1``).

    Args:
        kenlm_ln: the static LM's natural-log probabilities.
        ctx_prob: the context LM's probabilities (not logs), same shape.
        weight: ``lam`` in ``[0, 1]``.
    """
    k = np.asarray(kenlm_ln, dtype=np.float64)
    c = np.asarray(ctx_prob, dtype=np.float64)
    out = np.empty(np.broadcast(k, c).shape)
    log1m = math.log1p(-weight) if weight < 1.0 else -math.inf
    for idx, (kv, cv) in enumerate(zip(np.broadcast_to(k, out.shape).ravel().tolist(),
                                       np.broadcast_to(c, out.shape).ravel().tolist(),
                                       strict=True)):
        out.flat[idx] = interpolate_one(kv, cv, weight, log1m)
    return out


def interpolate_one(kenlm_ln: float, ctx_prob: float, weight: float, log1m: float) -> float:
    """One term of :func:`interpolate_ln`; ``log1m`` is ``log1p(-weight)``."""
    if ctx_prob == 0.0:
        return log1m + kenlm_ln
    return math.log(weight * ctx_prob + (1.0 - weight) * math.exp(kenlm_ln))
