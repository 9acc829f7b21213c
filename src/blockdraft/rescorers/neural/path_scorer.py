"""A small neural LM scoring the paths of a token tree (docs/definitions.md sec. 4, 11): the
neural path scorer of the rescored tree (:func:`~blockdraft.drafts.trees.rescored_tree`).

:class:`NeuralPathScorer` scores with a :class:`~blockdraft.models.RescorerLM`, one forward per
expanded node for all its children at once, on a cache of the context window kept between
nodes of a step. Its n-gram counterpart is
:class:`~blockdraft.rescorers.ngram.NgramPathScorer`; both satisfy
:class:`~blockdraft.rescorers.base.PathScorer`.

Public surface:
    NeuralPathScorer(model, max_depth=8, bos_id=None)
        .next_scores(path, context, candidates) -> float64 [c]    ln P(c | context, path)
        .score_tree(tokens, parents, context) -> float64 [N]      every node of a tree
        .score(tokens, context) -> float64 [n]                    ln P(token_i | ..., tokens_<i)
        .check_vocab(vocab_size)                                  V equal to the model's
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from blockdraft.core.checks import check_positive_int
from blockdraft.models.blockwise import RescorerLM
from blockdraft.rescorers.base import RescorerError, check_same_vocab, scores_by_parent


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
        RescorerError: on a model that is not a :class:`RescorerLM`, or ``max_depth`` that
            leaves no window.
    """

    def __init__(self, model: RescorerLM, max_depth: int = 8, bos_id: int | None = None) -> None:
        if not isinstance(model, RescorerLM):
            raise RescorerError(f"model must be a RescorerLM, got {type(model).__name__}")
        self.model = model
        self.max_depth = check_positive_int(max_depth, "max_depth", RescorerError)
        self.window = model.config.max_seq_len - self.max_depth - 1
        if self.window < 0:
            raise RescorerError(f"max_depth = {max_depth} leaves no room in the LM's context of "
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
        cand = np.array(candidates, dtype=np.int64).reshape(-1)  # a writable copy for torch
        lp = self._logprobs(list(path), context)
        if lp is None:
            return np.zeros(cand.size)
        return lp[-1, torch.as_tensor(cand)].cpu().numpy()

    def score_tree(self, tokens: np.ndarray, parents: np.ndarray,
                   context: Sequence[int] | np.ndarray) -> np.ndarray:
        """float64 ``[N]``: ``ln P(token_u | context, u's ancestors)`` of every node of a token
        tree: :meth:`next_scores` once per parent (one forward each)."""
        return scores_by_parent(self, tokens, parents, context)

    def check_vocab(self, vocab_size: int) -> None:
        """Raise unless the LM's vocabulary is the model's (``V`` equal).

        Raises:
            RescorerError: naming both sizes.
        """
        check_same_vocab(self.model.config.vocab_size, vocab_size)

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
