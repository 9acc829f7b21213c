"""Package heads with what they draft with: their shortlist and their drafting recipe.

Trained heads (``blockdraft heads train``) are a Medusa version-2 folder, a prefix heads folder
or a draft layer's (``--arch prefix``, ``--arch eagle``). Things measured after training belong
beside them, so that ``load_model`` brings them and ``decode(model, ids)`` uses them with no
settings:

- the shortlist (:mod:`blockdraft.models.hf.shortlist`): the draft vocabulary, the most
  frequent tokens of the base's own answers (:mod:`.shortlist`);
- the drafting recipe (:mod:`blockdraft.models.hf.drafting`): the n-gram LM of those answers
  (a KenLM binary, copied with its vocabulary record), the acceptance tables measured on
  held-out training answers, and the settings tuned there.

Heads whose lattice is a tree (prefix heads, a draft layer: :data:`TREE_LATTICE_LAYOUTS`) carry
their shortlist from training (it is their output layer's rows: a new one means retraining) and
draft by default with the tree lattice's cost-aware tree and lookup copies, which reads the
recipe's ``k``, ``max_nodes``, ``copy_length``, the acceptance tables (the copies' rates) and,
for a draft layer, ``depth``; an n-gram LM, which that drafter does not read, is refused. Every
kind's recipe may set ``draft_precision`` (the heads' weights on ONNX Runtime).

:func:`package_heads` writes a new heads folder from an existing one plus those parts, in one
atomic step (the folder appears complete or not at all); the heads' tensors are copied as they
are (their digest unchanged). Before the folder is put in place every file it holds is read
back by the readers that use it (:func:`check_package`): the heads, shortlist and recipe as
``load_model`` reads them, the acceptance tables and the n-gram LM as ``decode(model, ids)``
loads them, and the LM's tokenizer record against the base's tokenizer (the check ``decode
--lm`` makes, and ``load_model`` again): what packages without an error loads at decode time.

Public surface:
    package_heads(heads, out, *, shortlist=None, shortlist_info=None, ngram=None,
                  acceptance=None, recipe=None, tokenizer=None, shown=None) -> Path
    check_package(folder, tokenizer=None, shown=None)
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from blockdraft.core.errors import BlockdraftError
from blockdraft.training.errors import TrainingError

NGRAM_DIR = "ngram"
"""Where a packaged heads folder keeps its n-gram LM."""
RECIPE_KEYS = ("k", "p", "max_nodes", "copy_length", "alpha", "context_order",
               "context_weight", "draft_precision", "heads_on_demand", "tuned_on")
TREE_LATTICE_LAYOUTS = ("blockdraft-prefix", "blockdraft-eagle")
"""The layouts of heads folders whose lattice is a tree (packaged by copying their files)."""
_TREE_LATTICE_RECIPE = {"blockdraft-prefix": ("k", "max_nodes", "copy_length",
                                              "draft_precision", "tuned_on"),
                        "blockdraft-eagle": ("k", "max_nodes", "copy_length", "depth",
                                             "draft_precision", "tuned_on")}


def package_heads(heads: str | os.PathLike[str], out: str | os.PathLike[str], *,
                  shortlist: np.ndarray | None = None,
                  shortlist_info: dict[str, Any] | None = None,
                  ngram: str | os.PathLike[str] | None = None,
                  acceptance: str | os.PathLike[str] | None = None,
                  recipe: dict[str, Any] | None = None, tokenizer: Any = None,
                  shown: str | os.PathLike[str] | None = None) -> Path:
    """A copy of the version-2 heads folder ``heads`` at ``out`` with a shortlist and a
    drafting recipe (either may be left out; the folder's own are kept unless replaced).

    Args:
        heads: a Medusa version-2 heads folder.
        out: the folder to write (replaced atomically when it exists: the caller applies
            the output rule).
        shortlist: int ``[Vs]`` token ids; ``shortlist_info`` what they were counted on.
        ngram: a KenLM binary (or ARPA) over the base's token ids; its ``.vocab.json`` record
            is copied too when it lies beside it.
        acceptance: acceptance tables (JSON, :class:`~blockdraft.drafts.AcceptanceTables`).
        recipe: the tuned settings (:data:`RECIPE_KEYS`).
        tokenizer: the base's tokenizer: the packaged n-gram LM is checked against it (``V``
            and the vocabulary fingerprint of its record); None checks the LM's files alone.
        shown: the path messages name for ``out`` (where the folder will lie, when ``out`` is
            a place it is built in); default ``out``.

    Raises:
        TrainingError: not a version-2 heads folder, a missing file, an unknown recipe key, a
            packaged file that does not load (damaged tables, a recipe out of range, an LM
            over another tokenizer): nothing is written then.
    """
    import torch

    from blockdraft.core.files import atomic_directory
    from blockdraft.models.hf.drafting import CONFIG_KEY as DRAFTING_KEY
    from blockdraft.models.hf.formats import read_heads, read_heads_config, write_heads

    src = Path(heads)
    layout = folder_layout(src)
    if layout in TREE_LATTICE_LAYOUTS:
        if shortlist is not None:
            raise TrainingError(f"{src} holds {layout!r} heads, whose shortlist is their output "
                                "layer's rows, fixed at training: drop --shortlist (train with "
                                "heads train --shortlist N for another)")
        if ngram is not None:
            raise TrainingError(f"{src} holds {layout!r} heads, whose default drafter (the tree "
                                "lattice's cost-aware tree) does not rescore with an n-gram LM: "
                                "drop --ngram (name the LM at decode time: --lm)")
        return _package_tree_lattice(src, Path(out), layout, acceptance, recipe, shown)
    try:
        info = read_heads_config(src)
        medusa = read_heads(src)
    except Exception as e:  # a ModelError naming what is wrong
        raise TrainingError(f"cannot package {src}: {e}") from e
    if info.layout != "medusa-v2":
        raise TrainingError(f"{src} holds {info.layout!r} heads; packaging writes version-2 "
                            "folders (heads that share the base's lm_head)")
    for path in (ngram, acceptance):
        if path is not None and not Path(path).is_file():
            raise TrainingError(f"{path} does not exist")
    unknown = set(recipe or {}) - set(RECIPE_KEYS)
    if unknown:
        raise TrainingError(f"unknown recipe settings {sorted(unknown)}; known: "
                            f"{', '.join(RECIPE_KEYS)}")
    if shortlist is not None:
        medusa.set_shortlist(torch.as_tensor(np.asarray(shortlist, dtype=np.int64)),
                             info=shortlist_info)
    target = Path(out)
    with atomic_directory(target) as tmp:
        folder = write_heads(medusa, tmp / "heads", base_model=info.base_model)
        for item in folder.iterdir():
            item.rename(tmp / item.name)
        folder.rmdir()
        # the heads' own file as it was (the same tensors: a byte-for-byte copy keeps its
        # digest and every record of it), and the training's records
        for name in ("medusa_lm_head.safetensors", "README.md", "curve.json", "curve.png"):
            if (src / name).is_file():
                shutil.copy2(src / name, tmp / name)
        config = json.loads((tmp / "config.json").read_text(encoding="utf-8"))
        old = json.loads((src / "config.json").read_text(encoding="utf-8")).get(DRAFTING_KEY)
        entry: dict[str, Any] = dict(old or {})
        if ngram is not None:
            (tmp / NGRAM_DIR).mkdir()
            lm = Path(ngram)
            shutil.copy2(lm, tmp / NGRAM_DIR / lm.name)
            for sidecar in (lm.with_suffix(".vocab.json"), lm.with_suffix(".fingerprint.json")):
                if sidecar.is_file():
                    shutil.copy2(sidecar, tmp / NGRAM_DIR / sidecar.name)
            entry["ngram"] = f"{NGRAM_DIR}/{lm.name}"
        elif old and old.get("ngram"):
            _copy_relative(src, tmp, old["ngram"])
        if acceptance is not None:
            shutil.copy2(acceptance, tmp / "acceptance.json")
            entry["acceptance"] = "acceptance.json"
        elif old and old.get("acceptance"):
            _copy_relative(src, tmp, old["acceptance"])
        entry.update(recipe or {})
        if entry:
            config[DRAFTING_KEY] = entry
        (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n",
                                         encoding="utf-8")
        check_package(tmp, tokenizer, shown=shown or target)  # before it is put in place
    return target


def folder_layout(folder: str | os.PathLike[str]) -> str:
    """The ``layout`` a heads folder's ``config.json`` names (``""`` when it names none, as
    Medusa folders do; a folder without a readable config is left to the heads' reader)."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    layout = config.get("layout") if isinstance(config, dict) else None
    return layout if isinstance(layout, str) else ""


