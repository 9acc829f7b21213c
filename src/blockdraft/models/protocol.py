"""The small protocol through which the downstream rooms (drafts, verify, oracle) use a model.

Anything that satisfies :class:`HeadsModel` works in their place of :class:`BlockwiseLM`: the
reference model here, or an adapter around another checkpoint. Its cache only needs the
operations a BPD verifier uses (:class:`DecoderCache`). :func:`takes_last_only` says whether a
model's ``heads_logits`` can skip the projections of all but the last position;
:func:`as_factored` gives every model the factored protocol (the verifier and the greedy
reference have one code path).
"""

from __future__ import annotations

import inspect
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

    @property
    def device(self) -> torch.device:
        """Where the keys and values live."""
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


@runtime_checkable
class FactoredHeadsModel(HeadsModel, Protocol):
    """A :class:`HeadsModel` whose heads sit on one shared hidden state (BPD, Medusa).

    The verifier uses this optional split to evaluate only what a step needs: the base head at
    all ``p * w`` draft positions (for acceptance) and all ``h`` heads at the one position the
    winner stops at (for the next lattice), instead of ``h`` heads everywhere.
    """

    def hidden(self, input_ids: torch.Tensor, past: Any = None, position_ids: Any = None,
               tree_mask: Any = None) -> tuple[torch.Tensor, Any]:
        """``input_ids [B, T]`` -> (final hidden states ``[B, T, d]``, cache); a token tree
        passes its nodes' ``position_ids [T]`` and ancestor mask ``tree_mask`` bool ``[T, T]``
        (default: contiguous positions, causal)."""
        ...

    def head_states(self, x: torch.Tensor, heads: int | None = None) -> torch.Tensor:
        """``[..., d]`` -> each head's pre-projection state ``[..., heads, d]`` (heads 1..)."""
        ...

    def project(self, states: torch.Tensor) -> torch.Tensor:
        """``[..., d]`` -> raw logits ``[..., V]``; ``project(head_states(x))`` equals the
        ``heads_logits`` at ``x``'s positions."""
        ...


def factored(model: Any) -> bool:
    """Whether the model splits into ``hidden``, ``head_states`` and ``project`` (see
    :class:`FactoredHeadsModel`)."""
    return all(callable(getattr(model, name, None)) for name in ("hidden", "head_states",
                                                                  "project"))


class _PlainAsFactored:
    """A plain :class:`HeadsModel` seen through the factored protocol: its "hidden state" at a
    position is every head's logits there (``[..., h, V]``), ``head_states`` keeps the first
    ``n`` heads, ``project`` is the identity. The verifier and the greedy reference then have
    one code path for both kinds of model."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def __getattr__(self, name: str) -> Any:  # h, device, config, max_seq_len, ...
        return getattr(self.model, name)

    def hidden(self, input_ids: torch.Tensor, past: Any = None, position_ids: Any = None,
               tree_mask: Any = None) -> tuple[torch.Tensor, Any]:
        """Every head's logits ``[B, T, h, V]`` as the state, and the cache."""
        kwargs = ({} if position_ids is None and tree_mask is None
                  else {"position_ids": position_ids, "tree_mask": tree_mask})
        return self.model.heads_logits(input_ids, past, **kwargs)  # type: ignore[no-any-return]

    def head_states(self, x: torch.Tensor, heads: int | None = None) -> torch.Tensor:
        """``[..., h, V] -> [..., n, V]``: the first ``n`` heads' logits."""
        return x[..., : (heads or x.shape[-2]), :]

    def project(self, states: torch.Tensor) -> torch.Tensor:
        """The identity: the states already are logits."""
        return states


def as_factored(model: Any) -> FactoredHeadsModel:
    """``model`` itself when it is factored, else a view of it that is (see
    :class:`_PlainAsFactored`): the one place where the two kinds of model differ."""
    return model if factored(model) else _PlainAsFactored(model)  # type: ignore[return-value]


def takes_last_only(model: Any) -> bool:
    """Whether ``model.heads_logits`` takes ``last_only=True`` (both blockdraft model kinds
    do): then it projects the heads at the last position only, logits ``[B, 1, h, V]``."""
    try:
        return "last_only" in inspect.signature(model.heads_logits).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        return False
