"""`KVBuffer` and `BufferCache`: a key/value cache that a forward never copies.

One pre-allocated buffer per layer for keys and one for values, ``[1, n_kv, C, head_dim]``
(torch tensors on the model's device: float32 bound to the ONNX Runtime session by address, or
the static runtime's float32 / bfloat16 views that transformers' ``StaticLayer`` writes into),
hold the committed prefix in rows ``0 .. length - 1``. A forward writes its ``T`` new tokens'
keys and values into rows ``length .. length + T - 1`` in place, so a step costs no copy of the
cache. After a verification, :meth:`BufferCache.gather` moves the accepted path's rows to the
contiguous rows after the prefix: ``1 + n`` rows per layer, not the whole cache. When the
buffer is full it grows (doubling; one copy of the prefix) if its runtime lets it.

:class:`BufferCache` is the immutable view the model protocol hands around (length, batch 1);
the views of one buffer stay valid as long as nothing wrote below their length since they were
made: a decode that continues from each step's result never invalidates anything, and a view
that was invalidated (two forwards branching from one prefix: a second forward from ``A``
overwrites what the first one's result ``B`` holds) is refused with a :class:`ModelError`, never
read.

A forward's inputs and the attention bias over the buffer's rows are the runtime's checked
:class:`~blockdraft.models.step.Step` (its ``bias``: the prefix, a token tree's ancestors, a
sliding window), as on every runtime.

Public surface:
    KVBuffer(n_layer, n_kv_head, head_dim, capacity=256, device="cpu", dtype=torch.float32)
        .reserve(rows), .capacity, .keys[i], .values[i], .begin_write(cache) -> new epoch
    BufferCache(buffer, length, epoch)     length, batch_size, crop, gather, select_row,
                                           expand(1), select_rows, to
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from blockdraft.models.errors import ModelError


class KVBuffer:
    """Per-layer key and value buffers ``[1, n_kv_head, capacity, head_dim]``.

    Args:
        n_layer, n_kv_head, head_dim: the model's attention sizes.
        capacity: rows allocated at first (grows on demand, :meth:`reserve`).
        device: where the buffers live (the ONNX Runtime provider's device, or the model's).
        dtype: the keys' and values' dtype (ONNX Runtime binds float32).
    """

    def __init__(self, n_layer: int, n_kv_head: int, head_dim: int, capacity: int = 256,
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> None:
        self.n_layer, self.n_kv_head, self.head_dim = n_layer, n_kv_head, head_dim
        self.device = torch.device(device)
        self.dtype = dtype
        self.storage = self._allocate(max(int(capacity), 1))
        self.epoch = 0
        self._writes: list[int] = []  # the first row each write touched, by epoch - 1

    def _allocate(self, capacity: int) -> torch.Tensor:
        # (layer, key/value, 1, n_kv, C, hd): one allocation, every buffer a contiguous view
        return torch.zeros((self.n_layer, 2, 1, self.n_kv_head, capacity, self.head_dim),
                           dtype=self.dtype, device=self.device)

    @property
    def capacity(self) -> int:
        """Rows each buffer holds (``C``)."""
        return int(self.storage.shape[4])

    def keys(self, layer: int) -> torch.Tensor:
        """Layer ``layer``'s key buffer ``[1, n_kv, C, hd]`` (a contiguous view)."""
        return self.storage[layer, 0]

    def values(self, layer: int) -> torch.Tensor:
        """Layer ``layer``'s value buffer ``[1, n_kv, C, hd]``."""
        return self.storage[layer, 1]

    def reserve(self, rows: int, keep: int) -> bool:
        """Make room for ``rows`` rows, keeping the first ``keep``; True when the buffers moved
        (their addresses changed: rebind them)."""
        if rows <= self.capacity:
            return False
        grown = self._allocate(max(rows, 2 * self.capacity))
        grown[:, :, :, :, :keep] = self.storage[:, :, :, :, :keep]
        self.storage = grown
        return True

    def check(self, cache: BufferCache) -> None:
        """Refuse a view whose rows a later write overwrote (see the module docstring)."""
        if cache.buffer is not self:
            raise ModelError("this cache belongs to another model's buffers")
        for start in self._writes[cache.epoch:]:
            if start < cache.length:
                raise ModelError(
                    f"this cache (length {cache.length}) was overwritten by a later forward "
                    f"from position {start}: a runtime on buffers keeps one cache per model; "
                    "continue from the newest result (a verifier's outcome.past), or load a "
                    "second model to branch"
                )

    def begin_write(self, start: int) -> int:
        """Record a write of rows ``start ..`` and return the epoch of the views made after it."""
        self._writes.append(int(start))
        self.epoch += 1
        return self.epoch


