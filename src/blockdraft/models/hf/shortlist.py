"""The shortlist file of a heads folder: the draft vocabulary of heads that share ``lm_head``.

A shortlist (:meth:`~blockdraft.models.hf.MedusaHeads.set_shortlist`) is stored beside the
heads as ``shortlist.safetensors`` (one int64 tensor ``token_ids [Vs]``, sorted ascending, the
file's tensors digest in its metadata like blockdraft's heads files) and named in the folder's
``config.json`` under :data:`CONFIG_KEY`, with what it was counted on::

    "blockdraft_shortlist": {"file": "shortlist.safetensors", "size": 8192,
                             "counted_on": "...", "tokens": 901312, "coverage": 0.985}

Other tools ignore both (Medusa, TGI and vLLM read neither), so such a folder still loads
there, drafting over the whole vocabulary.

Public surface:
    CONFIG_KEY, SHORTLIST_FILE
    read_shortlist(folder) -> (token_ids int64 [Vs], info dict) | None
    shortlist_files(token_ids, info) -> (tensors, config entry)   what write_heads stores
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from blockdraft.models.errors import ModelError
from blockdraft.models.hf.layouts import CONFIG_FILE
from blockdraft.models.hf.tensor_digest import DIGEST_KEY, tensors_digest

CONFIG_KEY = "blockdraft_shortlist"
"""The key of ``config.json`` that names a heads folder's shortlist."""
SHORTLIST_FILE = "shortlist.safetensors"
"""The shortlist's file in a heads folder."""
TENSOR = "token_ids"


def read_shortlist(folder: str | os.PathLike[str]) -> tuple[torch.Tensor, dict[str, Any]] | None:
    """The shortlist a heads folder names, or None when its ``config.json`` names none.

    Returns:
        ``(token_ids, info)``: int64 ``[Vs]`` sorted ids, and the config entry (size, what it
        was counted on).

    Raises:
        ModelError: a named file that is missing, unreadable, damaged (its digest), or whose
            ids are not a sorted list of distinct non-negative ids of the named size.
    """
    root = Path(folder)
    try:
        config = json.loads((root / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # read_heads_config names what is wrong with a config
    info = config.get(CONFIG_KEY) if isinstance(config, dict) else None
    if info is None:
        return None
    if not isinstance(info, dict) or not isinstance(info.get("file"), str):
        raise ModelError(f"{root / CONFIG_FILE}: {CONFIG_KEY} must be an object naming its "
                         f"file, got {info!r}")
    file = root / info["file"]
    if not file.is_file():
        raise ModelError(f"{root / CONFIG_FILE} names the shortlist {info['file']!r}, which "
                         f"{root} does not hold; restore it, or remove {CONFIG_KEY} from the "
                         "config to draft over the whole vocabulary")
    try:
        from safetensors import safe_open

        with safe_open(str(file), framework="pt") as f:
            meta = f.metadata() or {}
            ids = f.get_tensor(TENSOR)
    except Exception as e:  # safetensors raises its own error types
        raise ModelError(f"cannot read the shortlist {file}: {e}") from e
    digest = meta.get(DIGEST_KEY)
    if digest is not None and digest != tensors_digest({TENSOR: ids}):
        raise ModelError(f"the shortlist {file} is damaged (its tensors do not match the "
                         "digest it was written with); write it again")
    if ids.dim() != 1 or ids.dtype != torch.int64 or ids.numel() == 0 or (
            ids.numel() > 1 and bool((ids[1:] <= ids[:-1]).any())) or int(ids[0]) < 0:
        raise ModelError(f"{file}: {TENSOR} must be a non-empty sorted int64 list of distinct "
                         "non-negative token ids")
    size = info.get("size", ids.numel())
    if size != ids.numel():
        raise ModelError(f"{root / CONFIG_FILE} says the shortlist holds {size} ids; {file} "
                         f"holds {ids.numel()}")
    return ids, dict(info)


def shortlist_files(token_ids: torch.Tensor, info: dict[str, Any] | None = None
                    ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """What a heads folder stores for a shortlist: the tensors of :data:`SHORTLIST_FILE` and
    the ``config.json`` entry (``info`` plus the file and the size)."""
    ids = torch.as_tensor(token_ids, dtype=torch.int64).cpu().contiguous().clone()
    entry = {**(info or {}), "file": SHORTLIST_FILE, "size": int(ids.numel())}
    return {TENSOR: ids}, entry
