"""Shared helpers of the oracle room's tests: a tiny handcrafted trace and a fake bigram
rescorer (brute force over all paths) to drive `HeadDrafter` with a rescorer."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from blockdraft.core.batch import DraftBatch
from blockdraft.lattice.sausage import SausageLattice
from blockdraft.oracle import Trace, TraceWriter

# The tiny trace: h = 3 heads, K = 2, V = 10. Per example: prompt, greedy ids y_1..y_m, and per
# position t the top-2 ids of heads 1, 2, 3 (head i at t predicts y_{t+i}).
TINY_H, TINY_K, TINY_V = 3, 2, 10
TINY: list[tuple[list[int], list[int], list[list[list[int]]]]] = [
    (
        [9],
        [1, 2, 3, 4, 5, 6],
        [
            [[1, 0], [2, 0], [7, 3]],  # t=0: y2 = 2 top-1; y3 = 3 only at rank 2
            [[2, 0], [0, 8], [0, 8]],  # t=1: junk (vanilla never visits it)
            [[3, 0], [8, 4], [5, 0]],  # t=2: y4 = 4 only at rank 2; y5 = 5 top-1
            [[4, 0], [5, 0], [6, 0]],  # t=3: y5, y6 top-1
            [[5, 0], [6, 0], [0, 8]],  # t=4
            [[6, 0], [0, 8], [0, 8]],  # t=5
        ],
    ),
    ([], [4], [[[4, 0], [1, 2], [1, 2]]]),  # m = 1: the prefill alone
    (
        [7, 8],
        [5, 5],
        [
            [[5, 0], [5, 1], [3, 2]],  # t=0: y2 = 5 top-1, but y_3 does not exist
            [[5, 1], [1, 2], [1, 2]],  # t=1
        ],
    ),
]


def tiny_entropy(example: int, m: int) -> np.ndarray:
    """The tiny trace's entropies: ``10 * example + t + 0.25 * (head - 1)`` nats."""
    t = np.arange(m)[:, None]
    return (10.0 * example + t + 0.25 * np.arange(TINY_H)[None, :]).astype(np.float32)


def write_tiny(
    path: Path, rows: Sequence[tuple[list[int], list[int], list[list[list[int]]]]] = TINY
) -> Trace:
    with TraceWriter(path, h=TINY_H, K=TINY_K, V=TINY_V, signature={"data": "tiny"}) as w:
        for e, (prompt, greedy, ids) in enumerate(rows):
            ids_arr = np.asarray(ids, dtype=np.int64)  # (m, h, K)
            lp = np.broadcast_to(np.array([-0.1, -2.5]), ids_arr.shape)
            w.add(prompt, greedy, ids_arr, lp, tiny_entropy(e, len(greedy)))
    return Trace.open(path)


class BigramRescorer:
    """A made-up LM rescorer: score = head scores + alpha * sum log P(d_i | d_{i-1}), with the
    context's last token before d_1 (none when the context is empty). Brute force over all
    paths; ties keep enumeration order (lexicographic arc ranks). Records every context. A
    :class:`~blockdraft.rescorers.base.Rescorer` (``rescore``, ``path_scorer``,
    ``check_vocab``)."""

    def __init__(self, V: int, alpha: float = 1.0, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        z = rng.standard_normal((V, V)) * 2.0
        self.table = z - np.log(np.exp(z).sum(axis=1, keepdims=True))  # (V, V) log P(b | a)
        self.alpha = alpha
        self.contexts: list[np.ndarray] = []

    def rescore(self, lattice: SausageLattice, context: Any, p: int = 1) -> DraftBatch:
        ctx = np.asarray(context, dtype=np.int64)
        self.contexts.append(ctx.copy())
        slots = [lattice.slot(i) for i in range(lattice.h)]
        scored = []
        for arcs in itertools.product(*(range(len(tok)) for tok, _ in slots)):
            toks = [int(slots[i][0][a]) for i, a in enumerate(arcs)]
            head = float(sum(slots[i][1][a] for i, a in enumerate(arcs)))
            prev = [int(ctx[-1])] if ctx.size else []
            seq = prev + toks
            lm = float(sum(self.table[a, b] for a, b in itertools.pairwise(seq)))
            scored.append((head + self.alpha * lm, head, lm, toks))
        scored.sort(key=lambda s: -s[0])
        best = scored[:p]
        return DraftBatch(
            tokens=np.array([s[3] for s in best]),
            scores=np.array([s[0] for s in best]),
            head_scores=np.array([s[1] for s in best]),
            lm_scores=np.array([s[2] for s in best]),
            alpha=self.alpha,
            requested=p,
            source="fake-bigram",
        )

    def path_scorer(self) -> None:
        """No LM over tree paths."""
        return None

    def check_vocab(self, vocab_size: int) -> None:
        from blockdraft.rescorers.base import RescorerError

        if vocab_size != self.table.shape[0]:
            raise RescorerError(f"the bigram table has V = {self.table.shape[0]}, the model "
                                f"{vocab_size}")
