"""Helpers of the models and training rooms' tests: tiny configs and models, a learnable
token stream.

A plain module at the top of ``tests/`` (on the path of every test folder, like
``ngram_testlib``), not a conftest.py: other test folders import their root ``conftest`` by
name, which a second conftest.py would shadow.
"""

from __future__ import annotations

import numpy as np
import torch

from blockdraft.models import BlockwiseConfig, BlockwiseLM, RescorerLM

VOCAB = 32  # the tiny test vocabulary


def tiny_config() -> BlockwiseConfig:
    """The ``tiny`` preset over the 32-token test vocabulary, 64 positions."""
    return BlockwiseConfig.tiny(vocab_size=VOCAB, max_seq_len=64)


def random_heads(model: BlockwiseLM, seed: int = 0) -> BlockwiseLM:
    """Give the extra heads non-zero output layers (they start at zero) so that every head
    differs and a test can tell them apart."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.head_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    return model


def tiny_model(seed: int = 0) -> BlockwiseLM:
    """A seeded, untrained tiny model with random extra heads, in eval mode."""
    torch.manual_seed(seed)
    return random_heads(BlockwiseLM(tiny_config())).eval()


def word_stream(n_words: int, seed: int = 0, vocab: int = VOCAB) -> np.ndarray:
    """int64 stream of 4 random 6-token "words" drawn uniformly: inside a word every next
    token is determined, so head i reaches high top-1 accuracy only if it predicts t + i."""
    rng = np.random.default_rng(seed)
    words = [rng.integers(2, vocab, size=6) for _ in range(4)]
    return np.concatenate([words[i] for i in rng.integers(0, 4, size=n_words)]).astype(np.int64)


def tiny_rescorer_lm(vocab: int = 30, seed: int = 0, max_seq_len: int = 32) -> RescorerLM:
    """A seeded tiny RescorerLM (h = 1) in eval mode, its matrices scaled up 10x so that its
    next-token distributions are peaked (scores then tell paths apart)."""
    torch.manual_seed(seed)
    model = RescorerLM(BlockwiseConfig.tiny(vocab_size=vocab, h=1, max_seq_len=max_seq_len))
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.mul_(10.0)
    return model.eval()


def ancestors(parents: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """``(mask [N, N], depths [N])`` of a tree given by its parents (``parents[0] = -1``),
    computed the plain way (each node's row is its parent's plus itself): the brute force the
    models' tree steps are checked against."""
    n = len(parents)
    mask, depths = np.eye(n, dtype=bool), np.zeros(n, dtype=np.int64)
    for u in range(1, n):
        mask[u] |= mask[parents[u]]
        depths[u] = depths[parents[u]] + 1
    return mask, depths
