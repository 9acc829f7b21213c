"""`BlockwiseConfig`: the shape of a blockwise parallel transformer, with named presets.

Presets (``BlockwiseConfig.preset(name, **overrides)`` or ``BlockwiseConfig.tiny(...)``):

    tiny    2 layers, d=64,  2 attention heads, h=4   tests; trains in seconds on a CPU
    small   4 layers, d=256, 4 attention heads, h=9   the CPU model: ~2.5-3k tokens/s on 2 cores
                                                      at batch 32 x 128 (measured), ~1 h of
                                                      training reaches ~10M tokens
    base    12 layers, d=768, 12 attention heads, h=9 GPT-2-small-sized, for a GPU

Every preset defaults to the 4,096-token BPE vocabulary (pass ``vocab_size=tokenizer.vocab_size``
for another tokenizer) and is a plain frozen dataclass, so any field can be overridden.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from blockdraft.core.checks import check_positive_int
from blockdraft.models.errors import ModelError

PRESETS = ("tiny", "small", "base")


@dataclass(frozen=True)
class BlockwiseConfig:
    """Hyper-parameters of :class:`~blockdraft.models.blockwise.BlockwiseLM`.

    Raises:
        ModelError: on a non-positive size, ``d_model`` not divisible by ``n_head``, an odd
            per-head size (RoPE rotates pairs of dimensions), or ``dropout`` outside [0, 1).
    """

    vocab_size: int = 4096  # V: the tokenizer's vocabulary, special tokens included
    n_layer: int = 4  # transformer blocks
    n_head: int = 4  # attention heads per block
    d_model: int = 256  # residual stream width
    d_ff: int = 1024  # hidden width of each block's MLP
    max_seq_len: int = 512  # longest sequence (prompt + generated) the model accepts
    h: int = 9  # prediction heads: head 1 is the base LM, heads 2..h the extra heads
    head_hidden: int = 1024  # hidden width of each extra head's residual FFN (Stern sec. 6)
    dropout: float = 0.0  # on attention weights and residual branches, training only
    tie_embeddings: bool = True  # vocabulary projection = input embedding matrix (transposed)
    rope_base: float = 10000.0  # RoPE frequency base (rotary position embeddings)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "n_layer", "n_head", "d_model", "d_ff", "max_seq_len", "h",
                     "head_hidden"):
            value = check_positive_int(getattr(self, name), f"BlockwiseConfig.{name}", ModelError)
            object.__setattr__(self, name, value)  # a numpy integer becomes a JSON-ready int
        if self.d_model % self.n_head:
            raise ModelError(
                f"d_model = {self.d_model} is not divisible by n_head = {self.n_head}; "
                "pick n_head that divides d_model"
            )
        if self.head_dim % 2:
            raise ModelError(
                f"the per-head size d_model / n_head = {self.head_dim} is odd; RoPE needs an even "
                "size (change d_model or n_head)"
            )
        if not (isinstance(self.dropout, (int, float)) and 0.0 <= self.dropout < 1.0):
            raise ModelError(f"dropout must lie in [0, 1), got {self.dropout!r}")
        if not (isinstance(self.rope_base, (int, float)) and math.isfinite(self.rope_base)
                and self.rope_base > 1.0):
            raise ModelError(f"rope_base must be a finite number > 1, got {self.rope_base!r}")

    @property
    def head_dim(self) -> int:
        """Size of one attention head, ``d_model // n_head``."""
        return self.d_model // self.n_head

    # ---- presets -----------------------------------------------------------------------------

    @classmethod
    def tiny(cls, **overrides: Any) -> BlockwiseConfig:
        """For tests: trains in seconds on a CPU."""
        base: dict[str, Any] = dict(n_layer=2, n_head=2, d_model=64, d_ff=256, max_seq_len=256,
                                    h=4, head_hidden=128, dropout=0.0)
        return cls(**{**base, **overrides})

    @classmethod
    def small(cls, **overrides: Any) -> BlockwiseConfig:
        """The CPU model: ~2.5-3k training tokens/s on 2 cores (batch 32 x 128, measured)."""
        base: dict[str, Any] = dict(n_layer=4, n_head=4, d_model=256, d_ff=1024, max_seq_len=512,
                                    h=9, head_hidden=1024, dropout=0.0)
        return cls(**{**base, **overrides})

    @classmethod
    def base(cls, **overrides: Any) -> BlockwiseConfig:
        """GPT-2-small-sized, for a GPU."""
        base: dict[str, Any] = dict(n_layer=12, n_head=12, d_model=768, d_ff=3072,
                                    max_seq_len=1024, h=9, head_hidden=3072, dropout=0.1)
        return cls(**{**base, **overrides})

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> BlockwiseConfig:
        """The preset called ``name`` (one of :data:`PRESETS`), with fields overridden."""
        if name not in PRESETS:
            raise ModelError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
        factory = getattr(cls, name)
        return factory(**overrides)  # type: ignore[no-any-return]

    # ---- (de)serialisation -------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BlockwiseConfig:
        """The config of :meth:`to_dict`'s output.

        Raises:
            ModelError: on an unknown field name (a newer or foreign config) or a bad value.
        """
        if not isinstance(data, dict):
            raise ModelError(f"a model config must be a JSON object, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ModelError(
                f"unknown config field(s) {unknown}; known fields are {sorted(known)}"
            )
        try:
            return cls(**data)
        except TypeError as e:  # pragma: no cover - guarded by the field check above
            raise ModelError(f"bad model config: {e}") from e
