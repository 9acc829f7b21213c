"""What is trained when, and how fast: phases of a mode, the learning-rate schedule, which
parameters are trainable in a phase, and the optimizer."""

from __future__ import annotations

import math

import torch

from blockdraft.models.blockwise import BlockwiseLM
from blockdraft.training.blockwise.config import TrainConfig


def phases(mode: str, cfg: TrainConfig) -> list[tuple[str, int]]:
    """``(phase mode, steps)`` in order."""
    if mode != "base-then-heads":
        return [(mode, cfg.steps)]
    n_base = round(cfg.base_fraction * cfg.steps)
    return [(m, n) for m, n in (("base", n_base), ("heads", cfg.steps - n_base)) if n > 0]


def phase_at(plan: list[tuple[str, int]], step: int) -> tuple[str, int, int]:
    """(phase mode, step within the phase, phase length) of global step ``step`` (0-based)."""
    for mode, n in plan:
        if step < n:
            return mode, step, n
        step -= n
    raise AssertionError("step past the last phase")  # pragma: no cover


def lr_factor(cfg: TrainConfig, step: int, n: int) -> float:
    """The schedule's multiplier of ``cfg.lr`` at ``step`` (0-based) of an ``n``-step phase."""
    warmup = min(cfg.warmup_steps, max(n - 1, 0))
    if step < warmup:
        return (step + 1) / (warmup + 1)
    if cfg.schedule == "constant" or n - warmup <= 1:
        return 1.0
    progress = (step - warmup) / (n - warmup - 1)  # 0 -> 1
    if cfg.schedule == "cosine":
        decay = 0.5 * (1.0 + math.cos(math.pi * progress))
    else:
        decay = 1.0 - progress
    return cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * decay


def set_trainable(model: BlockwiseLM, phase: str) -> None:
    """Make the parameters of ``phase`` trainable and freeze the others; a frozen base runs as
    at inference (no dropout)."""
    train_base = phase in ("joint", "base")
    train_heads = phase in ("joint", "heads")
    for p in model.base_parameters():
        p.requires_grad_(train_base)
    for p in model.head_parameters():
        p.requires_grad_(train_heads)
    model.train()
    if not train_base:
        model.transformer.eval()
        if model.lm_head is not None:
            model.lm_head.eval()


def make_optimizer(model: BlockwiseLM, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices and embeddings only (tied weights counted once)."""
    params = list(dict.fromkeys(model.parameters()))
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr, betas=(cfg.beta1, cfg.beta2),
    )
