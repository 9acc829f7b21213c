"""The PyTorch backends of the heads: the modules themselves, on the model's device.

:class:`TorchHeads` is what every kind computes the same way in PyTorch: the base head (the
base's ``lm_head``), the heads' projection (``lm_head``, ``-inf`` outside a shortlist, or the
heads' own matrices) and the projection onto the shortlist's ``[Vs, d]`` rows of ``lm_head``,
kept between calls (``Vs / V`` of the multiply-adds). Each kind adds its own computation:
:class:`TorchMedusa` (the ResBlocks), :class:`TorchPrefix` (the greedy chain, a loop over
the heads, and one node's expansion, :meth:`PrefixHeads.node
<blockdraft.models.hf.prefix_heads.PrefixHeads.node>`) and :class:`TorchEagle` (one call of an
EAGLE draft layer, :class:`~blockdraft.models.hf.eagle_heads.EagleHeads`). The eager adapter
(:class:`~blockdraft.models.hf.HFBlockwiseModel`) runs them, and so does the static runtime,
whose heads are the adapter's modules on its device.

Where data enters. A state ``x`` reaches the heads in whatever float dtype and on whatever device
its caller made it (the forward's ``x`` in the model's dtype, a cost curve's zeros in float32, a
host copy): every method converts it once, on entry (:meth:`TorchHeads.enter`), to the dtype
and device of the modules (``lm_head``'s weight: the adapter keeps the heads beside it), so a
bfloat16 model on a GPU takes a float32 CPU tensor as a float32 model on a CPU does. What
leaves is the modules' own (logits in their dtype on their device; top-k ids and scores as
numpy arrays on the host).

Public surface:
    TorchHeads(base, heads)      num_heads, by_head, enter, greedy, project, shortlist_projection
    TorchMedusa(base, heads)     + states, topk
    TorchPrefix(base, heads)     + chain, chain_states, chain_topk, node
    TorchEagle(base, heads)      + config, context, feature_layers, token_ids, step
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from blockdraft.models.heads.eagle_config import EagleConfig
from blockdraft.models.heads.eagle_layer import KV, EagleStep
from blockdraft.models.heads.prefix import Node
from blockdraft.models.topk import topk_logprobs

Projection = tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]
"""``(weight [Vs, d], bias [Vs] or None, ids [Vs] or None)``: the heads' shortlist projection."""


