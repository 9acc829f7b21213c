"""Medusa heads: small residual networks on a base model's final hidden state.

docs/definitions.md sec. 10. A Medusa head is ``L`` residual blocks ``x + SiLU(W x + b)`` on
the base model's final hidden state ``x`` (after its final norm), then a vocabulary projection:
the base's own ``lm_head`` (``own_projection=False``, Medusa "version 2") or a separate
``[V, d]`` matrix per head (Medusa-1, Medusa-2, vLLM).

Numbering. ``MedusaHeads`` holds ``num_heads`` heads indexed ``j = 0 .. num_heads - 1``, as
Medusa numbers them: Medusa head ``j`` predicts the token ``j + 2`` positions after the input
position. In blockdraft's numbering the base LM is head 1 and Medusa head ``j`` is head
``j + 2``, so a model with these heads has ``h = 1 + num_heads`` heads and
``heads_logits[..., i - 1]`` predicts the token at ``t + i``.

Public surface:
    ResBlock(d_model, bias=True)                         ``x + SiLU(Linear(d, d)(x))``
    MedusaHeads(d_model, vocab_size, num_heads, num_layers=1, own_projection=False,
                bias=True, tie_layers=False)
        heads(x [..., d], heads=None) -> [..., n, d]     pre-projection states
        heads.logits(states [..., n, d], lm_head) -> [..., n, V]

Tied layers. Medusa's own code builds a head as ``nn.Sequential(*([ResBlock(d)] * L), ...)``:
ONE block listed ``L`` times, applied ``L`` times with the same weights, and its files repeat
the same tensors under every layer index. ``tie_layers=True`` reproduces exactly that (the
block is one module, so training keeps the copies equal); ``tie_layers=False`` gives every
layer its own block (TGI, vLLM). With ``L = 1`` the two are the same.
"""

from __future__ import annotations

import torch
from torch import nn

from blockdraft.models.errors import ModelError


class ResBlock(nn.Module):
    """``x + SiLU(Linear(d, d)(x))`` (Medusa's ResBlock; ``bias=False`` for vLLM files
    without ``medusa_fc_bias``). The weight starts at zero, so a new block maps ``x`` to
    ``x + SiLU(b)``: a fresh head predicts nearly what the base head does."""

    def __init__(self, d_model: int, bias: bool = True) -> None:
        super().__init__()
        self.linear = nn.Linear(d_model, d_model, bias=bias)
        nn.init.zeros_(self.linear.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[..., d] -> [..., d]``."""
        return x + nn.functional.silu(self.linear(x))


class MedusaHeads(nn.Module):
    """``num_heads`` Medusa heads of ``num_layers`` ResBlocks each (see the module docstring).

    Args:
        d_model: the base model's hidden size ``d``.
        vocab_size: ``V``; may be None when ``own_projection`` is False (the heads then use
            the base's ``lm_head``, whose size the base decides).
        num_heads: Medusa heads (``h - 1``), ``>= 1``.
        num_layers: ResBlocks per head (``L >= 1``).
        own_projection: give each head its own ``[V, d]`` projection (Medusa-1/2 files, vLLM);
            False reuses the base model's ``lm_head`` (Medusa "version 2"), passed to
            :meth:`logits`.
        bias: the ResBlocks' linear layers have a bias (Medusa: always; vLLM: only with
            ``medusa_fc_bias``).
        tie_layers: each head applies ONE block ``num_layers`` times, as Medusa's own code
            does (see the module docstring).

    Shapes: :meth:`forward` maps ``[..., d]`` to ``[..., n, d]`` (pre-projection states of
    the first ``n`` heads); :meth:`logits` maps those to ``[..., n, V]``.

    Raises:
        ModelError: on a non-positive size, or ``own_projection`` without ``vocab_size``.
    """

    def __init__(
        self,
        d_model: int,
        vocab_size: int | None,
        num_heads: int,
        num_layers: int = 1,
        own_projection: bool = False,
        *,
        bias: bool = True,
        tie_layers: bool = False,
    ) -> None:
        super().__init__()
        for name, value in (("d_model", d_model), ("num_heads", num_heads),
                            ("num_layers", num_layers)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ModelError(f"MedusaHeads: {name} must be an integer >= 1, got {value!r}")
        if own_projection and (not isinstance(vocab_size, int) or vocab_size < 1):
            raise ModelError(
                f"MedusaHeads: own_projection=True needs vocab_size (an integer >= 1), got "
                f"{vocab_size!r}"
            )
        self.d_model = d_model
        self.vocab_size = vocab_size
        self.num_heads = num_heads
        self.num_layers = num_layers
        self.own_projection = own_projection
        self.bias = bias
        self.tie_layers = tie_layers

        def head() -> nn.Sequential:
            if tie_layers:
                block = ResBlock(d_model, bias)
                return nn.Sequential(*([block] * num_layers))  # one module, applied L times
            return nn.Sequential(*(ResBlock(d_model, bias) for _ in range(num_layers)))

        self.blocks = nn.ModuleList(head() for _ in range(num_heads))
        self.projections = (
            nn.ModuleList(
                nn.Linear(d_model, vocab_size, bias=False)  # type: ignore[arg-type]
                for _ in range(num_heads)
            )
            if own_projection
            else None
        )

    def block(self, head: int, layer: int) -> ResBlock:
        """The ResBlock of Medusa head ``head`` (0-based) at depth ``layer`` (0-based)."""
        sequence = self.blocks[head]
        assert isinstance(sequence, nn.Sequential)
        module = sequence[layer]
        assert isinstance(module, ResBlock)
        return module

    def projection(self, head: int) -> nn.Linear:
        """Medusa head ``head``'s own ``[V, d]`` projection.

        Raises:
            ModelError: the heads share the base ``lm_head``.
        """
        if self.projections is None:
            raise ModelError("these heads share the base lm_head; they have no projection")
        module = self.projections[head]
        assert isinstance(module, nn.Linear)
        return module

    def forward(self, hidden: torch.Tensor, heads: int | None = None) -> torch.Tensor:
        """``hidden [..., d]`` -> ``[..., n, d]``, the states of Medusa heads ``0 .. n-1``
        (``n = heads``, default all)."""
        n = self.num_heads if heads is None else heads
        if not 0 <= n <= self.num_heads:
            raise ModelError(f"heads must lie in [0, {self.num_heads}], got {n}")
        if n == 0:
            return hidden.new_zeros(*hidden.shape[:-1], 0, hidden.shape[-1])  # (..., 0, d)
        return torch.stack([self.blocks[j](hidden) for j in range(n)], dim=-2)  # (..., n, d)

    def logits(self, states: torch.Tensor, lm_head: nn.Module | None = None) -> torch.Tensor:
        """``states [..., n, d]`` of heads ``0 .. n-1`` -> raw logits ``[..., n, V]``.

        Raises:
            ModelError: the heads share the base ``lm_head`` and none was passed.
        """
        if self.projections is None:
            if lm_head is None:
                raise ModelError("these heads share the base lm_head: pass it as lm_head")
            return lm_head(states)  # type: ignore[no-any-return]  # (..., n, V)
        return torch.stack(
            [self.projections[j](states[..., j, :]) for j in range(states.shape[-2])], dim=-2
        )  # (..., n, V)

    def extra_repr(self) -> str:
        return (f"num_heads={self.num_heads}, num_layers={self.num_layers}, "
                f"own_projection={self.own_projection}, bias={self.bias}, "
                f"tie_layers={self.tie_layers}")
