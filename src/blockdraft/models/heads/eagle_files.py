"""The files of an EAGLE draft layer: its config, its weights, its shortlist.

A folder of a draft layer (:class:`~blockdraft.models.heads.eagle_layer.EagleLayer`) holds

    ``config.json``          ``layout`` (:data:`LAYOUT`), ``kind`` (``"eagle"``), the layer's
                             :class:`~blockdraft.models.heads.eagle_layer.EagleConfig` under
                             ``"eagle"``, the base (``base_model_name_or_path``), the shortlist
                             entry (:mod:`blockdraft.models.hf.shortlist`) and what the caller
                             records (``"training"``: how its features were made)
    ``eagle.safetensors``    the layer's own weights (the state dict), sealed by their digest
    ``shortlist.safetensors``  the draft vocabulary, when it has one

The base's embedding and output projection are not stored: :func:`read_eagle` attaches the
base's when given them (they are the layer's frozen input and head).

Public surface:
    LAYOUT, WEIGHTS_FILE
    write_eagle(layer, folder, base_model=None, record=None) -> Path
    is_eagle_folder(folder) -> bool
    read_eagle(folder, embed=None, lm_head=None) -> EagleLayer
    eagle_record(folder) -> dict        the config's ``"training"`` record
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from blockdraft.models.errors import ModelError
from blockdraft.models.heads.eagle_config import KIND, EagleConfig
from blockdraft.models.heads.eagle_layer import EagleLayer
from blockdraft.models.hf.layouts import CONFIG_FILE
from blockdraft.models.hf.shortlist import CONFIG_KEY, read_shortlist, shortlist_files
from blockdraft.models.hf.tensor_digest import read_sealed, save_sealed

LAYOUT = "blockdraft-eagle"
"""The ``layout`` of a draft layer's ``config.json``."""
WEIGHTS_FILE = "eagle.safetensors"
"""The layer's weights in its folder."""


def write_eagle(layer: EagleLayer, folder: str | os.PathLike[str], base_model: str | None = None,
                record: dict[str, Any] | None = None) -> Path:
    """Write ``layer`` (its weights in their stored dtype) into ``folder`` (created; callers
    make it atomic); ``record``: what to keep under the config's ``"training"``."""
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous().clone() for k, v in layer.state_dict().items()}
    save_sealed(state, root / WEIGHTS_FILE)
    config: dict[str, Any] = {"layout": LAYOUT, "kind": KIND, "eagle": layer.config.to_dict(),
                              "base_model_name_or_path": base_model or "",
                              "training": dict(record or {})}
    if layer.shortlist is not None:
        tensors, entry = shortlist_files(layer.shortlist, layer.shortlist_info)
        save_sealed(tensors, root / entry["file"])
        config[CONFIG_KEY] = entry
    (root / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n",
                                    encoding="utf-8")
    return root


def _config(folder: Path) -> dict[str, Any] | None:
    try:
        config = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) and config.get("layout") == LAYOUT else None


def is_eagle_folder(folder: str | os.PathLike[str]) -> bool:
    """Whether ``folder``'s config names the draft layer's layout."""
    return _config(Path(folder)) is not None


def eagle_record(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """What the folder's config keeps under ``"training"`` (empty when nothing).

    Raises:
        ModelError: not a draft layer's folder.
    """
    config = _config(Path(folder))
    if config is None:
        raise ModelError(f"{folder} holds no EAGLE draft layer (config.json layout {LAYOUT!r})")
    return dict(config.get("training") or {})


def read_eagle(folder: str | os.PathLike[str], embed: torch.Tensor | None = None,
               lm_head: torch.Tensor | None = None) -> EagleLayer:
    """The draft layer of a folder :func:`write_eagle` wrote (float32, eval mode), attached to
    the base's ``embed`` and ``lm_head`` when both are given.

    Raises:
        ModelError: not such a folder, a damaged file (its digest), weights of other shapes
            than its config's, or base tensors of another ``[V, d]``.
    """

    root = Path(folder)
    config = _config(root)
    if config is None:
        raise ModelError(f"{root} holds no EAGLE draft layer (config.json layout {LAYOUT!r})")
    if config.get("kind") != KIND:
        raise ModelError(f"{root / CONFIG_FILE} names kind {config.get('kind')!r}; an EAGLE "
                         f"draft layer's is {KIND!r}")
    settings = config.get("eagle")
    if not isinstance(settings, dict):
        raise ModelError(f"{root / CONFIG_FILE} has no 'eagle' object (the layer's sizes)")
    state = read_sealed(root / WEIGHTS_FILE)
    found = read_shortlist(root)
    layer = EagleLayer(EagleConfig.from_dict(settings),
                       None if found is None else found[0], None if found is None else found[1])
    mine = layer.state_dict()
    wrong = sorted(k for k in mine.keys() | state.keys()
                   if k not in mine or k not in state or mine[k].shape != state[k].shape)
    if wrong:
        raise ModelError(f"{root / WEIGHTS_FILE} does not fit its config: "
                         + ", ".join(wrong[:4]))
    layer.load_state_dict({k: v.float() for k, v in state.items()})
    if embed is not None and lm_head is not None:
        layer.attach(embed, lm_head)
    return layer.eval()
