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

Medusa heads' recipe may name ``"heads_on_demand"`` (a match length: a step whose best
prompt-lookup copy matched that many tokens drafts the copies alone and skips the heads,
:class:`~blockdraft.drafts.lookup.HeadsOnDemand`; 0 or absent: the heads every step). Any heads
folder may name ``"draft_precision"`` (the heads' weights on ONNX Runtime, one of
:data:`~blockdraft.models.heads.draft_precision.DRAFT_PRECISIONS`, default ``"float32"``; the
readers set it on the heads, other runtimes do not read it); an EAGLE draft layer's folder
also ``"depth"`` (its tree depth, read by
:func:`~blockdraft.models.hf.eagle_heads.read_eagle_heads`).

:func:`blockdraft.drafts.default_drafter` turns it into a
:class:`~blockdraft.drafts.CostAwareTreeDrafter` on the model's measured cost curve.

The reader checks what it can without the model: every setting's range and every named file;
the n-gram LM's tokenizer record is read with it (:mod:`blockdraft.models.vocab_record`), and
:func:`check_recipe_tokenizer` holds it against the base's tokenizer when the heads meet their
base (:class:`~blockdraft.models.hf.HFBlockwiseModel`): the one vocabulary check ``decode
--lm`` and ``heads package --ngram`` make, so an LM over another tokenizer is refused when the
model loads, not used silently.

Public surface:
    CONFIG_KEY
    DraftingRecipe       frozen: the settings, the files as absolute paths
    read_drafting(folder) -> DraftingRecipe | None
    check_recipe_tokenizer(recipe, vocab_size, tokenizer)   the LM against the base's tokenizer
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from blockdraft.models.errors import ModelError
from blockdraft.models.heads.draft_precision import check_draft_precision
from blockdraft.models.tokenizer import TokenizerInfo
from blockdraft.models.vocab_record import check_tokenizer_record, read_vocab_record

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
        ngram_tokenizer: the tokenizer recorded beside the n-gram LM (its ``.vocab.json``), or
            None without an LM or without a record.
        draft_precision: the heads' weights on ONNX Runtime (``"float32"``, ``"int8"``,
            ``"q4"``: :data:`~blockdraft.models.heads.draft_precision.DRAFT_PRECISIONS`).
        heads_on_demand: skip the heads on a step whose best copy matched this many tokens
            (0: never; Medusa heads' cost-aware tree).
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
    ngram_tokenizer: TokenizerInfo | None = field(default=None, compare=False)
    draft_precision: str = "float32"
    heads_on_demand: int = 0


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
        ModelError: an entry that is not an object, a setting out of range (a draft precision
            not in DRAFT_PRECISIONS), a named file that is missing, an n-gram LM's tokenizer
            record that cannot be read.
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
             "context_weight", "acceptance", "draft_precision", "heads_on_demand"}
    ngram = _file(root, entry, "ngram", where)
    return DraftingRecipe(
        k=_int(entry, "k", 8, 1, where), p=_int(entry, "p", 4, 0, where),
        max_nodes=_int(entry, "max_nodes", 32, 1, where),
        copy_length=_int(entry, "copy_length", 16, 1, where),
        ngram=ngram,
        alpha=_float(entry, "alpha", 1.0, 0.0, 1e6, where),
        context_order=_int(entry, "context_order", 0, 0, where),
        context_weight=_float(entry, "context_weight", 0.0, 0.0, 1.0, where),
        acceptance=_file(root, entry, "acceptance", where),
        info={k: v for k, v in entry.items() if k not in known},
        ngram_tokenizer=None if ngram is None else read_vocab_record(ngram),
        draft_precision=check_draft_precision(entry.get("draft_precision", "float32"),
                                              f"{where}: {CONFIG_KEY}.draft_precision"),
        heads_on_demand=_int(entry, "heads_on_demand", 0, 0, where))


def check_recipe_tokenizer(recipe: DraftingRecipe | None, vocab_size: int,
                           tokenizer: Any = None) -> None:
    """Refuse a recipe whose n-gram LM was trained over another tokenizer than the base's
    (another ``V``; with ``tokenizer``, another vocabulary fingerprint): the check of
    :func:`~blockdraft.models.vocab_record.check_tokenizer_record`, made when the heads meet
    their base. An LM without a tokenizer record cannot be checked: a warning, once.

    Args:
        recipe: the heads' recipe (None: nothing to check).
        vocab_size: the base's ``V``.
        tokenizer: the base's tokenizer, or None.

    Raises:
        ModelError: naming the LM, both tokenizers and what to do.
    """
    if recipe is None or recipe.ngram is None:
        return
    try:
        check_tokenizer_record(recipe.ngram, recipe.ngram_tokenizer, vocab_size, tokenizer,
                               ModelError)
    except ModelError as e:
        raise ModelError(f"the drafting recipe packaged with these heads names the n-gram LM "
                         f"{recipe.ngram}, which does not fit the base: {e} (then package the "
                         "heads again: blockdraft heads package --ngram)") from e
