"""The reference blockwise parallel transformer (Stern et al. 2018) and the small rescoring LM.

A decoder-only pre-LayerNorm transformer with rotary position embeddings (RoPE). On top of the
final (normed) hidden state ``x`` sit ``h`` prediction heads (docs/definitions.md sec. 1):

    head 1:        z^1 = W_E x                         the base LM's next-token head
    head i >= 2:   z^i = W_E (x + FFN_i(x))            Stern sec. 6: one hidden layer, residual

where ``W_E`` is the input embedding matrix (tied vocabulary projection). Head ``i`` at
position ``t`` predicts the token at ``t + i``. ``FFN_i``'s output layer starts at zero, so an
untrained extra head copies head 1 (as in Medusa), a sensible start for training the heads on
a frozen base.

Public surface:
    BlockwiseLM(config, device=None)
        .heads_logits(input_ids, past=None, last_only=False)
            -> (logits [B, T, h, V], KVCache)     raw logits; ``log_softmax`` gives nats
        .hidden(...) -> (x [B, T, d], KVCache);  .head_states(x) -> [..., h, d];
        .project(states) -> [..., V]             the pieces, for training
    RescorerLM(config, device=None)              the same network with ``h = 1``
        .logits(input_ids, past=None, ...) -> (logits [B, T, V], KVCache)

Incremental decoding: pass the returned cache as ``past``; position ids continue from the
cache (a token tree passes its own, and its ancestor mask: ``position_ids``, ``tree_mask``,
docs/definitions.md sec. 11). A batch-1 ``past`` under a ``B``-row input is broadcast (the
verifier's ``p`` drafts on one prefix). Every position is a real token: there is no padding.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
import torch.nn.functional as F  # noqa: N812 - the PyTorch convention
from torch import nn

from blockdraft.models.cache import KVCache
from blockdraft.models.capabilities import Capabilities
from blockdraft.models.config import BlockwiseConfig
from blockdraft.models.errors import ModelError
from blockdraft.models.factored import FactoredHeadsLM
from blockdraft.models.step import check_step


def rope_tables(config: BlockwiseConfig, device: torch.device | str | None = None,
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE ``cos`` and ``sin`` tables, float32 ``[max_seq_len, head_dim // 2]`` each."""
    half = config.head_dim // 2
    inv_freq = 1.0 / (config.rope_base ** (torch.arange(half, dtype=torch.float64,
                                                          device=device) / half))
    pos = torch.arange(config.max_seq_len, dtype=torch.float64, device=device)
    angles = torch.outer(pos, inv_freq)  # (max_seq_len, hs/2)
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs ``(x[..., j], x[..., j + hs/2])`` of ``x [B, nh, T, hs]`` by the angles of
    ``cos``/``sin`` ``[B or 1, 1, T, hs/2]`` (GPT-NeoX layout)."""
    x1, x2 = x.chunk(2, dim=-1)  # (B, nh, T, hs/2) each
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)  # (B, nh, T, hs)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with RoPE and a key/value cache."""

    def __init__(self, config: BlockwiseConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.head_dim = config.head_dim
        self.dropout = config.dropout
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model, bias=False)
        self.proj = nn.Linear(config.d_model, config.d_model, bias=False)
        self.resid_drop = nn.Dropout(config.dropout)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        past_k: torch.Tensor | None,
        past_v: torch.Tensor | None,
        attn_mask: torch.Tensor | None,
        is_causal: bool,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``x [B, T, d]`` -> (output ``[B, T, d]``, keys and values ``[B, nh, T_past+T, hs]``)."""
        B, T, C = x.shape  # noqa: N806 - shape names as in the papers
        q, k, v = self.qkv(x).split(C, dim=2)  # (B, T, d) each
        q = q.view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # (B, nh, T, hs)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        if past_k is not None and past_v is not None:
            k = torch.cat((past_k, k), dim=2)  # (B, nh, T_past + T, hs)
            v = torch.cat((past_v, v), dim=2)  # (B, nh, T_past + T, hs)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, is_causal=is_causal,
            dropout_p=self.dropout if self.training else 0.0,
        )  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, d)
        return self.resid_drop(self.proj(y)), k, v


class MLP(nn.Module):
    """The block's feed-forward layer: ``d -> d_ff -> d`` with GELU."""

    def __init__(self, config: BlockwiseConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(config.d_model, config.d_ff, bias=False)
        self.proj = nn.Linear(config.d_ff, config.d_model, bias=False)
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[..., d] -> [..., d]``."""
        return self.drop(self.proj(F.gelu(self.fc(x))))


class Block(nn.Module):
    """Pre-LN transformer block: ``x + attn(ln(x))``, then ``x + mlp(ln(x))``."""

    def __init__(self, config: BlockwiseConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.d_model)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.d_model)
        self.mlp = MLP(config)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        past_k: torch.Tensor | None,
        past_v: torch.Tensor | None,
        attn_mask: torch.Tensor | None,
        is_causal: bool,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``x [B, T, d]`` -> (``[B, T, d]``, this layer's keys and values)."""
        a, k, v = self.attn(self.ln_1(x), cos, sin, past_k, past_v, attn_mask, is_causal)
        x = x + a
        x = x + self.mlp(self.ln_2(x))
        return x, k, v


class ResidualFFN(nn.Module):
    """An extra head's transform (Stern sec. 6): ``x + W_2 gelu(W_1 x + b_1) + b_2``.

    ``W_2`` and ``b_2`` start at zero, so the head starts as a copy of head 1.
    """

    def __init__(self, config: BlockwiseConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(config.d_model, config.head_hidden)
        self.out = nn.Linear(config.head_hidden, config.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[..., d] -> [..., d]``."""
        return x + self.out(F.gelu(self.fc(x)))


class Transformer(nn.Module):
    """The base LM's body: token embedding, blocks, final LayerNorm (no forward of its own;
    :meth:`BlockwiseLM.hidden` runs it with the cache)."""

    def __init__(self, config: BlockwiseConfig) -> None:
        super().__init__()
        self.wte = nn.Embedding(config.vocab_size, config.d_model)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.d_model)


class BlockwiseLM(FactoredHeadsLM, nn.Module):
    """A decoder-only transformer with ``h`` prediction heads (docs/definitions.md sec. 1).

    Args:
        config: the sizes (see :class:`BlockwiseConfig`).
        device: where to build the parameters (default: the CPU / torch's default device).
    """

    kind: ClassVar[str] = "blockwise"
    tokenizer: Any = None
    """The tokenizer the model was trained with, when the loader attached one (None: it is kept
    beside the checkpoint, :func:`~blockdraft.models.load_tokenizer`)."""
    heads_digest: str = ""
    """The heads' identity when they come apart from the model (a Hugging Face model's Medusa
    heads); empty: the heads are the checkpoint's own, named by the checkpoint."""
    rope_cos: torch.Tensor
    rope_sin: torch.Tensor

    def __init__(self, config: BlockwiseConfig, device: torch.device | str | None = None) -> None:
        super().__init__()
        if not isinstance(config, BlockwiseConfig):
            raise ModelError(f"config must be a BlockwiseConfig, got {type(config).__name__}")
        self.config = config
        with torch.device(device if device is not None else "cpu"):
            self.transformer = Transformer(config)
            self.extra_heads = nn.ModuleList(ResidualFFN(config) for _ in range(config.h - 1))
            self.lm_head = (
                None if config.tie_embeddings
                else nn.Linear(config.d_model, config.vocab_size, bias=False)
            )
            cos, sin = rope_tables(config)
        self.register_buffer("rope_cos", cos, persistent=False)  # (max_seq_len, hs/2)
        self.register_buffer("rope_sin", sin, persistent=False)  # (max_seq_len, hs/2)
        self._init_weights()

    def _init_weights(self) -> None:
        """GPT-2 initialisation: N(0, 0.02), residual projections scaled by 1/sqrt(2 n_layer),
        extra heads' output layers at zero."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
        for name, p in self.transformer.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * self.config.n_layer))
        for head in self.extra_heads:
            assert isinstance(head, ResidualFFN)
            nn.init.zeros_(head.out.weight)
            nn.init.zeros_(head.out.bias)

    # ---- properties --------------------------------------------------------------------------

    @property
    def h(self) -> int:
        """Prediction heads (head 1 included)."""
        return self.config.h

    @property
    def device(self) -> torch.device:
        """Where the parameters live."""
        return self.transformer.wte.weight.device

    @property
    def capabilities(self) -> Capabilities:
        """What the model can do (:class:`~blockdraft.models.capabilities.Capabilities`): BPD
        heads on one shared state (a sausage lattice), PyTorch eager in its parameters' dtype."""
        return Capabilities(
            heads="medusa" if self.config.h > 1 else "none", h=self.config.h,
            vocab_size=self.config.vocab_size, max_seq_len=self.config.max_seq_len,
            runtime="torch", precision=str(self.transformer.wte.weight.dtype).removeprefix(
                "torch."), factored=True, head_topk=True, last_only=True,
            device=self.device.type, name=type(self).__name__)

    def num_parameters(self, trainable_only: bool = False) -> int:
        """Parameter count (tied weights counted once)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)

    def base_parameters(self) -> list[nn.Parameter]:
        """The base LM's parameters: embeddings, blocks, final norm (and an untied head 1)."""
        params = list(self.transformer.parameters())
        if self.lm_head is not None:
            params += list(self.lm_head.parameters())
        return params

    def head_parameters(self) -> list[nn.Parameter]:
        """The extra heads' parameters (their residual FFNs; the projection is the base's)."""
        return list(self.extra_heads.parameters())

    # ---- the forward pass, in pieces ---------------------------------------------------------

    def _check_past(self, past: Any) -> None:
        """Refuse a :class:`KVCache` of another model's layers (its kind is checked with the
        rest of the step)."""
        if isinstance(past, KVCache) and (
                past.n_layer != self.config.n_layer or past.keys[0].shape[1] != self.config.n_head
                or past.keys[0].shape[3] != self.config.head_dim):
            raise ModelError(
                f"past has {past.n_layer} layers of {tuple(past.keys[0].shape)}; this model "
                f"needs {self.config.n_layer} layers of [B, {self.config.n_head}, T, "
                f"{self.config.head_dim}] (was it made by another model?)"
            )

    def hidden(
        self,
        input_ids: torch.Tensor,
        past: KVCache | None = None,
        position_ids: torch.Tensor | None = None,
        tree_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, KVCache]:
        """The final, normed hidden states.

        Args:
            input_ids: int ``[B, T]`` token ids, on the model's device.
            past: the cache of the preceding positions (batch ``B`` or 1), or None.
            position_ids: int ``[T]`` or ``[B, T]`` positions of the new tokens; default
                ``T_past + arange(T)``. A token tree passes ``T_past + depths``
                (docs/definitions.md sec. 11).
            tree_mask: bool ``[T, T]``: ``tree_mask[u, v]`` lets new token ``u`` attend to new
                token ``v`` (a tree's ancestor mask, itself included); every new token also
                attends to the whole prefix. Default: causal. With both defaults the forward
                is the plain causal one, unchanged; otherwise its boolean attention mask is
                the step's (:meth:`Step.allowed <blockdraft.models.step.Step.allowed>`) and
                the context check is on the largest position, not on the cache length (a tree
                of ``N`` nodes reaches only ``T_past + max depth``).

        Returns:
            ``x`` float ``[B, T, d]`` and the cache of all ``T_past + T`` positions.

        Raises:
            ModelError: on bad ids (empty, wrong dtype/shape/device, outside the vocabulary),
                a sequence longer than ``max_seq_len``, or a cache that does not fit.
        """
        self._check_past(past)
        step = check_step(input_ids, past, position_ids, tree_mask, cache=KVCache,
                          vocab_size=self.config.vocab_size, device=self.device,
                          max_seq_len=self.config.max_seq_len)
        if position_ids is not None or tree_mask is not None:  # a token tree: its mask
            return self._run_blocks(step.ids, step.past, step.positions, step.allowed(), False)
        t, t_past = step.length, step.t_past
        attn_mask: torch.Tensor | None = None
        is_causal = False
        if t_past == 0:  # a chain at the next positions: the causal kernels
            is_causal = bool(t > 1)
        elif t > 1:
            attn_mask = torch.ones(t, t_past + t, dtype=torch.bool,
                                   device=step.ids.device).tril(t_past)  # (T, Tk)
        return self._run_blocks(step.ids, step.past, step.positions, attn_mask, is_causal)

    def _run_blocks(
        self,
        input_ids: torch.Tensor,
        past: KVCache | None,
        positions: torch.Tensor,
        attn_mask: torch.Tensor | None,
        is_causal: bool,
    ) -> tuple[torch.Tensor, KVCache]:
        """The body on checked inputs: ``positions [1 or B, T]``, ``attn_mask [T, Tk]``."""
        cos = self.rope_cos[positions][:, None]  # (1, 1, T, hs/2)
        sin = self.rope_sin[positions][:, None]  # (1, 1, T, hs/2)
        x = self.transformer.drop(self.transformer.wte(input_ids))  # (B, T, d)
        keys: list[torch.Tensor] = []
        values: list[torch.Tensor] = []
        for i, block in enumerate(self.transformer.blocks):
            pk = None if past is None else past.keys[i]
            pv = None if past is None else past.values[i]
            x, k, v = block(x, cos, sin, pk, pv, attn_mask, is_causal)
            keys.append(k)
            values.append(v)
        x = self.transformer.ln_f(x)  # (B, T, d)
        return x, KVCache(keys=tuple(keys), values=tuple(values))

    def head_states(self, x: torch.Tensor, heads: int | None = None) -> torch.Tensor:
        """The pre-projection state of each head: ``[..., d] -> [..., heads, d]``.

        Head 1's state is ``x`` itself; head ``i >= 2``'s is ``x + FFN_i(x)``. ``heads``
        (default ``h``) keeps heads ``1..heads``.
        """
        n = self.config.h if heads is None else heads
        if n > 1 and not torch.is_grad_enabled():  # inference: all heads in two matmuls
            return torch.cat((x.unsqueeze(-2), self._fused_extra_heads(x, n - 1)), dim=-2)
        states = [x] + [ffn(x) for ffn in list(self.extra_heads)[: n - 1]]
        return torch.stack(states, dim=-2)  # (..., heads, d)

    def _fused_extra_heads(self, x: torch.Tensor, n: int) -> torch.Tensor:
        """Heads 2..n+1 at once: ``[..., d] -> [..., n, d]``, the same function as the
        :class:`ResidualFFN` modules, as one matmul into all heads' hidden layers and one
        batched matmul out (a BPD step projects 8 heads at one position: one call each would
        cost more in overhead than in arithmetic). Inference only (no autograd).
        """
        w1, b1, w2, b2 = self._stacked_head_weights()  # (H*f, d), (H*f,), (H, d, f), (H, d)
        f = w1.shape[0] // w2.shape[0]
        u = F.gelu(F.linear(x, w1[: n * f], b1[: n * f]))  # (..., n*f)
        u = u.reshape(-1, n, f).transpose(0, 1)  # (n, M, f)
        y = torch.baddbmm(b2[:n, None, :], u, w2[:n].transpose(1, 2))  # (n, M, d)
        y = y.transpose(0, 1).reshape(*x.shape[:-1], n, x.shape[-1])  # (..., n, d)
        return x.unsqueeze(-2) + y

    def _stacked_head_weights(
        self,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The extra heads' weights stacked for :meth:`_fused_extra_heads`, rebuilt whenever a
        parameter is replaced or modified in place (training, ``load_state_dict``, ``.to``)."""
        key = tuple(  # every parameter's storage and in-place version (cheap: no recursion)
            (q.data_ptr(), q._version) for ffn in self.extra_heads._modules.values()
            if ffn is not None for sub in ffn._modules.values() if sub is not None
            for q in sub._parameters.values() if q is not None
        )
        cached = self.__dict__.get("_head_stack")
        if cached is None or cached[0] != key:
            ffns = [ffn for ffn in self.extra_heads if isinstance(ffn, ResidualFFN)]
            stack = (
                torch.cat([ffn.fc.weight for ffn in ffns]).detach(),  # (H*f, d)
                torch.cat([ffn.fc.bias for ffn in ffns]).detach(),  # (H*f,)
                torch.stack([ffn.out.weight for ffn in ffns]).detach(),  # (H, d, f)
                torch.stack([ffn.out.bias for ffn in ffns]).detach(),  # (H, d)
            )
            cached = (key, stack)
            self.__dict__["_head_stack"] = cached
        w1, b1, w2, b2 = cached[1]
        return w1, b1, w2, b2

    def extra_head_states(self, x: torch.Tensor) -> torch.Tensor:
        """Heads 2..h only: ``[..., d] -> [..., h - 1, d]`` (empty when ``h == 1``)."""
        if self.config.h == 1:
            return x.new_zeros(*x.shape[:-1], 0, x.shape[-1])
        if not torch.is_grad_enabled():
            return self._fused_extra_heads(x, self.config.h - 1)  # (..., h-1, d)
        return torch.stack([ffn(x) for ffn in self.extra_heads], dim=-2)  # (..., h-1, d)

    def project(self, states: torch.Tensor) -> torch.Tensor:
        """The vocabulary projection: ``[..., d] -> [..., V]`` raw logits."""
        if self.lm_head is not None:
            return self.lm_head(states)  # type: ignore[no-any-return]
        return F.linear(states, self.transformer.wte.weight)



class RescorerLM(BlockwiseLM):
    """A small autoregressive LM for local neural rescoring (Kim Alg. 2): ``h = 1``.

    Args:
        config: sizes with ``h == 1`` (e.g. ``BlockwiseConfig.tiny(h=1)``).
        device: where to build the parameters.

    Raises:
        ModelError: when ``config.h != 1``.
    """

    kind: ClassVar[str] = "rescorer"

    def __init__(self, config: BlockwiseConfig, device: torch.device | str | None = None) -> None:
        if isinstance(config, BlockwiseConfig) and config.h != 1:
            raise ModelError(
                f"a RescorerLM has one head, got h = {config.h}; use dataclasses.replace(config, "
                "h=1) or BlockwiseLM for a model with extra heads"
            )
        super().__init__(config, device)

    def logits(
        self,
        input_ids: torch.Tensor,
        past: KVCache | None = None,
        last_only: bool = False,
    ) -> tuple[torch.Tensor, KVCache]:
        """Next-token raw logits ``[B, T, V]`` (position ``t`` predicts ``t + 1``) and the cache.

        Same arguments and errors as :meth:`BlockwiseLM.heads_logits`.
        """
        x, cache = self.hidden(input_ids, past)  # (B, T, d)
        if last_only:
            x = x[:, -1:]  # (B, 1, d)
        return self.project(x), cache  # (B, T, V)
