"""`HFCache`: a Hugging Face model's own key/value cache behind blockdraft's cache protocol.

A ``transformers.DynamicCache`` is mutable: every forward appends to it in place. blockdraft's
verifier needs immutable caches (it branches ``p`` drafts from one prefix, then keeps the
winner's row), so :class:`HFCache` holds the per-layer key and value tensors themselves and
builds a fresh ``DynamicCache`` around them for each forward (:meth:`HFCache.dynamic`). In
transformers 5.x ``DynamicLayer.update`` concatenates (``torch.cat``) into NEW tensors, so a
forward never writes into the tensors an ``HFCache`` holds, and building the ``DynamicCache``
copies nothing (the layers are filled with the very tensors).

The operations, as on :class:`blockdraft.models.KVCache`:

    cache.expand(p)                 batch 1 -> p rows sharing the prefix (views, no copy)
    cache.select_row(j)             keep row j (batch 1), a view
    cache.select_rows(index)        reorder / select rows (a gather)
    cache.crop(length)              keep the first ``length`` positions, a view
    cache.gather(positions)         keep the given positions, in order (a copy): a token tree's
                                    accepted path (docs/definitions.md sec. 11)

Keys are stored as the model's attention layers produce them (after the rotary embedding, for
RoPE models), so a cropped or gathered cache continues at position ``length`` with no
recomputation, provided the kept positions are ``0 .. length - 1`` in the sequence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from blockdraft.models.errors import ModelError


@dataclass(frozen=True, eq=False)
class HFCache:
    """Per-layer keys and values of a prefix of ``length`` positions, for one HF model.

    Attributes:
        keys: one tensor per attention layer, ``[B, n_kv_head, length, head_dim]``.
        values: one tensor per attention layer, ``[B, n_kv_head, length, head_dim_v]``.

    Layers may differ in heads and head sizes (the model decides); they must agree in
    ``B`` and ``length``.

    Raises:
        ModelError: when the layers disagree in rows or length, or a tensor is not 4-D.
    """

    keys: tuple[torch.Tensor, ...]
    values: tuple[torch.Tensor, ...]

    def __post_init__(self) -> None:
        if len(self.keys) == 0 or len(self.keys) != len(self.values):
            raise ModelError(
                f"an HFCache needs one key and one value tensor per layer, got "
                f"{len(self.keys)} keys and {len(self.values)} values"
            )
        first = self.keys[0]
        b, t = (first.shape[0], first.shape[2]) if first.dim() == 4 else (-1, -1)
        for i, (k, v) in enumerate(zip(self.keys, self.values, strict=True)):
            for name, x in (("keys", k), ("values", v)):
                if x.dim() != 4 or x.shape[0] != b or x.shape[2] != t:
                    raise ModelError(
                        f"cache layer {i} {name} have shape {tuple(x.shape)}; every layer must "
                        f"be [B, heads, T, head_dim] with B = {b} and T = {t}"
                    )

    # ---- conversion --------------------------------------------------------------------------

    @classmethod
    def from_dynamic(cls, cache: Any) -> HFCache:
        """The tensors of a ``transformers.DynamicCache`` whose layers are all filled.

        Raises:
            ModelError: when a layer is not a plain ``DynamicLayer`` holding keys and values.
        """
        from transformers.cache_utils import DynamicLayer

        layers = getattr(cache, "layers", None)
        if not layers:
            raise ModelError(
                f"the model returned no key/value cache ({type(cache).__name__}); blockdraft "
                "needs a transformers DynamicCache"
            )
        for i, layer in enumerate(layers):
            if type(layer) is not DynamicLayer or not layer.is_initialized:
                raise ModelError(
                    f"cache layer {i} is a {type(layer).__name__}; blockdraft supports models "
                    "whose every attention layer keeps a plain DynamicLayer"
                )
        return cls(keys=tuple(layer.keys for layer in layers),
                   values=tuple(layer.values for layer in layers))

    def dynamic(self) -> Any:
        """A new ``transformers.DynamicCache`` whose layers hold these very tensors (no copy).

        A forward on it replaces the layers' tensors with concatenations (new tensors), so
        this cache's tensors are never written.
        """
        from transformers import DynamicCache
        from transformers.cache_utils import DynamicLayer

        cache = DynamicCache()
        for k, v in zip(self.keys, self.values, strict=True):
            layer = DynamicLayer()
            layer.dtype, layer.device = k.dtype, k.device
            layer.keys, layer.values = k, v
            layer.is_initialized = True
            cache.layers.append(layer)
        return cache

    # ---- sizes -------------------------------------------------------------------------------

    @property
    def length(self) -> int:
        """Positions held (``T_past``)."""
        return int(self.keys[0].shape[2])

    @property
    def batch_size(self) -> int:
        """Rows ``B``."""
        return int(self.keys[0].shape[0])

    @property
    def n_layer(self) -> int:
        """Attention layers the cache covers."""
        return len(self.keys)

    @property
    def device(self) -> torch.device:
        """Where the tensors live."""
        return self.keys[0].device

    # ---- views and selections ----------------------------------------------------------------

    def crop(self, length: int) -> HFCache:
        """The first ``length`` positions (``1 <= length <= self.length``), as views.

        Raises:
            ModelError: when ``length`` is outside ``[1, self.length]``.
        """
        if isinstance(length, bool) or not isinstance(length, int) or not (
            1 <= length <= self.length
        ):
            raise ModelError(
                f"crop length must be an integer in [1, {self.length}], got {length!r}"
            )
        if length == self.length:
            return self
        return HFCache(
            keys=tuple(k[:, :, :length] for k in self.keys),  # (B, nkv, length, hs)
            values=tuple(v[:, :, :length] for v in self.values),  # (B, nkv, length, hs)
        )

    def select_row(self, row: int) -> HFCache:
        """Row ``row`` alone (batch 1), as views.

        Raises:
            ModelError: when ``row`` is not in ``[0, B)``.
        """
        if isinstance(row, bool) or not isinstance(row, int) or not (
            0 <= row < self.batch_size
        ):
            raise ModelError(f"row must be an integer in [0, {self.batch_size}), got {row!r}")
        return HFCache(
            keys=tuple(k[row : row + 1] for k in self.keys),  # (1, nkv, T, hs)
            values=tuple(v[row : row + 1] for v in self.values),  # (1, nkv, T, hs)
        )

    def select_rows(self, rows: Sequence[int] | torch.Tensor) -> HFCache:
        """Rows ``rows`` in that order (repeats allowed): a gather, so it copies.

        Raises:
            ModelError: on an empty selection or a row outside ``[0, B)``.
        """
        index = torch.as_tensor(rows, dtype=torch.long).to(self.device).reshape(-1)
        if index.numel() == 0:
            raise ModelError("select_rows needs at least one row")
        if int(index.min()) < 0 or int(index.max()) >= self.batch_size:
            raise ModelError(f"rows must lie in [0, {self.batch_size}), got {index.tolist()}")
        return HFCache(
            keys=tuple(k.index_select(0, index) for k in self.keys),  # (len(rows), nkv, T, hs)
            values=tuple(v.index_select(0, index) for v in self.values),
        )

    def expand(self, batch_size: int) -> HFCache:
        """A batch-1 cache repeated as ``batch_size`` rows without copying (``Tensor.expand``).

        The next forward on top of it writes ``batch_size`` new rows (the prefix is copied
        once per row then, by the cache's concatenation); the views themselves cost nothing.

        Raises:
            ModelError: when the cache has more than one row (and not already ``batch_size``).
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ModelError(f"batch_size must be a positive integer, got {batch_size!r}")
        if batch_size == self.batch_size:
            return self
        if self.batch_size != 1:
            raise ModelError(
                f"only a batch-1 cache can be expanded, this one has {self.batch_size} rows; "
                "use select_row(j) first"
            )
        return HFCache(
            keys=tuple(k.expand(batch_size, -1, -1, -1) for k in self.keys),  # (p, nkv, T, hs)
            values=tuple(v.expand(batch_size, -1, -1, -1) for v in self.values),
        )

    def gather(self, positions: Sequence[int] | torch.Tensor) -> HFCache:
        """The positions ``positions`` (1-D, in that order, every row alike): a copy.

        For a token tree (docs/definitions.md sec. 11): after verifying ``N`` tree nodes on a
        prefix of ``P`` positions, ``gather([0 .. P-1] + [P + u for u in accepted path])``
        keeps the prefix and the accepted path, which then sit at contiguous positions.

        Raises:
            ModelError: on an empty or non-1-D selection, or a position outside
                ``[0, length)``.
        """
        index = torch.as_tensor(positions, dtype=torch.long).to(self.device)
        if index.dim() != 1 or index.numel() == 0:
            raise ModelError(
                f"positions must be a non-empty 1-D sequence, got shape {tuple(index.shape)}"
            )
        if int(index.min()) < 0 or int(index.max()) >= self.length:
            raise ModelError(
                f"positions must lie in [0, {self.length}), got {index.tolist()}"
            )
        return HFCache(
            keys=tuple(k.index_select(2, index) for k in self.keys),  # (B, nkv, n, hs)
            values=tuple(v.index_select(2, index) for v in self.values),  # (B, nkv, n, hs)
        )

    def to(self, device: torch.device | str) -> HFCache:
        """The same cache on ``device``."""
        return HFCache(keys=tuple(k.to(device) for k in self.keys),
                       values=tuple(v.to(device) for v in self.values))

    def __repr__(self) -> str:
        return (f"HFCache(n_layer={self.n_layer}, batch_size={self.batch_size}, "
                f"length={self.length})")
