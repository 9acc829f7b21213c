"""`EagleLayer`: an EAGLE-style draft layer, one decoder layer of the base's own block shape.

EAGLE (Li et al. 2024) drafts with one decoder layer that runs autoregressively beside the
base, with its own KV cache. At position ``p`` it reads a *feature* of the base at ``p`` and
the embedding of the token that follows ``p``, ``w_{p+1}``, and predicts ``w_{p+2}``; its output
feature is the next position's input feature when it drafts on alone:

    x_p   = fc([feature_norm(f_p) ; embed_norm(E[w_{p+1}])])          2d -> d
    h_p   = x_p + Attn(input_norm(x_p))       GQA, RoPE at position p, its own KV cache
    a_p   = h_p + MLP(post_norm(h_p))         SwiGLU
    logits_p = head_norm(a_p) @ E_s^T         over the shortlist's rows E_s, frozen

``E`` is the base's input embedding (frozen, not stored with the layer), ``E_s`` its output
projection's rows of the shortlist (the draft vocabulary, sorted base ids: logit ``i`` is token
``shortlist[i]``). The sizes (``d``, heads, KV heads, head size, MLP width, RMSNorm epsilon,
RoPE theta) are the base's (:meth:`EagleConfig.from_base`). The base feature ``f_p`` is
(``fusion``):

- ``"top"`` (EAGLE-1): the base's final hidden state at ``p``, after its final norm (what
  ``lm_head`` reads; what a distillation set stores). The output ``a_p`` lives in the same
  space (trained to regress the base's next feature), so it goes to the head as it is
  (``head_norm`` off);
- ``"layers"`` (EAGLE-3): the base's residual stream entering decoder layers ``fuse_layers``
  (0-based; HF's ``hidden_states[i]``: low, middle, high; ``L`` is the last layer's output
  before the final norm), each RMS-normalised, fused by ``fuse_proj: 3d -> d``; the output
  has its own RMSNorm before the head (``head_norm`` on).

A call reads base features (width :attr:`EagleConfig.feature_width`, fused here) or, when it
drafts on, the layer's own output features (width ``d``); with ``"top"`` the two are one space.

Positions and the cache. ``positions`` are the base's positions of the features (RoPE angles);
the KV cache is explicit tensors ``(k, v)``, each ``[B, kv_heads, S, head_dim]`` (keys after
RoPE), passed in and returned grown by the call's ``T`` positions: a graph with the cache as
inputs and outputs computes the same thing. By default a call's positions see every cached
entry and the earlier positions of the call (causal); a tree step passes its own ``mask``.

Training-time test (EAGLE-3). :meth:`unroll` runs ``K`` draft steps for every root position
of a sequence at once: step ``k`` at row ``p`` is the ``k``-th drafted position from root
``p - k``, reading the step ``k - 1`` output at row ``p - 1`` and the true token ``w_{p+1}``,
attending to step 0's keys at positions ``<= p - k`` (the root's context) and to the keys of
steps ``1 .. k`` along its own chain: exactly what :meth:`draft_chain` computes one root at a
time with the cache (the tests hold them equal).

Public surface:
    KIND, CAPABILITY_KIND, FUSIONS, EagleConfig      (their home: :mod:`.eagle_config`)
    EagleLayer(config, shortlist=None, shortlist_info=None)      kind "eagle"
        attach(embed [V, d], lm_head [V, d]) -> self   the base's frozen tensors
        fuse(states [..., F]) -> [..., d];   logits(features [..., d]) -> [..., Vs]
        forward(features, tokens, positions, kv=None, mask=None) -> EagleStep
        unroll(features, tokens, positions, steps, project=True) -> [EagleStep (kv None)]
        draft_chain(features, tokens, positions, depth, kv=None, forced=None) -> EagleChain
        token_ids(index) -> base ids
    KV, EagleStep, EagleChain, truncate_kv(kv, length)
    (files: :mod:`.eagle_files`)
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, NamedTuple

import torch
from torch import nn

from blockdraft.models.blockwise import apply_rope
from blockdraft.models.errors import ModelError
from blockdraft.models.heads.eagle_config import CAPABILITY_KIND, FUSIONS, KIND, EagleConfig

__all__ = ["CAPABILITY_KIND", "FUSIONS", "KIND", "KV", "EagleChain", "EagleConfig", "EagleLayer",
           "EagleStep", "RMSNorm", "truncate_kv"]

KV = tuple[torch.Tensor, torch.Tensor]
"""``(k, v)``, each ``[B, kv_heads, S, head_dim]``: the layer's cache of ``S`` positions."""


