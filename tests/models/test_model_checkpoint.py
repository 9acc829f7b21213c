"""save_model / load_model / load_tokenizer: round trip and every documented failure."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from blockdraft.core.digest import sha256_file
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
from blockdraft.models.checkpoint import MAX_CONTEXT

CHANGED = "the file was changed or corrupted since"


def edit_config(directory: Path, edit, v1: bool = True) -> None:  # type: ignore[no-untyped-def]
    """Edit config.json; ``v1``: as a version 1 file (no digests, as blockdraft wrote them
    before it sealed them), whose values are then checked one by one."""
    data = json.loads((directory / "config.json").read_text())
    if v1:
        del data["integrity"]
        data["format_version"] = 1
    edit(data)
    (directory / "config.json").write_text(json.dumps(data))


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
    assert data["kind"] == "blockwise" and data["format_version"] == 2
    assert data["integrity"]["files"] == {"model.safetensors":
                                          sha256_file(directory / "model.safetensors")}


def test_rescorer_round_trip(tmp_path: Path) -> None:
    lm = RescorerLM(BlockwiseConfig.tiny(vocab_size=40, h=1))
    save_model(lm, tmp_path)
    again = load_model(tmp_path)
    assert type(again) is RescorerLM
    with pytest.raises(ModelError, match="no tokenizer.json"):
        load_tokenizer(tmp_path)


def test_missing_files(saved: tuple[Path, BlockwiseLM], tmp_path: Path) -> None:
    directory, _ = saved
    with pytest.raises(ModelError, match="model path .*nowhere' does not exist"):
        load_model(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="no config.json in .*save_model"):
        load_model(tmp_path / "empty")
    (directory / "model.safetensors").unlink()
    with pytest.raises(ModelError, match="no model.safetensors"):
        load_model(directory)


def test_shape_mismatch(saved: tuple[Path, BlockwiseLM]) -> None:
    directory, model = saved
    edit_config(directory, lambda d: d["config"].update(d_model=128))
    with pytest.raises(ModelError, match="model.safetensors does not match .*config.json.*"
                                         "shape mismatch"):
        load_model(directory)


def test_layer_count_mismatch(saved: tuple[Path, BlockwiseLM]) -> None:
    directory, _ = saved
    edit_config(directory, lambda d: d["config"].update(n_layer=3))
    with pytest.raises(ModelError, match="missing tensors"):
        load_model(directory)


@pytest.mark.parametrize(("edit", "match"), [
    (lambda d: d["config"].update(n_layer=10**9), "describes 1000000000 blocks and 3 extra "
                                                  "heads, but .* holds only"),
    (lambda d: d["config"].update(d_model=2**40, n_head=2**20), "torch cannot build"),
    (lambda d: d["config"].update(vocab_size=2**40), "shape mismatch"),
    (lambda d: d["config"].update(max_seq_len=2**40), "max_seq_len = 1099511627776 exceeds"),
])
def test_a_config_naming_a_huge_model_is_refused_at_once(saved, edit, match) -> None:  # type: ignore[no-untyped-def]
    """The fuzz hang of issue 13: an edited size made load_model allocate (or loop over) a
    huge model before it compared the config with the weights."""
    directory, _ = saved
    edit_config(directory, edit)
    with pytest.raises(ModelError, match=match):
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
    edit_config(directory, edit)
    with pytest.raises(ModelError, match=message):
        load_model(directory)


def test_unreadable_files(saved: tuple[Path, BlockwiseLM]) -> None:
    directory, _ = saved
    edit_config(directory, lambda d: None)  # version 1: no digest to catch it first
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


# ---- integrity (issue 13 item 5) -------------------------------------------------------------


@pytest.mark.parametrize(("edit", "match"), [
    (lambda d: d["config"].update(dropout=0.5), "config.json: its content does not match"),
    (lambda d: d["meta"].update(data="cat"), "config.json: its content does not match"),
    (lambda d: d.update(format_version=1), "config.json: its content does not match"),
    (lambda d: d.pop("integrity"), "format_version 2 files carry an 'integrity' member"),
    (lambda d: d["integrity"]["files"].clear(), "no digest of model.safetensors"),
    (lambda d: d.update(kind="rescorer"), "config.json: its content does not match"),
])
def test_sealed_config_refuses_any_change(saved, edit, match) -> None:  # type: ignore[no-untyped-def]
    directory, _ = saved
    edit_config(directory, edit, v1=False)
    with pytest.raises(ModelError, match=match + ".*"):
        load_model(directory)
    with pytest.raises(ModelError, match=match):
        read_model_config(directory)


def test_sealed_weights_refuse_a_changed_value_or_another_models_file(
        saved: tuple[Path, BlockwiseLM], tmp_path: Path) -> None:
    directory, model = saved
    weights = directory / "model.safetensors"
    original = weights.read_bytes()
    data = bytearray(original)
    data[-4] ^= 1  # the lowest mantissa bit of the last weight: still a valid file
    weights.write_bytes(bytes(data))
    with pytest.raises(ModelError, match=r"model.safetensors: its SHA-256 .* is not the one "
                                         r"recorded when it was written .*" + CHANGED):
        load_model(directory)
    other = BlockwiseLM(model.config)  # same shapes, other values
    save_model(other, tmp_path / "other")
    weights.write_bytes((tmp_path / "other" / "model.safetensors").read_bytes())
    with pytest.raises(ModelError, match="must come from one save_model"):
        load_model(directory)
    weights.write_bytes(original)
    assert load_model(directory).config == model.config


def test_version_1_checkpoints_still_load(saved: tuple[Path, BlockwiseLM]) -> None:
    """Checkpoints saved before digests load as before: unchecked, without a warning."""
    directory, model = saved
    edit_config(directory, lambda d: None)
    loaded = load_model(directory)
    for a, b in zip(model.state_dict().values(), loaded.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert read_model_config(directory)[2] == {"data": "fox"}


def test_max_seq_len_bounded(tmp_path: Path) -> None:
    model = RescorerLM(BlockwiseConfig.tiny(vocab_size=40, h=1, max_seq_len=MAX_CONTEXT + 2))
    with pytest.raises(ModelError, match="exceeds the largest a checkpoint holds"):
        save_model(model, tmp_path)
