"""The small protocol through which the downstream rooms (drafts, verify, oracle) use a model.

Anything that satisfies :class:`HeadsModel` works in their place of :class:`BlockwiseLM`: the
reference model here, or an adapter around another checkpoint. Its cache only needs the
operations a BPD verifier uses (:class:`DecoderCache`). What a model can do beyond the protocol
is declared (:mod:`~blockdraft.models.capabilities`); :func:`as_factored` gives every model the
factored protocol (the verifier and the greedy reference have one code path).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from blockdraft.core.moved import moved_getattr


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

    def gather(self, positions: torch.Tensor) -> DecoderCache:
        """The positions ``positions`` (int64 ``[L]``, on the cache's device), in order: a
        verification keeps its accepted path's keys and values this way."""
        ...

    def select_row(self, row: int) -> DecoderCache:
        """Row ``row`` alone (batch 1)."""
        ...

    def expand(self, batch_size: int) -> DecoderCache:
        """A batch-1 cache as ``batch_size`` identical rows."""
        ...


@runtime_checkable
class HeadsModel(Protocol):
    """A blockwise parallel LM with ``h`` heads and incremental decoding. blockdraft's models
    also declare ``capabilities`` (:class:`~blockdraft.models.capabilities.Capabilities`);
    :func:`~blockdraft.models.capabilities.capabilities_of` derives one for a model that does
    not."""

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


    def head_topk(self, x: torch.Tensor, k: int, heads: int | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
        """Heads 2..``heads``' top-``k`` at the states ``x [M, d]``: ``(ids int64 [M, n-1, k],
        natural-log probabilities float64)``, taken where the logits are
        (:attr:`Capabilities.head_topk <blockdraft.models.capabilities.Capabilities
        .head_topk>`)."""
        ...


@runtime_checkable
class TreeLatticeModel(FactoredHeadsModel, Protocol):
    """A factored model whose heads give a tree lattice (prefix-conditioned heads, a draft
    layer: :attr:`Capabilities.tree_lattice <blockdraft.models.capabilities.Capabilities
    .tree_lattice>`): its heads read the base's greedy token ``first`` and the step's lattice is
    expanded lazily."""

    def head_topk(self, x: torch.Tensor, k: int, heads: int | None = None,
                  first: torch.Tensor | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The heads' greedy chain's top-``k`` at ``x [M, d]`` (``first``: the base's greedy
        tokens there, int64 ``[M]``)."""
        ...

    def expander(self, x: torch.Tensor, k: int, first: int | None = None,
                 chain: tuple[np.ndarray, np.ndarray] | None = None
                 ) -> Callable[[tuple[int, ...]], tuple[np.ndarray, np.ndarray]]:
        """The step's tree lattice at ``x [d]``: ``expand(prefix) -> (ids, log-probs)``."""
        ...


@runtime_checkable
class DraftLayerModel(TreeLatticeModel, Protocol):
    """A tree-lattice model whose heads keep a state along the committed text (an EAGLE draft
    layer's KV cache: :attr:`Capabilities.stateful_heads <blockdraft.models.capabilities
    .Capabilities.stateful_heads>`): after the prompt's forward and after every verification,
    the verifier hands it the accepted rows of that forward, before it asks for the next
    step's heads."""

    def accept_path(self, rows: Any, tokens: Any, start: int, new_text: bool = False) -> None:
        """The last ``hidden`` call's rows ``rows`` (int ``[n]``, text order) were committed,
        the token after each is ``tokens[i]``, the first sits at position ``start``;
        ``new_text``: a prompt's forward (the state starts over)."""
        ...


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
    """``model`` itself when it declares itself factored, else a view of it that is (see
    :class:`_PlainAsFactored`): the one place where the two kinds of model differ."""
    from blockdraft.models.capabilities import capabilities_of

    if capabilities_of(model).factored:
        return model  # type: ignore[no-any-return]
    return _PlainAsFactored(model)  # type: ignore[return-value]


__getattr__ = moved_getattr("blockdraft.models.protocol", {
    "factored": ("capabilities_of(model).factored (blockdraft.models.capabilities)",
                 "a model declares what it can do"),
    "takes_last_only": ("capabilities_of(model).last_only (blockdraft.models.capabilities)",
                        "a model declares what it can do"),
})

