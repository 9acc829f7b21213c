"""Packaged heads: a shortlist and a drafting recipe travel with the heads' files, load_model
brings them, and decode(model, ids) told nothing drafts with them, losslessly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from blockdraft.drafts import (  # noqa: E402
    AcceptanceTables,  # noqa: E402
    HeadPaths,
    default_drafter,
    default_spec,
)
from blockdraft.models import ModelError, greedy_generate  # noqa: E402
from blockdraft.models.hf import HFBlockwiseModel, MedusaHeads  # noqa: E402
from blockdraft.models.hf.formats import read_heads, write_heads  # noqa: E402
from blockdraft.models.runtimes import on_runtime  # noqa: E402
from blockdraft.training.errors import TrainingError  # noqa: E402
from blockdraft.training.heads.package import package_heads  # noqa: E402
from blockdraft.verify import decode  # noqa: E402

V = 96


def _base(seed: int = 0) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=V, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        tie_word_embeddings=False, bos_token_id=0, eos_token_id=1, pad_token_id=0,
        initializer_range=0.1)).eval()


def _heads(seed: int = 1) -> MedusaHeads:
    heads = MedusaHeads(64, None, 3, 1)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in heads.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return heads


@pytest.fixture
def parts(tmp_path: Path, monkeypatch: Any) -> dict[str, Any]:
    from blockdraft.rescorers.base import RescorerError
    from blockdraft.training.ngram.train import find_kenlm_tool, train_ngram

    monkeypatch.setenv("BLOCKDRAFT_CACHE", str(tmp_path / "cache"))
    try:
        find_kenlm_tool("lmplz")
    except RescorerError as e:
        pytest.skip(f"KenLM's lmplz is not built ({e}); run `make setup`")
    base = _base()
    heads_dir = write_heads(_heads(), tmp_path / "heads", base_model="tiny")
    rng = np.random.default_rng(0)
    text = [greedy_generate(HFBlockwiseModel(base, _heads()), rng.integers(2, V, 6).tolist(), 30)
            for _ in range(20)]
    lm = train_ngram(text, tmp_path / "lm3", order=3)
    tables = AcceptanceTables.uniform(4).save(tmp_path / "acc.json")
    return {"base": base, "heads": heads_dir, "lm": lm.binary, "tables": tables,
            "shortlist": np.sort(rng.choice(V, 50, replace=False))}


def test_package_load_and_decode(parts: dict[str, Any], tmp_path: Path) -> None:
    out = package_heads(parts["heads"], tmp_path / "packaged", shortlist=parts["shortlist"],
                        shortlist_info={"counted_on": "test"}, ngram=parts["lm"],
                        acceptance=parts["tables"],
                        recipe={"k": 4, "p": 2, "alpha": 0.5, "context_order": 3,
                                "context_weight": 0.3, "tuned_on": "test"})
    heads = read_heads(out)
    assert heads.shortlist is not None
    np.testing.assert_array_equal(heads.shortlist.numpy(), parts["shortlist"])
    recipe = heads.drafting
    assert recipe is not None and recipe.p == 2 and recipe.context_weight == 0.3
    assert recipe.ngram is not None and recipe.ngram.is_file()
    assert recipe.ngram.parent.name == "ngram"
    model = HFBlockwiseModel(parts["base"], heads)
    prompt = [3, 17, 4, 22, 9, 3, 17]
    want = greedy_generate(model, prompt, 40)
    for m in (model, on_runtime(model, "onnxruntime", "float32")):
        spec = default_spec(m.capabilities)
        assert (spec.strategy, spec.p, spec.rescorer, spec.alpha) == ("cost-aware", 2, "ngram", 0.5)
        assert (spec.context_order, spec.context_weight) == (3, 0.3)
        drafter = default_drafter(m)
        rescored = drafter.sources[1]  # the chain, then the rescored p-best paths
        assert isinstance(rescored, HeadPaths) and rescored.p == 2
        assert rescored.rescorer is not None and rescored.rescorer.alpha == 0.5
        assert rescored.rescorer.context_weight == 0.3
        res = decode(m, prompt, max_new_tokens=40)  # told nothing: the packaged recipe
        assert res.tokens == want
        assert res.drafter == drafter.name
    # packaging the packaged folder again keeps its parts
    again = package_heads(out, tmp_path / "again")
    back = read_heads(again)
    assert back.drafting is not None and back.drafting.p == 2 and back.drafting.ngram is not None
    assert back.shortlist is not None


def test_a_missing_part_is_named(parts: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(TrainingError, match="nope.bin"):
        package_heads(parts["heads"], tmp_path / "x", ngram=tmp_path / "nope.bin")
    with pytest.raises(TrainingError, match="unknown recipe"):
        package_heads(parts["heads"], tmp_path / "x", recipe={"beam": 3})
    out = package_heads(parts["heads"], tmp_path / "p", acceptance=parts["tables"])
    (out / "acceptance.json").unlink()
    with pytest.raises(ModelError, match="acceptance"):
        read_heads(out)
    config = json.loads((out / "config.json").read_text())
    config["blockdraft_drafting"]["p"] = -1
    (out / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match="p must be"):
        read_heads(out)


def test_what_does_not_load_is_not_packaged(tmp_path: Path) -> None:
    """Issue 42 row 3: a truncated acceptance table (or a recipe out of range) was copied and
    named in the config; the error came only at decode time. Now package_heads reads every
    file back before the folder is put in place, and writes nothing when one fails."""
    heads_dir = write_heads(_heads(), tmp_path / "heads", base_model="tiny")
    good = AcceptanceTables.uniform(4).save(tmp_path / "acc.json")
    truncated = tmp_path / "truncated.json"
    truncated.write_bytes(good.read_bytes()[:20])
    out = tmp_path / "packaged"
    with pytest.raises(TrainingError, match=r"acceptance tables do not load: cannot read "
                                            rf"acceptance tables {out}/acceptance.json"):
        package_heads(heads_dir, out, acceptance=truncated)
    with pytest.raises(TrainingError, match=r"would not load: .*max_nodes must be an integer"):
        package_heads(heads_dir, out, recipe={"max_nodes": 0})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["acc.json", "heads", "truncated.json"]
    assert read_heads(package_heads(heads_dir, out, acceptance=good)).drafting is not None


def test_a_recipes_heads_on_demand_drives_the_default(tmp_path: Path) -> None:
    """``heads_on_demand`` in a Medusa recipe: the default drafter gates its heads on the
    copies (needs.on_demand), on PyTorch and ONNX Runtime, and decodes greedy's tokens; a
    negative length is refused when packaging."""
    heads_dir = write_heads(_heads(), tmp_path / "heads", base_model="tiny")
    tables = AcceptanceTables.uniform(4).save(tmp_path / "acc.json")
    out = package_heads(heads_dir, tmp_path / "packaged", acceptance=tables,
                        recipe={"k": 4, "p": 0, "heads_on_demand": 2})
    heads = read_heads(out)
    assert heads.drafting is not None and heads.drafting.heads_on_demand == 2
    model = HFBlockwiseModel(_base(), heads)
    prompt = [3, 17, 4, 22, 9, 3, 17, 4, 22]  # repeats: lookup finds copies
    want = greedy_generate(model, prompt, 30)
    for m in (model, on_runtime(model, "onnxruntime", "float32")):
        assert default_spec(m.capabilities).heads_on_demand == 2
        assert default_drafter(m).needs.on_demand
        assert decode(m, prompt, max_new_tokens=30).tokens == want
    with pytest.raises(TrainingError, match="heads_on_demand must be an integer >= 0"):
        package_heads(heads_dir, tmp_path / "bad", recipe={"heads_on_demand": -1})
