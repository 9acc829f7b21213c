"""Random-weight stand-ins the harnesses time or smoke-run on instead of the real model: a
tiny random Llama for smoke runs, SmolLM2-135M's exact shape for cost curves on machines that
cannot hold the real weights, and a random token tree of a given size.

    tiny_model() -> HFBlockwiseModel       V = 96, d = 64, 2 layers, 3 random Medusa heads
    SMOLLM2_SHAPE, TINY_SHAPE              LlamaConfig fields: SmolLM2-135M's shape, a tiny one
    random_model(shape, heads=5, seed=0)   a randomly initialised Llama of ``shape`` with
                                           ``heads`` Medusa heads (float32)
    bushy_tree(n, vocab, rng, max_depth=5) -> DraftTree   ``n`` nodes, depths <= ``max_depth``

Compute does not depend on the weights, so a step's cost on ``random_model(SMOLLM2_SHAPE)`` is
the real model's (``bench_costs``, ``bench_gpu``); the tiny model's numbers mean nothing
(``bench_static_host --tiny``, ``benchmarks.common.replay --tiny``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from blockdraft.core.tree import DraftTree

SMOLLM2_SHAPE = {
    "vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536,
    "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
    "head_dim": 64, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5,
    "rope_theta": 100000.0, "tie_word_embeddings": True,
}
TINY_SHAPE = {
    "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "tie_word_embeddings": True,
}


def tiny_model() -> Any:
    """A tiny random Llama with 3 random Medusa heads (the tests' shape: V = 96, d = 64)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from blockdraft.models.hf import HFBlockwiseModel, MedusaHeads

    torch.manual_seed(0)
    base = LlamaForCausalLM(LlamaConfig(
        vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        bos_token_id=0, eos_token_id=1, pad_token_id=0, initializer_range=0.1))
    heads = MedusaHeads(64, None, 3, 1)
    with torch.no_grad():
        for p in heads.parameters():
            p.normal_(0.0, 0.2)
    return HFBlockwiseModel(base.eval(), heads)


def random_model(shape: dict[str, Any], heads: int = 5, seed: int = 0) -> Any:
    """A randomly initialised Llama of ``shape`` with ``heads`` Medusa heads (float32)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from blockdraft.models.hf import HFBlockwiseModel, MedusaHeads

    torch.manual_seed(seed)
    rope = {"rope_theta": shape["rope_theta"]} if "rope_theta" in shape else {}
    settings: dict[str, Any] = {k: v for k, v in shape.items() if k != "rope_theta"}
    if rope:
        settings["rope_parameters"] = {"rope_type": "default", **rope}
    config = LlamaConfig(**settings)
    base = LlamaForCausalLM(config).eval()
    return HFBlockwiseModel(base, MedusaHeads(shape["hidden_size"], None, heads, 1))


def bushy_tree(n: int, vocab: int, rng: np.random.Generator, max_depth: int = 5) -> DraftTree:
    """A token tree of ``n`` nodes, every depth at most ``max_depth`` (an EAGLE-like shape)."""
    parents = [-1]
    depths = [0]
    for _ in range(1, n):
        choices = [u for u in range(len(parents)) if depths[u] < max_depth]
        par = int(rng.choice(choices))
        parents.append(par)
        depths.append(depths[par] + 1)
    tokens = np.empty(n, dtype=np.int64)
    tokens[0] = int(rng.integers(vocab))
    for u in range(1, n):  # distinct siblings
        taken = {int(tokens[v]) for v in range(1, u) if parents[v] == parents[u]}
        tok = int(rng.integers(vocab))
        while tok in taken:
            tok = int(rng.integers(vocab))
        tokens[u] = tok
    return DraftTree(tokens=tokens, parents=np.asarray(parents), scores=-np.arange(n, dtype=float))
