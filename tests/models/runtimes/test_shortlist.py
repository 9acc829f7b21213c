"""Shortlist heads: the Medusa heads draft over a subset of the vocabulary, the base head over all
of it. The verification's outputs stay those of greedy, no token outside the shortlist is ever
drafted by a head, the fast top-k paths (torch, ONNX Runtime's graph) equal the slow path (every
logit, masked), and the shortlist travels with the heads' files and the export's key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

from blockdraft.drafts import ConfidenceTreeDrafter  # noqa: E402
from blockdraft.lattice import SausageLattice  # noqa: E402
from blockdraft.models import ModelError, greedy_generate  # noqa: E402
from blockdraft.models.factored import FactoredHeadsLM  # noqa: E402
from blockdraft.models.hf import HFBlockwiseModel, MedusaHeads  # noqa: E402
from blockdraft.models.hf.formats import read_heads, write_heads  # noqa: E402
from blockdraft.models.runtimes import on_runtime  # noqa: E402
from blockdraft.models.runtimes.onnx_export import export_key  # noqa: E402
from blockdraft.models.topk import topk_logprobs  # noqa: E402
from blockdraft.verify import decode  # noqa: E402
from blockdraft.verify.decode import head_lattice, step_lattice  # noqa: E402

pytestmark = pytest.mark.usefixtures("private_cache")

V = 96


def tiny(kind: str = "llama", seed: int = 0, shortlist: int | None = 40) -> HFBlockwiseModel:
    """A tiny random Llama or GPT-2 (V = 96) with 3 random Medusa heads and, unless None, a
    random shortlist of that many ids."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    ids = {"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 0, "initializer_range": 0.1}
    if kind == "llama":
        base = LlamaForCausalLM(LlamaConfig(
            vocab_size=V, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
            tie_word_embeddings=False, **ids))
    else:
        base = GPT2LMHeadModel(GPT2Config(vocab_size=V, n_embd=64, n_layer=2, n_head=4,
                                          n_positions=256, **ids))
    heads = MedusaHeads(64, None, 3, 1)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in heads.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    if shortlist is not None:
        heads.set_shortlist(torch.randperm(V, generator=g)[:shortlist], vocab_size=V)
    return HFBlockwiseModel(base.eval(), heads)


