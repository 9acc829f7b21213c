"""Path scorers of a rescored token tree: an n-gram LM step by step, a small neural LM
(docs/definitions.md sec. 4, 11).

:func:`~blockdraft.drafts.trees.rescored_tree` scores a node's children with an LM that sees
the committed context and the node's root path. An ``NgramLM`` can do it through ``score``,
rescoring the whole path for every child; :class:`NgramPathScorer` gives the same numbers
with one KenLM lookup per child, from its parent's LM state (kept for the step); and
:class:`NeuralPathScorer` scores with a :class:`RescorerLM`, one forward per expanded node for
all its children at once, on a cache of the context window kept between nodes of a step.

Public surface:
    NgramPathScorer(lm)
    NeuralPathScorer(model, max_depth=8, bos_id=None)
        .next_scores(path, context, candidates) -> float64 [c]    ln P(c | context, path)
        .score(tokens, context) -> float64 [n]                    ln P(token_i | ..., tokens_<i)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from blockdraft.core.batch import DraftError
from blockdraft.core.checks import check_positive_int
from blockdraft.models.blockwise import RescorerLM
from blockdraft.rescorers.base import as_context
from blockdraft.rescorers.ngram.lm import LN10, NgramLM


class NgramPathScorer:
    """An :class:`NgramLM` scoring tree paths incrementally, natural log.

    ``next_scores(path, context, candidates)`` equals ``lm.score([*path, c], context)[-1]``
    for every candidate ``c`` (the LM's start-of-text and unknown-token conventions
    included), at the cost of one KenLM lookup per candidate: the LM state after each scored
    path is kept, keyed by the path, until the context's LM history changes (a new step).

    Raises:
        DraftError: on an ``lm`` that is not an :class:`NgramLM`.
    """

    MAX_STATES = 1 << 16
    """Kept states beyond which the cache starts over (a bound on memory, not on results)."""

    def __init__(self, lm: NgramLM) -> None:
        if not isinstance(lm, NgramLM):
            raise DraftError(f"lm must be an NgramLM, got {type(lm).__name__}")
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

    def score(self, tokens: Sequence[int] | np.ndarray,
              context: Sequence[int] | np.ndarray = ()) -> np.ndarray:
        """float64 ``[n]``: ``ln P(token_i | context, tokens_<i)`` (the LM's own ``score``)."""
        return self.lm.score(tokens, context)


class NeuralPathScorer:
    """A :class:`RescorerLM` scoring tree paths, natural log.

    The LM sees the last ``W = max_seq_len - max_depth - 1`` tokens of the context (with
    ``bos_id`` before the context, when given) and then the path. With an empty window
    (no context, no BOS) the first token of a path cannot be scored: it gets 0, as the
    certain token in local neural rescoring (Kim et al. Alg. 2 rescores slots 2..h).

    Args:
        model: the rescoring LM (``h = 1``), in eval mode.
        max_depth: the deepest path (in tokens after the context) the scorer is asked about.
        bos_id: a token put before every context, or None.

    Raises:
        DraftError: on a model that is not a :class:`RescorerLM`, or ``max_depth`` that
            leaves no window.
    """

    def __init__(self, model: RescorerLM, max_depth: int = 8, bos_id: int | None = None) -> None:
        if not isinstance(model, RescorerLM):
            raise DraftError(f"model must be a RescorerLM, got {type(model).__name__}")
        self.model = model
        self.max_depth = check_positive_int(max_depth, "max_depth", DraftError)
        self.window = model.config.max_seq_len - self.max_depth - 1
        if self.window < 0:
            raise DraftError(f"max_depth = {max_depth} leaves no room in the LM's context of "
                             f"{model.config.max_seq_len} positions")
        self.bos_id = bos_id
        self._key: tuple[int, ...] | None = None
        self._cache: Any = None
        self._last: torch.Tensor | None = None  # log-probs after the window

    def _window(self, context: Sequence[int] | np.ndarray) -> tuple[int, ...]:
        ctx = [int(t) for t in np.asarray(context, dtype=np.int64).reshape(-1)]
        if self.bos_id is not None:
            ctx = [self.bos_id, *ctx]
        return tuple(ctx[len(ctx) - self.window:]) if self.window else ()

    def _prefix(self, window: tuple[int, ...]) -> tuple[Any, torch.Tensor | None]:
        """The cache of the window and the log-probs after it (None without a window)."""
        if window != self._key:
            self._key, self._cache, self._last = window, None, None
            if window:
                with torch.no_grad():
                    logits, self._cache = self.model.logits(
                        torch.tensor([list(window)], device=self.model.device), None)
                self._last = torch.log_softmax(logits[0, -1].double(), -1)
        return self._cache, self._last

    def _logprobs(self, path: Sequence[int], context: Sequence[int] | np.ndarray
                  ) -> torch.Tensor | None:
        """float64 ``[len(path) + 1, V]`` log-probs of the token at each path position and the
        one after it (row 0: after the window; None there without a window)."""
        cache, last = self._prefix(self._window(context))
        if not len(path):
            return None if last is None else last[None]  # (1, V)
        with torch.no_grad():
            logits, _ = self.model.logits(
                torch.tensor([list(path)], device=self.model.device), cache)
        after = torch.log_softmax(logits[0].double(), -1)  # (len(path), V)
        first = torch.zeros_like(after[0]) if last is None else last  # (V,)
        return torch.cat((first[None], after))  # (len(path) + 1, V)

    def next_scores(self, path: Sequence[int], context: Sequence[int] | np.ndarray,
                    candidates: Any) -> np.ndarray:
        """float64 ``[c]``: ``ln P(candidate | context, path)`` for every candidate."""
        cand = np.asarray(candidates, dtype=np.int64).reshape(-1)
        lp = self._logprobs(list(path), context)
        if lp is None:
            return np.zeros(cand.size)
        return lp[-1, torch.as_tensor(cand)].cpu().numpy()

    def score(self, tokens: Sequence[int] | np.ndarray,
              context: Sequence[int] | np.ndarray = ()) -> np.ndarray:
        """float64 ``[n]``: ``ln P(token_i | context, tokens_<i)`` (the first is 0 without a
        window)."""
        toks = [int(t) for t in np.asarray(tokens, dtype=np.int64).reshape(-1)]
        if not toks:
            return np.zeros(0)
        lp = self._logprobs(toks[:-1], context)
        if lp is None:
            return np.zeros(1)
        return lp[torch.arange(len(toks)), torch.as_tensor(toks)].cpu().numpy()
