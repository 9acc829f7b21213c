"""Fixtures of the Hugging Face adapter's tests: tiny seeded Llama, GPT-2 and Mistral models
(2 layers, d = 32-64, V = 128-256, random weights) and Medusa heads on them.

Factories, not objects, so every test builds what it modifies: ``hf_base(kind, seed)``,
``hf_heads(d, vocab, ...)``, ``hf_model(kind, seed, heads=...)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

pytest.importorskip("transformers")

from blockdraft.models.hf import HFBlockwiseModel, MedusaHeads  # noqa: E402

KINDS = ("llama", "gpt2")
"""The two architectures every adapter test runs on."""


def _base(kind: str = "llama", seed: int = 0, init: float = 0.1, max_positions: int = 128) -> Any:
    """A tiny causal LM in eval mode. ``init`` is the weights' standard deviation: 0.1 gives
    varied greedy output that still falls into loops (so copy heads accept tokens)."""
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
        MistralConfig,
        MistralForCausalLM,
    )

    torch.manual_seed(seed)
    ids: dict[str, Any] = {"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 0,
                           "initializer_range": init}
    if kind == "llama":  # untied lm_head, grouped-query attention
        return LlamaForCausalLM(LlamaConfig(
            vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_positions,
            tie_word_embeddings=False, **ids)).eval()
    if kind == "gpt2":  # tied lm_head, learned absolute positions
        return GPT2LMHeadModel(GPT2Config(
            vocab_size=200, n_embd=32, n_layer=2, n_head=4, n_positions=max_positions,
            **ids)).eval()
    if kind == "mistral":  # a sliding window shorter than the test sequences
        return MistralForCausalLM(MistralConfig(
            vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, sliding_window=8,
            max_position_embeddings=max_positions, **ids)).eval()
    raise ValueError(kind)


def _heads(
    d: int,
    vocab: int,
    num_heads: int = 3,
    num_layers: int = 1,
    own_projection: bool = False,
    *,
    kind: str = "random",
    bias: bool = True,
    tie_layers: bool = False,
    seed: int = 0,
) -> MedusaHeads:
    """Medusa heads: ``kind="random"`` (N(0, 0.2) weights: every head differs), or
    ``"copy"`` (zero weights, bias -30: every head is the base head, ``SiLU(-30) ~ 0``)."""
    heads = MedusaHeads(d, vocab if own_projection else None, num_heads, num_layers,
                        own_projection, bias=bias, tie_layers=tie_layers)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in heads.named_parameters():
            if kind == "copy":
                p.fill_(-30.0 if name.endswith("bias") else 0.0)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return heads


def _model(kind: str = "llama", seed: int = 0, heads: str = "random", num_heads: int = 3,
           num_layers: int = 1, own_projection: bool = False, init: float = 0.1,
           max_positions: int = 128, tie_layers: bool = False) -> HFBlockwiseModel:
    base = _base(kind, seed, init, max_positions)
    lm_head = base.get_output_embeddings()
    medusa = _heads(lm_head.in_features, lm_head.out_features, num_heads, num_layers,
                    own_projection, kind=heads, tie_layers=tie_layers, seed=seed)
    return HFBlockwiseModel(base, medusa)


@pytest.fixture(scope="session")
def hf_base() -> Callable[..., Any]:
    """``hf_base(kind="llama", seed=0, init=0.1, max_positions=128)``: a tiny causal LM."""
    return _base


@pytest.fixture(scope="session")
def hf_heads() -> Callable[..., MedusaHeads]:
    """``hf_heads(d, vocab, num_heads=3, num_layers=1, own_projection=False, kind="random",
    bias=True, tie_layers=False, seed=0)``."""
    return _heads


@pytest.fixture(scope="session")
def hf_model() -> Callable[..., HFBlockwiseModel]:
    """``hf_model(kind="llama", seed=0, heads="random"|"copy", num_heads=3, num_layers=1,
    own_projection=False, init=0.1, max_positions=128, tie_layers=False)``."""
    return _model
