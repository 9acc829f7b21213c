"""benchmarks/bench_identity.py on a tiny Hugging Face model: the replays that recompute the
base logits on greedy's path and on BPD's path reproduce both decodes, and a divergence (forced
here by altering a decode's output) is recorded with both paths' top-2 margins and written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("transformers")

from benchmarks import bench_identity  # noqa: E402


def _tiny(seed: int = 0) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    from blockdraft.models.hf import HFBlockwiseModel, MedusaHeads

    torch.manual_seed(seed)
    base = LlamaForCausalLM(LlamaConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        initializer_range=0.1)).eval()
    heads = MedusaHeads(32, None, 3)
    with torch.no_grad():
        for p in heads.parameters():
            p.fill_(0.0)  # copy heads: every head is the base head, drafts get accepted
    return HFBlockwiseModel(base, heads)


class _Tok:
    """Just what run_one uses of a chat tokenizer."""

    eos_id = None

    def apply_chat_template(self, messages: Any) -> list[int]:
        return [1, 5, 9, 33, len(messages[0]["content"]) % 100 + 2]

    def decode(self, ids: Any) -> str:
        return " ".join(map(str, ids))


def test_replays_reproduce_both_paths() -> None:
    from blockdraft.drafts import DraftSpec
    from blockdraft.models import greedy_generate
    from blockdraft.verify import decode

    bench = bench_identity
    model = _tiny()
    prompt = [1, 5, 9, 33, 2]
    ys = greedy_generate(model, prompt, 24)
    for spec in (DraftSpec("heads"), DraftSpec("heads", k=4, p=3)):  # a chain, then a trie
        res = decode(model, prompt, drafter=spec, max_new_tokens=24)
        assert res.tokens == ys and res.block_efficiency > 1.0
        for i in (0, 1, 7, 23):
            zb, ok = bench.bpd_logits_at(model, prompt, res, i, 24, None)
            zg = bench.greedy_logits_at(model, prompt, ys, i)
            assert ok and int(zb.argmax()) == int(zg.argmax()) == ys[i]
            assert bench.top2(zg)["top1"] == ys[i]


def test_a_divergence_is_recorded_and_written(monkeypatch: Any, tmp_path: Path) -> None:
    from blockdraft.drafts import DraftSpec
    from blockdraft.verify import decode as real_decode

    bench = bench_identity
    model = _tiny()

    def altered(*args: Any, **kwargs: Any) -> Any:
        res = real_decode(*args, **kwargs)
        tokens = list(res.tokens)
        tokens[5] = (tokens[5] + 1) % 128
        object.__setattr__(res, "tokens", tokens)
        return res

    monkeypatch.setattr(bench, "decode", altered)
    rows = bench.run_one(model, _Tok(), "hi", {"vanilla": DraftSpec("heads")}, 12)
    (row,) = rows
    d = row["first_divergence"]
    assert not row["identical"] and d["index"] == 5
    assert d["greedy_path"]["top1"] == d["greedy_token"]
    assert d["bpd_path"]["top1"] == d["greedy_token"]  # the real BPD path chose greedy's token
    assert d["greedy_path"]["margin"] >= 0 and isinstance(d["bpd_path"]["tie"], bool)
    assert d["replay_ok"] is False  # the replay does not reproduce the altered output
    runs = [dict(row, dtype="float32", prompt_index=0)]
    summary = bench.summarise(runs)
    assert summary[0]["divergences"] == 1 and summary[0]["identical"] == 0
    text = bench.markdown("sig", summary, runs, "cmd")
    assert "## Divergences" in text and "| float32 | vanilla | 0 | 5 | " in text
    json.dumps(runs)  # JSON-serialisable


def test_top2_breaks_ties_as_argmax_does() -> None:
    bench = bench_identity
    got = bench.top2(torch.tensor([1.0, 3.0, 3.0, 0.0], dtype=torch.bfloat16))
    assert (got["top1"], got["top2"], got["margin"], got["tie"]) == (1, 2, 0.0, True)
    got = bench.top2(torch.tensor([1.0, 2.0, 3.5, 0.0]))
    assert (got["top1"], got["top2"], got["margin"], got["tie"]) == (2, 1, 1.5, False)
