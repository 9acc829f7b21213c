"""Token trees offline (docs/definitions.md sec. 11): rank accuracies from a trace, Medusa's
calibrated tree from them, and tree strategies in the simulator (a chain = its draft, a trie
= its batch)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from blockdraft.drafts import (
    ConfidenceTreeDrafter,
    HeadDrafter,
    TrieDrafter,
    calibrated_tree_drafter,
)
from blockdraft.oracle import OracleError, rank_accuracies, simulate, synthetic_trace


def test_rank_accuracies_by_brute_force(tmp_path: Path) -> None:
    trace = synthetic_trace(tmp_path / "t", num_examples=5, h=4, K=6, V=20,
                            accuracy=[0.8, 0.5, 0.3], seed=1)
    acc = rank_accuracies(trace, 4)
    assert acc.shape == (3, 4)
    hits = np.zeros((3, 4))
    counts = np.zeros(3)
    for ex in trace:
        y = ex.greedy_ids
        for t in range(ex.m):
            for d in range(1, 4):
                if t + d < ex.m:
                    counts[d - 1] += 1
                    for r in range(4):
                        hits[d - 1, r] += ex.topk_ids[t, d, r] == y[t + d]
    np.testing.assert_allclose(acc, hits / counts[:, None])
    assert acc[0, 0] > acc[2, 0]  # head 2 is the most accurate
    with pytest.raises(OracleError, match="K"):
        rank_accuracies(trace, 7)


def test_calibrated_tree_from_a_trace(tmp_path: Path) -> None:
    trace = synthetic_trace(tmp_path / "t", num_examples=6, h=4, K=6, V=30,
                            accuracy=[0.7, 0.5, 0.3], seed=2)
    acc = rank_accuracies(trace, 4, examples=range(3))  # "held out": the first half
    tree = calibrated_tree_drafter(acc, budget=12)  # was MedusaTreeDrafter.calibrated
    res = simulate(trace, tree, examples=range(3, 6))
    vanilla = simulate(trace, HeadDrafter(k=1), examples=range(3, 6))
    assert res.block_efficiency >= vanilla.block_efficiency


def test_tree_strategies_in_the_simulator(tmp_path: Path) -> None:
    trace = synthetic_trace(tmp_path / "t", num_examples=4, h=4, K=8, V=30, seed=3)
    batch = simulate(trace, HeadDrafter(k=4, p=5))
    trie = simulate(trace, TrieDrafter(HeadDrafter(k=4, p=5)))
    assert trie.steps.n.tolist() == batch.steps.n.tolist()
    assert trie.block_efficiency == batch.block_efficiency
    chain = simulate(trace, TrieDrafter(HeadDrafter(k=1)))
    vanilla = simulate(trace, HeadDrafter(k=1))
    assert chain.steps.n.tolist() == vanilla.steps.n.tolist()
    assert (chain.steps.drafts == vanilla.steps.drafts).all()
    big = simulate(trace, ConfidenceTreeDrafter(k=8, budget=64))
    small = simulate(trace, ConfidenceTreeDrafter(k=8, budget=4))
    assert big.block_efficiency >= vanilla.block_efficiency
    assert big.steps.num_drafts.max() > small.steps.num_drafts.max()
