"""q4 from the command line (issue 39): ``decode --precision q4`` on a GGUF file of Q4_1/Q8_0
blocks equals q4's own greedy output (``--lookup`` beside the heads, a token tree whose path a
chain forward confirms, too), ``demo --precision q4`` runs the strategies of one draft a step
and says why it skips the trees, and q4 on PyTorch, or on a model without a GGUF file, is
refused saying what to pass."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from gguf_testlib import BLOCK_D, write_block_gguf

pytest.importorskip("gguf")
pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

from test_cli_hf import TEXT  # noqa: E402

from blockdraft.cli import main  # noqa: E402

PROMPT = "abc abc ab abc abc ab abc abc"


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny block GGUF file, random Medusa heads for it (h = 4), a corpus, a cache."""
    from blockdraft.models.hf import MedusaHeads, write_heads

    root = tmp_path_factory.mktemp("q4cli")
    heads = MedusaHeads(BLOCK_D, None, 3, 1)
    with torch.no_grad():
        g = torch.Generator().manual_seed(1)
        for p in heads.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    corpus = root / "corpus.txt"
    corpus.write_text("\n\n".join(TEXT) + "\n", encoding="utf-8")
    return {"model": write_block_gguf(root / "tiny.Q4_1.gguf"),
            "heads": write_heads(heads, root / "heads"), "corpus": corpus,
            "cache": root / "cache"}


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
            "--prompt", PROMPT, "--runtime", "onnxruntime", "--precision", "q4",
            "--max-new-tokens", "12", "--threads", "1", *extra]


def test_decode_on_q4_is_its_own_greedy(folders: dict[str, Path], capsys: Any) -> None:
    res = json.loads(_run(capsys, _decode(folders, "--lookup", "--compare-greedy",
                                          "--json")).out)
    assert "lookup" in res["drafter"] and len(res["tokens"]) == 12
    vanilla = json.loads(_run(capsys, _decode(folders, "--k", "1", "--json")).out)
    assert vanilla["tokens"] == res["tokens"]
    trie = json.loads(_run(capsys, _decode(folders, "--p", "2", "--lookup", "--compare-greedy",
                                           "--json")).out)
    assert trie["tokens"] == res["tokens"]


def test_demo_on_q4_runs_the_chains(folders: dict[str, Path], tmp_path: Path,
                                    capsys: Any) -> None:
    from blockdraft.rescorers.base import RescorerError
    from blockdraft.training.ngram.train import find_kenlm_tool

    try:
        find_kenlm_tool("lmplz")
    except RescorerError as e:
        pytest.skip(f"KenLM's lmplz is not built ({e})")
    argv = ["demo", "--model", str(folders["model"]), "--heads", str(folders["heads"]),
            "--runtime", "onnxruntime", "--precision", "q4", "--corpus",
            str(folders["corpus"]), "--prompt", PROMPT, "--max-new-tokens", "6",
            "--threads", "1", "--out", str(tmp_path / "demo"), "--json"]
    out = _run(capsys, argv)
    rows = json.loads(out.out)["rows"]
    assert "blockdraft default (cost-aware tree)" in [r["strategy"] for r in rows]
    for row in rows:  # every q4 strategy equals q4's greedy decoding
        if row["strategy"] != "greedy (PyTorch)":
            assert row["identical"] == row["prompts"] == 1, row
    assert any("onnxruntime q4's tree rows are not its chain rows bit for bit" in line
               and "skipping" in line for line in out.err.splitlines()), out.err


def test_q4_is_refused_where_it_does_not_apply(folders: dict[str, Path], tmp_path: Path,
                                               capsys: Any) -> None:
    err = _run(capsys, ["decode", "--model", str(folders["model"]), "--heads",
                        str(folders["heads"]), "--prompt", "ab", "--precision", "q4"], 2).err
    assert "--precision q4 is for --runtime onnxruntime" in err