class RMSNorm(nn.Module):
    """``w * x / rms(x)`` over the last axis (computed in float32, the input's dtype out)."""

    def __init__(self, d: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[..., d] -> [..., d]``."""
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * y.to(x.dtype)


class EagleStep(NamedTuple):
    """One call of the layer: ``logits [B, T, Vs]`` over the shortlist (raw), the output
    ``features [B, T, d]`` (the next draft position's input feature), and the cache grown by
    the call's positions (None from :meth:`EagleLayer.unroll`)."""

    logits: torch.Tensor
    features: torch.Tensor
    kv: KV | None


class EagleChain(NamedTuple):
    """A greedy chain of ``depth`` drafts: ``tokens`` int64 ``[B, depth]`` (base ids),
    ``logits [B, depth, Vs]`` (step ``i``'s, over the shortlist), and the cache: the call's
    ``S + T`` context positions first, then the ``depth - 1`` drafted positions the chain ran
    (:func:`truncate_kv` keeps the context)."""

    tokens: torch.Tensor
    logits: torch.Tensor
    kv: KV


def truncate_kv(kv: KV, length: int) -> KV:
    """The cache's first ``length`` positions."""
    return kv[0][:, :, :length], kv[1][:, :, :length]


def _shift(x: torch.Tensor, by: int, dim: int) -> torch.Tensor:
    """``x`` moved ``by`` places later along ``dim``, zeros in front (row ``p`` holds row
    ``p - by``)."""
    if by == 0:
        return x
    keep = x.narrow(dim, 0, x.shape[dim] - by)
    pad = list(x.shape)
    pad[dim] = by
    return torch.cat((x.new_zeros(pad), keep), dim=dim)


class EagleLayer(nn.Module):
    """The draft layer (see the module docstring).

    Args:
        config: its sizes and fusion.
        shortlist: int ``[Vs]`` distinct base ids, the draft vocabulary (kept sorted); None
            drafts over the whole vocabulary.
        shortlist_info: what the shortlist was counted on (written beside it).

    The base's embedding and output projection are not the layer's parameters: :meth:`attach`
    hands them over (frozen buffers, not saved) before the first call.

    Raises:
        ModelError: a shortlist that is not distinct ids inside the vocabulary.
    """

    kind: ClassVar[str] = KIND
    fuse_norms: nn.ModuleList
    fuse_proj: nn.Linear
    out_norm: RMSNorm
    inv_freq: torch.Tensor
    embed: torch.Tensor | None
    head: torch.Tensor | None

    def __init__(self, config: EagleConfig, shortlist: torch.Tensor | None = None,
                 shortlist_info: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.config = c = config
        d, eps = c.d_model, c.rms_norm_eps
        self.shortlist: torch.Tensor | None = None
        self.shortlist_info: dict[str, Any] = dict(shortlist_info or {})
        if shortlist is not None:
            ids = torch.sort(torch.as_tensor(shortlist).to(torch.int64).cpu().flatten()).values
            if ids.numel() == 0 or bool((ids[1:] == ids[:-1]).any()) or int(ids[0]) < 0 or (
                    int(ids[-1]) >= c.vocab_size):
                span = f" in {int(ids[0])}..{int(ids[-1])}" if ids.numel() else ""
                raise ModelError(f"the shortlist must be distinct ids in [0, {c.vocab_size}), "
                                 f"got {ids.numel()} ids{span}")
            self.shortlist = ids
        if c.fusion == "layers":
            self.fuse_norms = nn.ModuleList(RMSNorm(d, eps) for _ in c.fuse_layers)
            self.fuse_proj = nn.Linear(c.feature_width, d, bias=False)
        self.feature_norm = RMSNorm(d, eps)
        self.embed_norm = RMSNorm(d, eps)
        self.fc = nn.Linear(2 * d, d, bias=False)
        self.input_norm = RMSNorm(d, eps)
        self.q_proj = nn.Linear(d, c.num_heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(d, c.num_kv_heads * c.head_dim, bias=False)
        self.v_proj = nn.Linear(d, c.num_kv_heads * c.head_dim, bias=False)
        self.o_proj = nn.Linear(c.num_heads * c.head_dim, d, bias=False)
        self.post_norm = RMSNorm(d, eps)
        self.gate_proj = nn.Linear(d, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(d, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, d, bias=False)
        if c.head_norm:
            self.out_norm = RMSNorm(d, eps)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=c.initializer_range)
        inv = 1.0 / (c.rope_theta ** (torch.arange(c.head_dim // 2, dtype=torch.float64)
                                      / (c.head_dim // 2)))
        self.register_buffer("inv_freq", inv, persistent=False)
        self.register_buffer("embed", None, persistent=False)
        self.register_buffer("head", None, persistent=False)

    # ------------------------------------------------------------------------ the base's parts

    def attach(self, embed: torch.Tensor, lm_head: torch.Tensor) -> EagleLayer:
        """Take the base's input embedding and output projection (each ``[V, d]``; the same
        tensor when tied): frozen buffers, never saved; the head keeps the shortlist's rows.

        Raises:
            ModelError: a tensor of another shape than ``[V, d]`` of the config.
        """
        want = (self.config.vocab_size, self.config.d_model)
        for name, t in (("embed", embed), ("lm_head", lm_head)):
            if tuple(t.shape) != want:
                raise ModelError(f"the base's {name} has shape {tuple(t.shape)}; this EAGLE layer "
                                 f"was made for [V, d] = {list(want)}: attach the base it was "
                                 "trained on")
        device = self.fc.weight.device
        rows = lm_head.detach() if self.shortlist is None else lm_head.detach()[self.shortlist]
        self.embed = embed.detach().to(device)
        self.head = rows.to(device).contiguous()
        return self

    @property
    def attached(self) -> bool:
        """Whether :meth:`attach` gave the layer the base's tensors."""
        return self.embed is not None and self.head is not None

    def token_ids(self, index: torch.Tensor) -> torch.Tensor:
        """Shortlist positions (the logits' last axis) as base token ids."""
        return index if self.shortlist is None else self.shortlist.to(index.device)[index]

    # --------------------------------------------------------------------------- the pieces

    def fuse(self, states: torch.Tensor) -> torch.Tensor:
        """The base feature the layer reads: ``[..., F] -> [..., d]`` (``"top"``: as it is;
        ``"layers"``: each layer's state RMS-normalised, then ``fuse_proj``).

        Raises:
            ModelError: a width other than :attr:`EagleConfig.feature_width`.
        """
        c = self.config
        if states.shape[-1] != c.feature_width:
            raise ModelError(f"base features have width {states.shape[-1]}; this EAGLE layer "
                             f"(fusion {c.fusion!r}) reads width {c.feature_width}")
        if c.fusion == "top":
            return states
        parts = states.split(c.d_model, dim=-1)
        return self.fuse_proj(torch.cat(  # type: ignore[no-any-return]
            [norm(p) for norm, p in zip(self.fuse_norms, parts, strict=True)], dim=-1))

    def _inputs(self, features: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """``x = fc([feature_norm(f); embed_norm(E[token])])``: ``[B, T, d]``."""
        c = self.config
        if not self.attached:
            raise ModelError("the EAGLE layer has no base embedding yet: call "
                             "layer.attach(embed, lm_head) with the base's tensors")
        width = features.shape[-1]
        if width != c.d_model:
            features = self.fuse(features)
        if tuple(tokens.shape) != tuple(features.shape[:-1]):
            raise ModelError(f"tokens {tuple(tokens.shape)} must match the features' positions "
                             f"{tuple(features.shape[:-1])}")
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= c.vocab_size):
            raise ModelError(f"token ids must lie in [0, {c.vocab_size}), got "
                             f"{int(tokens.min())}..{int(tokens.max())}")
        assert self.embed is not None
        embedded = self.embed[tokens].to(self.fc.weight.dtype)
        feature = features.to(self.fc.weight.dtype)
        return self.fc(torch.cat((self.feature_norm(feature), self.embed_norm(embedded)),
                                 dim=-1))  # type: ignore[no-any-return]

    def _rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``cos``, ``sin`` ``[B, 1, T, head_dim / 2]`` at ``positions [B, T]``."""
        angles = positions.to(torch.float64)[..., None] * self.inv_freq  # (B, T, hd/2)
        dtype = self.fc.weight.dtype
        return angles.cos().to(dtype)[:, None], angles.sin().to(dtype)[:, None]

    def _qkv(self, x: torch.Tensor, positions: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``q [B, H, T, hd]``, ``k``, ``v [B, Hkv, T, hd]`` (``q``, ``k`` rotated)."""
        c = self.config
        b, t, _ = x.shape
        h = self.input_norm(x)
        q = self.q_proj(h).view(b, t, c.num_heads, c.head_dim).transpose(1, 2)
        k = self.k_proj(h).view(b, t, c.num_kv_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(h).view(b, t, c.num_kv_heads, c.head_dim).transpose(1, 2)
        cos, sin = self._rope(positions)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def _grouped(self, kv: torch.Tensor) -> torch.Tensor:
        """``[B, Hkv, S, hd] -> [B, H, S, hd]`` (each KV head serves its group of heads)."""
        return kv.repeat_interleave(self.config.num_heads // self.config.num_kv_heads, dim=1)

    def _finish(self, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """The block after attention: ``[B, H, T, hd]`` attended values -> output ``[B, T, d]``."""
        b, _, t, _ = attended.shape
        h = x + self.o_proj(attended.transpose(1, 2).reshape(b, t, -1))
        m = self.post_norm(h)
        return h + self.down_proj(  # type: ignore[no-any-return]
            nn.functional.silu(self.gate_proj(m)) * self.up_proj(m))

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        """The head: ``[..., d]`` output features -> ``[..., Vs]`` raw logits over the
        shortlist (the base's rows, frozen)."""
        if self.head is None:
            raise ModelError("the EAGLE layer has no head yet: call layer.attach(embed, lm_head)")
        out = self.out_norm(features) if self.config.head_norm else features
        return out @ self.head.to(out.dtype).T  # type: ignore[no-any-return]

    # ----------------------------------------------------------------------------- the calls

    def forward(self, features: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor,
                kv: KV | None = None, mask: torch.Tensor | None = None) -> EagleStep:
        """``T`` new positions after ``S`` cached ones.

        Args:
            features: ``[B, T, F]`` base features (fused here) or ``[B, T, d]`` fused ones or
                the layer's own output features.
            tokens: int64 ``[B, T]``: the token that follows each position (base ids).
            positions: int64 ``[B, T]``: the positions (RoPE).
            kv: the cache ``(k, v)`` of ``S`` positions, or None (``S = 0``).
            mask: bool ``[B or 1, T, S + T]``: which entries (cache, then the call's) each new
                position attends to; default every cached one and the causal ones of the call.

        Returns:
            :class:`EagleStep` (``kv`` of ``S + T`` positions).

        Raises:
            ModelError: features of another width, tokens or a cache or mask that do not fit.
        """
        if features.dim() != 3 or positions.shape != features.shape[:2]:
            raise ModelError(f"features must be [B, T, F] with positions [B, T], got "
                             f"{tuple(features.shape)} and {tuple(positions.shape)}")
        x = self._inputs(features, tokens)
        q, k, v = self._qkv(x, positions)
        t = q.shape[2]
        if kv is not None:
            if kv[0].shape[:2] != k.shape[:2] or kv[0].shape[3] != k.shape[3]:
                raise ModelError(f"the cache has shape {tuple(kv[0].shape)}; this call needs "
                                 f"[B, kv_heads, S, head_dim] = [{k.shape[0]}, {k.shape[1]}, S, "
                                 f"{k.shape[3]}]")
            k = torch.cat((kv[0].to(k.dtype), k), dim=2)
            v = torch.cat((kv[1].to(v.dtype), v), dim=2)
        s = k.shape[2]
        if mask is None:
            mask = (torch.arange(s, device=q.device)[None, :]
                    <= torch.arange(t, device=q.device)[:, None] + (s - t))[None]  # (1, T, S+T)
        elif mask.dim() != 3 or mask.shape[1:] != (t, s):
            raise ModelError(f"mask must be bool [B or 1, T, S + T] = [B, {t}, {s}], got "
                             f"{tuple(mask.shape)}")
        scores = (q @ self._grouped(k).transpose(-1, -2)) / math.sqrt(self.config.head_dim)
        scores = scores.float().masked_fill(~mask[:, None], float("-inf"))
        attended = torch.softmax(scores, dim=-1).to(v.dtype) @ self._grouped(v)
        out = self._finish(x, attended)
        return EagleStep(self.logits(out), out, (k, v))

    def unroll(self, features: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor,
               steps: int, project: bool = True) -> list[EagleStep]:
        """Training-time test: ``steps`` draft steps from every root of whole sequences.

        Step ``k``'s row ``p`` is the ``k``-th drafted position from the root ``p - k``
        (see the module docstring): its logits predict the token after ``tokens[p]``, as
        step 0's do; rows ``p < k`` have no root (their values are finite, not meaningful).

        Args:
            features: ``[B, T, F]`` base features along the sequences (or fused ``[B, T, d]``).
            tokens: int64 ``[B, T]``: the true token after each position.
            positions: int64 ``[B, T]``.
            steps: ``K >= 1``.
            project: compute the logits (False: each step's ``logits`` are ``[B, T, 0]``,
                for a caller that projects the rows it scores, :meth:`logits`).

        Returns:
            ``K`` :class:`EagleStep` records (``kv`` None).
        """
        if features.dim() != 3 or positions.shape != features.shape[:2]:
            raise ModelError(f"features must be [B, T, F] with positions [B, T], got "
                             f"{tuple(features.shape)} and {tuple(positions.shape)}")
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ModelError(f"steps must be an integer >= 1, got {steps!r}")
        t = features.shape[1]
        rows = torch.arange(t, device=features.device)
        scale = 1.0 / math.sqrt(self.config.head_dim)
        keys: list[torch.Tensor] = []
        values: list[torch.Tensor] = []
        out: list[EagleStep] = []
        feature = features
        for k in range(steps):
            x = self._inputs(feature, tokens)
            q, key, value = self._qkv(x, positions)
            keys.append(self._grouped(key))
            values.append(self._grouped(value))
            # the root's context: step 0's keys at positions <= p - k
            context = (q @ keys[0].transpose(-1, -2)).float() * scale  # (B, H, T, T)
            context = context.masked_fill(rows[None, :] > rows[:, None] - k, float("-inf"))
            chain_keys = [_shift(keys[j], k - j, 2) for j in range(1, k + 1)]
            chain_values = [_shift(values[j], k - j, 2) for j in range(1, k + 1)]
            chain = [((q * kj).sum(-1, keepdim=True).float() * scale).masked_fill(
                (rows < k - j)[:, None], float("-inf"))
                for j, kj in zip(range(1, k + 1), chain_keys, strict=True)]  # (B, H, T, 1)
            probs = torch.softmax(torch.cat([context, *chain], dim=-1), dim=-1).to(q.dtype)
            attended = probs[..., :t] @ values[0]
            for j, vj in enumerate(chain_values):
                attended = attended + probs[..., t + j:t + j + 1] * vj
            step_out = self._finish(x, attended)
            logits = self.logits(step_out) if project else step_out.new_zeros(
                (*step_out.shape[:2], 0))
            out.append(EagleStep(logits, step_out, None))
            feature = _shift(step_out, 1, 1)  # row p reads row p - 1's output
        return out

    @torch.no_grad()
    def draft_chain(self, features: torch.Tensor, tokens: torch.Tensor,
                    positions: torch.Tensor, depth: int, kv: KV | None = None,
                    forced: torch.Tensor | None = None) -> EagleChain:
        """Draft greedily ``depth`` tokens after the call's positions.

        The call's ``T`` positions (base features: the newly accepted tokens) run first on
        the cache; the last one's logits give draft 1, and each draft then runs as the next
        position, reading the previous output feature and its own token.

        Args:
            features, tokens, positions, kv: as :meth:`forward` takes them.
            depth: drafts ``>= 1``.
            forced: int64 ``[B, depth - 1]``: tokens to feed at the drafted positions instead
                of the drafts (teacher forcing, for measures and tests); the drafts returned
                are still each step's argmax.

        Returns:
            :class:`EagleChain`.
        """
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ModelError(f"depth must be an integer >= 1, got {depth!r}")
        if forced is not None and tuple(forced.shape) != (features.shape[0], depth - 1):
            raise ModelError(f"forced must be [B, depth - 1] = [{features.shape[0]}, "
                             f"{depth - 1}], got {tuple(forced.shape)}")
        step = self(features, tokens, positions, kv)
        logits = [step.logits[:, -1]]
        drafts = [self.token_ids(logits[-1].argmax(-1))]
        feature, position, cache = step.features[:, -1:], positions[:, -1:], step.kv
        for i in range(1, depth):
            token = drafts[-1] if forced is None else forced[:, i - 1]
            position = position + 1
            step = self(feature, token[:, None], position, cache)
            logits.append(step.logits[:, -1])
            drafts.append(self.token_ids(logits[-1].argmax(-1)))
            feature, cache = step.features, step.kv
        assert cache is not None
        return EagleChain(torch.stack(drafts, dim=1), torch.stack(logits, dim=1), cache)

    def extra_repr(self) -> str:
        c = self.config
        size = "V" if self.shortlist is None else str(self.shortlist.numel())
        return (f"fusion={c.fusion}, fuse_layers={list(c.fuse_layers)}, d={c.d_model}, "
                f"heads={c.num_heads}/{c.num_kv_heads}, shortlist={size}")
