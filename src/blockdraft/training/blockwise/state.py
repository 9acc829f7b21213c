"""Resumable training checkpoints: a loadable model directory plus ``optimizer.pt`` (optimizer,
torch RNG, the heads' position generator) and ``train_state.json`` (step, mode, seed, settings,
the numpy RNG), each file written atomically and ``train_state.json`` last.

``train_state.json`` is sealed (:func:`blockdraft.core.digest.seal`) with the digest of
``optimizer.pt``, as ``config.json`` is with the weights': a resumption refuses a changed or
corrupted file. A checkpoint of an older blockdraft (no digests) still resumes, unchecked."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from blockdraft.core.digest import check_file, seal, sha256_file, unseal
from blockdraft.core.files import atomic_path, write_text_atomic
from blockdraft.models.blockwise import BlockwiseLM
from blockdraft.models.checkpoint import load_model, read_model_config, save_model
from blockdraft.models.tokenizer import BaseTokenizer
from blockdraft.training.blockwise.config import EvalResult, TrainConfig
from blockdraft.training.errors import TrainingError
from blockdraft.training.resume import changed_settings

TRAIN_STATE_FILE = "train_state.json"
OPTIMIZER_FILE = "optimizer.pt"
# Fields that may change between a checkpoint and its resumption.
RESUMABLE_CHANGES = ("eval_interval", "eval_batches", "checkpoint_interval")


def seed_everything(seed: int) -> None:
    """Seed ``random``, numpy's global generator and torch."""
    random.seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002 - for callers' code on the global generator
    torch.manual_seed(seed)


def save_checkpoint(
    directory: Path,
    model: BlockwiseLM,
    optimizer: torch.optim.Optimizer,
    rng: np.random.Generator,
    generator: torch.Generator,
    step: int,
    mode: str,
    seed: int,
    cfg: TrainConfig,
    tokenizer: BaseTokenizer | None,
    last_eval: EvalResult | None,
) -> None:
    """Model directory + optimizer + RNG states; ``train_state.json`` is written last."""
    train_meta: dict[str, Any] = {"step": step, "mode": mode, "seed": seed,
                                  "train_config": cfg.to_dict()}
    if last_eval is not None:
        train_meta["last_eval"] = dataclasses.asdict(last_eval)
    save_model(model, directory, tokenizer=tokenizer, extra_meta={"train": train_meta})
    with atomic_path(directory / OPTIMIZER_FILE) as tmp:
        torch.save({"step": step, "optimizer": optimizer.state_dict(),
                    "torch_rng": torch.get_rng_state(), "position_rng": generator.get_state()},
                   tmp)
        optimizer_digest = sha256_file(tmp)
    state = {"step": step, "mode": mode, "seed": seed, "train_config": cfg.to_dict(),
             "numpy_rng": rng.bit_generator.state}
    state = seal(state, {OPTIMIZER_FILE: optimizer_digest})
    write_text_atomic(directory / TRAIN_STATE_FILE, json.dumps(state, indent=2) + "\n")


def load_checkpoint(
    directory: Path,
    model: BlockwiseLM,
    optimizer: torch.optim.Optimizer,
    rng: np.random.Generator,
    generator: torch.Generator,
    mode: str,
    cfg: TrainConfig,
) -> int:
    """Restore a checkpoint of :func:`save_checkpoint` into the objects; returns its step.

    Raises:
        TrainingError: when the checkpoint is unreadable, incomplete, or was made with another
            mode, other training settings (only the eval and checkpoint intervals may change)
            or a model of another config.
    """
    state_path = directory / TRAIN_STATE_FILE
    try:
        state = json.loads(state_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise TrainingError(f"cannot read {state_path}: {e}; delete the checkpoint to start over") \
            from e
    if not isinstance(state, dict):
        raise TrainingError(f"{state_path} must hold a JSON object; delete the checkpoint to start "
                         "over")
    digests = unseal(state, state_path, TrainingError, "delete the checkpoint to start over")
    if state.get("mode") != mode:
        raise TrainingError(
            f"the checkpoint in {directory} was trained with mode={state.get('mode')!r}, "
            f"not {mode!r}; resume with the same mode or use another checkpoint_dir"
        )
    changed = changed_settings(dict(state.get("train_config", {})), cfg.to_dict(),
                               RESUMABLE_CHANGES)
    if changed:
        raise TrainingError(
            f"the checkpoint in {directory} used other training settings: "
            + ", ".join(changed)
            + "; resume with the same TrainConfig (only eval/checkpoint intervals may change)"
        )
    _, config, meta = read_model_config(directory)
    if config != model.config:
        raise TrainingError(
            f"the checkpoint in {directory} holds a model of another config ({config}); "
            f"this model is {model.config}"
        )
    step = int(state["step"])
    opt_path = directory / OPTIMIZER_FILE
    if digests is not None and OPTIMIZER_FILE in digests and opt_path.is_file():
        check_file(opt_path, digests[OPTIMIZER_FILE], TrainingError,
                   "delete the checkpoint to start over")
    try:
        opt_state = torch.load(opt_path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError) as e:
        raise TrainingError(f"cannot read {opt_path}: {e}; the checkpoint is incomplete") from e
    meta_step = meta.get("train", {}).get("step")
    if opt_state.get("step") != step or meta_step != step:
        raise TrainingError(
            f"the checkpoint in {directory} is inconsistent (train_state step {step}, optimizer "
            f"step {opt_state.get('step')}, model step {meta_step}): a save was interrupted; "
            "delete the directory to start over"
        )
    model.load_state_dict(load_model(directory).state_dict())  # digests checked there
    optimizer.load_state_dict(opt_state["optimizer"])
    torch.set_rng_state(opt_state["torch_rng"])
    generator.set_state(opt_state["position_rng"])
    rng.bit_generator.state = state["numpy_rng"]
    return step
