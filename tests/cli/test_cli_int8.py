"""int8 from the command line (issue 28, finding 6; issue 39): ``decode --lookup`` decodes on int8
the heads' drafts beside prompt lookup's as one token tree, whose path a second forward confirms
(lossless: int8's own greedy, with ``--p 2`` too), and ``demo --precision int8``
runs the strategies of one draft a step and says why it skips the trees (slower there). Before,
both failed with int8's refusal of token trees."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

from test_cli_hf import TEXT, _hf_tokenizer  # noqa: E402

from blockdraft.cli import main  # noqa: E402

PROMPT = ("Python lists keep their items in order and grow as you append to them. Python lists "
          "keep their items in order and")


def tiny_chat_llama(root: Path) -> tuple[Path, Path]:
    """(model folder, heads folder): a tiny Llama that ONNX Runtime runs (head size 16), with
    a byte-level BPE and a chat template, and random Medusa heads (h = 4)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from blockdraft.models.hf import MedusaHeads, write_heads

    tok = _hf_tokenizer(chat=True)
    torch.manual_seed(0)
    base = LlamaForCausalLM(LlamaConfig(
        vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        tie_word_embeddings=False, bos_token_id=0, eos_token_id=tok.eos_token_id,
        pad_token_id=1, initializer_range=0.1)).eval()
    base.save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    heads = MedusaHeads(64, None, 3, 1)
    with torch.no_grad():
        g = torch.Generator().manual_seed(1)
        for p in heads.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return root / "model", write_heads(heads, root / "heads")


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny model and heads, a corpus for the demo's 4-gram, and a private cache."""
    root = tmp_path_factory.mktemp("int8")
    model, heads = tiny_chat_llama(root)
    corpus = root / "corpus.txt"
    corpus.write_text("\n\n".join(TEXT) + "\n", encoding="utf-8")
    return {"model": model, "heads": heads, "corpus": corpus, "cache": root / "cache"}


@pytest.fixture(autouse=True)
def _cache(folders: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BLOCKDRAFT_CACHE", str(folders["cache"]))


def _run(capsys: Any, argv: list[str], code: int = 0) -> Any:
    capsys.readouterr()
    got = main(argv)
    out = capsys.readouterr()
    assert got == code, out.err
    return out


def _decode(folders: dict[str, Path], *extra: str) -> list[str]:
    return ["decode", "--model", str(folders["model"]), "--heads", str(folders["heads"]),
            "--prompt", PROMPT, "--runtime", "onnxruntime", "--precision", "int8",
            "--max-new-tokens", "12", "--threads", "1", *extra]


@pytest.mark.parametrize("extra", [(), ("--p", "2")])
def test_decode_lookup_works_on_int8(extra: tuple[str, ...], folders: dict[str, Path],
                                     capsys: Any) -> None:
    out = _run(capsys, _decode(folders, "--lookup", "--compare-greedy", "--json", *extra))
    res = json.loads(out.out)
    assert "lookup" in res["drafter"] and len(res["tokens"]) == 12
    assert not [line for line in out.err.splitlines() if line.startswith("blockdraft: ")]
    # --compare-greedy passed: the output equals int8's own greedy decoding
    greedy = json.loads(_run(capsys, _decode(folders, "--json")).out)  # vanilla heads, p = 1
    assert greedy["tokens"] == res["tokens"]


def test_demo_on_int8_runs_the_chains_and_says_why_it_skips_trees(
        folders: dict[str, Path], tmp_path: Path, capsys: Any) -> None:
    from blockdraft.rescorers.base import RescorerError
    from blockdraft.training.ngram.train import find_kenlm_tool

    try:
        find_kenlm_tool("lmplz")
    except RescorerError as e:
        pytest.skip(f"KenLM's lmplz is not built ({e})")
    argv = ["demo", "--model", str(folders["model"]), "--heads", str(folders["heads"]),
            "--runtime", "onnxruntime", "--precision", "int8", "--corpus",
            str(folders["corpus"]), "--prompt", PROMPT, "--max-new-tokens", "6",
            "--threads", "1", "--out", str(tmp_path / "demo"), "--json"]
    out = _run(capsys, argv)
    rows = json.loads(out.out)["rows"]
    assert [r["strategy"] for r in rows] == [
        "greedy", "greedy (PyTorch)", "blockdraft default (cost-aware tree)", "vanilla heads",
        "4-gram rescoring", "prompt lookup"]  # the default drafts one path a step on int8
    for row in rows:  # every int8 strategy equals int8's greedy decoding
        if row["strategy"] != "greedy (PyTorch)":
            assert row["identical"] == row["prompts"] == 1, row
    skipped = [line for line in out.err.splitlines() if "skipping" in line]
    assert len(skipped) == 1 and "a second, confirming forward" in skipped[0] \
        and "4-best 4-gram, 4-gram + lookup" in skipped[0], out.err


def test_demo_refuses_int8_on_torch(folders: dict[str, Path], tmp_path: Path,
                                    capsys: Any) -> None:
    err = _run(capsys, ["demo", "--runtime", "torch", "--precision", "int8", "--out",
                        str(tmp_path / "demo")], 2).err
    assert "--precision int8 is for --runtime onnxruntime" in err


def test_decode_iad_with_lookup_is_refused_by_name(folders: dict[str, Path], capsys: Any) -> None:
    """Two copy sources: ``--lookup`` used to drop ``--iad`` without a word."""
    err = _run(capsys, _decode(folders, "--lookup", "--iad"), 2).err
    assert "--iad" in err and "drop one of them" in err
