"""`FactoredHeadsLM`: ``heads_logits`` and ``forward`` for every model whose heads sit on one
shared hidden state (the reference `BlockwiseLM`, the Hugging Face `HFBlockwiseModel`).

A subclass provides ``hidden``, ``head_states`` and ``project``
(:class:`~blockdraft.models.protocol.FactoredHeadsModel`); this mixin composes them, so the
two models compute every head's logits the same way.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from blockdraft.models.topk import topk_logprobs


class FactoredHeadsLM:
    """Mixin: every head's logits from ``project(head_states(hidden(...)))``."""

    def heads_logits(
        self,
        input_ids: torch.Tensor,
        past: Any = None,
        last_only: bool = False,
        position_ids: torch.Tensor | None = None,
        tree_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, Any]:
        """Every head's raw logits at every new position.

        Args:
            input_ids: int ``[B, T]`` token ids (on the model's device).
            past: the preceding positions' cache (batch ``B``, or 1 to share it), or None.
            last_only: return only the last position (``T = 1`` in the output): a prefill
                that needs the next block's logits alone skips ``(T-1) h V`` projections.
            position_ids, tree_mask: a token tree's positions and ancestor mask (see the
                model's ``hidden``); default the plain causal forward.

        Returns:
            ``logits`` ``[B, T, h, V]`` in the model's dtype (raw; ``log_softmax`` gives
            natural-log probabilities): ``logits[b, t, i - 1]`` is head ``i``'s prediction of
            the token at position ``t + i``; and the cache of all positions.

        Raises:
            ModelError: see the model's ``hidden``.
        """
        model: Any = self
        x, cache = model.hidden(input_ids, past, position_ids, tree_mask)  # (B, T, d)
        if last_only:
            x = x[:, -1:]  # (B, 1, d)
        return model.project(model.head_states(x)), cache  # (B, T, h, V)

    def head_topk(self, x: torch.Tensor, k: int, heads: int | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
        """Heads 2..``heads``' top-``k`` at the states ``x`` (the next step's lattice slots).

        The generic way: every head's logits (:meth:`project` of :meth:`head_states`), then
        :func:`~blockdraft.models.topk.topk_logprobs`. A runtime overrides it to compute the
        same inside its graph (and over its heads' shortlist only).

        Args:
            x: float ``[M, d]`` final hidden states.
            k: tokens per head.
            heads: heads kept, ``2 <= heads <= h`` (default every head).

        Returns:
            ``(ids, scores)``: int64 ``[M, heads - 1, k]`` ordered by (logit desc, id asc) and
            float64 natural-log probabilities (``-1`` / ``-inf`` for a masked token).
        """
        model: Any = self
        n = self.heads_kept(heads)
        logits = model.project(model.head_states(x, n))[:, 1:]  # (M, n - 1, V)
        ids, scores = topk_logprobs(logits.reshape(-1, logits.shape[-1]), k)
        return ids.reshape(x.shape[0], n - 1, k), scores.reshape(x.shape[0], n - 1, k)

    def heads_kept(self, heads: int | None) -> int:
        """How many heads ``head_states(x, heads)`` keeps: ``heads``, default every one.

        Raises:
            ModelError: when ``heads`` is not an integer in ``[1, h]``.
        """
        from blockdraft.models.errors import ModelError

        h = int(self.h)  # type: ignore[attr-defined]
        n = h if heads is None else heads
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= h:
            raise ModelError(f"heads must be an integer in [1, {h}], got {heads!r}")
        return n

    def forward(self, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, Any]:
        """Same as :meth:`heads_logits` (same arguments)."""
        return self.heads_logits(*args, **kwargs)
