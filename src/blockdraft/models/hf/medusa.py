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
    heads.set_shortlist(token_ids) / heads.shortlist                 the heads' draft vocabulary
    heads.use_recipe(recipe)      a folder's drafting recipe and the draft precision it sets

Shortlist (a draft vocabulary, FR-Spec's frequency-ranked subset). Heads that share the base's
``lm_head`` may project onto a subset of the vocabulary only: ``shortlist`` holds its token
ids (int64 ``[Vs]``, sorted ascending, distinct), and :meth:`logits` then gives ``-inf`` to
every other token, so such a token never gets an arc in a lattice and a head's log-probs are
normalised over the shortlist. The base head (head 1) always projects onto the whole
vocabulary: verification stays exact. A runtime computes the same thing from the ``[Vs, d]``
rows of ``lm_head`` alone (:meth:`shortlist_weight`), which is the point: ``Vs / V`` of the
projection's multiply-adds and memory reads.

Tied layers. Medusa's own code builds a head as ``nn.Sequential(*([ResBlock(d)] * L), ...)``:
ONE block listed ``L`` times, applied ``L`` times with the same weights, and its files repeat
the same tensors under every layer index. ``tie_layers=True`` reproduces exactly that (the
block is one module, so training keeps the copies equal); ``tie_layers=False`` gives every
layer its own block (TGI, vLLM). With ``L = 1`` the two are the same.
"""

from __future__ import annotations

from typing import Any, ClassVar

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

    kind: ClassVar[str] = "medusa"
    """The heads' kind (:data:`~blockdraft.models.capabilities.HEAD_KINDS`): which rule of
    :mod:`blockdraft.models.heads` drafts with them."""

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
        self.shortlist: torch.Tensor | None = None  # int64 [Vs], sorted; see set_shortlist
        self.shortlist_info: dict[str, Any] = {}  # what it was counted on (its file's record)
        self.drafting: Any = None  # the folder's DraftingRecipe, if it packages one
        self.draft_precision = "float32"  # weights on ONNX Runtime (heads.draft_precision)
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

    def use_recipe(self, recipe: Any) -> None:
        """Draft with a folder's drafting recipe (a
        :class:`~blockdraft.models.hf.drafting.DraftingRecipe`, or None: no recipe), and run the
        heads' weights on ONNX Runtime in the precision it names (``draft_precision``; float32
        without one)."""
        self.drafting = recipe
        self.draft_precision = "float32" if recipe is None else recipe.draft_precision

    def set_shortlist(self, token_ids: torch.Tensor | None, vocab_size: int | None = None,
                      info: dict[str, Any] | None = None) -> None:
        """Draft over ``token_ids`` only (see the module docstring); None drafts over the whole
        vocabulary again.

        Args:
            token_ids: int ``[Vs]`` distinct token ids, any order (kept sorted ascending).
            vocab_size: the base's ``V``, when known: every id must lie in ``[0, V)``.
            info: what the shortlist was counted on (kept with it, written beside it).

        Raises:
            ModelError: heads with their own projections, an empty or non-integer list, a
                repeated id, or an id outside the vocabulary.
        """
        if token_ids is None:
            self.shortlist, self.shortlist_info = None, {}
            return
        if self.projections is not None:
            raise ModelError("a shortlist applies to heads that share the base lm_head; these "
                             "heads have their own projections")
        ids = torch.as_tensor(token_ids)
        if ids.dim() != 1 or ids.numel() == 0 or ids.dtype.is_floating_point or (
                ids.dtype == torch.bool):
            raise ModelError(f"a shortlist must be a non-empty 1-D list of token ids, got "
                             f"{tuple(ids.shape)} {ids.dtype}")
        ids = torch.sort(ids.to(torch.int64).cpu()).values
        if bool((ids[1:] == ids[:-1]).any()):
            raise ModelError("a shortlist must not repeat a token id")
        hi = vocab_size if vocab_size is not None else self.vocab_size
        if int(ids[0]) < 0 or (hi is not None and int(ids[-1]) >= hi):
            raise ModelError(f"shortlist ids must lie in [0, {hi}), got {int(ids[0])}.."
                             f"{int(ids[-1])}")
        self.shortlist, self.shortlist_info = ids, dict(info or {})

    def shortlist_weight(self, lm_head: nn.Linear) -> torch.Tensor:
        """The shortlist's rows of ``lm_head``: ``[Vs, d]`` (the whole ``[V, d]`` without a
        shortlist)."""
        weight = lm_head.weight
        if self.shortlist is None:
            return weight
        return weight[self.shortlist.to(weight.device)]

    def logits(self, states: torch.Tensor, lm_head: nn.Module | None = None) -> torch.Tensor:
        """``states [..., n, d]`` of heads ``0 .. n-1`` -> raw logits ``[..., n, V]``
        (``-inf`` outside the shortlist, when there is one).

        Raises:
            ModelError: the heads share the base ``lm_head`` and none was passed.
        """
        if self.projections is None:
            if lm_head is None:
                raise ModelError("these heads share the base lm_head: pass it as lm_head")
            out = lm_head(states)  # (..., n, V)
            if self.shortlist is not None:
                keep = torch.zeros(out.shape[-1], dtype=torch.bool, device=out.device)
                keep[self.shortlist.to(out.device)] = True
                out = out.masked_fill(~keep, float("-inf"))
            return out  # type: ignore[no-any-return]
        return torch.stack(
            [self.projections[j](states[..., j, :]) for j in range(states.shape[-2])], dim=-2
        )  # (..., n, V)

    def extra_repr(self) -> str:
        return (f"num_heads={self.num_heads}, num_layers={self.num_layers}, "
                f"own_projection={self.own_projection}, bias={self.bias}, "
                f"tie_layers={self.tie_layers}"
                + ("" if self.shortlist is None else f", shortlist={self.shortlist.numel()}@"
                   f"{shortlist_digest(self.shortlist)}")
                + ("" if self.draft_precision == "float32"
                   else f", draft_precision={self.draft_precision}"))


def shortlist_digest(token_ids: torch.Tensor) -> str:
    """12 hex digits of the SHA-256 of a shortlist's sorted int64 ids (in ``extra_repr``, so
    caches keyed by the heads' description change with the shortlist's content)."""
    import hashlib

    raw = torch.as_tensor(token_ids, dtype=torch.int64).cpu().contiguous().numpy().tobytes()
    return hashlib.sha256(raw).hexdigest()[:12]
