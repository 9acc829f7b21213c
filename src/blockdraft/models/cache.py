"""`KVCache`: the attention keys and values of a processed prefix, for incremental decoding.

A cache is immutable: every forward returns a new one (the old one stays valid, so a verifier
can branch from a shared prefix as often as it likes). The operations a BPD verifier needs:

    cache.expand(p)                 batch 1 -> p rows sharing the prefix (views, no copy)
    cache.select_row(j)             keep row j (batch 1), a view
    cache.select_rows(index)        reorder / select rows (a gather)
    cache.crop(length)              keep the first ``length`` positions, a view
    cache.select_row(j).crop(n)     the winning draft's accepted prefix (docs/definitions.md
                                    sec. 2, step 3)

Keys are stored after the rotary position embedding, so a cropped cache continues at position
``length`` with no recomputation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from blockdraft.core.checks import check_int, check_positive_int
from blockdraft.models.errors import ModelError


@dataclass(frozen=True, eq=False)
class KVCache:
    """Per-layer keys and values of a prefix of ``length`` positions.

    Attributes:
        keys: one tensor per layer, ``[B, n_head, length, head_dim]`` (rotary-embedded).
        values: one tensor per layer, ``[B, n_head, length, head_dim]``.

    Every position holds a real token (there is no padding).

    Raises:
        ModelError: when the layers disagree in shape.
    """

    keys: tuple[torch.Tensor, ...]
    values: tuple[torch.Tensor, ...]

    def __post_init__(self) -> None:
        if len(self.keys) == 0 or len(self.keys) != len(self.values):
            raise ModelError(
                f"a KVCache needs one key and one value tensor per layer, got {len(self.keys)} "
                f"keys and {len(self.values)} values"
            )
        shape = self.keys[0].shape
        if len(shape) != 4:
            raise ModelError(f"cache tensors must be [B, n_head, T, head_dim], got {tuple(shape)}")
        for i, (k, v) in enumerate(zip(self.keys, self.values, strict=True)):
            if k.shape != shape or v.shape != shape:
                raise ModelError(
                    f"cache layer {i} has keys {tuple(k.shape)} and values {tuple(v.shape)}; "
                    f"every layer must be {tuple(shape)}"
                )

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
        """Transformer layers the cache covers."""
        return len(self.keys)

    @property
    def device(self) -> torch.device:
        """Where the tensors live."""
        return self.keys[0].device

    # ---- views and selections ----------------------------------------------------------------

    def crop(self, length: int) -> KVCache:
        """The first ``length`` positions (``0 < length <= self.length``), as views.

        Raises:
            ModelError: when ``length`` is outside ``[1, self.length]``.
        """
        length = check_int(length, "crop length", ModelError, minimum=1, maximum=self.length)
        if length == self.length:
            return self
        return KVCache(
            keys=tuple(k[:, :, :length] for k in self.keys),  # (B, nh, length, hs)
            values=tuple(v[:, :, :length] for v in self.values),  # (B, nh, length, hs)
        )

    def select_row(self, row: int) -> KVCache:
        """Row ``row`` alone (batch 1), as views.

        Raises:
            ModelError: when ``row`` is not in ``[0, B)``.
        """
        row = check_int(row, "row", ModelError, minimum=0, maximum=self.batch_size - 1)
        return KVCache(
            keys=tuple(k[row : row + 1] for k in self.keys),  # (1, nh, T, hs)
            values=tuple(v[row : row + 1] for v in self.values),  # (1, nh, T, hs)
        )

    def select_rows(self, rows: Sequence[int] | torch.Tensor) -> KVCache:
        """Rows ``rows`` in that order (repeats allowed): a gather, so it copies.

        Raises:
            ModelError: on an empty selection or a row outside ``[0, B)``.
        """
        index = torch.as_tensor(rows, dtype=torch.long).to(self.device).reshape(-1)
        if index.numel() == 0:
            raise ModelError("select_rows needs at least one row")
        if int(index.min()) < 0 or int(index.max()) >= self.batch_size:
            raise ModelError(
                f"rows must lie in [0, {self.batch_size}), got {index.tolist()}"
            )
        return KVCache(
            keys=tuple(k.index_select(0, index) for k in self.keys),  # (len(rows), nh, T, hs)
            values=tuple(v.index_select(0, index) for v in self.values),
        )

    def expand(self, batch_size: int) -> KVCache:
        """A batch-1 cache repeated as ``batch_size`` rows without copying (``Tensor.expand``).

        The next forward on top of it writes ``batch_size`` new rows (the prefix is copied
        once per row then, as part of appending the new keys); the expanded views themselves
        cost nothing.

        Raises:
            ModelError: when the cache has more than one row (and not already ``batch_size``).
        """
        batch_size = check_positive_int(batch_size, "batch_size", ModelError)
        if batch_size == self.batch_size:
            return self
        if self.batch_size != 1:
            raise ModelError(
                f"only a batch-1 cache can be expanded, this one has {self.batch_size} rows; "
                "use select_row(j) first"
            )
        return KVCache(
            keys=tuple(k.expand(batch_size, -1, -1, -1) for k in self.keys),  # (p, nh, T, hs)
            values=tuple(v.expand(batch_size, -1, -1, -1) for v in self.values),
        )

    def to(self, device: torch.device | str) -> KVCache:
        """The same cache on ``device``."""
        return KVCache(
            keys=tuple(k.to(device) for k in self.keys),
            values=tuple(v.to(device) for v in self.values),
        )