def _slow_topk(model: Any, x: torch.Tensor, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The generic path: every head's logits over V (masked outside the shortlist), top-k."""
    return FactoredHeadsLM.head_topk(model, x, k)


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_fast_topk_equals_the_masked_logits(kind: str) -> None:
    model = tiny(kind)
    ort = on_runtime(model, "onnxruntime", "float32")
    x, _ = model.hidden(torch.randint(2, V, (1, 9), generator=torch.Generator().manual_seed(4)))
    x = x[0]  # (9, d)
    allowed = set(model.heads.shortlist.tolist())
    for k in (1, 5, 40, 50):
        want_ids, want_sc = _slow_topk(model, x, k)
        for got_ids, got_sc in (model.head_topk(x, k), ort.head_topk(x, k)):
            assert got_ids.shape == want_ids.shape == (9, 3, k)
            np.testing.assert_array_equal(got_ids, want_ids)
            np.testing.assert_allclose(got_sc, want_sc, atol=2e-5)
        real = want_ids[want_ids >= 0]
        assert set(real.tolist()) <= allowed  # never a token outside the shortlist
        assert (want_ids >= 0).sum(-1).max() == min(k, 40)  # padding beyond the shortlist
    # the scores are log-probabilities over the shortlist: they sum to 1 over it
    _, full = _slow_topk(model, x, 40)
    np.testing.assert_allclose(np.exp(full).sum(-1), 1.0, atol=1e-6)


def test_project_masks_medusa_rows_only() -> None:
    model = tiny()
    ort = on_runtime(model, "onnxruntime", "float32")
    x, _ = model.hidden(torch.tensor([[5, 6, 7]]))
    outside = np.setdiff1d(np.arange(V), model.heads.shortlist.numpy())
    for m in (model, ort):
        logits = m.project(m.head_states(x[0]))  # (3, h, V)
        assert torch.isfinite(logits[:, 0]).all()  # the base head: the whole vocabulary
        assert torch.isneginf(logits[:, 1:, outside]).all()
        assert torch.isfinite(logits[:, 1:, model.heads.shortlist]).all()


@pytest.mark.parametrize("runtime", ["torch", "onnxruntime"])
def test_decode_is_greedy_and_drafts_only_shortlisted_tokens(runtime: str) -> None:
    model = tiny()
    m = model if runtime == "torch" else on_runtime(model, "onnxruntime", "float32")
    allowed = set(model.heads.shortlist.tolist())
    prompt = [3, 17, 4, 22, 9]
    want = greedy_generate(m, prompt, 40)
    for kw in ({"p": 1}, {"k": 4, "p": 3}, {"tree": ConfidenceTreeDrafter(k=4, budget=8)}):
        res = decode(m, prompt, max_new_tokens=40, **kw)
        assert res.tokens == want
        for step in res.steps:
            drafted = step.drafts.tokens[:, 1:]  # column 0 is the certain token
            assert set(drafted[drafted >= 0].tolist()) <= allowed


def test_the_shortlist_changes_drafts_not_outputs() -> None:
    """Without the shortlist the heads draft other tokens (so the test above can fail), and
    the output is the same."""
    plain, short = tiny(shortlist=None), tiny(shortlist=8)
    prompt = [3, 17, 4, 22, 9]
    a = decode(plain, prompt, max_new_tokens=30, p=1)
    b = decode(short, prompt, max_new_tokens=30, p=1)
    assert a.tokens == b.tokens == greedy_generate(plain, prompt, 30)
    drafted = np.concatenate([s.drafts.tokens[:, 1:].ravel() for s in a.steps])
    assert not set(drafted.tolist()) <= set(short.heads.shortlist.tolist())


def test_step_lattice_from_topk_equals_the_logits_lattice() -> None:
    model = tiny()
    x, _ = model.hidden(torch.tensor([[5, 6, 7, 8]]))
    state = x[0, -1]
    logits = model.project(model.head_states(state))  # (h, V), masked
    ids, scores = model.head_topk(state[None], 6)
    a = step_lattice(logits[:1], (ids[0], scores[0]), 6)
    b = head_lattice(logits, 6)
    c = SausageLattice.from_logits(logits, 6)
    for lat in (a, b):
        np.testing.assert_array_equal(lat.tokens, c.tokens)
        np.testing.assert_allclose(lat.scores, c.scores, atol=1e-9)


def test_topk_ties_go_to_the_smaller_id() -> None:
    z = torch.tensor([[0.0, 1.0, 1.0, 1.0, 0.5], [2.0, 2.0, 2.0, 2.0, 2.0]])
    ids, scores = topk_logprobs(z, 2)
    np.testing.assert_array_equal(ids, [[1, 2], [0, 1]])
    ids, _ = topk_logprobs(z, 2, ids=torch.tensor([10, 11, 12, 13, 14]))
    np.testing.assert_array_equal(ids, [[11, 12], [10, 11]])
    np.testing.assert_allclose(scores[1], np.log(0.2))


def test_files_roundtrip_and_damage(tmp_path: Path) -> None:
    model = tiny()
    folder = write_heads(model.heads, tmp_path / "h", base_model="x")
    back = read_heads(folder)
    assert back.shortlist is not None
    assert torch.equal(back.shortlist, model.heads.shortlist)
    config = json.loads((folder / "config.json").read_text())
    assert config["blockdraft_shortlist"]["size"] == 40
    # a damaged file is refused, naming it
    raw = bytearray((folder / "shortlist.safetensors").read_bytes())
    raw[-3] ^= 0x01
    (folder / "shortlist.safetensors").write_bytes(bytes(raw))
    with pytest.raises(ModelError, match="shortlist"):
        read_heads(folder)
    (folder / "shortlist.safetensors").unlink()
    with pytest.raises(ModelError, match="does not hold"):
        read_heads(folder)


def test_bad_shortlists_are_refused() -> None:
    heads = MedusaHeads(8, None, 2)
    with pytest.raises(ModelError, match="repeat"):
        heads.set_shortlist(torch.tensor([1, 1, 2]))
    with pytest.raises(ModelError, match=r"\[0, 10\)"):
        heads.set_shortlist(torch.tensor([1, 10]), vocab_size=10)
    with pytest.raises(ModelError, match="non-empty"):
        heads.set_shortlist(torch.tensor([], dtype=torch.int64))
    with pytest.raises(ModelError, match="own projections"):
        MedusaHeads(8, 10, 2, own_projection=True).set_shortlist(torch.tensor([1]))


def test_the_export_key_follows_the_shortlist() -> None:
    a, b = tiny(shortlist=40), tiny(shortlist=40)
    assert export_key(a, "float32") == export_key(b, "float32")
    b.heads.set_shortlist(torch.arange(40))
    assert export_key(a, "float32") != export_key(b, "float32")
    b.heads.set_shortlist(None)
    assert export_key(a, "float32") != export_key(b, "float32")
