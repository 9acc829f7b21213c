"""Synthetic lattices for the rescoring benchmark (``blockdraft bench rescore``,
``benchmarks/``) and tests: clearly not real head outputs.

``hits_heavy``: slot i holds the true next token of held-out text at a random rank among
``k - 1`` distractors drawn by unigram frequency: the worst case for the exact n-gram search
(many n-gram hits, many distinct LM states). ``random_tokens``: every arc a uniformly random
token id. Both give random sorted log-prob scores (a Dirichlet(1) draw per slot, in nats).

Public surface:
    hits_heavy(rng, truth, k, unigram, certain_first=False) -> SausageLattice
    random_tokens(rng, h, k, vocab_size, certain_first=False) -> SausageLattice
"""

from __future__ import annotations

import numpy as np

from blockdraft.lattice.sausage import PAD_TOKEN, LatticeError, SausageLattice


def _scores(rng: np.random.Generator, n: int) -> np.ndarray:
    if n == 1:
        return np.zeros(1)
    return np.sort(np.log(rng.dirichlet(np.ones(n))))[::-1]


def hits_heavy(
    rng: np.random.Generator,
    truth: np.ndarray,
    k: int,
    unigram: np.ndarray,
    *,
    certain_first: bool = False,
) -> SausageLattice:
    """A lattice with ``truth[i]`` at a random rank of slot ``i`` among frequency-drawn
    distractors.

    Args:
        rng: the random generator (the only source of randomness).
        truth: int ``[h]``, the true tokens.
        k: arcs per slot (``k - 1`` distinct distractors besides the true token).
        unigram: float ``[V]``, the distractor distribution (sums to 1).
        certain_first: slot 1 holds the true token alone (as in a real BPD step).

    Raises:
        LatticeError: ``k`` larger than the vocabulary.
    """
    truth = np.asarray(truth, dtype=np.int64)
    h = truth.size
    v = unigram.size
    if k > v:
        raise LatticeError(f"k = {k} exceeds the vocabulary size {v}; lower k")
    tokens = np.full((h, k), PAD_TOKEN, dtype=np.int64)
    scores = np.full((h, k), -np.inf)
    cdf = np.cumsum(unigram)
    cdf /= cdf[-1]
    for i in range(h):
        n = 1 if (certain_first and i == 0) else k
        row = [int(truth[i])]
        seen = set(row)
        while len(row) < n:
            for c in np.searchsorted(cdf, rng.random(2 * n), side="right").tolist():
                c = min(c, v - 1)
                if c not in seen:
                    seen.add(c)
                    row.append(c)
                    if len(row) == n:
                        break
        rng.shuffle(row)
        tokens[i, :n] = row
        scores[i, :n] = _scores(rng, n)
    return SausageLattice(tokens=tokens, scores=scores)


def random_tokens(
    rng: np.random.Generator, h: int, k: int, vocab_size: int, *, certain_first: bool = False
) -> SausageLattice:
    """A lattice of uniformly random distinct token ids per slot."""
    tokens = np.full((h, k), PAD_TOKEN, dtype=np.int64)
    scores = np.full((h, k), -np.inf)
    for i in range(h):
        n = 1 if (certain_first and i == 0) else k
        tokens[i, :n] = rng.choice(vocab_size, size=n, replace=False)
        scores[i, :n] = _scores(rng, n)
    return SausageLattice(tokens=tokens, scores=scores)
