"""The blockwise training recipe shared by ``blockdraft train`` and the demo.

    texts -> a tokenizer (a byte-level BPE trained on them, unless one is given)
          -> one token stream (each text followed by EOS), its tail held out
          -> a model: a new one (a preset's config, sizes overridden; seeded) or a saved one
          -> train it (by default the base LM first, then the extra heads on the frozen base)
          -> a model directory (``config.json``, ``model.safetensors``, ``tokenizer.json``)

Public surface:
    train_tokenizer(texts, vocab_size, log=None, unit="lines") -> Tokenizer
    eos_stream(ids, eos_id) -> int64 [N]       encoded texts, each followed by EOS
    split_tail(stream, fraction) -> (train, held_out | None)
    model_config(preset, vocab_size, rescorer=False, **sizes) -> BlockwiseConfig
    new_model(config, rescorer=False, device="cpu", seed=None) -> BlockwiseLM | RescorerLM
    train_and_save(model, train_ids, out, tokenizer=..., cfg=..., mode=..., ...) -> TrainResult
    MODEL_FILES                  the names a model directory it writes holds (its checkpoints
                                 included)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from blockdraft.models import BlockwiseConfig, BlockwiseLM, RescorerLM, Tokenizer, save_model
from blockdraft.models.checkpoint import CONFIG_FILE, WEIGHTS_FILE
from blockdraft.models.tokenizer import TOKENIZER_FILE, BaseTokenizer
from blockdraft.training.blockwise.config import TrainConfig, TrainMode, TrainResult
from blockdraft.training.blockwise.loop import train
from blockdraft.training.blockwise.state import OPTIMIZER_FILE, TRAIN_STATE_FILE

MODEL_FILES = (CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE, TRAIN_STATE_FILE, OPTIMIZER_FILE)
"""Every name :func:`train_and_save` writes in its model directory (the model, its tokenizer
and, with ``checkpoints``, the resumable state)."""


def train_tokenizer(
    texts: Sequence[str],
    vocab_size: int,
    log: Callable[[str], None] | None = None,
    unit: str = "lines",
) -> Tokenizer:
    """A byte-level BPE of at most ``vocab_size`` tokens trained on ``texts``; ``log`` hears
    ``"training a V-token BPE on N <unit>"`` first."""
    if log is not None:
        log(f"training a {vocab_size}-token BPE on {len(texts)} {unit}")
    return Tokenizer.train(texts, vocab_size=vocab_size)


def eos_stream(ids: Sequence[Sequence[int]], eos_id: int) -> np.ndarray:
    """Encoded texts as one int64 stream, each text followed by EOS (the training stream's
    document separator)."""
    return np.asarray([t for x in ids for t in (*x, eos_id)], dtype=np.int64)


def split_tail(stream: np.ndarray, fraction: float) -> tuple[np.ndarray, np.ndarray | None]:
    """``(train, held_out)``: the last ``int(fraction * len)`` tokens held out (None when that
    is no token)."""
    n_eval = int(stream.size * fraction)
    if not n_eval:
        return stream, None
    return stream[: stream.size - n_eval], stream[stream.size - n_eval:]


def model_config(preset: str, vocab_size: int, rescorer: bool = False,
                 **sizes: Any) -> BlockwiseConfig:
    """The config of preset ``preset`` over ``vocab_size`` tokens, the ``sizes`` that are not
    None overridden; a rescorer has one head (``h = 1``)."""
    overrides = {name: value for name, value in sizes.items() if value is not None}
    overrides["vocab_size"] = vocab_size
    if rescorer:
        overrides["h"] = 1
    return BlockwiseConfig.preset(preset, **overrides)


def new_model(config: BlockwiseConfig, rescorer: bool = False,
              device: torch.device | str = "cpu", seed: int | None = None) -> BlockwiseLM:
    """A freshly initialised :class:`BlockwiseLM` (or :class:`RescorerLM`); with ``seed``,
    torch is seeded first so the initialisation is reproducible."""
    if seed is not None:
        torch.manual_seed(seed)
    return (RescorerLM if rescorer else BlockwiseLM)(config, device=device)


def train_and_save(
    model: BlockwiseLM,
    train_ids: np.ndarray,
    out: str | Path,
    *,
    tokenizer: BaseTokenizer,
    cfg: TrainConfig,
    mode: TrainMode = "base-then-heads",
    seed: int = 0,
    eval_ids: np.ndarray | None = None,
    checkpoints: bool = False,
    resume: bool = False,
    progress: bool = True,
    extra_meta: Callable[[TrainResult], dict[str, Any]] | None = None,
) -> TrainResult:
    """Train ``model`` in place (:func:`~blockdraft.training.blockwise.train`) and save it
    with its tokenizer to ``out``.

    Args:
        checkpoints: also keep resumable checkpoints in ``out`` while training (every
            ``cfg.checkpoint_interval`` steps); ``resume`` continues from one.
        extra_meta: the facts to keep in the model directory's ``config.json``, given the
            training result.

    Raises:
        TrainingError: see :func:`~blockdraft.training.blockwise.train`.
        ModelError: see :func:`blockdraft.models.save_model`.
    """
    result = train(model, train_ids, cfg, eval_ids=eval_ids, mode=mode, progress=progress,
                   seed=seed, checkpoint_dir=out if checkpoints else None, resume=resume,
                   tokenizer=tokenizer)
    save_model(model, out, tokenizer=tokenizer,
               extra_meta=None if extra_meta is None else extra_meta(result))
    return result
