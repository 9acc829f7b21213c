"""`KVCache`: the attention keys and values of a processed prefix, for incremental decoding.

A cache is immutable: every forward returns a new one (the old one stays valid, so a verifier
can branch from a shared prefix as often as it likes). The operations a BPD verifier needs:

    cache.expand(p)                 batch 1 -> p rows sharing the prefix (views, no copy)
    cache.select_row(j)             keep row j (batch 1), a view
    cache.select_rows(index)        reorder / select rows (a gather)
    cache.crop(length)              keep the first ``length`` positions, a view
    cache.select_row(j).crop(n)     the winning draft's accepted prefix (docs/definitions.md
                                    sec. 2, step 3)
    cache.gather(positions)         keep the given positions, in order (a copy): a token tree's
                                    accepted path (docs/definitions.md sec. 11)
    cache.to(device)                the same cache on another device

Every operation returns a cache of the same class (a subclass such as
:class:`blockdraft.models.hf.HFCache` keeps its type).

Keys are stored after the rotary position embedding, so a cropped or gathered cache continues
at position ``length`` with no recomputation, provided the kept positions are
``0 .. length - 1`` in the sequence.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch

from blockdraft.core.checks import check_int, check_positive_int, is_int
from blockdraft.models.errors import ModelError

_Cache = TypeVar("_Cache", bound="KVCache")


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
                f"{type(self).__name__} needs one key and one value tensor per layer, got "
                f"{len(self.keys)} keys and {len(self.values)} values"
            )
        self._check_layer_shapes()

    def _check_layer_shapes(self) -> None:
        """Every layer's keys and values have one shape, ``[B, n_head, T, head_dim]``."""
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

    def _map(self: _Cache, fn: Callable[[torch.Tensor], torch.Tensor]) -> _Cache:
        """A cache of the same class holding ``fn`` of every key and value tensor."""
        return dataclasses.replace(self, keys=tuple(fn(k) for k in self.keys),
                                   values=tuple(fn(v) for v in self.values))

    def crop(self: _Cache, length: int) -> _Cache:
        """The first ``length`` positions (``1 <= length <= self.length``), as views.

        Raises:
            ModelError: when ``length`` is outside ``[1, self.length]``.
        """
        length = check_int(length, "crop length", ModelError, minimum=1, maximum=self.length)
        if length == self.length:
            return self
        return self._map(lambda t: t[:, :, :length])  # (B, nh, length, hs)

    def select_row(self: _Cache, row: int) -> _Cache:
        """Row ``row`` alone (batch 1), as views.

        Raises:
            ModelError: when ``row`` is not in ``[0, B)``.
        """
        if not is_int(row) or not 0 <= row < self.batch_size:
            raise ModelError(f"row must be an integer in [0, {self.batch_size}), got {row!r}")
        j = int(row)
        return self._map(lambda t: t[j : j + 1])  # (1, nh, T, hs)

    def select_rows(self: _Cache, rows: Sequence[int] | torch.Tensor) -> _Cache:
        """Rows ``rows`` in that order (repeats allowed): a gather, so it copies.

        Raises:
            ModelError: on an empty selection or a row outside ``[0, B)``.
        """
        index = torch.as_tensor(rows, dtype=torch.long).to(self.device).reshape(-1)
        if index.numel() == 0:
            raise ModelError("select_rows needs at least one row")
        if int(index.min()) < 0 or int(index.max()) >= self.batch_size:
            raise ModelError(f"rows must lie in [0, {self.batch_size}), got {index.tolist()}")
        return self._map(lambda t: t.index_select(0, index))  # (len(rows), nh, T, hs)

    def expand(self: _Cache, batch_size: int) -> _Cache:
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
        return self._map(lambda t: t.expand(batch_size, -1, -1, -1))  # (p, nh, T, hs)

    def gather(self: _Cache, positions: Sequence[int] | torch.Tensor) -> _Cache:
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
            raise ModelError(f"positions must lie in [0, {self.length}), got {index.tolist()}")
        return self._map(lambda t: t.index_select(2, index))  # (B, nh, n, hs)

    def to(self: _Cache, device: torch.device | str) -> _Cache:
        """The same cache on ``device``."""
        return self._map(lambda t: t.to(device))

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(n_layer={self.n_layer}, batch_size={self.batch_size}, "
                f"length={self.length})")
