"""BlockwiseLM: cache equivalence (incremental, batched-p), the heads' structure,
input errors, and RescorerLM."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from blockdraft.models import (
    BlockwiseConfig,
    BlockwiseLM,
    DecoderCache,
    HeadsModel,
    KVCache,
    ModelError,
    RescorerLM,
)
from blockdraft.models.blockwise import ResidualFFN
from models_testlib import VOCAB, tiny_config, tiny_model

ATOL = 1e-5


@pytest.fixture(name="model")
def _model() -> BlockwiseLM:
    return tiny_model()


def ids(b: int, t: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, VOCAB, (b, t), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def test_shapes_and_units(model: BlockwiseLM) -> None:
    logits, past = model.heads_logits(ids(2, 7))
    assert logits.shape == (2, 7, model.h, VOCAB)
    assert isinstance(past, KVCache) and past.length == 7 and past.batch_size == 2
    assert isinstance(model, HeadsModel) and isinstance(past, DecoderCache)
    assert past.keys[0].shape == (2, 2, 7, 32)  # [B, n_head, T, head_dim]
    last, _ = model.heads_logits(ids(2, 7), last_only=True)
    torch.testing.assert_close(last[:, 0], logits[:, -1], atol=ATOL, rtol=0)


@torch.no_grad()
def test_prefill_then_steps_equals_full_pass(model: BlockwiseLM) -> None:
    x = ids(2, 40)
    full, _ = model.heads_logits(x)
    pieces, past = [], None
    z, past = model.heads_logits(x[:, :9])
    pieces.append(z)
    for t in range(9, 40):
        z, past = model.heads_logits(x[:, t : t + 1], past)
        pieces.append(z)
    assert past.length == 40
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=ATOL, rtol=0)


@settings(max_examples=15, deadline=None)
@given(cuts=st.lists(st.integers(1, 47), max_size=4, unique=True))
def test_any_chunking_equals_full_pass(cuts: list[int]) -> None:
    model = tiny_model()
    x = ids(1, 48, seed=1)
    with torch.no_grad():
        full, _ = model.heads_logits(x)
        bounds = [0, *sorted(cuts), 48]
        past, pieces = None, []
        for a, b in zip(bounds, bounds[1:], strict=False):
            z, past = model.heads_logits(x[:, a:b], past)
            pieces.append(z)
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=ATOL, rtol=0)


@torch.no_grad()
def test_p_drafts_on_a_shared_prefix(model: BlockwiseLM) -> None:
    prefix = ids(1, 20)
    drafts = ids(3, 4, seed=5)  # p = 3 drafts of h = 4 tokens
    _, past = model.heads_logits(prefix)
    batched, bpast = model.heads_logits(drafts, past)  # batch-1 past broadcast to 3 rows
    expanded, _ = model.heads_logits(drafts, past.expand(3))
    torch.testing.assert_close(expanded, batched, atol=0, rtol=0)
    assert past.expand(3).keys[0].data_ptr() == past.keys[0].data_ptr()  # a view, no copy
    for j in range(3):
        alone, _ = model.heads_logits(torch.cat((prefix, drafts[j : j + 1]), dim=1))
        torch.testing.assert_close(batched[j], alone[0, 20:], atol=ATOL, rtol=0)
    # Keep draft 1's first 2 tokens (prefix + 2 positions), then continue from there.
    kept = bpast.select_row(1).crop(22)
    assert kept.length == 22 and kept.batch_size == 1
    nxt = ids(1, 3, seed=9)
    z, _ = model.heads_logits(nxt, kept)
    ref, _ = model.heads_logits(torch.cat((prefix, drafts[1:2, :2], nxt), dim=1))
    torch.testing.assert_close(z[0], ref[0, 22:], atol=ATOL, rtol=0)
    # select_rows reorders rows.
    rows = bpast.select_rows([2, 0])
    torch.testing.assert_close(rows.keys[0][0], bpast.keys[0][2], atol=0, rtol=0)


@torch.no_grad()
def test_extra_heads_are_residual_ffn_with_tied_projection(model: BlockwiseLM) -> None:
    x = ids(2, 9)
    logits, _ = model.heads_logits(x)
    hidden, _ = model.hidden(x)
    wte = model.transformer.wte.weight
    torch.testing.assert_close(logits[:, :, 0], hidden @ wte.T, atol=ATOL, rtol=0)
    ffns = [m for m in model.extra_heads if isinstance(m, ResidualFFN)]
    assert len(ffns) == model.h - 1
    for i, ffn in enumerate(ffns, start=2):
        manual = hidden + ffn.out(torch.nn.functional.gelu(ffn.fc(hidden)))
        torch.testing.assert_close(logits[:, :, i - 1], manual @ wte.T, atol=ATOL, rtol=0)
        assert not torch.allclose(logits[:, :, i - 1], logits[:, :, 0])
    for ffn in ffns:  # with the FFNs' output zeroed, head i = head 1
        ffn.out.weight.zero_()
        ffn.out.bias.zero_()
    zeroed, _ = model.heads_logits(x)
    for i in range(1, model.h):
        torch.testing.assert_close(zeroed[:, :, i], zeroed[:, :, 0], atol=0, rtol=0)
    assert "lm_head" not in "".join(model.state_dict())  # tied: no second matrix


def test_fused_inference_heads_equal_the_modules(model: BlockwiseLM) -> None:
    """Under no_grad the extra heads run fused (two matmuls); they must equal the per-head
    modules (the training path) at every position, for any number of heads, and follow the
    weights when they change in place or are reloaded."""
    x = ids(3, 6, seed=4)
    hidden, _ = model.hidden(x)
    for heads in (1, 2, model.h):
        modules = model.head_states(hidden, heads=heads)  # grad enabled: the modules
        with torch.no_grad():
            fused = model.head_states(hidden, heads=heads)
            one = model.head_states(hidden[1, 2], heads=heads)  # a single position
        assert fused.shape == modules.shape == (3, 6, heads, model.config.d_model)
        torch.testing.assert_close(fused, modules.detach(), atol=ATOL, rtol=0)
        torch.testing.assert_close(one, modules[1, 2].detach(), atol=ATOL, rtol=0)
    with torch.no_grad():
        before = model.head_states(hidden)
        ffn = model.extra_heads[1]
        assert isinstance(ffn, ResidualFFN)
        ffn.out.bias.add_(1.0)  # in place, as an optimizer step does
        after = model.head_states(hidden)
        torch.testing.assert_close(after[..., 2, :], before[..., 2, :] + 1.0, atol=ATOL, rtol=0)
        torch.testing.assert_close(after[..., 1, :], before[..., 1, :], atol=0, rtol=0)
        fresh = tiny_model(seed=1)
        stale = fresh.head_states(hidden)  # builds its stacked weights
        fresh.load_state_dict(model.state_dict())
        assert not torch.allclose(stale, after)
        torch.testing.assert_close(fresh.head_states(hidden), after, atol=ATOL, rtol=0)
        extra = model.extra_head_states(hidden)
        torch.testing.assert_close(extra, after[..., 1:, :], atol=0, rtol=0)


def test_fresh_heads_start_as_copies_of_head_one() -> None:
    model = BlockwiseLM(tiny_config()).eval()
    with torch.no_grad():
        z, _ = model.heads_logits(ids(1, 5))
    torch.testing.assert_close(z[:, :, 3], z[:, :, 0], atol=0, rtol=0)


def test_untied_projection() -> None:
    model = BlockwiseLM(dataclasses.replace(tiny_config(), tie_embeddings=False)).eval()
    assert model.lm_head is not None
    with torch.no_grad():
        z, _ = model.heads_logits(ids(1, 5))
        hid, _ = model.hidden(ids(1, 5))
    torch.testing.assert_close(z[:, :, 0], hid @ model.lm_head.weight.T, atol=ATOL, rtol=0)


def test_input_errors(model: BlockwiseLM) -> None:
    with pytest.raises(ModelError, match="max_seq_len"):
        model.heads_logits(ids(1, 65))
    _, past = model.heads_logits(ids(1, 60))
    with pytest.raises(ModelError, match="60 cached \\+ 5 new"):
        model.heads_logits(ids(1, 5), past)
    with pytest.raises(ModelError, match="empty"):
        model.heads_logits(torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ModelError, match=f"token id {VOCAB} is outside"):
        model.heads_logits(torch.tensor([[1, VOCAB]]))
    with pytest.raises(ModelError, match="outside"):
        model.heads_logits(torch.tensor([[-1, 2]]))
    with pytest.raises(ModelError, match="\\[B, T\\]"):
        model.heads_logits(torch.tensor([1, 2]))
    with pytest.raises(ModelError, match="integer"):
        model.heads_logits(torch.tensor([[1.0, 2.0]]))
    with pytest.raises(ModelError, match="LongTensor"):
        model.heads_logits([[1, 2]])  # type: ignore[arg-type]
    _, past3 = model.heads_logits(ids(3, 4))
    with pytest.raises(ModelError, match="3 rows"):
        model.heads_logits(ids(2, 1), past3)


def test_cache_errors(model: BlockwiseLM) -> None:
    _, past = model.heads_logits(ids(2, 6))
    with pytest.raises(ModelError, match="crop"):
        past.crop(7)
    with pytest.raises(ModelError, match="crop"):
        past.crop(0)
    with pytest.raises(ModelError, match="row"):
        past.select_row(2)
    with pytest.raises(ModelError, match="batch-1"):
        past.expand(4)
    with pytest.raises(ModelError, match="rows must lie"):
        past.select_rows([0, 5])
    other = BlockwiseLM(BlockwiseConfig.tiny(vocab_size=VOCAB, n_layer=3))
    with pytest.raises(ModelError, match="layers"):
        other.heads_logits(ids(2, 1), past)


def test_config_errors() -> None:
    with pytest.raises(ModelError, match="divisible"):
        BlockwiseConfig.tiny(n_head=3)
    with pytest.raises(ModelError, match="positive integer"):
        BlockwiseConfig.tiny(h=0)
    with pytest.raises(ModelError, match="dropout"):
        BlockwiseConfig.tiny(dropout=1.0)
    with pytest.raises(ModelError, match="unknown preset"):
        BlockwiseConfig.preset("huge")
    with pytest.raises(ModelError, match="unknown config field"):
        BlockwiseConfig.from_dict({"vocab_size": 10, "n_embd": 3})
    small = BlockwiseConfig.preset("small")
    assert (small.n_layer, small.d_model, small.h, small.vocab_size) == (4, 256, 9, 4096)
    assert BlockwiseConfig.from_dict(small.to_dict()) == small


@torch.no_grad()
def test_rescorer_lm() -> None:
    with pytest.raises(ModelError, match="one head"):
        RescorerLM(tiny_config())
    torch.manual_seed(0)
    lm = RescorerLM(dataclasses.replace(tiny_config(), h=1)).eval()
    x = ids(2, 12)
    z, past = lm.logits(x[:, :8])
    z2, _ = lm.logits(x[:, 8:], past)
    full, _ = lm.logits(x)
    assert full.shape == (2, 12, VOCAB)
    torch.testing.assert_close(torch.cat((z, z2), 1), full, atol=ATOL, rtol=0)
    heads, _ = lm.heads_logits(x)
    torch.testing.assert_close(heads[:, :, 0], full, atol=0, rtol=0)