def _package_tree_lattice(src: Path, target: Path, layout: str,
                          acceptance: str | os.PathLike[str] | None,
                          recipe: dict[str, Any] | None,
                          shown: str | os.PathLike[str] | None) -> Path:
    """:func:`package_heads` of a prefix heads or draft layer folder: its files copied as
    they are, its config's drafting entry merged with ``acceptance`` and ``recipe``."""
    from blockdraft.core.files import atomic_directory
    from blockdraft.models.hf.drafting import CONFIG_KEY as DRAFTING_KEY

    allowed = _TREE_LATTICE_RECIPE[layout]
    unknown = set(recipe or {}) - set(allowed)
    if unknown:
        raise TrainingError(f"recipe settings {sorted(unknown)} do not apply to {layout!r} "
                            f"heads (their default drafter reads {', '.join(allowed)})")
    if acceptance is not None and not Path(acceptance).is_file():
        raise TrainingError(f"{acceptance} does not exist")
    config = json.loads((src / "config.json").read_text(encoding="utf-8"))
    entry: dict[str, Any] = dict(config.get(DRAFTING_KEY) or {})
    with atomic_directory(target) as tmp:
        for item in sorted(src.iterdir()):
            if item.is_file() and item.name != "config.json" and not item.name.startswith("."):
                shutil.copy2(item, tmp / item.name)
        if acceptance is not None:
            shutil.copy2(acceptance, tmp / "acceptance.json")
            entry["acceptance"] = "acceptance.json"
        entry.update(recipe or {})
        if entry:
            config[DRAFTING_KEY] = entry
        (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n",
                                         encoding="utf-8")
        check_package(tmp, shown=shown or target)  # before it is put in place
    return target