class TorchHeads:
    """The PyTorch computation every kind shares (see the module docstring).

    Args:
        base: the ``transformers`` causal LM (its ``lm_head`` and input embeddings are read at
            each call: the modules as they are now).
        heads: the heads' module (:class:`~blockdraft.models.hf.MedusaHeads` or a subclass).
    """

    def __init__(self, base: Any, heads: Any) -> None:
        self.base = base
        self.heads = heads
        self._projection: tuple[Any, Projection] | None = None

    @property
    def num_heads(self) -> int:
        """The heads beside the base LM."""
        return int(self.heads.num_heads)

    @property
    def by_head(self) -> bool:
        """Own projections or a shortlist: a head's projection depends on the head."""
        return self.heads.projections is not None or self.heads.shortlist is not None

    @property
    def lm_head(self) -> nn.Linear:
        """The base model's vocabulary projection (head 1)."""
        head = self.base.get_output_embeddings()
        assert isinstance(head, nn.Linear)
        return head

    def enter(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` in the modules' dtype and on their device (itself when it already is): the one
        conversion of what enters the heads (module docstring)."""
        weight = self.lm_head.weight
        if x.dtype == weight.dtype and x.device == weight.device:
            return x
        return x.to(device=weight.device, dtype=weight.dtype)

    def greedy(self, x: torch.Tensor) -> torch.Tensor:
        """The base's greedy tokens at ``x [..., d]``: int64 ``[...]``."""
        return self.lm_head(self.enter(x)).argmax(-1)

    def project(self, states: torch.Tensor) -> torch.Tensor:
        """``[..., n, d] -> [..., n, V]``: the base ``lm_head`` on head 1's row, the heads'
        projection (:meth:`MedusaHeads.logits <blockdraft.models.hf.MedusaHeads.logits>`) on
        the others; ``lm_head`` on everything when that is every head's projection."""
        lm_head = self.lm_head
        states = self.enter(states)
        if not self.by_head:
            return lm_head(states)  # type: ignore[no-any-return]  # (..., n, V)
        base = lm_head(states[..., :1, :])  # (..., 1, V)
        if states.shape[-2] == 1:
            return base  # type: ignore[no-any-return]
        heads = self.heads.logits(states[..., 1:, :], lm_head)  # (..., n - 1, V)
        return torch.cat((base, heads), dim=-2)  # (..., n, V)

    def shortlist_projection(self) -> Projection:
        """``(weight [Vs, d], bias [Vs] or None, ids [Vs] or None)`` of the heads' projection
        onto their shortlist (``lm_head`` itself without one), kept until the shortlist or
        ``lm_head``'s weight changes."""
        lm_head = self.lm_head
        shortlist = self.heads.shortlist
        weight = lm_head.weight
        key = (id(shortlist), weight.data_ptr(), weight._version, weight.dtype, weight.device)
        if self._projection is None or self._projection[0] != key:
            if shortlist is None:
                kept: Projection = (weight, lm_head.bias, None)
            else:
                rows = shortlist.to(weight.device)
                bias = None if lm_head.bias is None else lm_head.bias[rows]
                kept = (weight[rows].contiguous(), bias, shortlist)
            self._projection = (key, kept)
        return self._projection[1]


class TorchMedusa(TorchHeads):
    """Medusa heads in PyTorch: each head's ResBlocks on ``x``."""

    def states(self, x: torch.Tensor, n: int) -> torch.Tensor:
        """Medusa heads ``0 .. n - 1``'s states at ``x [..., d]``: ``[..., n, d]``."""
        return self.heads(self.enter(x), n)  # type: ignore[no-any-return]

    def topk(self, x: torch.Tensor, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Medusa heads ``0 .. n - 1``'s top-``k`` at ``x [M, d]``, projected onto the
        shortlist's rows alone (with the heads' own matrices: every head's logits)."""
        x = self.enter(x)
        states = self.heads(x, n)  # (M, n, d)
        if self.heads.projections is not None:  # every head's logits over V, as project gives
            logits = self.project(torch.cat((x.unsqueeze(-2), states), dim=-2))[:, 1:]
            ids: torch.Tensor | None = None
        else:
            weight, bias, ids = self.shortlist_projection()
            logits = nn.functional.linear(states, weight, bias)  # (M, n, Vs)
        top, scores = topk_logprobs(logits.reshape(-1, logits.shape[-1]), k, ids)
        return top.reshape(x.shape[0], n, k), scores.reshape(x.shape[0], n, k)


class TorchPrefix(TorchHeads):
    """Prefix-conditioned heads in PyTorch: their greedy chain, one head after the other."""

    def chain(self, x: torch.Tensor, n: int, first: torch.Tensor | None = None
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """The heads along their greedy chain at ``x [..., d]``: ``(states [..., n, d],
        logits [..., n, Vs])``, the logits over the shortlist (``V`` without one), each
        computed once: head ``j``'s argmax is the token head ``j + 1`` reads. ``first``
        (int64 ``[...]``): the base's greedy token at ``x`` when the caller has it (the
        verifier does), else projected here over the whole vocabulary."""
        x = self.enter(x)
        weight, bias, ids = self.shortlist_projection()
        embed = self.base.get_input_embeddings().weight
        previous = self.greedy(x) if first is None else first.to(x.device)
        states, logits = [], []
        for j in range(n):
            state = self.heads.head_state(j, x, embed[previous])
            row = nn.functional.linear(state, weight, bias)  # (..., Vs)
            states.append(state)
            logits.append(row)
            best = row.argmax(-1)
            previous = best if ids is None else ids.to(best.device)[best]
        return torch.stack(states, dim=-2), torch.stack(logits, dim=-2)

    def chain_states(self, x: torch.Tensor, n: int) -> torch.Tensor:
        """The chain's states from the base's greedy token at ``x``: ``[..., n, d]``."""
        return self.chain(x, n)[0]

    def chain_topk(self, x: torch.Tensor, k: int, n: int, first: Any
                   ) -> tuple[np.ndarray, np.ndarray]:
        """The chain's top-``k`` at ``x [M, d]``, its logits projected once."""
        logits = self.chain(x, n, first)[1]  # (M, n, Vs)
        ids = self.shortlist_projection()[2]
        top, scores = topk_logprobs(logits.reshape(-1, logits.shape[-1]), k, ids)
        return top.reshape(x.shape[0], n, k), scores.reshape(x.shape[0], n, k)

    def node(self, x: torch.Tensor, k: int) -> Node:
        """One node's expansion at ``x [d]``: the heads' module on the shortlist's rows."""
        return self.heads.node(self.enter(x), self.lm_head.weight,  # type: ignore[no-any-return]
                               self.base.get_input_embeddings().weight, k,
                               rows=self.shortlist_projection()[0])


class TorchEagle(TorchHeads):
    """An EAGLE draft layer in PyTorch (the heads module an
    :class:`~blockdraft.models.hf.eagle_heads.EagleHeads`): the layer is handed the base's
    input embedding and output projection here (:meth:`EagleHeads.bind
    <blockdraft.models.hf.eagle_heads.EagleHeads.bind>`, which refuses a layer made for
    another base)."""

    def __init__(self, base: Any, heads: Any) -> None:
        super().__init__(base, heads)
        heads.bind(base)

    @property
    def by_head(self) -> bool:
        """The layer's head (its own norm, the shortlist's rows) projects heads 2..."""
        return True

    @property
    def config(self) -> EagleConfig:
        """The layer's sizes and fusion."""
        return self.heads.layer.config  # type: ignore[no-any-return]

    @property
    def context(self) -> str:
        """What the layer was trained to read before an answer (``"answer"``, ``"prompt"``)."""
        return str(self.heads.context)

    @property
    def feature_layers(self) -> tuple[int, ...]:
        """The base's layers the layer fuses (``()`` with ``"top"``)."""
        return tuple(self.config.fuse_layers)

    @property
    def token_ids(self) -> torch.Tensor | None:
        """The layer's shortlist (the base ids of its logits' columns), or None."""
        return self.heads.layer.shortlist  # type: ignore[no-any-return]

    def step(self, features: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor,
             kv: KV | None, mask: torch.Tensor | None) -> EagleStep:
        """One call of the layer, without gradients (its checks included); ``features``
        enter as every state does (:meth:`~TorchHeads.enter`: a cost curve's float32 probe
        reaches a bfloat16 layer of fusion ``"layers"`` in the layer's dtype)."""
        with torch.no_grad():
            return self.heads.layer(  # type: ignore[no-any-return]
                self.enter(features), tokens, positions, kv, mask)
