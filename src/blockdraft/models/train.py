"""Training the blockwise LM's heads (Stern et al. 2018 sec. 6; Kim et al. 2024 App. C.1).

Public surface:
    TrainConfig                  frozen hyper-parameters (defaults sized for ``small`` on a CPU)
    train(model, token_ids, cfg, eval_ids=None, mode="joint", ...) -> TrainResult
    evaluate(model, token_ids, seq_len, batch_size, n_batches) -> EvalResult
    distill_targets(model, prompts, max_new_tokens, eos_id=None) -> np.ndarray

The loss (Kim App. C.1) is ``sum_i w_i * CE_i``: head ``i`` at position ``t`` predicts token
``t + i`` (natural-log cross-entropy, mean over positions, weights 1 by default). Head 1's loss
covers every position; heads 2..h take theirs on a random ``head_position_fraction`` of the
positions (the same ones for every head), because ``h`` full softmaxes at every position cost
~5x the transformer body (NOTES.md).

Modes:
    "joint"            every parameter, every head's loss
    "base"             the base LM alone (head 1's loss); the extra heads are untouched
    "heads"            the extra heads alone on a frozen base (Stern's "regular" setting): the
                       base runs without gradients, so head 1's output is unchanged
    "base-then-heads"  "base" for ``base_fraction`` of the steps, then "heads": NOTES.md found
                       joint training from scratch holds the base near the unigram entropy

Each phase has its own schedule (linear warm-up, then cosine/linear decay or constant).
A run is seeded (``random``, numpy, torch) and reproducible: the same seed, model
initialisation and data give the same weights, and a resumed run continues exactly where the
checkpoint left off (model, optimizer, every RNG).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812 - the PyTorch convention

from blockdraft.models.blockwise import BlockwiseLM
from blockdraft.models.checkpoint import read_model_config, save_model
from blockdraft.models.errors import ModelError
from blockdraft.models.generate import greedy_generate
from blockdraft.models.tokenizer import Tokenizer

logger = logging.getLogger(__name__)

TrainMode = Literal["joint", "heads", "base", "base-then-heads"]
MODES: tuple[TrainMode, ...] = ("joint", "heads", "base", "base-then-heads")
SCHEDULES = ("cosine", "linear", "constant")
TRAIN_STATE_FILE = "train_state.json"
OPTIMIZER_FILE = "optimizer.pt"
# Fields that may change between a checkpoint and its resumption.
_RESUMABLE_CHANGES = ("eval_interval", "eval_batches", "checkpoint_interval")


@dataclass(frozen=True)
class TrainConfig:
    """Training hyper-parameters.

    Raises:
        ModelError: on a non-positive size, a fraction outside its range, or an unknown
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
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ModelError(f"TrainConfig.{name} must be a positive integer, got {value!r}")
        for name in ("warmup_steps", "eval_interval", "checkpoint_interval"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ModelError(
                    f"TrainConfig.{name} must be a non-negative integer, got {value!r}"
                )
        if not self.lr > 0:
            raise ModelError(f"TrainConfig.lr must be positive, got {self.lr!r}")
        for name, lo, hi in (("min_lr_ratio", 0.0, 1.0), ("beta1", 0.0, 0.999999),
                             ("beta2", 0.0, 0.999999), ("base_fraction", 0.0, 1.0)):
            value = getattr(self, name)
            if not lo <= value <= hi:
                raise ModelError(f"TrainConfig.{name} must lie in [{lo}, {hi}], got {value!r}")
        if not 0.0 < self.head_position_fraction <= 1.0:
            raise ModelError(
                "TrainConfig.head_position_fraction must lie in (0, 1], got "
                f"{self.head_position_fraction!r}"
            )
        if self.weight_decay < 0 or self.grad_clip < 0:
            raise ModelError("TrainConfig.weight_decay and grad_clip must be >= 0")
        if self.schedule not in SCHEDULES:
            raise ModelError(f"unknown schedule {self.schedule!r}; choose one of {SCHEDULES}")
        if self.head_weights is not None:
            weights = tuple(float(w) for w in self.head_weights)
            if not weights or any(not math.isfinite(w) or w < 0 for w in weights):
                raise ModelError(
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
    """What a :func:`train` call did.

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


# ---- helpers -------------------------------------------------------------------------------


def _check_tokens(token_ids: Any, name: str, vocab_size: int, min_len: int) -> np.ndarray:
    arr = token_ids if isinstance(token_ids, np.ndarray) else np.asarray(token_ids)
    if arr.ndim != 1:
        raise ModelError(f"{name} must be a 1-D array of token ids, got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise ModelError(f"{name} must hold integer token ids, got dtype {arr.dtype}")
    if arr.size < min_len:
        raise ModelError(
            f"{name} has {arr.size} tokens; one training window needs seq_len + h = {min_len}: "
            "use more data or a smaller seq_len"
        )
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= vocab_size:
        raise ModelError(
            f"{name} holds token id {lo if lo < 0 else hi}, outside the model's vocabulary "
            f"[0, {vocab_size}); encode the data with the model's tokenizer"
        )
    return arr


def _phases(mode: str, cfg: TrainConfig) -> list[tuple[str, int]]:
    """``(phase mode, steps)`` in order."""
    if mode != "base-then-heads":
        return [(mode, cfg.steps)]
    n_base = round(cfg.base_fraction * cfg.steps)
    return [(m, n) for m, n in (("base", n_base), ("heads", cfg.steps - n_base)) if n > 0]


def _phase_at(phases: list[tuple[str, int]], step: int) -> tuple[str, int, int]:
    """(phase mode, step within the phase, phase length) of global step ``step`` (0-based)."""
    for mode, n in phases:
        if step < n:
            return mode, step, n
        step -= n
    raise AssertionError("step past the last phase")  # pragma: no cover


def _lr_factor(cfg: TrainConfig, step: int, n: int) -> float:
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


def _set_trainable(model: BlockwiseLM, phase: str) -> None:
    train_base = phase in ("joint", "base")
    train_heads = phase in ("joint", "heads")
    for p in model.base_parameters():
        p.requires_grad_(train_base)
    for p in model.head_parameters():
        p.requires_grad_(train_heads)
    model.train()
    if not train_base:  # a frozen base runs as at inference (no dropout)
        model.transformer.eval()
        if model.lm_head is not None:
            model.lm_head.eval()


def _make_optimizer(model: BlockwiseLM, cfg: TrainConfig) -> torch.optim.AdamW:
    params = list(dict.fromkeys(model.parameters()))  # tied weights once
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr, betas=(cfg.beta1, cfg.beta2),
    )


def _loss(
    model: BlockwiseLM,
    chunk: torch.Tensor,
    phase: str,
    weights: torch.Tensor,
    fraction: float,
    generator: torch.Generator,
) -> torch.Tensor:
    """The weighted training loss of one batch ``chunk [B, seq_len + h]`` (nats)."""
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
        ModelError: when ``token_ids`` is shorter than one window or holds ids outside the
            vocabulary.
    """
    h, V = model.config.h, model.config.vocab_size  # noqa: N806
    L = seq_len + h  # noqa: N806
    arr = _check_tokens(token_ids, "eval_ids", V, L)
    n_windows = min(arr.size // L, n_batches * batch_size)
    was_training = model.training
    model.eval()
    loss_sum = torch.zeros(h, dtype=torch.float64)
    hit_sum = torch.zeros(h, dtype=torch.float64)
    try:
        for start in range(0, n_windows, batch_size):
            rows = np.arange(start, min(start + batch_size, n_windows))
            idx = rows[:, None] * L + np.arange(L)[None]  # (b, L)
            chunk = torch.from_numpy(np.asarray(arr[idx], dtype=np.int64)).to(model.device)
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


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002 - for callers' code on the global generator
    torch.manual_seed(seed)


def _save_checkpoint(
    directory: Path,
    model: BlockwiseLM,
    optimizer: torch.optim.Optimizer,
    rng: np.random.Generator,
    generator: torch.Generator,
    step: int,
    mode: str,
    seed: int,
    cfg: TrainConfig,
    tokenizer: Tokenizer | None,
    last_eval: EvalResult | None,
) -> None:
    """Model directory + optimizer + RNG states; ``train_state.json`` is written last."""
    train_meta: dict[str, Any] = {"step": step, "mode": mode, "seed": seed,
                                  "train_config": cfg.to_dict()}
    if last_eval is not None:
        train_meta["last_eval"] = dataclasses.asdict(last_eval)
    save_model(model, directory, tokenizer=tokenizer, extra_meta={"train": train_meta})
    tmp = directory / (OPTIMIZER_FILE + ".tmp")
    torch.save({"step": step, "optimizer": optimizer.state_dict(),
                "torch_rng": torch.get_rng_state(), "position_rng": generator.get_state()}, tmp)
    tmp.replace(directory / OPTIMIZER_FILE)
    state = {"step": step, "mode": mode, "seed": seed, "train_config": cfg.to_dict(),
             "numpy_rng": rng.bit_generator.state}
    tmp = directory / (TRAIN_STATE_FILE + ".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
    tmp.replace(directory / TRAIN_STATE_FILE)


def _load_checkpoint(
    directory: Path,
    model: BlockwiseLM,
    optimizer: torch.optim.Optimizer,
    rng: np.random.Generator,
    generator: torch.Generator,
    mode: str,
    cfg: TrainConfig,
) -> int:
    """Restore a checkpoint of :func:`_save_checkpoint` into the objects; returns its step."""
    from safetensors.torch import load_file

    state_path = directory / TRAIN_STATE_FILE
    try:
        state = json.loads(state_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ModelError(f"cannot read {state_path}: {e}; delete the checkpoint to start over") \
            from e
    if state.get("mode") != mode:
        raise ModelError(
            f"the checkpoint in {directory} was trained with mode={state.get('mode')!r}, "
            f"not {mode!r}; resume with the same mode or use another checkpoint_dir"
        )
    saved = dict(state.get("train_config", {}))
    now = cfg.to_dict()
    changed = sorted(k for k in now if k not in _RESUMABLE_CHANGES and saved.get(k) != now[k])
    if changed:
        raise ModelError(
            f"the checkpoint in {directory} used other training settings: "
            + ", ".join(f"{k}={saved.get(k)!r} (now {now[k]!r})" for k in changed)
            + "; resume with the same TrainConfig (only eval/checkpoint intervals may change)"
        )
    _, config, meta = read_model_config(directory)
    if config != model.config:
        raise ModelError(
            f"the checkpoint in {directory} holds a model of another config ({config}); "
            f"this model is {model.config}"
        )
    step = int(state["step"])
    opt_path = directory / OPTIMIZER_FILE
    try:
        opt_state = torch.load(opt_path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError) as e:
        raise ModelError(f"cannot read {opt_path}: {e}; the checkpoint is incomplete") from e
    meta_step = meta.get("train", {}).get("step")
    if opt_state.get("step") != step or meta_step != step:
        raise ModelError(
            f"the checkpoint in {directory} is inconsistent (train_state step {step}, optimizer "
            f"step {opt_state.get('step')}, model step {meta_step}): a save was interrupted; "
            "delete the directory to start over"
        )
    weights = load_file(str(directory / "model.safetensors"), device="cpu")
    model.load_state_dict(weights)
    optimizer.load_state_dict(opt_state["optimizer"])
    torch.set_rng_state(opt_state["torch_rng"])
    generator.set_state(opt_state["position_rng"])
    rng.bit_generator.state = state["numpy_rng"]
    return step


# ---- the training loop ---------------------------------------------------------------------


def train(
    model: BlockwiseLM,
    token_ids: np.ndarray,
    cfg: TrainConfig | None = None,
    eval_ids: np.ndarray | None = None,
    mode: TrainMode = "joint",
    progress: bool = True,
    seed: int = 0,
    checkpoint_dir: str | Path | None = None,
    resume: bool = False,
    tokenizer: Tokenizer | None = None,
) -> TrainResult:
    """Train ``model`` in place on a token stream.

    Args:
        model: a :class:`BlockwiseLM` (or :class:`RescorerLM`, with mode "base" or "joint"),
            on the device to train on.
        token_ids: 1-D integer array (a ``np.memmap`` works) of the training stream;
            windows of ``seq_len + h`` tokens are drawn at uniformly random offsets.
        cfg: hyper-parameters (default ``TrainConfig()``).
        eval_ids: held-out stream for periodic loss / top-1 accuracy per head (logged, and
            returned in ``TrainResult.evals``).
        mode: "joint", "heads", "base" or "base-then-heads" (see the module docstring).
        progress: show a progress bar (loss, tokens/s) on the terminal.
        seed: seeds ``random``, numpy and torch (the window offsets, the positions of the
            heads' loss, dropout). The model's initialisation is the caller's: seed torch
            before building the model for a fully reproducible run.
        checkpoint_dir: where to save checkpoints (a loadable model directory plus
            ``optimizer.pt`` and ``train_state.json``) every ``checkpoint_interval`` steps
            and at the end.
        resume: continue from the checkpoint in ``checkpoint_dir`` when there is one (the
            model's weights are replaced by the checkpoint's); start afresh when there is none.
        tokenizer: saved beside the checkpoints so they are complete model directories.

    Returns:
        A :class:`TrainResult`. The model is left in eval mode with every parameter trainable.

    Raises:
        ModelError: on an unknown mode, data too short or outside the vocabulary,
            ``seq_len > max_seq_len``, ``head_weights`` of the wrong length, "heads" training
            of a model with ``h = 1``, ``resume`` without ``checkpoint_dir``, or a checkpoint
            that does not match this run.
    """
    cfg = cfg or TrainConfig()
    if not isinstance(model, BlockwiseLM):
        raise ModelError(f"train expects a BlockwiseLM, got {type(model).__name__}")
    if mode not in MODES:
        raise ModelError(f"unknown training mode {mode!r}; choose one of {MODES}")
    h, V = model.config.h, model.config.vocab_size  # noqa: N806
    if h == 1 and mode in ("heads", "base-then-heads"):
        raise ModelError(f"mode {mode!r} trains extra heads, but this model has h = 1")
    if cfg.seq_len > model.config.max_seq_len:
        raise ModelError(
            f"seq_len = {cfg.seq_len} exceeds the model's max_seq_len = "
            f"{model.config.max_seq_len}"
        )
    head_weights = cfg.head_weights or (1.0,) * h
    if len(head_weights) != h:
        raise ModelError(
            f"head_weights has {len(head_weights)} entries but the model has h = {h} heads"
        )
    if resume and checkpoint_dir is None:
        raise ModelError("resume=True needs a checkpoint_dir")
    window = cfg.seq_len + h
    data = _check_tokens(token_ids, "token_ids", V, window)
    held = None if eval_ids is None else _check_tokens(eval_ids, "eval_ids", V, window)

    device = model.device
    _seed_everything(seed)
    rng = np.random.default_rng(seed)
    generator = torch.Generator(device="cpu").manual_seed(seed)
    weights = torch.tensor(head_weights, dtype=torch.float32, device=device)
    optimizer = _make_optimizer(model, cfg)
    phases = _phases(mode, cfg)
    ckpt = None if checkpoint_dir is None else Path(checkpoint_dir)
    start = 0
    if resume and ckpt is not None:
        if (ckpt / TRAIN_STATE_FILE).is_file():
            start = _load_checkpoint(ckpt, model, optimizer, rng, generator, mode, cfg)
            logger.info("resumed from %s at step %d", ckpt, start)
        else:
            logger.info("no checkpoint in %s; starting from step 0", ckpt)

    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    history: list[tuple[int, float]] = []
    evals: list[EvalResult] = []
    t_start = time.perf_counter()
    t_train = 0.0
    tokens = 0
    offsets_max = data.size - window
    phase_now = ""
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[info]}"), TimeRemainingColumn())
    try:
        from rich.console import Console

        # On stderr, so that a caller's stdout (tables, JSON) stays clean.
        with Progress(*columns, disable=not progress, console=Console(stderr=True)) as bar:
            task = bar.add_task(f"train ({mode})", total=cfg.steps, completed=start, info="")
            for step in range(start, cfg.steps):
                phase, phase_step, phase_len = _phase_at(phases, step)
                if phase != phase_now:
                    _set_trainable(model, phase)
                    phase_now = phase
                lr = cfg.lr * _lr_factor(cfg, phase_step, phase_len)
                for group in optimizer.param_groups:
                    group["lr"] = lr
                t0 = time.perf_counter()
                offsets = rng.integers(0, offsets_max + 1, size=cfg.batch_size)
                idx = offsets[:, None] + np.arange(window)[None]  # (B, seq_len + h)
                chunk = torch.from_numpy(np.asarray(data[idx], dtype=np.int64)).to(device)
                loss = _loss(model, chunk, phase, weights, cfg.head_position_fraction,
                             generator)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()  # type: ignore[no-untyped-call]
                if cfg.grad_clip > 0:
                    torch.nn.utils.clip_grad_norm_(
                        [p for p in model.parameters() if p.grad is not None], cfg.grad_clip
                    )
                optimizer.step()
                value = float(loss.detach())
                if not math.isfinite(value):
                    raise ModelError(
                        f"the training loss became {value} at step {step + 1}; lower lr "
                        f"(now {cfg.lr}) or raise warmup_steps"
                    )
                t_train += time.perf_counter() - t0
                tokens += cfg.batch_size * cfg.seq_len
                history.append((step + 1, value))
                held_info = "" if not evals else f" | held-out {evals[-1].loss[0]:.3f}"
                bar.update(task, advance=1, info=(
                    f"{phase} loss {value:.3f} | {tokens / max(t_train, 1e-9):,.0f} tok/s"
                    + held_info
                ))
                done = step + 1
                if held is not None and (
                    (cfg.eval_interval and done % cfg.eval_interval == 0) or done == cfg.steps
                ):
                    ev = evaluate(model, held, cfg.seq_len, cfg.batch_size, cfg.eval_batches,
                                  step=done)
                    evals.append(ev)
                    _set_trainable(model, phase)  # evaluate() left every module in train mode
                    logger.info(
                        "step %d held-out loss per head %s, top-1 %s", done,
                        " ".join(f"{x:.3f}" for x in ev.loss),
                        " ".join(f"{x:.3f}" for x in ev.accuracy),
                    )
                if ckpt is not None and (
                    (cfg.checkpoint_interval and done % cfg.checkpoint_interval == 0)
                    or done == cfg.steps
                ):
                    _save_checkpoint(ckpt, model, optimizer, rng, generator, done, mode, seed,
                                     cfg, tokenizer, evals[-1] if evals else None)
    finally:
        for p in model.parameters():
            p.requires_grad_(True)
        model.eval()
    return TrainResult(
        steps=start + len(history),
        mode=mode,
        final_loss=history[-1][1] if history else float("nan"),
        history=tuple(history),
        evals=tuple(evals),
        tokens_seen=tokens,
        tokens_per_s=tokens / t_train if t_train > 0 else 0.0,
        wall_s=time.perf_counter() - t_start,
    )


def distill_targets(
    model: BlockwiseLM,
    prompts: Sequence[Sequence[int] | np.ndarray],
    max_new_tokens: int,
    eos_id: int | None = None,
) -> np.ndarray:
    """Sequence-level distillation data (Stern sec. 6.2): the base model's own greedy outputs.

    Each prompt is followed by head 1's greedy continuation (:func:`greedy_generate`), and
    with ``eos_id`` by an EOS when the continuation did not end with one; the results are
    concatenated into one stream for ``train(..., mode="heads")``, so the heads learn to
    predict what the base model will actually say.

    Returns:
        int64 ``[N]`` token stream.

    Raises:
        ModelError: on an empty prompt list or a prompt :func:`greedy_generate` rejects.
    """
    if len(prompts) == 0:
        raise ModelError("distill_targets needs at least one prompt")
    parts: list[np.ndarray] = []
    for prompt in prompts:
        out = list(prompt) + greedy_generate(model, prompt, max_new_tokens, eos_id)
        if eos_id is not None and out[-1] != eos_id:
            out.append(eos_id)
        parts.append(np.asarray(out, dtype=np.int64))
    return np.concatenate(parts)
