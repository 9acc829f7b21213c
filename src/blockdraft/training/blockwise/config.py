"""The training run's settings and results: :class:`TrainConfig`, :class:`TrainResult`,
:class:`EvalResult`, and the training modes."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal

from blockdraft.core.checks import check_int, check_positive_int
from blockdraft.training.errors import TrainingError

TrainMode = Literal["joint", "heads", "base", "base-then-heads"]
MODES: tuple[TrainMode, ...] = ("joint", "heads", "base", "base-then-heads")
SCHEDULES = ("cosine", "linear", "constant")


@dataclass(frozen=True)
class TrainConfig:
    """Training hyper-parameters.

    Raises:
        TrainingError: on a non-positive size, a fraction outside its range, or an unknown
            schedule.
    """

    steps: int = 2000  # optimizer steps, all phases together (~1 h for `small` on 2 CPU cores)
    batch_size: int = 32  # sequences per step
    seq_len: int = 128  # input positions per sequence (a sample reads seq_len + h tokens)
    lr: float = 1e-3  # peak learning rate
    min_lr_ratio: float = 0.1  # the schedule decays to min_lr_ratio * lr
    warmup_steps: int = 100  # linear warm-up from 0 at the start of each phase
    schedule: str = "cosine"  # decay after warm-up: "cosine", "linear" or "constant"
    weight_decay: float = 0.1  # AdamW decoupled decay, on matrices and embeddings only
    beta1: float = 0.9  # AdamW
    beta2: float = 0.95  # AdamW
    grad_clip: float = 1.0  # clip the global gradient norm to this; 0 disables
    head_weights: tuple[float, ...] | None = None  # loss weight of heads 1..h; None = all 1
    head_position_fraction: float = 0.125  # share of positions where heads 2..h take a loss
    base_fraction: float = 0.5  # "base-then-heads": share of the steps spent on the base
    eval_interval: int = 200  # steps between held-out evaluations (0: only at the end)
    eval_batches: int = 8  # held-out batches (of batch_size windows) per evaluation
    checkpoint_interval: int = 0  # steps between checkpoints (0: only at the end)

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "seq_len", "eval_batches"):
            value = check_positive_int(getattr(self, name), f"TrainConfig.{name}", TrainingError)
            object.__setattr__(self, name, value)
        for name in ("warmup_steps", "eval_interval", "checkpoint_interval"):
            value = check_int(getattr(self, name), f"TrainConfig.{name}", TrainingError, minimum=0)
            object.__setattr__(self, name, value)
        if not self.lr > 0:
            raise TrainingError(f"TrainConfig.lr must be positive, got {self.lr!r}")
        for name, lo, hi in (("min_lr_ratio", 0.0, 1.0), ("beta1", 0.0, 0.999999),
                             ("beta2", 0.0, 0.999999), ("base_fraction", 0.0, 1.0)):
            value = getattr(self, name)
            if not lo <= value <= hi:
                raise TrainingError(f"TrainConfig.{name} must lie in [{lo}, {hi}], got {value!r}")
        if not 0.0 < self.head_position_fraction <= 1.0:
            raise TrainingError(
                "TrainConfig.head_position_fraction must lie in (0, 1], got "
                f"{self.head_position_fraction!r}"
            )
        if self.weight_decay < 0 or self.grad_clip < 0:
            raise TrainingError("TrainConfig.weight_decay and grad_clip must be >= 0")
        if self.schedule not in SCHEDULES:
            raise TrainingError(f"unknown schedule {self.schedule!r}; choose one of {SCHEDULES}")
        if self.head_weights is not None:
            weights = tuple(float(w) for w in self.head_weights)
            if not weights or any(not math.isfinite(w) or w < 0 for w in weights):
                raise TrainingError(
                    f"head_weights must be finite and >= 0, got {self.head_weights!r}"
                )
            object.__setattr__(self, "head_weights", weights)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        data = dataclasses.asdict(self)
        if data["head_weights"] is not None:
            data["head_weights"] = list(data["head_weights"])
        return data


@dataclass(frozen=True)
class EvalResult:
    """Held-out loss and top-1 accuracy per head.

    Attributes:
        step: the optimizer step it was measured after.
        loss: ``[h]`` mean cross-entropy of head ``i`` (index ``i - 1``), nats per token.
        accuracy: ``[h]`` share of positions where head ``i``'s argmax is the token at ``t + i``.
        positions: positions scored (per head).
    """

    step: int
    loss: tuple[float, ...]
    accuracy: tuple[float, ...]
    positions: int


@dataclass(frozen=True)
class TrainResult:
    """What a :func:`~blockdraft.training.blockwise.train` call did.

    Attributes:
        steps: optimizer steps done in total (a resumed run counts the checkpoint's steps).
        mode: the training mode.
        final_loss: the last step's training loss ``sum_i w_i CE_i`` (nats), or NaN when the
            call ran no step (resumed at the end).
        history: ``(step, training loss)`` of every step of this call.
        evals: held-out evaluations of this call (empty without ``eval_ids``).
        tokens_seen: input positions processed by this call (``steps x batch x seq_len``).
        tokens_per_s: training throughput of this call (evaluation time excluded).
        wall_s: this call's wall-clock seconds.
    """

    steps: int
    mode: str
    final_loss: float
    history: tuple[tuple[int, float], ...]
    evals: tuple[EvalResult, ...]
    tokens_seen: int
    tokens_per_s: float
    wall_s: float
