"""save_model / load_model / load_tokenizer: round trip and every documented failure."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from blockdraft.models import (
    BlockwiseConfig,
    BlockwiseLM,
    ModelError,
    RescorerLM,
    Tokenizer,
    load_model,
    load_tokenizer,
    read_model_config,
    save_model,
)


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    text = "the quick brown fox jumps over the lazy dog. " * 50
    return Tokenizer.train([text], vocab_size=300)


@pytest.fixture
def saved(tmp_path: Path, tokenizer: Tokenizer) -> tuple[Path, BlockwiseLM]:
    torch.manual_seed(0)
    model = BlockwiseLM(BlockwiseConfig.tiny(vocab_size=tokenizer.vocab_size, max_seq_len=32))
    with torch.no_grad():
        for p in model.head_parameters():
            p.normal_(0, 0.05)
    model.eval()
    save_model(model, tmp_path / "m", tokenizer=tokenizer, extra_meta={"data": "fox"})
    return tmp_path / "m", model


def test_round_trip(saved: tuple[Path, BlockwiseLM], tokenizer: Tokenizer) -> None:
    directory, model = saved
    assert {p.name for p in directory.iterdir()} == {
        "config.json", "model.safetensors", "tokenizer.json"
    }
    loaded = load_model(directory)
    assert type(loaded) is BlockwiseLM and loaded.config == model.config
    assert not loaded.training
    x = torch.tensor([tokenizer.encode("the lazy dog jumps")])
    with torch.no_grad():
        a, _ = model.heads_logits(x)
        b, _ = loaded.heads_logits(x)
    torch.testing.assert_close(a, b, atol=0, rtol=0)
    kind, config, meta = read_model_config(directory)
    assert (kind, config, meta) == ("blockwise", model.config, {"data": "fox"})
    tok = load_tokenizer(directory)
    assert tok.encode("the fox") == tokenizer.encode("the fox")
    data = json.loads((directory / "config.json").read_text())
    assert data["kind"] == "blockwise" and data["format_version"] == 1


def test_rescorer_round_trip(tmp_path: Path) -> None:
    lm = RescorerLM(BlockwiseConfig.tiny(vocab_size=40, h=1))
    save_model(lm, tmp_path)
    again = load_model(tmp_path)
    assert type(again) is RescorerLM
    with pytest.raises(ModelError, match="no tokenizer.json"):
        load_tokenizer(tmp_path)


def test_missing_files(saved: tuple[Path, BlockwiseLM], tmp_path: Path) -> None:
    directory, _ = saved
    with pytest.raises(ModelError, match="no config.json in .*save_model"):
        load_model(tmp_path / "nowhere")
    (directory / "model.safetensors").unlink()
    with pytest.raises(ModelError, match="no model.safetensors"):
        load_model(directory)


def test_shape_mismatch(saved: tuple[Path, BlockwiseLM]) -> None:
    directory, model = saved
    data = json.loads((directory / "config.json").read_text())
    data["config"]["d_model"] = 128
    (directory / "config.json").write_text(json.dumps(data))
    with pytest.raises(ModelError, match="model.safetensors does not match .*config.json.*"
                                         "shape mismatch"):
        load_model(directory)


def test_layer_count_mismatch(saved: tuple[Path, BlockwiseLM]) -> None:
    directory, _ = saved
    data = json.loads((directory / "config.json").read_text())
    data["config"]["n_layer"] = 3
    (directory / "config.json").write_text(json.dumps(data))
    with pytest.raises(ModelError, match="missing tensors"):
        load_model(directory)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(kind="seq2seq"), "unknown model kind 'seq2seq'"),
        (lambda d: d.update(format_version=99), "format_version 99.*upgrade"),
        (lambda d: d.update(format="other"), "not a blockdraft model config"),
        (lambda d: d["config"].update(n_embd=3), "unknown config field"),
        (lambda d: d["config"].update(n_head=5), "divisible"),
    ],
)
def test_bad_config(saved: tuple[Path, BlockwiseLM], edit, message: str) -> None:  # type: ignore[no-untyped-def]
    directory, _ = saved
    data = json.loads((directory / "config.json").read_text())
    edit(data)
    (directory / "config.json").write_text(json.dumps(data))
    with pytest.raises(ModelError, match=message):
        load_model(directory)


def test_unreadable_files(saved: tuple[Path, BlockwiseLM]) -> None:
    directory, _ = saved
    (directory / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(ModelError, match="cannot read .*model.safetensors"):
        load_model(directory)
    (directory / "config.json").write_text("{")
    with pytest.raises(ModelError, match="cannot read .*config.json"):
        load_model(directory)


def test_tokenizer_vocab_mismatch(saved: tuple[Path, BlockwiseLM], tmp_path: Path) -> None:
    directory, model = saved
    other = Tokenizer.train(["some other text " * 30], vocab_size=280)
    n, v = other.vocab_size, model.config.vocab_size
    assert n != v
    other.save(directory)
    with pytest.raises(ModelError, match=f"tokenizer.json has {n} tokens but .*vocab_size = {v}"):
        load_model(directory)
    with pytest.raises(ModelError, match=f"{n} tokens but the model's vocab_size is {v}"):
        save_model(model, tmp_path / "again", tokenizer=other)


def test_save_errors(tmp_path: Path) -> None:
    model = BlockwiseLM(BlockwiseConfig.tiny(vocab_size=40))
    with pytest.raises(ModelError, match="JSON"):
        save_model(model, tmp_path, extra_meta={"x": object()})
    with pytest.raises(ModelError, match="BlockwiseLM"):
        save_model(torch.nn.Linear(2, 2), tmp_path)  # type: ignore[arg-type]
    untied = BlockwiseLM(dataclasses.replace(BlockwiseConfig.tiny(vocab_size=40),
                                             tie_embeddings=False))
    save_model(untied, tmp_path / "untied")
    assert load_model(tmp_path / "untied").lm_head is not None
