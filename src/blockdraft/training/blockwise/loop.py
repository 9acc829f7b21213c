"""The training loop: :func:`train` (see the package docstring for the modes and the loss)."""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path

import numpy as np
import torch

from blockdraft.models.blockwise import BlockwiseLM
from blockdraft.models.tokenizer import BaseTokenizer
from blockdraft.training.blockwise.config import (
    MODES,
    EvalResult,
    TrainConfig,
    TrainMode,
    TrainResult,
)
from blockdraft.training.blockwise.data import check_stream, random_windows
from blockdraft.training.blockwise.evaluate import evaluate
from blockdraft.training.blockwise.loss import batch_loss
from blockdraft.training.blockwise.schedule import (
    lr_factor,
    make_optimizer,
    phase_at,
    phases,
    set_trainable,
)
from blockdraft.training.blockwise.state import (
    TRAIN_STATE_FILE,
    load_checkpoint,
    save_checkpoint,
    seed_everything,
)
from blockdraft.training.errors import TrainingError

logger = logging.getLogger("blockdraft.training.blockwise")


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
    tokenizer: BaseTokenizer | None = None,
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
        mode: "joint", "heads", "base" or "base-then-heads" (see the package docstring).
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
        TrainingError: on an unknown mode, data too short or outside the vocabulary,
            ``seq_len > max_seq_len``, ``head_weights`` of the wrong length, "heads" training
            of a model with ``h = 1``, ``resume`` without ``checkpoint_dir``, or a checkpoint
            that does not match this run.
    """
    cfg = cfg or TrainConfig()
    if not isinstance(model, BlockwiseLM):
        raise TrainingError(f"train expects a BlockwiseLM, got {type(model).__name__}")
    if mode not in MODES:
        raise TrainingError(f"unknown training mode {mode!r}; choose one of {MODES}")
    h, V = model.config.h, model.config.vocab_size  # noqa: N806
    if h == 1 and mode in ("heads", "base-then-heads"):
        raise TrainingError(f"mode {mode!r} trains extra heads, but this model has h = 1")
    if cfg.seq_len > model.config.max_seq_len:
        raise TrainingError(
            f"seq_len = {cfg.seq_len} exceeds the model's max_seq_len = "
            f"{model.config.max_seq_len}"
        )
    head_weights = cfg.head_weights or (1.0,) * h
    if len(head_weights) != h:
        raise TrainingError(
            f"head_weights has {len(head_weights)} entries but the model has h = {h} heads"
        )
    if resume and checkpoint_dir is None:
        raise TrainingError("resume=True needs a checkpoint_dir")
    window = cfg.seq_len + h
    data = check_stream(token_ids, "token_ids", V, window)
    held = None if eval_ids is None else check_stream(eval_ids, "eval_ids", V, window)

    device = model.device
    seed_everything(seed)
    rng = np.random.default_rng(seed)
    generator = torch.Generator(device="cpu").manual_seed(seed)
    weights = torch.tensor(head_weights, dtype=torch.float32, device=device)
    optimizer = make_optimizer(model, cfg)
    plan = phases(mode, cfg)
    ckpt = None if checkpoint_dir is None else Path(checkpoint_dir)
    start = 0
    if resume and ckpt is not None:
        if (ckpt / TRAIN_STATE_FILE).is_file():
            start = load_checkpoint(ckpt, model, optimizer, rng, generator, mode, cfg)
            logger.info("resumed from %s at step %d", ckpt, start)
        else:
            logger.info("no checkpoint in %s; starting from step 0", ckpt)

    from rich.console import Console
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
    phase_now = ""
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[info]}"), TimeRemainingColumn())
    try:
        # On stderr, so that a caller's stdout (tables, JSON) stays clean.
        with Progress(*columns, disable=not progress, console=Console(stderr=True)) as bar:
            task = bar.add_task(f"train ({mode})", total=cfg.steps, completed=start, info="")
            for step in range(start, cfg.steps):
                phase, phase_step, phase_len = phase_at(plan, step)
                if phase != phase_now:
                    set_trainable(model, phase)
                    phase_now = phase
                lr = cfg.lr * lr_factor(cfg, phase_step, phase_len)
                for group in optimizer.param_groups:
                    group["lr"] = lr
                t0 = time.perf_counter()
                chunk = random_windows(data, rng, cfg.batch_size, window, device)
                loss = batch_loss(model, chunk, phase, weights, cfg.head_position_fraction,
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
                    raise TrainingError(
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
                    set_trainable(model, phase)  # evaluate() left every module in train mode
                    logger.info(
                        "step %d held-out loss per head %s, top-1 %s", done,
                        " ".join(f"{x:.3f}" for x in ev.loss),
                        " ".join(f"{x:.3f}" for x in ev.accuracy),
                    )
                if ckpt is not None and (
                    (cfg.checkpoint_interval and done % cfg.checkpoint_interval == 0)
                    or done == cfg.steps
                ):
                    save_checkpoint(ckpt, model, optimizer, rng, generator, done, mode, seed,
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
