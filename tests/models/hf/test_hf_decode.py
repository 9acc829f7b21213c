"""Lossless decoding with a Hugging Face model (docs/definitions.md sec. 1, 2, 6): BPD with the
exact criterion is token-identical to greedy_generate and to transformers' own greedy
``generate``; a trace of the model simulated offline gives the online decode's n per step;
the model's context is enforced."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from blockdraft.drafts import HeadDrafter
from blockdraft.models import greedy_generate
from blockdraft.models.errors import ModelError
from blockdraft.models.hf import HFBlockwiseModel
from blockdraft.oracle import simulate
from blockdraft.oracle.record import record_trace
from blockdraft.verify import decode
from blockdraft.verify.criteria import VerifyError


def hf_greedy(model: HFBlockwiseModel, prompt: list[int], max_new: int) -> list[int]:
    """transformers' own greedy decoding of the base model (no EOS)."""
    with torch.no_grad():
        out = model.base.generate(
            torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            do_sample=False, max_new_tokens=max_new, eos_token_id=None, pad_token_id=0,
        )
    return [int(t) for t in out[0, len(prompt):]]


@pytest.fixture(scope="module")
def models(hf_model: Any) -> Any:
    """``models(kind, heads)``, built once per module."""
    return cache(lambda kind, heads: hf_model(kind, heads=heads))


@given(
    kind=st.sampled_from(["llama", "gpt2"]),
    heads=st.sampled_from(["copy", "random"]),
    prompt=st.lists(st.integers(2, 127), min_size=1, max_size=10),
    k=st.integers(1, 4),
    p=st.integers(1, 3),
    max_new=st.integers(1, 24),
)
@settings(max_examples=16, deadline=None)
def test_exact_bpd_equals_greedy_and_transformers_generate(
    models: Any, kind: str, heads: str, prompt: list[int], k: int, p: int, max_new: int
) -> None:
    model = models(kind, heads)
    y = greedy_generate(model, prompt, max_new)
    assert y == hf_greedy(model, prompt, max_new)
    result = decode(model, prompt, k=k, p=p, max_new_tokens=max_new)
    assert result.tokens == y
    assert result.calls == 1 + len(result.steps)


@pytest.fixture(scope="module")
def ngram_lm(tmp_path_factory: pytest.TempPathFactory, models: Any) -> Any:
    """A 3-gram LM over the tiny models' token ids (< 128: every model's vocabulary), trained
    on greedy continuations of the copy-headed Llama, so rescored drafts differ from
    vanilla ones and get accepted."""
    from blockdraft.rescorers.base import RescorerError
    from blockdraft.rescorers.ngram import NgramLM
    from blockdraft.training.ngram import train_ngram

    model = models("llama", "copy")
    seqs = [[*prompt, *greedy_generate(model, prompt, 40)]
            for prompt in ([1, 5, 9, 33], [2, 7], [100, 3, 3], [64, 12, 90, 91, 4])]
    seqs = [[t % 128 for t in seq] for seq in seqs]
    try:
        r = train_ngram(seqs, tmp_path_factory.mktemp("hf-lm") / "lm3", order=3)
    except RescorerError as e:
        pytest.skip(f"KenLM's lmplz is not built ({e})")
    return NgramLM(r.arpa)


@given(
    kind=st.sampled_from(["llama", "gpt2", "mistral"]),
    own_projection=st.booleans(),
    num_layers=st.integers(1, 2),
    rescore=st.booleans(),
    prompt=st.lists(st.integers(2, 127), min_size=1, max_size=12),
    k=st.integers(1, 4),
    p=st.integers(1, 4),
    max_new=st.integers(1, 30),
    eos=st.one_of(st.none(), st.integers(2, 127)),
)
@settings(max_examples=16, deadline=None)
def test_property_exact_decode_equals_greedy_in_float32(
    hf_model: Any, ngram_lm: Any, kind: str, own_projection: bool, num_layers: int,
    rescore: bool, prompt: list[int], k: int, p: int, max_new: int, eos: int | None
) -> None:
    """Lossless in float32 (docs/definitions.md sec. 1): with random Medusa heads in either
    projection layout, 1-2 ResBlocks, a sliding-window model, vanilla, p-best 0-gram or p-best
    n-gram rescored drafts and any EOS, exact BPD returns greedy decoding's tokens."""
    from blockdraft.rescorers.ngram import NgramRescorer

    model = _cached_model(hf_model, kind, own_projection, num_layers)
    assert next(model.parameters()).dtype == torch.float32
    y = greedy_generate(model, prompt, max_new, eos_id=eos)
    drafter = HeadDrafter(k=k, p=p, rescorer=NgramRescorer(ngram_lm, alpha=1.0)
                          if rescore else None)
    result = decode(model, prompt, drafter=drafter, max_new_tokens=max_new, eos_id=eos)
    assert result.tokens == y


