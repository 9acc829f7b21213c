"""The training data: a 1-D token stream cut into windows of ``seq_len + h`` tokens.

Training draws windows at uniformly random offsets (:func:`random_windows`); evaluation reads
consecutive non-overlapping windows from the start of the stream (:func:`consecutive_windows`),
so its numbers are comparable between calls. A window's first ``seq_len`` tokens are the
input; head ``i`` at position ``t`` is scored against the token at ``t + i``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from blockdraft.training.errors import TrainingError


def check_stream(token_ids: Any, name: str, vocab_size: int, min_len: int) -> np.ndarray:
    """``token_ids`` as a 1-D integer array (a ``np.memmap`` is kept as it is, not copied).

    Raises:
        TrainingError: when it is not 1-D, not integers, shorter than one window of ``min_len``
            tokens, or holds an id outside ``[0, vocab_size)``.
    """
    arr = token_ids if isinstance(token_ids, np.ndarray) else np.asarray(token_ids)
    if arr.ndim != 1:
        raise TrainingError(f"{name} must be a 1-D array of token ids, got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise TrainingError(f"{name} must hold integer token ids, got dtype {arr.dtype}")
    if arr.size < min_len:
        raise TrainingError(
            f"{name} has {arr.size} tokens; one training window needs seq_len + h = {min_len}: "
            "use more data or a smaller seq_len"
        )
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= vocab_size:
        raise TrainingError(
            f"{name} holds token id {lo if lo < 0 else hi}, outside the model's vocabulary "
            f"[0, {vocab_size}); encode the data with the model's tokenizer"
        )
    return arr


def random_windows(
    data: np.ndarray,
    rng: np.random.Generator,
    batch_size: int,
    window: int,
    device: torch.device,
) -> torch.Tensor:
    """``batch_size`` windows of ``window`` tokens at offsets drawn from ``rng``:
    int64 ``[batch_size, window]`` on ``device``."""
    offsets = rng.integers(0, data.size - window + 1, size=batch_size)
    idx = offsets[:, None] + np.arange(window)[None]  # (B, window)
    return torch.from_numpy(np.asarray(data[idx], dtype=np.int64)).to(device)


def consecutive_windows(
    data: np.ndarray, window: int, n_windows: int, batch_size: int, device: torch.device
) -> Iterator[torch.Tensor]:
    """The first ``n_windows`` non-overlapping windows of ``data``, in batches of at most
    ``batch_size``: int64 ``[b, window]`` tensors on ``device``."""
    for start in range(0, n_windows, batch_size):
        rows = np.arange(start, min(start + batch_size, n_windows))
        idx = rows[:, None] * window + np.arange(window)[None]  # (b, window)
        yield torch.from_numpy(np.asarray(data[idx], dtype=np.int64)).to(device)
