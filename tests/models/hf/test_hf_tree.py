"""Token trees on Hugging Face models (docs/definitions.md sec. 11): the tree forward with a
custom 4D mask and explicit positions (eager and SDPA attention, a sliding window) equals the
forwards of its paths; a trie's verdict equals the batch's; decoding with trees is lossless;
the offline simulation of a tree strategy equals the online decode."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from blockdraft.drafts import (
    ConfidenceTreeDrafter,
    DraftBatch,
    DraftTree,
    HeadDrafter,
    MedusaTreeDrafter,
    TrieDrafter,
)
from blockdraft.models import greedy_generate
from blockdraft.oracle import simulate
from blockdraft.oracle.record import record_trace
from blockdraft.verify import Verifier, decode

TREE = DraftTree(tokens=np.array([7, 8, 9, 10, 11, 12]), parents=np.array([-1, 0, 0, 1, 1, 3]),
                 scores=np.zeros(6))


@pytest.fixture(scope="module")
def models(hf_model: Any) -> Any:
    """``models(kind, heads)``, built once per module."""
    return cache(lambda kind, heads: hf_model(kind, heads=heads))


@pytest.mark.parametrize("kind", ["llama", "gpt2", "mistral"])
@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_tree_forward_equals_path_forwards(hf_model: Any, kind: str, attention: str) -> None:
    model = hf_model(kind)
    model.base.config._attn_implementation = attention
    with torch.no_grad():
        _, past = model.hidden(torch.arange(2, 14)[None])  # 12 > mistral's window of 8
        positions = torch.as_tensor(past.length + TREE.position_offsets())
        x, cache_ = model.hidden(torch.tensor(TREE.tokens.tolist())[None], past,
                                 position_ids=positions,
                                 tree_mask=torch.as_tensor(TREE.ancestor_mask()))
        for u in range(TREE.num_nodes):
            path = torch.tensor(TREE.path_tokens(u).tolist())[None]
            ref, ref_cache = model.hidden(path, past)
            torch.testing.assert_close(x[0, u], ref[0, -1], atol=1e-4, rtol=1e-4)
            kept = cache_.gather(list(range(past.length))
                                 + [past.length + int(v) for v in TREE.path(u)])
            for a, b in zip(kept.keys + kept.values, ref_cache.keys + ref_cache.values,
                            strict=True):
                torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
@pytest.mark.parametrize("criterion", ["exact", "topk:k=3", "min_block:l=2"])
def test_trie_verdict_equals_batch_verdict(models: Any, kind: str, criterion: str) -> None:
    model = models(kind, "random")
    prompt = [1, 5, 9, 33]
    truth = greedy_generate(model, prompt, 5)
    with torch.no_grad():
        _, past = model.heads_logits(torch.tensor([prompt]))
    rng = np.random.default_rng(0)
    verifier = Verifier(model, criterion)
    for _ in range(4):
        rows: list[list[int]] = []
        while len(rows) < 4:
            cut = int(rng.integers(1, 5))
            row = truth[:cut] + [int(rng.integers(2, 20)) for _ in range(4 - cut)]
            if row not in rows:
                rows.append(row)
        s = -np.arange(4.0)
        drafts = DraftBatch(tokens=np.array(rows), scores=s, head_scores=s, lm_scores=0 * s)
        batch = verifier.verify(past, drafts)
        out = verifier.verify_tree(past, DraftTree.from_drafts(drafts))
        assert (out.n, out.tokens, out.accept_lengths) == (batch.n, batch.tokens,
                                                           batch.accept_lengths)
        torch.testing.assert_close(out.next_logits, batch.next_logits, atol=1e-4, rtol=1e-4)
        for a, b in zip(out.past.keys, batch.past.keys, strict=True):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


STRATEGIES = {
    "trie": True,
    "confidence": ConfidenceTreeDrafter(k=3, budget=10),
    "medusa": MedusaTreeDrafter(choices=((0,), (1,), (0, 0), (1, 0), (0, 0, 0))),
    "trie-budget": TrieDrafter(HeadDrafter(k=3, p=3), budget=6),
}


@given(
    kind=st.sampled_from(["llama", "gpt2"]),
    heads=st.sampled_from(["copy", "random"]),
    strategy=st.sampled_from(sorted(STRATEGIES)),
    prompt=st.lists(st.integers(2, 127), min_size=1, max_size=8),
    max_new=st.integers(1, 20),
    with_eos=st.booleans(),
)
@settings(max_examples=10, deadline=None)
def test_tree_decode_is_lossless(models: Any, kind: str, heads: str, strategy: str,
                                 prompt: list[int], max_new: int, with_eos: bool) -> None:
    model = models(kind, heads)
    full = greedy_generate(model, prompt, max_new)
    eos = full[len(full) // 2] if with_eos else None
    want = full if eos is None else full[: full.index(eos) + 1]
    tree = STRATEGIES[strategy]
    kw: dict[str, Any] = {"k": 3, "p": 3} if tree is True else {}
    res = decode(model, prompt, tree=tree, max_new_tokens=max_new, eos_id=eos, **kw)
    assert res.tokens == want


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_tree_online_equals_offline(models: Any, tmp_path: Path, kind: str) -> None:
    model = models(kind, "copy")
    prompt = [1, 5, 9, 33, 2]
    tree = ConfidenceTreeDrafter(k=3, budget=8)
    online = decode(model, prompt, tree=tree, max_new_tokens=30)
    assert online.block_efficiency > 1.0
    trace = record_trace(model, [prompt], tmp_path / "trace", max_new_tokens=30, K=8)
    offline = simulate(trace, tree)
    assert online.accept_lengths == offline.steps.n.tolist()
    assert [s.winner for s in online.steps] == offline.steps.winner.tolist()
    assert online.block_efficiency == pytest.approx(offline.block_efficiency)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_trees_on_a_cuda_device(hf_model: Any) -> None:
    """Token trees and tries on the GPU: the same tokens and accepted lengths as on the CPU."""
    from blockdraft.drafts import ConfidenceTreeDrafter

    model = hf_model("llama", seed=3)
    prompt = [1, 5, 9, 33, 2]
    y = greedy_generate(model, prompt, 24)
    tree = ConfidenceTreeDrafter(k=3, budget=12)
    cpu = [decode(model, prompt, k=3, p=3, max_new_tokens=24),
           decode(model, prompt, tree=tree, max_new_tokens=24)]
    model.base.to("cuda")
    model.heads.to("cuda")
    gpu = [decode(model, prompt, k=3, p=3, max_new_tokens=24, device="cuda"),
           decode(model, prompt, tree=tree, max_new_tokens=24, device="cuda")]
    for a, b in zip(cpu, gpu, strict=True):
        assert a.tokens == b.tokens == y
        assert a.accept_lengths == b.accept_lengths
