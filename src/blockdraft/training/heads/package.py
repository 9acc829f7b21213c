"""Package heads with what they draft with: their shortlist and their drafting recipe.

Trained heads (``blockdraft heads train``) are a Medusa version-2 folder. Two things measured
after training belong beside them, so that ``load_model`` brings them and ``decode(model, ids)``
uses them with no settings:

- the shortlist (:mod:`blockdraft.models.hf.shortlist`): the draft vocabulary, the most
  frequent tokens of the base's own answers (:mod:`.shortlist`);
- the drafting recipe (:mod:`blockdraft.models.hf.drafting`): the n-gram LM of those answers
  (a KenLM binary, copied with its vocabulary record), the acceptance tables measured on
  held-out training answers, and the settings tuned there.

:func:`package_heads` writes a new heads folder from an existing one plus those parts, in one
atomic step (the folder appears complete or not at all); the heads' tensors are copied as they
are (their digest unchanged).

Public surface:
    package_heads(heads, out, *, shortlist=None, shortlist_info=None, ngram=None,
                  acceptance=None, recipe=None) -> Path
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from blockdraft.training.errors import TrainingError

NGRAM_DIR = "ngram"
"""Where a packaged heads folder keeps its n-gram LM."""
RECIPE_KEYS = ("k", "p", "max_nodes", "copy_length", "alpha", "context_order",
               "context_weight", "tuned_on")


def package_heads(heads: str | os.PathLike[str], out: str | os.PathLike[str], *,
                  shortlist: np.ndarray | None = None,
                  shortlist_info: dict[str, Any] | None = None,
                  ngram: str | os.PathLike[str] | None = None,
                  acceptance: str | os.PathLike[str] | None = None,
                  recipe: dict[str, Any] | None = None) -> Path:
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

    Raises:
        TrainingError: not a version-2 heads folder, a missing file, an unknown recipe key.
    """
    import torch

    from blockdraft.core.files import atomic_directory
    from blockdraft.models.hf.drafting import CONFIG_KEY as DRAFTING_KEY
    from blockdraft.models.hf.formats import read_heads, read_heads_config, write_heads

    src = Path(heads)
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
    return target


def _copy_relative(src: Path, dst: Path, name: str) -> None:
    """Copy ``src/name`` (and the sidecars beside an LM) to ``dst/name``."""
    path = src / name
    (dst / name).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(path, dst / name)
    for sidecar in (path.with_suffix(".vocab.json"), path.with_suffix(".fingerprint.json")):
        if sidecar.is_file():
            shutil.copy2(sidecar, dst / Path(name).parent / sidecar.name)