_MODELS: dict[tuple[str, bool, int], HFBlockwiseModel] = {}


def _cached_model(hf_model: Any, kind: str, own: bool, layers: int) -> HFBlockwiseModel:
    key = (kind, own, layers)
    if key not in _MODELS:
        _MODELS[key] = hf_model(kind, heads="random", num_layers=layers, own_projection=own,
                                seed=len(_MODELS))
    return _MODELS[key]


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
@pytest.mark.parametrize(("k", "p"), [(1, 1), (4, 3)])
def test_drafts_are_accepted_and_eos_stops(models: Any, kind: str, k: int, p: int) -> None:
    """Copy heads on a looping base accept tokens (so the acceptance path is exercised);
    vanilla and p > 1 drafts stay lossless with an EOS."""
    model = models(kind, "copy")
    prompt = [1, 5, 9, 33]
    y = greedy_generate(model, prompt, 40)
    result = decode(model, prompt, k=k, p=p, max_new_tokens=40)
    assert result.tokens == y
    assert sum(result.accept_lengths) > 0 and result.block_efficiency > 1.0
    eos = y[12]
    stop = greedy_generate(model, prompt, 40, eos_id=eos)
    assert stop[-1] == eos and len(stop) <= 13
    assert decode(model, prompt, k=k, p=p, max_new_tokens=40, eos_id=eos).tokens == stop


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
@pytest.mark.parametrize(("heads", "k", "p"), [("copy", 1, 1), ("copy", 3, 2), ("random", 4, 3)])
def test_online_decode_equals_offline_simulation(models: Any, tmp_path: Path, kind: str,
                                                 heads: str, k: int, p: int) -> None:
    """docs/definitions.md sec. 6: a trace (one teacher-forced pass) simulated offline gives
    the same n, winner and tokens per step as the online decode loop."""
    model = models(kind, heads)
    prompt = [1, 5, 9, 33, 2]
    drafter = HeadDrafter(k=k, p=p)
    online = decode(model, prompt, drafter=drafter, max_new_tokens=30)
    trace = record_trace(model, [prompt], tmp_path / "trace", max_new_tokens=30, K=8)
    offline = simulate(trace, drafter)
    steps = offline.steps
    assert trace[0].greedy_ids.tolist() == online.tokens
    assert [s.position for s in online.steps] == steps.t.tolist()
    assert online.accept_lengths == steps.n.tolist()
    assert [s.winner for s in online.steps] == steps.winner.tolist()
    assert [len(s.tokens) for s in online.steps] == steps.tokens.tolist()
    assert online.block_efficiency == pytest.approx(offline.block_efficiency)


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_the_models_context_is_enforced(hf_model: Any, kind: str) -> None:
    model = hf_model(kind, heads="copy", max_positions=32)
    with pytest.raises(VerifyError, match="more than max_seq_len = 32, the model's context"):
        decode(model, list(range(2, 35)), max_new_tokens=4)
    with pytest.raises(VerifyError, match=r"needs 33 positions, more than max_seq_len = 32"):
        decode(model, list(range(2, 22)), max_new_tokens=14)
    with pytest.raises(ModelError, match="more than max_seq_len = 32"):
        greedy_generate(model, list(range(2, 35)), 1)
    prompt = list(range(2, 22))  # 20 tokens + 13 new - 1 = 32 positions: the context is full
    y = greedy_generate(model, prompt, 13)
    assert decode(model, prompt, k=2, p=2, max_new_tokens=13).tokens == y


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_cuda_device(hf_base: Any, hf_heads: Any) -> None:
    """The model moved by the constructor's device argument; caches stay on the device."""
    model: Any = HFBlockwiseModel(hf_base("llama"), hf_heads(64, 256, kind="copy"), device="cuda")
    assert model.device.type == "cuda" and model.heads.block(0, 0).linear.weight.is_cuda
    prompt = [1, 5, 9, 33]
    y = greedy_generate(model, prompt, 24)
    assert decode(model, prompt, k=3, p=2, max_new_tokens=24, device="cuda").tokens == y
    with torch.no_grad():
        _, past = model.heads_logits(torch.tensor([prompt], device="cuda"))
    assert past.device.type == "cuda" and past.expand(3).gather([0, 2]).length == 2
