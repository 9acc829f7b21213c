"""Which layout a Medusa heads folder holds, and what its ``config.json`` says.

Layouts (``h`` = Medusa head ``0 .. num_heads-1``, ``l`` = ResBlock ``0 .. L-1``, ``d`` the
base's hidden size, ``V`` its vocabulary):

``"medusa-heads"`` (Medusa-1, FasterDecoding/Medusa ``MedusaModel``)
    a folder with ``config.json`` (``medusa_num_heads``, ``medusa_num_layers``,
    ``base_model_name_or_path``) and ``medusa_lm_head.pt`` (or ``.safetensors``) holding
    ``{h}.{l}.linear.weight [d, d]``, ``{h}.{l}.linear.bias [d]`` and ``{h}.{L}.weight [V, d]``:
    every head has its own projection.
``"medusa-full"`` (Medusa-2 full checkpoints)
    a whole Hugging Face model folder (the base's ``config.json`` plus ``medusa_num_heads``,
    ``medusa_num_layers``; ``model.safetensors``, sharded or ``pytorch_model.bin``) whose
    weights also hold the Medusa-1 keys under the prefix ``medusa_head.``. The folder is the
    base model too.
``"medusa-v2"`` (Medusa "version 2", as served by TGI)
    ``config.json`` with ``"version": "2"`` and ``medusa_lm_head.safetensors`` with only
    ``{h}.{l}.linear.{weight,bias}``: the heads reuse the base's ``lm_head`` (projection keys
    in such a file are ignored, as TGI ignores them). blockdraft's own heads use this layout.
``"vllm"`` (vLLM's ``Medusa`` draft model)
    ``config.json`` with ``model_type: "medusa"``, ``num_heads``, ``num_hidden_layers``
    (optional ``medusa_fc_bias``, ``original_lm_head``) and ``model.safetensors`` (or
    ``pytorch_model.bin``) holding ``blocks.{h}.layers.{l}.weight [d, d]`` (``.bias`` only with
    ``medusa_fc_bias``) and ``lm_heads.{h}.weight [V, d]`` (only ``lm_heads.0.weight``, shared by
    every head, with ``original_lm_head``). A truncated draft vocabulary (``token_map``) is not
    supported.

Reading and writing the heads themselves: :mod:`.formats`.

Public surface:
    LAYOUTS                                      the four layout names above
    CONFIG_FILE                                  ``config.json``, the folder's config
    HEADS_FILES, FULL_PREFIX, WEIGHT_FILES       where each layout keeps its tensors
    HeadsConfig                                  what a folder's config says
    read_config(folder) -> dict                  the config as a JSON object
    weight_files(folder) -> list[Path]           a model folder's weight files (shards too)
    detect_layout(path) -> str                   which layout a folder holds
    read_heads_config(path) -> HeadsConfig       its sizes and the base it names
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blockdraft.models.errors import ModelError

LAYOUTS = ("medusa-heads", "medusa-full", "medusa-v2", "vllm")
CONFIG_FILE = "config.json"
HEADS_FILES = ("medusa_lm_head.safetensors", "medusa_lm_head.pt")
"""The heads file of a Medusa heads folder, in the order they are looked for."""
FULL_PREFIX = "medusa_head."
"""The prefix of the Medusa keys inside a Medusa-2 full checkpoint."""
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
"""The weight files of a Hugging Face model folder (a single file or a shard index)."""


@dataclass(frozen=True)
class HeadsConfig:
    """What a heads folder's ``config.json`` says.

    Attributes:
        layout: one of :data:`LAYOUTS`.
        num_heads: Medusa heads (``h - 1``).
        num_layers: ResBlocks per head (``L``).
        own_projection: each head has its own ``[V, d]`` projection (False: the base's).
        bias: the ResBlocks' linear layers have a bias.
        base_model: ``base_model_name_or_path`` (a hub id, a folder, or a blockdraft name),
            or None when the config names none (vLLM configs usually don't; a Medusa-2 full
            checkpoint is its own base: its folder).
    """

    layout: str
    num_heads: int
    num_layers: int
    own_projection: bool
    bias: bool
    base_model: str | None


def read_config(folder: Path) -> dict[str, Any]:
    """The heads folder's ``config.json`` as a JSON object.

    Raises:
        ModelError: no such file, an unreadable one, or one that is not a JSON object.
    """
    file = folder / CONFIG_FILE
    if not file.is_file():
        raise ModelError(f"{str(folder)!r} has no {CONFIG_FILE}; it is not a Medusa heads folder")
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ModelError(f"cannot read {file}: {e}") from e
    if not isinstance(config, dict):
        raise ModelError(f"{file} must hold a JSON object, got {type(config).__name__}")
    return config


def weight_files(folder: Path) -> list[Path]:
    """The weight files of a Hugging Face model folder (shards resolved through the index)."""
    for name in WEIGHT_FILES:
        file = folder / name
        if not file.is_file():
            continue
        if not name.endswith(".index.json"):
            return [file]
        try:
            weight_map = json.loads(file.read_text(encoding="utf-8"))["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ModelError(f"cannot read the shard index {file}: {e}") from e
        return [folder / shard for shard in sorted(set(weight_map.values()))]
    return []


def detect_layout(path: str | os.PathLike[str]) -> str:
    """Which of :data:`LAYOUTS` the folder ``path`` holds (see the module docstring).

    Raises:
        ModelError: when ``path`` is not a folder, has no readable ``config.json``, or holds
            none of the layouts (the message says what each needs).
    """
    folder = Path(path)
    if not folder.is_dir():
        raise ModelError(f"Medusa heads must be a folder, got {str(folder)!r}")
    config = read_config(folder)
    if "medusa_num_heads" in config:
        if str(config.get("version", "")) == "2":
            return "medusa-v2"
        if any((folder / name).is_file() for name in HEADS_FILES):
            return "medusa-heads"
        if weight_files(folder):
            return "medusa-full"
        raise ModelError(
            f"{str(folder)!r} has medusa_num_heads in its config.json but neither "
            f"{' nor '.join(HEADS_FILES)} (Medusa heads) nor model weights (a Medusa-2 full "
            "checkpoint)"
        )
    if config.get("model_type") == "medusa" or "MedusaModel" in (config.get("architectures") or []):
        return "vllm"
    raise ModelError(
        f"{str(folder)!r} is not a Medusa heads folder: its config.json has neither "
        "medusa_num_heads (Medusa-1, Medusa-2 full checkpoints, Medusa version 2) nor "
        "model_type 'medusa' (vLLM)"
    )


def _positive(config: dict[str, Any], key: str, default: int | None, file: Path) -> int:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelError(f"{file}: {key} must be an integer >= 1, got {value!r}")
    return value


def read_heads_config(path: str | os.PathLike[str]) -> HeadsConfig:
    """The layout, sizes and named base of a heads folder.

    Raises:
        ModelError: see :func:`detect_layout`; a missing or invalid size in ``config.json``;
            a vLLM draft with a truncated vocabulary or a logit scale.
    """
    folder = Path(path)
    layout = detect_layout(folder)
    config = read_config(folder)
    file = folder / CONFIG_FILE
    named = config.get("base_model_name_or_path")
    base = str(named) if named else None
    if layout == "vllm":
        vocab = config.get("vocab_size")
        truncated = config.get("truncated_vocab_size")
        if truncated is not None and vocab is not None and truncated < vocab:
            raise ModelError(
                f"{file}: truncated_vocab_size = {truncated} < vocab_size = {vocab}; vLLM "
                "drafts over a truncated vocabulary (token_map) are not supported"
            )
        scale = config.get("logit_scale", 1.0)
        if scale != 1:
            raise ModelError(f"{file}: logit_scale = {scale} is not supported (only 1.0)")
        return HeadsConfig(layout, _positive(config, "num_heads", None, file),
                           _positive(config, "num_hidden_layers", 1, file), own_projection=True,
                           bias=bool(config.get("medusa_fc_bias", False)), base_model=base)
    return HeadsConfig(layout, _positive(config, "medusa_num_heads", None, file),
                       _positive(config, "medusa_num_layers", 1, file),
                       own_projection=layout != "medusa-v2", bias=True,
                       base_model=str(folder) if layout == "medusa-full" else base)
