"""Held-out evaluation: cross-entropy and top-1 accuracy of every head."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812 - the PyTorch convention

from blockdraft.models.blockwise import BlockwiseLM
from blockdraft.training.blockwise.config import EvalResult
from blockdraft.training.blockwise.data import check_stream, consecutive_windows


@torch.no_grad()
def evaluate(
    model: BlockwiseLM,
    token_ids: np.ndarray,
    seq_len: int = 128,
    batch_size: int = 32,
    n_batches: int = 8,
    step: int = 0,
) -> EvalResult:
    """Held-out cross-entropy and top-1 accuracy of every head, at every position.

    Reads consecutive non-overlapping windows of ``seq_len + h`` tokens from the start of
    ``token_ids`` (at most ``n_batches * batch_size`` of them), so the numbers are comparable
    between calls.

    Raises:
        TrainingError: when ``token_ids`` is shorter than one window or holds ids outside the
            vocabulary.
    """
    h, V = model.config.h, model.config.vocab_size  # noqa: N806
    L = seq_len + h  # noqa: N806
    arr = check_stream(token_ids, "eval_ids", V, L)
    n_windows = min(arr.size // L, n_batches * batch_size)
    was_training = model.training
    model.eval()
    loss_sum = torch.zeros(h, dtype=torch.float64)
    hit_sum = torch.zeros(h, dtype=torch.float64)
    try:
        for chunk in consecutive_windows(arr, L, n_windows, batch_size, model.device):
            x, _ = model.hidden(chunk[:, :seq_len])  # (b, T, d)
            for i in range(1, h + 1):  # one head at a time: (b, T, V) logits, not (b, T, h, V)
                state = x if i == 1 else model.extra_heads[i - 2](x)  # (b, T, d)
                logits = model.project(state).float()  # (b, T, V)
                target = chunk[:, i : i + seq_len]  # (b, T)
                loss_sum[i - 1] += F.cross_entropy(
                    logits.reshape(-1, V), target.reshape(-1), reduction="sum"
                ).double().cpu()
                hit_sum[i - 1] += (logits.argmax(-1) == target).sum().double().cpu()
    finally:
        model.train(was_training)
    positions = n_windows * seq_len
    return EvalResult(
        step=step,
        loss=tuple((loss_sum / positions).tolist()),
        accuracy=tuple((hit_sum / positions).tolist()),
        positions=positions,
    )
