"""An n-gram LM scoring the paths of a token tree incrementally (docs/definitions.md sec. 4,
11): the path scorer of the rescored tree (:func:`~blockdraft.drafts.trees.rescored_tree`).

:func:`~blockdraft.drafts.trees.rescored_tree` scores a node's children with an LM that sees
the committed context and the node's root path. An ``NgramLM`` can do it through ``score``,
rescoring the whole path for every child; :class:`NgramPathScorer` gives the same numbers
with one KenLM lookup per child, from its parent's LM state (kept for the step). Its neural
counterpart is :class:`~blockdraft.rescorers.neural.NeuralPathScorer`; both satisfy
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

from blockdraft.rescorers.base import RescorerError, as_context, scores_by_parent
from blockdraft.rescorers.ngram.lm import LN10, NgramLM


class NgramPathScorer:
    """An :class:`NgramLM` scoring tree paths incrementally, natural log.

    ``next_scores(path, context, candidates)`` equals ``lm.score([*path, c], context)[-1]``
    for every candidate ``c`` (the LM's start-of-text and unknown-token conventions
    included), at the cost of one KenLM lookup per candidate: the LM state after each scored
    path is kept, keyed by the path, until the context's LM history changes (a new step).

    Raises:
        RescorerError: on an ``lm`` that is not an :class:`NgramLM`.
    """

    MAX_STATES = 1 << 16
    """Kept states beyond which the cache starts over (a bound on memory, not on results)."""

    def __init__(self, lm: NgramLM) -> None:
        if not isinstance(lm, NgramLM):
            raise RescorerError(f"lm must be an NgramLM, got {type(lm).__name__}")
        import kenlm

        self.lm = lm
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
        unk = self.lm.unk_ln()
        if unk is not None:
            out[~self.lm.known(cands)] = unk
        return out

    def score_tree(self, tokens: np.ndarray, parents: np.ndarray,
                   context: Sequence[int] | np.ndarray) -> np.ndarray:
        """float64 ``[N]``: ``ln P(token_u | context, u's ancestors)`` of every node of a token
        tree: :meth:`next_scores` once per parent."""
        return scores_by_parent(self, tokens, parents, context)

    def check_vocab(self, vocab_size: int) -> None:
        """The LM's own check (:meth:`NgramLM.check_vocab`)."""
        self.lm.check_vocab(vocab_size)

    def score(self, tokens: Sequence[int] | np.ndarray,
              context: Sequence[int] | np.ndarray = ()) -> np.ndarray:
        """float64 ``[n]``: ``ln P(token_i | context, tokens_<i)`` (the LM's own ``score``)."""
        return self.lm.score(tokens, context)
