"""Helpers of the neural rescorer's tests: peaky random tiny LMs, random lattices, and brute-force
references that recompute the LM from scratch (one full forward per partial path and slot).

A plain module, not a conftest.py (imported by name; see ``tests/models/models_testlib.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from blockdraft.lattice import SausageLattice
from blockdraft.lattice.sausage import log_softmax
from blockdraft.models import BlockwiseConfig, RescorerLM

VOCAB = 61  # the tiny test vocabulary
MAX_SEQ_LEN = 48


def peaky_lm(seed: int = 0, vocab: int = VOCAB, max_seq_len: int = MAX_SEQ_LEN) -> RescorerLM:
    """A random tiny RescorerLM whose next-token distributions are far from uniform and depend
    on the context (GPT-2 init at std 0.02 is nearly flat, so the LM would barely matter)."""
    torch.manual_seed(seed)
    cfg = BlockwiseConfig.tiny(h=1, vocab_size=vocab, max_seq_len=max_seq_len, d_model=32,
                               n_head=2, d_ff=64)
    model = RescorerLM(cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        model.transformer.wte.weight.normal_(0.0, 0.6, generator=g)
        for module in model.transformer.blocks.modules():
            if isinstance(module, torch.nn.Linear):  # attention and MLP matrices
                module.weight.normal_(0.0, 0.4, generator=g)
    return model.eval()


def random_lattice(rng: np.random.Generator, h: int, k: int, vocab: int = VOCAB,
                   scale: float = 1.5, certain_first: bool = True) -> SausageLattice:
    """The top-``k`` lattice of random ``[h, V]`` head logits (``N(0, scale^2)``)."""
    return SausageLattice.from_logits(rng.normal(size=(h, vocab)) * scale, k,
                                      certain_first=certain_first)


def lm_logprobs(model: RescorerLM, ids: Sequence[int]) -> np.ndarray | None:
    """float64 ``[V]``: ``ln P(next | ids)`` from one full forward over ``ids`` (no cache);
    None for an empty sequence."""
    if len(ids) == 0:
        return None
    with torch.no_grad():
        logits, _ = model.logits(torch.tensor([list(ids)], dtype=torch.long))
    return log_softmax(logits[0, -1].numpy())


def brute_beam(model: RescorerLM, lattice: SausageLattice, context: Sequence[int], alpha: float,
               p: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The width-``p`` beam over slots with the LM recomputed from scratch for every partial
    path (``p = 1``: Kim's greedy Algorithm 2). Ties keep the earlier entry, then the better
    arc. Returns ``(tokens [p', h], head [p'], lm [p'])``."""
    beam: list[tuple[float, float, float, list[int]]] = [(0.0, 0.0, 0.0, [])]
    for i in range(lattice.h):
        toks, scs = lattice.slot(i)
        cands = []
        for total, head, lm, path in beam:
            r = lm_logprobs(model, list(context) + path)
            for a in range(toks.size):
                ri = 0.0 if r is None else float(r[toks[a]])
                cands.append((total + float(scs[a]) + alpha * ri, head + float(scs[a]), lm + ri,
                              path + [int(toks[a])]))
        order = sorted(range(len(cands)), key=lambda j: (-cands[j][0], j))[:p]
        beam = [cands[j] for j in order]
    return (np.array([b[3] for b in beam], dtype=np.int64), np.array([b[1] for b in beam]),
            np.array([b[2] for b in beam]))
