"""`EagleConfig`: the EAGLE draft layer's sizes, copied from its base's block, and its fusion.

The draft layer (:class:`~blockdraft.models.heads.eagle_layer.EagleLayer`) is one decoder
layer of the base's own block shape: :meth:`EagleConfig.from_base` reads the sizes from the
base's ``transformers`` config and refuses a block the layer cannot copy (another activation,
biases, scaled RoPE), naming the value.

Public surface:
    KIND, CAPABILITY_KIND, FUSIONS
    EagleConfig(...)     frozen; from_base(hf_config, fusion, fuse_layers=None),
                         feature_width, to_dict(), from_dict(data)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from blockdraft.models.errors import ModelError

KIND = "eagle"
"""The draft layer's kind (its class's ``kind``, the folder's ``kind``)."""
CAPABILITY_KIND = "draft-layer"
"""Its head kind in :data:`~blockdraft.models.capabilities.HEAD_KINDS`."""
FUSIONS = ("top", "layers")
"""``"top"``: EAGLE-1's top-layer feature; ``"layers"``: EAGLE-3's fused low/middle/high."""


@dataclass(frozen=True)
class EagleConfig:
    """The draft layer's sizes (the base's own block shape) and its fusion.

    Attributes:
        d_model: the base's hidden size ``d``.
        num_heads, num_kv_heads, head_dim: the base's attention (GQA: ``num_heads`` a multiple
            of ``num_kv_heads``).
        intermediate_size: the base's SwiGLU width.
        rms_norm_eps: the base's RMSNorm epsilon.
        rope_theta: the base's RoPE base.
        vocab_size: the base's ``V`` (its embedding's rows).
        base_layers: the base's decoder layers ``L``.
        fusion: one of :data:`FUSIONS`.
        fuse_layers: with ``"layers"``, the HF ``hidden_states`` indices fused (the residual
            stream entering decoder layer ``i``; ``L``: the last layer's output before the
            final norm), low to high; ``()`` with ``"top"``.
        head_norm: an RMSNorm of the layer's own between its output and the head (EAGLE-3);
            off for ``"top"``, whose output is a base feature (after the final norm).
        initializer_range: the standard deviation of the linear layers' initial weights.
    """

    d_model: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope_theta: float
    vocab_size: int
    base_layers: int
    fusion: str = "top"
    fuse_layers: tuple[int, ...] = ()
    head_norm: bool = False
    initializer_range: float = 0.02
    version: str = field(default="1")

    def __post_init__(self) -> None:
        for name in ("d_model", "num_heads", "num_kv_heads", "head_dim", "intermediate_size",
                     "vocab_size", "base_layers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ModelError(f"EagleConfig: {name} must be an integer >= 1, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ModelError(f"EagleConfig: num_heads {self.num_heads} is not a multiple of "
                             f"num_kv_heads {self.num_kv_heads}")
        if self.head_dim % 2:
            raise ModelError(f"EagleConfig: RoPE needs an even head_dim, got {self.head_dim}")
        if self.fusion not in FUSIONS:
            raise ModelError(f"EagleConfig: fusion must be one of {', '.join(FUSIONS)}, got "
                             f"{self.fusion!r}")
        if self.fusion == "top" and self.fuse_layers:
            raise ModelError(f"EagleConfig: fusion 'top' reads the final feature only; got "
                             f"fuse_layers {self.fuse_layers}")
        if self.fusion == "layers" and (len(self.fuse_layers) < 2 or any(
                isinstance(i, bool) or not isinstance(i, int) or not 1 <= i <= self.base_layers
                for i in self.fuse_layers)):
            raise ModelError(f"EagleConfig: fusion 'layers' needs fuse_layers of >= 2 indices in "
                             f"[1, {self.base_layers}] (the base's layers), got "
                             f"{self.fuse_layers}")

    @property
    def feature_width(self) -> int:
        """``F``: the width of the base features a call reads (``d``, or ``d`` per fused layer)."""
        return self.d_model * max(1, len(self.fuse_layers))

    @classmethod
    def from_base(cls, config: Any, fusion: str = "top",
                  fuse_layers: tuple[int, ...] | None = None) -> EagleConfig:
        """The layer of a Llama-style base's block shape (its HF ``config``).

        Args:
            config: the base's ``transformers`` config (RMSNorm, SiLU-gated MLP, RoPE without
                scaling, no attention or MLP bias).
            fusion: one of :data:`FUSIONS`.
            fuse_layers: with ``"layers"``: the ``hidden_states`` indices to fuse; default
                EAGLE-3's ``(2, L // 2, L - 3)`` (clamped into ``[1, L]``).

        Raises:
            ModelError: a base whose block this layer cannot copy, naming the value.
        """
        def need(name: str, default: Any = None) -> Any:
            value = getattr(config, name, default)
            if value is None:
                raise ModelError(f"the base's config has no {name}: an EAGLE layer copies a "
                                 "Llama-style decoder block (RMSNorm, GQA, RoPE, SwiGLU)")
            return value

        act = next((getattr(config, name) for name in ("hidden_act", "hidden_activation",
                                                        "activation_function")
                    if getattr(config, name, None)), None)
        if act != "silu":
            raise ModelError(f"the base's MLP activation is {act!r}; the EAGLE layer copies a "
                             "SwiGLU (silu) block")
        for name in ("attention_bias", "mlp_bias"):
            if getattr(config, name, False):
                raise ModelError(f"the base's config sets {name}={getattr(config, name)!r}; the "
                                 "EAGLE layer's projections have no bias")
        rope = dict(getattr(config, "rope_parameters", None) or {})
        scaling = getattr(config, "rope_scaling", None) or {}
        kind = rope.get("rope_type") or scaling.get("rope_type") or scaling.get("type")
        if kind not in (None, "default"):
            raise ModelError(f"the base's RoPE is of type {kind!r}; the EAGLE layer implements "
                             "plain RoPE (rope_type 'default')")
        theta = rope.get("rope_theta", getattr(config, "rope_theta", None))
        d = int(need("hidden_size"))
        heads = int(need("num_attention_heads"))
        layers = int(need("num_hidden_layers"))
        head_dim = getattr(config, "head_dim", None) or d // heads
        if fusion == "layers" and fuse_layers is None:
            fuse_layers = tuple(min(max(i, 1), layers) for i in (2, layers // 2, layers - 3))
        return cls(
            d_model=d, num_heads=heads,
            num_kv_heads=int(getattr(config, "num_key_value_heads", None) or heads),
            head_dim=int(head_dim), intermediate_size=int(need("intermediate_size")),
            rms_norm_eps=float(need("rms_norm_eps")),
            rope_theta=float(theta if theta is not None else 10000.0),
            vocab_size=int(need("vocab_size")), base_layers=layers, fusion=fusion,
            fuse_layers=tuple(fuse_layers or ()), head_norm=fusion == "layers",
            initializer_range=float(getattr(config, "initializer_range", 0.02) or 0.02))

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON values."""
        out = asdict(self)
        out["fuse_layers"] = list(self.fuse_layers)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EagleConfig:
        """The config :meth:`to_dict` wrote.

        Raises:
            ModelError: unknown or missing fields, or bad values.
        """
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise ModelError(f"an EAGLE layer config has unknown fields {unknown}")
        try:
            return cls(**{**data, "fuse_layers": tuple(data.get("fuse_layers", ()))})
        except TypeError as e:
            raise ModelError(f"an EAGLE layer config is incomplete: {e}") from e
