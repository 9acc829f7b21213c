"""The small protocol through which the downstream rooms (drafts, verify, oracle) use a model.

Anything that satisfies :class:`HeadsModel` works in their place of :class:`BlockwiseLM`: the
reference model here, or an adapter around another checkpoint. Its cache only needs the
operations a BPD verifier uses (:class:`DecoderCache`).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch


@runtime_checkable
class DecoderCache(Protocol):
    """An immutable cache of processed positions (see :class:`~blockdraft.models.KVCache`)."""

    @property
    def length(self) -> int:
        """Positions held."""
        ...

    @property
    def batch_size(self) -> int:
        """Rows."""
        ...

    def crop(self, length: int) -> DecoderCache:
        """The first ``length`` positions."""
        ...

    def select_row(self, row: int) -> DecoderCache:
        """Row ``row`` alone (batch 1)."""
        ...

    def expand(self, batch_size: int) -> DecoderCache:
        """A batch-1 cache as ``batch_size`` identical rows."""
        ...


@runtime_checkable
class HeadsModel(Protocol):
    """A blockwise parallel LM with ``h`` heads and incremental decoding."""

    @property
    def h(self) -> int:
        """Prediction heads (head 1 is the base LM)."""
        ...

    @property
    def device(self) -> torch.device:
        """Where inputs must live."""
        ...

    def heads_logits(self, input_ids: torch.Tensor, past: Any = None) -> tuple[torch.Tensor, Any]:
        """``input_ids [B, T]`` (after the ``past`` positions; a batch-1 ``past`` is shared by
        every row) -> (raw logits ``[B, T, h, V]``, the cache of all positions).
        ``logits[b, t, i - 1]`` predicts the token at ``t + i``."""
        ...
