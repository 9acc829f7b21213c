"""Packaging a draft layer's folder (``heads package`` of an ``--arch eagle`` folder): its files
travel unchanged, the recipe and acceptance tables join its config, ``load_model`` reads them
back and ``decode(model, ids)`` told nothing drafts with them, losslessly; what the tree
lattice's drafter would not read is refused with nothing written; the packaged weights stay
sealed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

from blockdraft.drafts import AcceptanceTables, DraftSpec, default_spec  # noqa: E402
from blockdraft.models import ModelError, greedy_generate, load_model  # noqa: E402
from blockdraft.models.heads.eagle_files import write_eagle  # noqa: E402
from blockdraft.training.errors import TrainingError  # noqa: E402
from blockdraft.training.heads.package import package_heads  # noqa: E402
from blockdraft.verify import decode  # noqa: E402
from hf_testlib import eagle_layer, tiny_hf_base  # noqa: E402


@pytest.fixture
def layer_folder(tmp_path: Path) -> tuple[Path, Path]:
    """(the tiny base's folder, a random draft layer's folder made for it)."""
    base = tiny_hf_base("llama", init=0.1)
    base.save_pretrained(tmp_path / "base")
    folder = write_eagle(eagle_layer("top", 0, base), tmp_path / "eagle",
                         base_model=str(tmp_path / "base"), record={"context": "answer"})
    (folder / "README.md").write_text("a layer\n", encoding="utf-8")
    return tmp_path / "base", folder


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_packaged_layer_drafts_by_default_with_its_recipe(layer_folder: Any,
                                                             tmp_path: Path) -> None:
    base, folder = layer_folder
    tables = AcceptanceTables.uniform(4, copy_q=0.7).save(tmp_path / "acc.json")
    recipe = {"k": 2, "max_nodes": 8, "copy_length": 4, "depth": 3, "tuned_on": "a test"}
    out = package_heads(folder, tmp_path / "packaged", acceptance=tables, recipe=recipe)
    for name in ("eagle.safetensors", "shortlist.safetensors", "README.md"):  # as they were
        assert _digest(out / name) == _digest(folder / name)
    entry = json.loads((out / "config.json").read_text(encoding="utf-8"))["blockdraft_drafting"]
    assert entry == {**recipe, "acceptance": "acceptance.json"}
    model = load_model(base, heads=out)
    caps = model.capabilities
    assert (caps.heads, caps.h) == ("draft-layer", 4)  # the recipe's depth: 3 draft tokens
    assert default_spec(caps) == DraftSpec("tree-lattice", k=2, p=0, budget=8, lookup=True,
                                           tables=str(out / "acceptance.json"), copy_length=4)
    for prompt in ([5, 9, 14, 3, 5, 9, 14, 3], [7, 7, 2, 11]):
        assert decode(model, prompt, max_new_tokens=20).tokens == greedy_generate(
            model, prompt, 20)
    # packaging the package again keeps its entry and tables (nothing given replaces them)
    again = package_heads(out, tmp_path / "again")
    assert json.loads((again / "config.json").read_text(encoding="utf-8")) == json.loads(
        (out / "config.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("given, match", [
    ({"shortlist": [0, 2, 4]}, "shortlist is their output layer's rows"),
    ({"ngram": "lm.arpa"}, "does not rescore with an n-gram LM"),
    ({"recipe": {"p": 4}}, r"\['p'\] do not apply to 'blockdraft-eagle'"),
    ({"acceptance": "missing.json"}, "missing.json does not exist"),
])
def test_what_the_tree_lattice_would_not_read_is_refused(layer_folder: Any, tmp_path: Path,
                                                         given: dict[str, Any],
                                                         match: str) -> None:
    import numpy as np

    _, folder = layer_folder
    if "shortlist" in given:
        given = {"shortlist": np.asarray(given["shortlist"])}
    if "acceptance" in given:
        given = {"acceptance": tmp_path / given["acceptance"]}
    with pytest.raises(TrainingError, match=match):
        package_heads(folder, tmp_path / "p", **given)
    assert not (tmp_path / "p").exists()


def test_a_damaged_layer_is_refused_at_packaging_and_at_loading(layer_folder: Any,
                                                                tmp_path: Path) -> None:
    base, folder = layer_folder
    out = package_heads(folder, tmp_path / "packaged", recipe={"depth": 2})
    weights = out / "eagle.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # one bit of the last tensor
    weights.write_bytes(bytes(data))
    with pytest.raises(ModelError, match="digest"):
        load_model(base, heads=out)
    with pytest.raises(TrainingError, match="would not load.*digest"):
        package_heads(out, tmp_path / "from-damaged")
    assert not (tmp_path / "from-damaged").exists()
