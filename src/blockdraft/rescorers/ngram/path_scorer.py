"""An n-gram LM scoring the paths of a token tree incrementally (docs/definitions.md sec. 4,
11): the path scorer of the rescored tree (:func:`~blockdraft.drafts.trees.rescored_tree`).

:func:`~blockdraft.drafts.trees.rescored_tree` scores a node's children with an LM that sees
the committed context and the node's root path. An ``NgramLM`` can do it through ``score``,
rescoring the whole path for every child; :class:`NgramPathScorer` gives the same numbers
through the LM's own engine: with the native library (``engine="native"``, the default when it
is built) one native call per child or per leaf of a tree, rescoring its short root path; with
the ``kenlm`` module (``engine="kenlm"``) one KenLM lookup per child, from its parent's LM state
(kept for the step). So the native library alone is enough to rescore trees: the ``kenlm``
module is imported only by an LM that runs on it. Its neural counterpart is
:class:`~blockdraft.rescorers.neural.NeuralPathScorer`; both satisfy
:class:`~blockdraft.rescorers.base.PathScorer`.

Public surface:
    NgramPathScorer(lm)
        .next_scores(path, context, candidates) -> float64 [c]    ln P(c | context, path)
        .score_tree(tokens, parents, context) -> float64 [N]      every node of a tree
        .score(tokens, context) -> float64 [n]                    ln P(token_i | ..., tokens_<i)
        .check_vocab(vocab_size)                                  the LM's tokenizer check
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from blockdraft.rescorers.base import RescorerError, as_context
from blockdraft.rescorers.ngram.lm import LN10, NgramLM


class NgramPathScorer:
    """An :class:`NgramLM` scoring tree paths incrementally, natural log.

    ``next_scores(path, context, candidates)`` equals ``lm.score([*path, c], context)[-1]``
    for every candidate ``c`` (the LM's start-of-text and unknown-token conventions
    included). On the native engine each candidate is one native call over ``path + [c]``
    after the context (a tree's path is a few tokens); on the ``kenlm`` module it is one
    KenLM lookup: the LM state after each scored path is kept, keyed by the path, until the
    context's LM history changes (a new step).

    Raises:
        RescorerError: on an ``lm`` that is not an :class:`NgramLM`, or one on the ``kenlm``
            engine without the ``kenlm`` module.
    """

    MAX_STATES = 1 << 16
    """Kept states beyond which the cache starts over (a bound on memory, not on results)."""

    def __init__(self, lm: NgramLM) -> None:
        if not isinstance(lm, NgramLM):
            raise RescorerError(f"lm must be an NgramLM, got {type(lm).__name__}")
        self.lm = lm
        self._native = lm.native_model  # None: the LM runs on the kenlm module
        self._kenlm: Any = None
        self._model: Any = None
        if self._native is None:
            import kenlm

            self._kenlm = kenlm
            self._model = lm.kenlm_model()
        self._words: dict[int, str] = {}
        self._key: tuple[Any, ...] | None = None
        self._states: dict[tuple[int, ...], Any] = {}

    @property
    def order(self) -> int:
        return int(self.lm.order)

    def _word(self, token: int) -> str:
        word = self._words.get(token)
        if word is None:
            word = self._words[token] = self.lm.word(token)
        return word

    def _begin(self, context: Sequence[int] | np.ndarray) -> None:
        """Start the state cache for ``context`` (kept when its LM history is the same)."""
        ctx = as_context(context)
        bos, _ = self.lm.start_checked(ctx)  # refuses an unknown history with unknown="error"
        tail = tuple(ctx[-(self.order - 1):].tolist()) if self.order > 1 and ctx.size else ()
        key = (bos, tail)
        if key == self._key and len(self._states) < self.MAX_STATES:
            return
        state = self._kenlm.State()
        if bos:
            self._model.BeginSentenceWrite(state)
        else:
            self._model.NullContextWrite(state)
            for t in tail:
                nxt = self._kenlm.State()
                self._model.BaseScore(state, self._word(t), nxt)
                state = nxt
        self._key, self._states = key, {(): state}

    def _state(self, path: tuple[int, ...]) -> Any:
        state = self._states.get(path)
        if state is None:
            parent = self._state(path[:-1])
            state = self._kenlm.State()
            self._model.BaseScore(parent, self._word(path[-1]), state)
            self._states[path] = state
        return state

    def next_scores(self, path: Sequence[int], context: Sequence[int] | np.ndarray,
                    candidates: Sequence[int] | np.ndarray) -> np.ndarray:
        """float64 ``[c]``: ``ln P(c | context, path)`` of every candidate."""
        if self._native is not None:
            cands = as_context(candidates)
            bos, ctx = self.lm.start_checked(as_context(context))
            words = np.append(self.lm.indices(np.asarray(path, dtype=np.int64)), 0)
            out = np.empty(cands.size)
            for i, word in enumerate(self.lm.indices(cands).tolist()):
                words[-1] = word
                out[i] = self._native.score(words, ctx, bos)[-1]
            return self._unknown(cands, out)
        self._begin(context)
        prefix = tuple(int(t) for t in path)
        parent = self._state(prefix)
        cands = as_context(candidates)
        if self.lm.unknown == "error":
            self.lm.indices(cands)  # raises, naming the first unknown id
        out = np.empty(cands.size)
        for i, c in enumerate(cands.tolist()):
            state = self._kenlm.State()
            out[i] = self._model.BaseScore(parent, self._word(c), state) * LN10
            self._states[(*prefix, c)] = state
        return self._unknown(cands, out)

    def _unknown(self, tokens: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``out`` with the policy's fixed log-prob at the tokens the LM does not know."""
        unk = self.lm.unk_ln()
        if unk is not None:
            out[~self.lm.known(tokens)] = unk
        return out

    def score_tree(self, tokens: np.ndarray, parents: np.ndarray,
                   context: Sequence[int] | np.ndarray) -> np.ndarray:
        """float64 ``[N]``: ``ln P(token_u | context, u's ancestors)`` of every node of a token
        tree (``parents[u] < u``, the root's ``-1``): on the native engine one call per leaf
        (its root path scores every node on it), on the ``kenlm`` module one lookup per node,
        each from its parent's state. Equal to :meth:`next_scores` node by node."""
        toks = np.asarray(tokens, dtype=np.int64)
        par = np.asarray(parents, dtype=np.int64).tolist()
        ctx = as_context(context)
        words = self.lm.indices(toks)  # raises on an unknown id with unknown="error"
        out = np.empty(toks.size)
        if self._native is not None:
            bos, start = self.lm.start_checked(ctx)
            inner = set(par)
            for leaf in (u for u in range(toks.size) if u not in inner):
                path = [leaf]
                while par[path[-1]] >= 0:
                    path.append(par[path[-1]])
                path.reverse()  # root first
                out[path] = self._native.score(words[path], start, bos)
            return self._unknown(toks, out)
        self._begin(ctx)
        root = self._states[()]
        states: list[Any] = []
        for u, t in enumerate(toks.tolist()):
            state = self._kenlm.State()
            out[u] = self._model.BaseScore(root if par[u] < 0 else states[par[u]],
                                           self._word(t), state) * LN10
            states.append(state)
        return self._unknown(toks, out)

    def check_vocab(self, vocab_size: int) -> None:
        """The LM's own check (:meth:`NgramLM.check_vocab`)."""
        self.lm.check_vocab(vocab_size)

    def score(self, tokens: Sequence[int] | np.ndarray,
              context: Sequence[int] | np.ndarray = ()) -> np.ndarray:
        """float64 ``[n]``: ``ln P(token_i | context, tokens_<i)`` (the LM's own ``score``)."""
        return self.lm.score(tokens, context)
