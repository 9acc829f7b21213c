"""The training loss of one batch (Kim et al. 2024 App. C.1): ``sum_i w_i * CE_i``.

Head ``i`` at position ``t`` predicts token ``t + i`` (natural-log cross-entropy, mean over
positions). Head 1's loss covers every position; heads 2..h take theirs on a random
``fraction`` of the positions (the same ones for every head), because ``h`` full softmaxes at
every position cost about 5x the transformer body.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F  # noqa: N812 - the PyTorch convention

from blockdraft.models.blockwise import BlockwiseLM


def batch_loss(
    model: BlockwiseLM,
    chunk: torch.Tensor,
    phase: str,
    weights: torch.Tensor,
    fraction: float,
    generator: torch.Generator,
) -> torch.Tensor:
    """The weighted training loss of one batch ``chunk [B, seq_len + h]`` (nats).

    ``phase`` "base" scores head 1 only, "heads" heads 2..h only (the base runs without
    gradients), "joint" both; ``generator`` draws the heads' positions.
    """
    h, V = model.config.h, model.config.vocab_size  # noqa: N806
    B, L = chunk.shape  # noqa: N806
    T = L - h  # noqa: N806 - input positions
    frozen_base = phase == "heads"
    with torch.no_grad() if frozen_base else contextlib.nullcontext():
        x, _ = model.hidden(chunk[:, :T])  # (B, T, d)
    total = x.new_zeros(())
    if phase in ("joint", "base"):
        logits = model.project(x)  # (B, T, V)
        ce = F.cross_entropy(logits.reshape(B * T, V), chunk[:, 1 : T + 1].reshape(B * T))
        total = total + weights[0] * ce
    if phase in ("joint", "heads") and h > 1:
        n = max(1, round(fraction * B * T))
        idx = torch.randperm(B * T, generator=generator)[:n].to(chunk.device)  # (n,)
        states = model.extra_head_states(x.reshape(B * T, -1)[idx])  # (n, h-1, d)
        logits = model.project(states)  # (n, h-1, V)
        targets = torch.stack(
            [chunk[:, i : i + T].reshape(B * T)[idx] for i in range(2, h + 1)], dim=1
        )  # (n, h-1): head i at position t predicts token t + i
        ce_heads = F.cross_entropy(
            logits.reshape(n * (h - 1), V), targets.reshape(n * (h - 1)), reduction="none"
        ).view(n, h - 1).mean(dim=0)  # (h-1,)
        total = total + (weights[1:] * ce_heads).sum()
    return total
