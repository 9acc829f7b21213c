"""The ONNX Runtime model: the same numbers as PyTorch, decode = its own greedy, bit-exact chunk
invariance, a cache that is never copied nor silently stale, and an export made once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_testlib import check_accepted_rows_move, tiny_hf_base

pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

from blockdraft.drafts import ConfidenceTreeDrafter, DraftTree  # noqa: E402
from blockdraft.models import ModelError, greedy_generate  # noqa: E402
from blockdraft.models.hf import HFBlockwiseModel, MedusaHeads  # noqa: E402
from blockdraft.models.runtimes import on_runtime  # noqa: E402
from blockdraft.models.runtimes.kv_buffer import BufferCache  # noqa: E402
from blockdraft.verify import decode  # noqa: E402

pytestmark = pytest.mark.usefixtures("private_cache")


def _heads(d: int, n: int = 3, seed: int = 1, own: int | None = None) -> MedusaHeads:
    heads = MedusaHeads(d, own, n, 1, own_projection=own is not None)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in heads.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return heads


def tiny(kind: str, seed: int = 0, own: bool = False, positions: int = 512) -> HFBlockwiseModel:
    """A tiny random model of each family the runtime builds (hf_testlib, head size 16)."""
    return HFBlockwiseModel(tiny_hf_base(kind, seed, positions),
                            _heads(64, own=96 if own else None, seed=seed + 1))


KINDS = ["llama", "mistral", "qwen2", "gpt2"]


@pytest.mark.parametrize("kind", KINDS)
def test_the_same_numbers_as_pytorch(kind: str) -> None:
    model = tiny(kind)
    ort = on_runtime(model, "onnxruntime", "float32")
    ids = torch.randint(2, 96, (1, 30), generator=torch.Generator().manual_seed(3))
    want, _ = model.heads_logits(ids)
    got, cache = ort.heads_logits(ids)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert isinstance(cache, BufferCache) and cache.length == 30
    more = torch.tensor([[5, 6, 7]])  # incremental, on the cache
    with torch.no_grad():
        full, _ = model.heads_logits(torch.cat([ids, more], 1))
    torch.testing.assert_close(ort.heads_logits(more, cache)[0], full[:, 30:], atol=1e-4,
                               rtol=1e-4)
    assert greedy_generate(ort, [3, 9, 4], 20) == greedy_generate(model, [3, 9, 4], 20)


def test_own_projections_and_tree_forwards() -> None:
    model = tiny("llama", own=True)
    ort = on_runtime(model, "onnxruntime", "float32")
    _, past_t = model.hidden(torch.tensor([[3, 1, 4, 1, 5]]))
    _, past_o = ort.hidden(torch.tensor([[3, 1, 4, 1, 5]]))
    tree = DraftTree(tokens=np.array([7, 8, 9, 10, 11, 12]),
                     parents=np.array([-1, 0, 0, 1, 1, 3]), scores=np.zeros(6))
    kw = {"position_ids": torch.tensor(5 + tree.depths),
          "tree_mask": torch.tensor(tree.ancestor_mask())}
    ids = torch.tensor(tree.tokens)[None]
    want, _ = model.heads_logits(ids, past_t, **kw)
    got, _ = ort.heads_logits(ids, past_o, **kw)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("precision", ["float32", "int8"])
@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_chunks_are_bit_identical_to_single_tokens(kind: str, precision: str) -> None:
    """What makes decode lossless by construction: a token's logits do not depend on how many
    tokens its forward holds."""
    ort = on_runtime(tiny(kind), "onnxruntime", precision)
    rng = np.random.default_rng(0)
    prompt = rng.integers(2, 96, 7).tolist()
    text = rng.integers(2, 96, 23).tolist()

    def logits_in_chunks(size: int) -> torch.Tensor:
        _, past = ort.hidden(torch.tensor([prompt]))
        rows = []
        for s in range(0, len(text), size):
            chunk = torch.tensor([text[s:s + size]])
            x, past = ort.hidden(chunk, past)
            rows.append(ort.project(ort.head_states(x[0], heads=1))[:, 0])
        return torch.cat(rows)

    one = logits_in_chunks(1)
    for size in (2, 3, 6, 23):
        assert torch.equal(logits_in_chunks(size), one), size


@pytest.mark.parametrize("precision", ["float32", "int8"])
@pytest.mark.parametrize("kind", KINDS)
def test_decode_is_its_own_greedy(kind: str, precision: str) -> None:
    from blockdraft.drafts import LookupDrafter

    ort = on_runtime(tiny(kind, seed=2), "onnxruntime", precision)
    prompt = [5, 9, 2, 33, 7, 8, 9, 10, 11]
    want = greedy_generate(ort, prompt, 30)
    chains: list[dict[str, Any]] = [{"p": 1}, {"drafter": LookupDrafter()}]
    trees: list[dict[str, Any]] = [{"p": 3}, {"p": 3, "tree": True}, {"p": 4, "iad": True},
                                   {"tree": ConfidenceTreeDrafter(k=3, budget=10)}]
    for kw in chains + (trees if precision == "float32" else []):  # int8: chains only
        res = decode(ort, prompt, max_new_tokens=30, **({"k": 4} if "drafter" not in kw
                                                         and "tree" not in kw else {}), **kw)
        assert res.tokens == want, kw


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**16), p=st.integers(1, 5), k=st.integers(1, 6),
       prompt=st.lists(st.integers(2, 95), min_size=1, max_size=12))
def test_property_lossless_on_a_random_llama(seed: int, p: int, k: int,
                                              prompt: list[int]) -> None:
    ort = _cached_ort("llama", seed % 3)
    want = greedy_generate(ort, prompt, 16)
    assert decode(ort, prompt, k=k, p=p, max_new_tokens=16).tokens == want
    assert decode(ort, prompt, k=k, p=p, max_new_tokens=16, tree=True).tokens == want


_ORT: dict[tuple[str, int], Any] = {}


def _cached_ort(kind: str, seed: int) -> Any:
    if (kind, seed) not in _ORT:
        _ORT[(kind, seed)] = on_runtime(tiny(kind, seed=seed), "onnxruntime", "float32")
    return _ORT[(kind, seed)]


def test_the_cache_grows_and_refuses_what_was_overwritten() -> None:
    model = tiny("llama", positions=2048)
    ort = on_runtime(model, "onnxruntime", "float32")
    long = torch.randint(2, 96, (1, 700), generator=torch.Generator().manual_seed(1))
    x, past = ort.hidden(long)  # past the first 256 rows: the buffers grow
    assert past.length == 700 and ort._buffer.capacity >= 700
    step, after = ort.hidden(torch.tensor([[4]]), past)
    with torch.no_grad():
        full = model.hidden(torch.cat([long, torch.tensor([[4]])], 1))[0]
    torch.testing.assert_close(step[0, -1], full[0, -1], atol=1e-4, rtol=1e-4)
    # a second forward from `past` overwrites row 700, which `after` holds
    ort.hidden(torch.tensor([[9]]), past)
    with pytest.raises(ModelError, match="overwritten by a later forward"):
        ort.hidden(torch.tensor([[5]]), after)
    assert after.crop(700).length == 700  # what lies below the write stays valid
    ort.hidden(torch.tensor([[5]]), after.crop(700))
    with pytest.raises(ModelError, match="one row"):
        past.expand(2)
    with pytest.raises(ModelError, match="one row at a time"):
        ort.hidden(torch.tensor([[1, 2], [3, 4]]))


def test_a_verification_moves_only_the_accepted_rows() -> None:
    ort = on_runtime(tiny("llama", seed=4), "onnxruntime", "float32")
    check_accepted_rows_move(ort, ort, [3, 1, 4, 1, 5, 9, 2, 6], {"atol": 1e-4, "rtol": 1e-4})


def test_the_export_is_made_once_and_rebuilt_when_damaged(tmp_path: Path,
                                                          monkeypatch: Any) -> None:
    monkeypatch.setenv("BLOCKDRAFT_CACHE", str(tmp_path))
    model = tiny("gpt2", seed=7)
    lines: list[str] = []
    first = on_runtime(model, "onnxruntime", "float32", log=lines.append)
    assert any("exporting" in line for line in lines)
    lines.clear()
    again = on_runtime(model, "onnxruntime", "float32", log=lines.append)
    assert lines == [] and again.export_folder == first.export_folder
    other = on_runtime(model, "onnxruntime", "int8", log=lines.append)
    assert other.export_folder != first.export_folder and lines
    data = first.export_folder / "body.onnx.data"
    del first, again, other  # ONNX Runtime maps the weights file: close it before damaging it
    data.write_bytes(data.read_bytes()[:100])  # outside damage: a truncated weights file
    lines.clear()
    healed = on_runtime(model, "onnxruntime", "float32", log=lines.append)
    assert any("exporting" in line for line in lines)
    ids = torch.tensor([[3, 4, 5]])
    torch.testing.assert_close(healed.heads_logits(ids)[0], model.heads_logits(ids)[0],
                               atol=1e-4, rtol=1e-4)


def test_refusals() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    small_heads = LlamaForCausalLM(LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, bos_token_id=0, eos_token_id=1,
        pad_token_id=0)).eval()  # head size 8
    with pytest.raises(ModelError, match="multiple of 16"):
        on_runtime(HFBlockwiseModel(small_heads, _heads(32)), "onnxruntime", "float32")
    with pytest.raises(ModelError,
                       match=r"computes in float32, int8, q4, not 'bfloat16'.*torch"):
        on_runtime(tiny("llama"), "onnxruntime", "bfloat16")
    with pytest.raises(ModelError, match="unknown runtime 'tvm'"):
        on_runtime(tiny("llama"), "tvm", "float32")
    with pytest.raises(ModelError, match=r"not 'int8' \(precision 'int8' needs runtime "
                                         r"'onnxruntime'\)"):
        on_runtime(tiny("llama"), "torch", "int8")


def test_traces_and_every_criterion_run_on_it(tmp_path: Path) -> None:
    """The oracle's trace and the lossy criteria go through the same protocol."""
    from blockdraft.drafts import HeadDrafter
    from blockdraft.oracle import simulate
    from blockdraft.oracle.record import record_trace

    model = tiny("llama", seed=5)
    ort = on_runtime(model, "onnxruntime", "float32")
    prompts = [[5, 9, 2, 33], [7, 3, 1]]
    theirs = record_trace(model, prompts, tmp_path / "torch", max_new_tokens=12, K=4)
    ours = record_trace(ort, prompts, tmp_path / "ort", max_new_tokens=12, K=4)
    for a, b in zip(theirs, ours, strict=True):
        assert np.array_equal(a.greedy_ids, b.greedy_ids)
        np.testing.assert_allclose(a.topk_logprobs, b.topk_logprobs, atol=1e-3)
    vanilla = simulate(ours, HeadDrafter(k=1, p=1))
    assert vanilla.block_efficiency == pytest.approx(
        simulate(theirs, HeadDrafter(k=1, p=1)).block_efficiency)
    online = [decode(ort, p, k=1, p=1, max_new_tokens=12) for p in prompts]
    assert sum(len(r.tokens) for r in online) / sum(r.calls for r in online) == pytest.approx(
        vanilla.block_efficiency)
    for criterion in ("topk:k=3", "distance:eps=2", "min_block:l=2", "gadpp:beta=3,tau=2.0",
                      "typical:eps=0.3,delta=0.09"):
        want = decode(model, prompts[0], k=3, p=2, criterion=criterion, max_new_tokens=12)
        got = decode(ort, prompts[0], k=3, p=2, criterion=criterion, max_new_tokens=12)
        assert got.tokens == want.tokens and got.accept_lengths == want.accept_lengths, criterion


def test_int8_verifies_chains_and_confirms_trees_with_the_exact_criterion() -> None:
    """int8 is bit-exact per token for one draft a step, not for a tree (module docstring): a
    tree's path is confirmed by a chain forward, so trees decode int8's greedy too."""
    from blockdraft.drafts import CombinedDrafter, HeadDrafter, LookupDrafter

    ort = _cached_ort("llama", 1)
    int8 = on_runtime(tiny("llama", seed=1), "onnxruntime", "int8")
    assert ort.exact_trees and not int8.exact_trees
    prompt = [5, 9, 2, 33, 5, 9]
    want = greedy_generate(int8, prompt, 20)
    for drafter in (HeadDrafter(k=1, p=1), LookupDrafter(), HeadDrafter(k=4, p=1),
                    HeadDrafter(k=4, p=3), CombinedDrafter(HeadDrafter(k=1, p=1),
                                                           LookupDrafter(lengths=(9,)))):
        assert decode(int8, prompt, drafter=drafter, max_new_tokens=20).tokens == want
    lossy = decode(int8, prompt, k=4, p=3, criterion="topk:k=2", max_new_tokens=20)
    assert len(lossy.tokens) == 20  # a lossy criterion on trees is the user's choice
