"""The resumable training loop every kind of heads trains with (Medusa, prefix, EAGLE layer).

A kind brings its module, its optimizer, its seeded sampler, one step's loss on a fresh batch
and a held-out evaluation; :func:`run_loop` does the rest, the same way for every kind:
the learning rate of each step (``settings.lr_at``), an evaluation every ``eval_every`` steps
(and at the end, at a time box or at ``stop_after``) whose curve entry holds ``step``,
``positions`` (training positions seen), ``seconds`` (training wall time so far),
``train_loss``, ``heldout_loss``, ``top1``/``top5`` per head (or draft step) and any other
figure the evaluation returns; a checkpoint at each evaluation (the module, the best
evaluation's weights, optimizer, step, sampler state, curve), so a run resumes where it stopped
and ends with the same weights as an uninterrupted one; early stopping on ``patience``
evaluations without a better mean held-out top-1; and at the end the weights of the best
evaluation, not the last.

Public surface:
    CHECKPOINT_FILE, CURVE_FILE                a training folder's files
    read_checkpoint(path) -> dict              a training folder's ``checkpoint.pt``
    check_training_folder(work) -> Path        a training can start or go on there
    LoopSettings                               what the loop reads of a run's settings
    LoopResult                                 step, curve, finished, best_step
    run_loop(module, optimizer, sampler, batch_loss, evaluate, settings, work, identity,
             signature, ...) -> LoopResult
"""

from __future__ import annotations

import json
import os
import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from blockdraft.core.files import atomic_path, write_text_atomic
from blockdraft.training.errors import TrainingError
from blockdraft.training.heads.progress import ProgressBar
from blockdraft.training.resume import changed_settings, check_run_folder

CHECKPOINT_FILE = "checkpoint.pt"
CURVE_FILE = "curve.json"
_SCORES = ("loss", "top1", "top5", "positions")
"""What every evaluation returns (the curve keeps ``top1``/``top5`` and the loss as
``heldout_loss``; ``positions``, the count scored, is not kept)."""


class LoopSettings(Protocol):
    """What :func:`run_loop` reads of a run's settings."""

    @property
    def steps(self) -> int: ...

    @property
    def eval_every(self) -> int: ...

    @property
    def patience(self) -> int: ...

    def lr_at(self, step: int) -> float: ...


@dataclass(frozen=True)
class LoopResult:
    """What :func:`run_loop` ends with (the module holds the best evaluation's weights).

    Attributes:
        step: steps done.
        curve: one entry per evaluation (see the module docstring).
        finished: True when the run reached ``steps`` or stopped early on ``patience``.
        best_step: the step whose weights the module holds (0: no evaluation yet).
    """

    step: int
    curve: list[dict[str, Any]]
    finished: bool
    best_step: int


def check_training_folder(work: str | os.PathLike[str]) -> Path:
    """``work`` as a path, if a head training can start there (nothing there, or an empty
    folder) or go on there (it holds a ``checkpoint.pt``).

    Raises:
        TrainingError: a file, or a folder of other files (they are a user's, not a run's).
    """
    return check_run_folder(work, CHECKPOINT_FILE, "a head-training folder")


def read_checkpoint(path: Path) -> dict[str, Any]:
    """The state :func:`run_loop` saved in ``path`` (``checkpoint.pt``).

    Raises:
        TrainingError: a file torch cannot read, or one that is not such a checkpoint.
    """
    try:
        state = torch.load(path, weights_only=False, map_location="cpu")
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as e:
        raise TrainingError(f"cannot read the head-training checkpoint {str(path)!r} "
                            f"({type(e).__name__}: {e}); delete it to start over") from e
    if not isinstance(state, dict) or not {"identity", "heads", "step"} <= state.keys():
        raise TrainingError(f"{str(path)!r} is not a head-training checkpoint; delete it or "
                            "choose another folder")
    return state


