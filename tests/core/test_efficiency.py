"""The one counting rule of B (docs/definitions.md sec. 2): its function, and the online and
offline records that count with it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from blockdraft.core.efficiency import block_efficiency, call_tokens
from blockdraft.drafts import HeadDrafter
from blockdraft.oracle import Oracle, simulate, synthetic_trace


def test_the_rule() -> None:
    assert block_efficiency(10, 4) == 2.5
    assert block_efficiency(7, 7) == 1.0  # greedy: one token a call
    assert block_efficiency(0, 0) == 0.0  # nothing called, nothing to measure
    assert call_tokens(3, 10) == 4  # 3 accepted + the next certain token
    assert call_tokens(3, 2) == 2  # cut at the end of the output
    assert call_tokens(0, 1) == 1


@pytest.mark.parametrize("strategy", [HeadDrafter(k=1), HeadDrafter(k=4, p=3), Oracle(4)])
def test_a_simulation_counts_every_token_once(tmp_path: Path, strategy: object) -> None:
    """Walked by hand: the prefill's token plus each step's tokens are the example's m, the
    calls are the steps plus the prefill, and B is their pooled ratio."""
    trace = synthetic_trace(tmp_path / "t", num_examples=5, h=4, K=4, V=40, seed=3,
                            accuracy=[0.7, 0.5, 0.3])
    res = simulate(trace, strategy)  # type: ignore[arg-type]
    steps = res.steps
    for j, e in enumerate(res.examples.tolist()):
        mine = steps.example == e
        assert 1 + int(steps.tokens[mine].sum()) == int(res.generated[j])
        assert 1 + int(mine.sum()) == int(res.calls[j])
        m = int(res.generated[j])
        # the walk: t <- t + 1 + n from t = 0, each call counting min(1 + n, m - (t + 1))
        t = 0
        for n, tok, at in zip(steps.n[mine], steps.tokens[mine], steps.t[mine], strict=True):
            assert at == t and tok == call_tokens(int(n), m - (t + 1))
            t += 1 + int(n)
        assert t + 1 >= m
    assert res.block_efficiency == int(res.generated.sum()) / int(res.calls.sum())
    assert np.array_equal(res.example_block_efficiency, res.generated / res.calls)