def check_package(folder: str | os.PathLike[str], tokenizer: Any = None,
                  shown: str | os.PathLike[str] | None = None) -> None:
    """Read a heads folder back as it is used: the heads, shortlist and drafting recipe with
    :func:`~blockdraft.models.hf.formats.read_heads` (``load_model``'s reader), the
    recipe's acceptance tables and n-gram LM as :func:`~blockdraft.drafts.default
    .default_drafter` loads them, and with ``tokenizer`` (the base's) the LM against it: its
    largest id (:meth:`~blockdraft.rescorers.ngram.NgramLM.check_vocab`) and its tokenizer
    record (:func:`~blockdraft.models.vocab_record.check_tokenizer_record`, the check of
    ``decode --lm`` and of ``load_model``).

    Args:
        folder: the heads folder.
        tokenizer: the base's tokenizer, or None (the LM's vocabulary is not compared).
        shown: the path to name in messages instead of ``folder`` (where it will lie).

    Raises:
        TrainingError: the first file that does not load, naming it and why.
    """
    from blockdraft.drafts.calibration import AcceptanceTables
    from blockdraft.models.hf.formats import read_heads
    from blockdraft.models.vocab_record import check_tokenizer_record

    root = Path(folder)

    def named(e: BaseException) -> str:
        text = " ".join(str(e).split())
        return text if shown is None else text.replace(str(root), str(shown))

    layout = folder_layout(root)
    try:
        if layout == "blockdraft-eagle":
            from blockdraft.models.hf.eagle_heads import read_eagle_heads

            heads: Any = read_eagle_heads(root)
        elif layout == "blockdraft-prefix":
            from blockdraft.models.hf.prefix_heads import read_prefix_heads

            heads = read_prefix_heads(root)
        else:
            heads = read_heads(root)
    except BlockdraftError as e:
        raise TrainingError(f"the packaged heads would not load: {named(e)}") from e
    recipe = heads.drafting
    if recipe is None:
        return
    if recipe.acceptance is not None:
        try:
            AcceptanceTables.load(recipe.acceptance)
        except BlockdraftError as e:
            raise TrainingError(f"the acceptance tables do not load: {named(e)}; give tables "
                                "AcceptanceTables.save wrote (benchmarks/tune_drafting.py)"
                                ) from e
    if recipe.ngram is None:
        return
    from blockdraft.rescorers.ngram import NgramLM, NgramRescorer

    try:
        lm = NgramLM(recipe.ngram)
        extra = ({"context_order": recipe.context_order, "context_weight": recipe.context_weight}
                 if recipe.context_order and recipe.context_weight else {})
        NgramRescorer(lm, alpha=recipe.alpha, **extra)  # as decode(model, ids) builds it
        if tokenizer is not None:  # the checks of decode --lm and of load_model
            vocab = int(tokenizer.vocab_size)
            lm.check_vocab(vocab)  # its largest id inside the base's vocabulary
            check_tokenizer_record(recipe.ngram, recipe.ngram_tokenizer, vocab, tokenizer,
                                   TrainingError)
    except BlockdraftError as e:
        raise TrainingError(f"the n-gram LM does not fit these heads: {named(e)}") from e


def _copy_relative(src: Path, dst: Path, name: str) -> None:
    """Copy ``src/name`` (and the sidecars beside an LM) to ``dst/name``."""
    path = src / name
    (dst / name).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(path, dst / name)
    for sidecar in (path.with_suffix(".vocab.json"), path.with_suffix(".fingerprint.json")):
        if sidecar.is_file():
            shutil.copy2(sidecar, dst / Path(name).parent / sidecar.name)