def run_loop(
    module: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    sampler: torch.Generator,
    batch_loss: Callable[[], tuple[torch.Tensor, int]],
    evaluate: Callable[[], dict[str, Any]],
    settings: LoopSettings,
    work: Path,
    identity: dict[str, Any],
    signature: str,
    *,
    minutes: float | None = None,
    stop_after: int | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    label: str = "heads",
    extra_state: dict[str, Any] | None = None,
) -> LoopResult:
    """Train ``module`` from scratch or from ``work/checkpoint.pt`` (see the module docstring).

    Args:
        module: what trains (its state dict is the checkpoint's ``heads``).
        optimizer: its optimizer (the loop sets each step's learning rate).
        sampler: the generator ``batch_loss`` draws its batches with (checkpointed).
        batch_loss: one step's ``(loss [], positions in the batch)`` on a fresh batch.
        evaluate: the held-out scores (the module in eval mode, no gradients):
            ``{"loss", "top1": [n], "top5": [n], ...}``; other figures go into the curve.
        settings: the run's (:class:`LoopSettings`).
        work: the training folder (created with the first checkpoint).
        identity: what a checkpoint must match to be continued (its settings and data).
        signature: the run's signature (in the checkpoint and ``curve.json``).
        minutes: this call's time box (a checkpoint is written when it ends).
        stop_after: stop (with a checkpoint) after this step, for tests.
        progress: a progress bar on a terminal; log: one line per evaluation, or None.
        label: the progress bar's label.
        extra_state: more entries for the checkpoint (read back by the caller).

    Raises:
        TrainingError: a checkpoint from other settings or data (each changed setting named).
    """
    checkpoint = work / CHECKPOINT_FILE
    step, curve, best, stale, running, seen = 0, [], -1.0, 0, [], 0
    best_state: dict[str, torch.Tensor] | None = None  # the best evaluation's weights
    best_step = 0
    if checkpoint.is_file():
        state = read_checkpoint(checkpoint)
        if state["identity"] != identity:
            saved = state["identity"]
            changed = changed_settings({**saved.get("settings", {}), "data": saved.get("data")},
                                       {**identity["settings"], "data": identity["data"]})
            raise TrainingError(
                f"{checkpoint} is from other settings or data: " + ", ".join(changed)
                + "; pass the same settings and data to continue it, or another folder")
        module.load_state_dict(state["heads"])
        optimizer.load_state_dict(state["optimizer"])
        sampler.set_state(state["sampler"])
        step, curve, best, stale = state["step"], state["curve"], state["best"], state["stale"]
        running = state["running"]
        best_state, best_step = state.get("best_heads"), state.get("best_step", 0)
        seen = state.get("positions", curve[-1]["positions"] if curve else 0)
        if log is not None:
            log(f"resumed {checkpoint} at step {step}")
    seconds_before = curve[-1]["seconds"] if curve else 0.0

    def save() -> None:
        work.mkdir(parents=True, exist_ok=True)  # only now: an early interrupt leaves nothing
        with atomic_path(checkpoint) as tmp:
            torch.save({"identity": identity, "signature": signature,
                        "heads": module.state_dict(), "optimizer": optimizer.state_dict(),
                        "sampler": sampler.get_state(), "step": step, "curve": curve,
                        "best": best, "stale": stale, "running": running,
                        "best_heads": best_state, "best_step": best_step, "positions": seen,
                        **(extra_state or {})}, tmp)
        write_text_atomic(work / CURVE_FILE, json.dumps(
            {"signature": signature, "curve": curve}, indent=1) + "\n")

    start = time.monotonic()
    bar = ProgressBar(label, settings.steps, step, enabled=progress)
    finished = step >= settings.steps or (settings.patience > 0 and stale >= settings.patience)
    try:
        module.train()
        while not finished:
            for group in optimizer.param_groups:
                group["lr"] = settings.lr_at(step)
            loss, count = batch_loss()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            step += 1
            seen += count
            running.append(float(loss.detach()))
            bar.advance(info=f"loss {running[-1]:.3f}")
            finished = step >= settings.steps
            out_of_time = minutes is not None and time.monotonic() - start >= 60.0 * minutes
            stop = stop_after is not None and step >= stop_after
            if step % settings.eval_every == 0 or finished or out_of_time or stop:
                module.eval()
                with torch.no_grad():
                    scores = evaluate()
                module.train()
                seconds = seconds_before + time.monotonic() - start
                curve.append({"step": step, "positions": seen, "seconds": round(seconds, 1),
                              "train_loss": sum(running) / max(len(running), 1),
                              "heldout_loss": scores["loss"], "top1": scores["top1"],
                              "top5": scores["top5"],
                              **{k: v for k, v in scores.items() if k not in _SCORES}})
                running = []
                mean1 = float(np.mean(scores["top1"]))
                if mean1 > best:
                    best, stale, best_step = mean1, 0, step
                    best_state = {k: v.detach().clone() for k, v in module.state_dict().items()}
                else:
                    stale += 1
                if settings.patience > 0 and stale >= settings.patience:
                    finished = True
                save()
                if log is not None:
                    extra = "".join(f", {k} {v:.3f}" for k, v in scores.items()
                                    if k not in _SCORES and isinstance(v, float))
                    log(f"step {step} ({seen} positions, {seconds:.0f} s): "
                        f"train loss {curve[-1]['train_loss']:.3f}, held-out loss "
                        f"{scores['loss']:.3f}, top-1 "
                        + " ".join(f"{v:.3f}" for v in scores["top1"]) + ", top-5 "
                        + " ".join(f"{v:.3f}" for v in scores["top5"]) + extra)
                if out_of_time or stop:
                    break
    finally:
        bar.close()
    if best_state is not None:
        module.load_state_dict(best_state)
    module.eval()
    return LoopResult(step, curve, finished, best_step)