@dataclass(frozen=True, eq=False)
class BufferCache:
    """The first ``length`` rows of a :class:`KVBuffer`: a committed prefix (batch 1).

    The protocol of :class:`~blockdraft.models.protocol.DecoderCache`, for one row: ``crop``
    and ``select_row(0)`` are views; ``gather`` moves the kept rows into place (in the
    buffer, without touching the rows below the first moved one).
    """

    buffer: KVBuffer
    length: int
    epoch: int

    @property
    def batch_size(self) -> int:
        """Rows: always 1 (a batch of drafts is verified as a token tree)."""
        return 1

    @property
    def n_layer(self) -> int:
        """Decoder layers."""
        return self.buffer.n_layer

    @property
    def device(self) -> torch.device:
        """Where the buffers live."""
        return self.buffer.device

    def crop(self, length: int) -> BufferCache:
        """The first ``length`` positions (``0 <= length <= self.length``)."""
        if not 0 <= int(length) <= self.length:
            raise ModelError(f"crop length must be in [0, {self.length}], got {length}")
        return BufferCache(self.buffer, int(length), self.epoch)

    def select_row(self, row: int) -> BufferCache:
        """Row 0 (the only one)."""
        if int(row) != 0:
            raise ModelError(f"this cache has one row; select_row({row}) is out of range")
        return self

    def select_rows(self, index: Any) -> BufferCache:
        """Rows ``index``: only ``[0]`` exists."""
        if list(np.asarray(index).reshape(-1)) != [0]:
            raise ModelError("this cache has one row; only select_rows([0]) exists")
        return self

    def expand(self, batch_size: int) -> BufferCache:
        """Batch 1 only: a runtime on buffers verifies a batch of drafts as a token tree."""
        if int(batch_size) != 1:
            raise ModelError(
                f"this runtime's cache holds one row; expand({batch_size}) is not "
                "supported (verify a batch of drafts as their trie: decode does)")
        return self

    def gather(self, positions: Any) -> BufferCache:
        """Keep the positions ``positions`` in order: ``0 .. P - 1`` followed by rows of this
        cache's newest tokens (a token tree's accepted path, increasing); the kept rows move to
        ``P, P + 1, ...`` (``1 + n`` rows per layer are copied).

        Raises:
            ModelError: positions that are not a prefix ``0 .. P - 1`` followed by increasing
                rows below ``length``, or a view that was overwritten.
        """
        keep = np.asarray(positions.cpu() if isinstance(positions, torch.Tensor) else positions,
                          dtype=np.int64).reshape(-1)
        n = keep.size
        mismatch = np.flatnonzero(keep != np.arange(n))
        prefix = int(mismatch[0]) if mismatch.size else n
        rows = keep[prefix:]
        if rows.size and (rows.min() < prefix or rows.max() >= self.length
                          or (np.diff(rows) <= 0).any()):
            raise ModelError(
                f"gather keeps a prefix 0 .. P - 1 then increasing rows below the cache length "
                f"{self.length}; got {keep.tolist()}")
        self.buffer.check(self)
        if rows.size == 0:  # the kept rows are already in place (a chain accepted as a whole)
            return BufferCache(self.buffer, n, self.epoch)
        epoch = self.buffer.begin_write(prefix)
        store = self.buffer.storage  # (L, 2, 1, n_kv, C, hd)
        index = torch.as_tensor(rows, device=store.device)
        store[:, :, :, :, prefix:n] = store.index_select(4, index)
        return BufferCache(self.buffer, n, epoch)

    def to(self, device: Any) -> BufferCache:
        """The same cache: it lives where the runtime keeps it."""
        return self

    def __repr__(self) -> str:
        return f"BufferCache(length={self.length}, capacity={self.buffer.capacity})"
