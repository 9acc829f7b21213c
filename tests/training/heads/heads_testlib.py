"""Helpers of the Medusa-heads training tests (training/heads): a tiny random Llama as the
base, random prompts, distillation settings and sets built from them.

A plain module, not a conftest.py (imported by name; see ``tests/models_testlib.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from blockdraft.training.heads import (
    DistillSettings,
    HeadsTrainSettings,
    build_distill_set,
    hash_prompts,
)

EOS = 1
SHARED_PROMPTS = Path(__file__).resolve().parents[4] / "shared" / "data" / "prompts"


def tiny_llama(seed: int = 0, init: float = 0.3) -> Any:
    """A tiny random Llama with tied embeddings (d = 32, V = 100) in eval mode; ``init`` is
    the weights' standard deviation (0.1: greedy output falls into loops, which heads learn)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        tie_word_embeddings=True, bos_token_id=0, eos_token_id=EOS, pad_token_id=0,
        initializer_range=init)).eval()


def tiny_prompts(n: int, seed: int = 1) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 12, (n,), generator=g)
    return [torch.randint(2, 100, (int(k),), generator=g).tolist() for k in lengths]


def settings(**kw: Any) -> DistillSettings:
    base: dict[str, Any] = {
        "base": "tiny", "dtype": "float32", "max_new_tokens": 24, "batch_size": 4,
        "shard_size": 8, "seed": 0, "heldout_fraction": 0.2, "heldout_min": 4,
        "hidden_dtype": "float32"}
    base.update(kw)
    return DistillSettings(**base)


def build(folder: Path, prompts: list[list[int]], **kw: Any) -> Any:
    s = settings(prompts=hash_prompts(prompts))
    return build_distill_set(tiny_llama(), prompts, folder, s, eos_id=EOS, log=None,
                             progress=False, **kw)


TRAIN = HeadsTrainSettings(heads=3, steps=40, batch=64, lr=3e-2, warmup=5, eval_every=10,
                           eval_positions=500)
"""The training settings most tests share: 3 heads, 40 steps of 64 positions (a second)."""
