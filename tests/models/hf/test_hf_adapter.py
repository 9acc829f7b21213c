"""HFBlockwiseModel: logits equal a direct computation with the base model and the heads, the
factored path equals heads_logits, incremental decoding equals one full pass, and the
architecture and input checks refuse what they must."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from blockdraft.models import DecoderCache, FactoredHeadsModel, HeadsModel, greedy_generate
from blockdraft.models.errors import ModelError
from blockdraft.models.hf import HFBlockwiseModel, HFCache, MedusaHeads

KINDS = ("llama", "gpt2")


def direct_logits(model: HFBlockwiseModel, ids: torch.Tensor) -> torch.Tensor:
    """``[B, T, h, V]`` computed by hand: the base's own logits, then each Medusa head's
    ResBlocks on ``output_hidden_states[-1]`` and its projection."""
    base, heads = model.base, model.heads
    with torch.no_grad():
        out = base(ids, output_hidden_states=True)
        x = out.hidden_states[-1]  # (B, T, d), after the final norm
        rows = [out.logits]
        for j in range(heads.num_heads):
            y = x
            for layer in range(heads.num_layers):
                linear = heads.block(j, layer).linear
                y = y + F.silu(y @ linear.weight.T + linear.bias)
            weight = (heads.projection(j).weight if heads.own_projection
                      else base.get_output_embeddings().weight)
            rows.append(y @ weight.T)  # (B, T, V)
    return torch.stack(rows, dim=2)  # (B, T, h, V)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("own_projection", "num_layers", "tie_layers"),
                         [(False, 1, False), (True, 1, False), (False, 2, False), (True, 3, True)])
def test_heads_logits_equal_a_direct_computation(hf_model: Any, kind: str, own_projection: bool,
                                                 num_layers: int, tie_layers: bool) -> None:
    model = hf_model(kind, num_heads=3, num_layers=num_layers, own_projection=own_projection,
                     tie_layers=tie_layers)
    ids = torch.randint(2, model.config.vocab_size, (2, 9), generator=torch.Generator()
                        .manual_seed(1))
    with torch.no_grad():
        logits, cache = model.heads_logits(ids)
    assert logits.shape == (2, 9, 4, model.config.vocab_size)
    assert cache.length == 9 and cache.batch_size == 2
    torch.testing.assert_close(logits, direct_logits(model, ids), rtol=1e-5, atol=1e-5)
    # head 1 is the base model itself, bit for bit
    with torch.no_grad():
        assert torch.equal(logits[:, :, 0], model.base(ids).logits)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("own_projection", [False, True])
def test_the_factored_path_equals_heads_logits(hf_model: Any, kind: str,
                                               own_projection: bool) -> None:
    """What the verifier does: the base head at every draft position, all heads at one."""
    model = hf_model(kind, own_projection=own_projection)
    ids = torch.randint(2, 100, (3, 5), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        logits, _ = model.heads_logits(ids)
        x, _ = model.hidden(ids)  # (3, 5, d)
        torch.testing.assert_close(model.project(model.head_states(x)), logits)
        base = model.project(model.head_states(x, heads=1))[:, :, 0]  # (3, 5, V)
        torch.testing.assert_close(base, logits[:, :, 0])
        torch.testing.assert_close(model.project(model.head_states(x[1, 3])), logits[1, 3])
        two = model.project(model.head_states(x, heads=2))  # (3, 5, 2, V)
        torch.testing.assert_close(two, logits[:, :, :2])
    assert model.head_states(x).shape == (3, 5, model.h, model.config.d_model)
    assert torch.equal(model.head_states(x)[..., 0, :], x)  # head 1's state is x itself


@pytest.mark.parametrize("kind", [*KINDS, "mistral"])
def test_incremental_decoding_equals_one_full_pass(hf_model: Any, kind: str) -> None:
    """Chunks on the cache (explicit position ids) give the full pass's logits; Mistral's
    sliding window (8) is shorter than the sequence."""
    model = hf_model(kind)
    ids = torch.randint(2, 120, (1, 30), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full, _ = model.heads_logits(ids)
        parts, past, start = [], None, 0
        for stop in (5, 12, 13, 30):
            logits, past = model.heads_logits(ids[:, start:stop], past)
            parts.append(logits)
            start = stop
    assert past is not None and past.length == 30
    torch.testing.assert_close(torch.cat(parts, dim=1), full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_a_batch_one_past_is_shared_by_every_row(hf_model: Any, kind: str) -> None:
    model = hf_model(kind)
    g = torch.Generator().manual_seed(4)
    prefix = torch.randint(2, 100, (1, 6), generator=g)
    drafts = torch.randint(2, 100, (3, 4), generator=g)
    with torch.no_grad():
        _, past = model.heads_logits(prefix)
        batched, cache = model.heads_logits(drafts, past)  # (3, 4, h, V)
        assert cache.batch_size == 3 and cache.length == 10 and past.batch_size == 1
        for row in range(3):
            alone, _ = model.heads_logits(torch.cat((prefix, drafts[row : row + 1]), dim=1))
            torch.testing.assert_close(batched[row], alone[0, 6:], rtol=1e-5, atol=1e-5)


def test_last_only_and_explicit_positions(hf_model: Any) -> None:
    model = hf_model("llama")
    ids = torch.randint(2, 100, (2, 7), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        full, _ = model.heads_logits(ids)
        last, cache = model.heads_logits(ids, last_only=True)
        assert last.shape == (2, 1, model.h, model.config.vocab_size) and cache.length == 7
        torch.testing.assert_close(last[:, 0], full[:, -1])
        explicit, _ = model.heads_logits(ids, position_ids=torch.arange(7))
        assert torch.equal(explicit, full)
        shifted, _ = model.heads_logits(ids, position_ids=torch.arange(3, 10))
        assert not torch.allclose(shifted, full)  # the positions are really used


def test_the_model_satisfies_the_protocol(hf_model: Any) -> None:
    model = hf_model("gpt2", num_heads=4, max_positions=96)
    anything: object = model
    assert isinstance(anything, HeadsModel) and isinstance(anything, FactoredHeadsModel)
    assert model.h == 5 and model.device == torch.device("cpu")
    assert model.max_seq_len == 96 == model.config.max_seq_len
    cfg = model.config
    assert (cfg.vocab_size, cfg.d_model, cfg.n_layer, cfg.model_type, cfg.dtype) == (
        200, 32, 2, "gpt2", "float32")
    assert cfg.to_dict()["h"] == 5
    with torch.no_grad():
        _, cache = model.heads_logits(torch.tensor([[3, 4]]))
    assert isinstance(cache, HFCache) and isinstance(cache, DecoderCache)
    assert model.head_parameters() and all(
        any(p is q for q in model.heads.parameters()) for p in model.head_parameters())


def test_greedy_generate_projects_head_one_only(hf_model: Any, monkeypatch: Any) -> None:
    model = hf_model("llama")
    reference = greedy_generate(model, [5, 6, 7], 8)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("greedy_generate must not project every head")

    monkeypatch.setattr(model, "heads_logits", refuse)
    assert greedy_generate(model, [5, 6, 7], 8) == reference


def test_dtype_and_device_arguments(hf_base: Any, hf_heads: Any) -> None:
    base = hf_base("llama")
    heads = hf_heads(64, 256)
    model = HFBlockwiseModel(base, heads, device="cpu", dtype=torch.bfloat16)
    assert model.config.dtype == "bfloat16"
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    with torch.no_grad():
        logits, cache = model.heads_logits(torch.tensor([[3, 4, 5]]))
    assert logits.dtype == torch.bfloat16 and cache.keys[0].dtype == torch.bfloat16


# ---- refusals ------------------------------------------------------------------------------


def test_heads_of_another_size_are_refused(hf_base: Any, hf_heads: Any) -> None:
    base = hf_base("llama")
    with pytest.raises(ModelError, match=r"hidden size d = 32 .* d = 64"):
        HFBlockwiseModel(base, hf_heads(32, 256))
    with pytest.raises(ModelError, match=r"V = 300 .* V = 256"):
        HFBlockwiseModel(base, hf_heads(64, 300, own_projection=True))
    with pytest.raises(ModelError, match="MedusaHeads"):
        HFBlockwiseModel(base, torch.nn.Linear(64, 64))  # type: ignore[arg-type]


def test_unsupported_architectures_are_refused(hf_heads: Any) -> None:
    from transformers import (
        Gemma2Config,
        Gemma2ForCausalLM,
        T5Config,
        T5ForConditionalGeneration,
    )

    t5 = T5ForConditionalGeneration(T5Config(vocab_size=64, d_model=16, d_ff=32, num_layers=1,
                                             num_heads=2, d_kv=8))
    with pytest.raises(ModelError, match=r"T5ForConditionalGeneration.*encoder-decoder.*"
                                         r"supported: decoder-only"):
        HFBlockwiseModel(t5, hf_heads(16, 64))
    gemma = Gemma2ForCausalLM(Gemma2Config(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=8, final_logit_softcapping=30.0,
        sliding_window=4))
    with pytest.raises(ModelError, match=r"final_logit_softcapping = 30.0.*supported"):
        HFBlockwiseModel(gemma, hf_heads(16, 64))
    with pytest.raises(ModelError, match="not a transformers model"):
        HFBlockwiseModel(torch.nn.Linear(4, 4), hf_heads(4, 4))


def test_bad_inputs_and_caches_are_refused(hf_model: Any) -> None:
    model = hf_model("llama", max_positions=16)
    with pytest.raises(ModelError, match="integer token ids"):
        model.heads_logits(torch.zeros(1, 3))
    with pytest.raises(ModelError, match=r"\[B, T\]"):
        model.heads_logits(torch.tensor([1, 2, 3]))
    with pytest.raises(ModelError, match="outside the vocabulary"):
        model.heads_logits(torch.tensor([[1, 256]]))
    with pytest.raises(ModelError, match="empty"):
        model.heads_logits(torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ModelError, match=r"17 positions exceed the model's context "
                                         r"max_seq_len = 16"):
        model.heads_logits(torch.ones(1, 17, dtype=torch.long))
    with torch.no_grad():
        _, past = model.heads_logits(torch.ones(2, 10, dtype=torch.long))
        with pytest.raises(ModelError, match="2 rows but input_ids has 3"):
            model.heads_logits(torch.ones(3, 1, dtype=torch.long), past)
        with pytest.raises(ModelError, match=r"10 cached \+ 7 new"):
            model.heads_logits(torch.ones(2, 7, dtype=torch.long), past)
    with pytest.raises(ModelError, match="HFCache"):
        model.heads_logits(torch.ones(1, 1, dtype=torch.long), past=object())
    with pytest.raises(ModelError, match=r"heads must be an integer in \[1, 4\]"):
        model.head_states(torch.zeros(64), heads=5)
    with pytest.raises(ModelError, match="position_ids"):
        model.heads_logits(torch.ones(1, 3, dtype=torch.long), position_ids=torch.arange(4))


def test_own_projections_need_the_head_axis(hf_model: Any) -> None:
    model = hf_model("llama", own_projection=True)
    with pytest.raises(ModelError, match="second-to-last axis"):
        model.project(torch.zeros(7, 64))  # 7 > h = 4 "heads": not head states
    assert model.project(torch.zeros(2, 64)).shape == (2, 256)  # two head states


def test_medusa_heads_checks() -> None:
    with pytest.raises(ModelError, match="num_heads must be an integer >= 1"):
        MedusaHeads(8, None, 0)
    with pytest.raises(ModelError, match="needs vocab_size"):
        MedusaHeads(8, None, 2, own_projection=True)
    heads = MedusaHeads(8, None, 2, 3, tie_layers=True)
    assert heads.block(0, 0) is heads.block(0, 2) and heads.block(0, 0) is not heads.block(1, 0)
    assert sum(p.numel() for p in heads.parameters()) == 2 * (8 * 8 + 8)
    with pytest.raises(ModelError, match="share the base lm_head"):
        heads.logits(torch.zeros(2, 8))
    x = torch.randn(5, 8)
    assert torch.equal(heads(x, heads=0), torch.zeros(5, 0, 8))
