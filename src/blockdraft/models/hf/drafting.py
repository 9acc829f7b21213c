"""The drafting recipe packaged with a heads folder: how ``decode(model, ids)`` drafts by default.

Heads are trained for one base; so are the LM that rescores their lattice (an n-gram LM of the
base's own answers), the acceptance rates a cost-aware tree sizes itself by, and the settings
tuned on held-out training answers. They travel together: ``config.json`` of the heads folder
names them under :data:`CONFIG_KEY` (other tools ignore the key), files relative to the folder::

    "blockdraft_drafting": {
        "k": 8, "p": 4, "max_nodes": 32, "copy_length": 16,
        "ngram": "ngram/answers4.bin", "alpha": 0.5,
        "context_order": 4, "context_weight": 0.3,
        "acceptance": "acceptance.json",
        "tuned_on": "..."}

:func:`blockdraft.drafts.default_drafter` turns it into a
:class:`~blockdraft.drafts.CostAwareTreeDrafter` on the model's measured cost curve.

Public surface:
    CONFIG_KEY
    DraftingRecipe       frozen: the settings, the files as absolute paths
    read_drafting(folder) -> DraftingRecipe | None
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from blockdraft.models.errors import ModelError

CONFIG_KEY = "blockdraft_drafting"
"""The key of a heads folder's ``config.json`` that holds its drafting recipe."""


@dataclass(frozen=True)
class DraftingRecipe:
    """How the heads draft by default (see the module docstring).

    Attributes:
        k: lattice arcs per slot; p: rescored paths in the tree; max_nodes: the largest tree;
            copy_length: tokens a prompt-lookup copy proposes.
        ngram: the n-gram LM (a KenLM binary or ARPA file over the base's token ids), or None.
        alpha: its weight in rescoring (natural-log units, docs/definitions.md sec. 4).
        context_order, context_weight: the context LM interpolated with it (0: none).
        acceptance: the acceptance tables (JSON), or None (uncalibrated stand-ins).
        info: the rest of the entry (what it was tuned on), for records.
    """

    k: int = 8
    p: int = 4
    max_nodes: int = 32
    copy_length: int = 16
    ngram: Path | None = None
    alpha: float = 1.0
    context_order: int = 0
    context_weight: float = 0.0
    acceptance: Path | None = None
    info: dict[str, Any] = field(default_factory=dict, compare=False)


def _int(entry: dict[str, Any], key: str, default: int, minimum: int, where: Path) -> int:
    value = entry.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ModelError(f"{where}: {CONFIG_KEY}.{key} must be an integer >= {minimum}, got "
                         f"{value!r}")
    return value


def _float(entry: dict[str, Any], key: str, default: float, lo: float, hi: float,
           where: Path) -> float:
    value = entry.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            math.isfinite(value) and lo <= value <= hi):
        raise ModelError(f"{where}: {CONFIG_KEY}.{key} must be a number in [{lo}, {hi}], got "
                         f"{value!r}")
    return float(value)


def _file(root: Path, entry: dict[str, Any], key: str, where: Path) -> Path | None:
    name = entry.get(key)
    if name is None:
        return None
    if not isinstance(name, str) or not (root / name).is_file():
        raise ModelError(f"{where} names the {key} file {name!r}, which {root} does not hold; "
                         f"restore it, or remove {key!r} from {CONFIG_KEY}")
    return (root / name).resolve()


def read_drafting(folder: str | os.PathLike[str]) -> DraftingRecipe | None:
    """The recipe a heads folder's ``config.json`` holds, or None when it holds none.

    Raises:
        ModelError: an entry that is not an object, a setting out of range, a named file that
            is missing.
    """
    root = Path(folder)
    where = root / "config.json"
    try:
        config = json.loads(where.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # read_heads_config names what is wrong with a config
    entry = config.get(CONFIG_KEY) if isinstance(config, dict) else None
    if entry is None:
        return None
    if not isinstance(entry, dict):
        raise ModelError(f"{where}: {CONFIG_KEY} must be an object, got {entry!r}")
    known = {"k", "p", "max_nodes", "copy_length", "ngram", "alpha", "context_order",
             "context_weight", "acceptance"}
    return DraftingRecipe(
        k=_int(entry, "k", 8, 1, where), p=_int(entry, "p", 4, 0, where),
        max_nodes=_int(entry, "max_nodes", 32, 1, where),
        copy_length=_int(entry, "copy_length", 16, 1, where),
        ngram=_file(root, entry, "ngram", where),
        alpha=_float(entry, "alpha", 1.0, 0.0, 1e6, where),
        context_order=_int(entry, "context_order", 0, 0, where),
        context_weight=_float(entry, "context_weight", 0.0, 0.0, 1.0, where),
        acceptance=_file(root, entry, "acceptance", where),
        info={k: v for k, v in entry.items() if k not in known})
