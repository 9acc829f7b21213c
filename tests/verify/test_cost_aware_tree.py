"""The cost-aware tree in the decode loop: lossless (every output equals greedy, with every
source on and a lookup that finds copies), and its offline simulation equals the online decode
step by step."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from test_offline_online import teacher_forced_logits

from blockdraft.drafts import AcceptanceTables, CostAwareTreeDrafter, HeadDrafter
from blockdraft.models import greedy_generate
from blockdraft.models.cost import CostCurve, measure_cost_curve
from blockdraft.oracle import Trace, simulate
from blockdraft.verify import decode


def curve(slope: float) -> CostCurve:
    nodes = (1, 2, 4, 8, 16, 32)
    return CostCurve(nodes=nodes, step_ms=tuple(10 + slope * (n - 1) for n in nodes),
                     heads_ms=0.5, greedy_ms=10.0)


def const_tables(h: int, q: float) -> AcceptanceTables:
    """Every lattice token and every copied token accepted with rate ``q``."""
    base = AcceptanceTables.uniform(h)
    return AcceptanceTables(heads=np.full(base.heads.shape, q),
                            marginal=np.full(base.marginal.shape, q), copy=np.full((4, 16), q))


def drafter(h: int, slope: float = 0.3, p: int = 3, max_nodes: int = 16,
            q: float | None = None) -> Any:
    tables = AcceptanceTables.uniform(h, 0.9) if q is None else const_tables(h, q)
    return CostAwareTreeDrafter(cost=curve(slope), tables=tables, k=4, p=p,
                                max_nodes=max_nodes)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("slope", [0.05, 0.5, 3.0])
def test_lossless(random_model: Any, seed: int, slope: float) -> None:
    model = random_model(seed=seed, vocab=64, h=4, scale=1.0 if seed == 0 else 10.0)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]
    want = greedy_generate(model, prompt, 48)
    for q in (None, 0.7):
        tree = drafter(4, slope, q=q)
        res = decode(model, prompt, tree=tree, max_new_tokens=48)
        assert res.tokens == want
        sizes = [s.tree.num_nodes for s in res.steps if s.tree is not None]
        assert max(sizes) <= 16  # max_nodes
        if q is not None and slope <= 0.05:  # likely nodes that are nearly free: big trees
            assert max(sizes) > 6


@pytest.mark.parametrize("seed", [0, 1])
def test_online_equals_offline(random_model: Any, tmp_path: Any, seed: int) -> None:
    model = random_model(seed=seed, vocab=64, h=4, scale=10.0)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    y = greedy_generate(model, prompt, 40)
    tree = drafter(4, 0.2)
    online = decode(model, prompt, tree=tree, max_new_tokens=40)
    assert online.tokens == y
    trace = Trace.from_head_logits(tmp_path / "trace",
                                   [(prompt, y, teacher_forced_logits(model, prompt, y))], K=8)
    offline = simulate(trace, tree)
    assert online.accept_lengths == offline.steps.n.tolist()
    assert online.block_efficiency == pytest.approx(offline.block_efficiency)
    # the simulated sizes are the verified trees' (the last step's may be cut to what counts)
    sizes = [s.tree.num_nodes for s in online.steps if s.tree is not None]
    assert sizes[:-1] == offline.steps.nodes.tolist()[:-1]
    cost = curve(0.2)
    want = (len(y) - 1) / sum(cost.relative(n) for n in offline.steps.nodes.tolist())
    assert offline.simulated_speedup(cost) == pytest.approx(want)


def test_beats_the_chain_it_contains_on_a_looping_model(chain_model: Any) -> None:
    """A model whose heads are useless but whose output copies the prompt: the tree's lookup
    copy is accepted, the vanilla chain alone is not."""
    model, order = chain_model(vocab=64, h=4)
    prompt = [int(t) for t in order] + [int(order[0])]  # the chain, then its start again
    want = greedy_generate(model, prompt, 30)
    tree = decode(model, prompt, tree=drafter(4, 0.1), max_new_tokens=30)
    chain = decode(model, prompt, drafter=HeadDrafter(k=1, p=1), max_new_tokens=30)
    assert tree.tokens == chain.tokens == want
    assert tree.block_efficiency > chain.block_efficiency + 0.5


def test_measured_curve_is_a_curve(random_model: Any) -> None:
    model = random_model(seed=0, vocab=64, h=4)
    cost = measure_cost_curve(model, nodes=(1, 2, 4), prefix=16, repeats=2)
    assert cost.nodes == (1, 2, 4) and cost.greedy_ms > 0
    assert cost.relative(1, heads=False) == pytest.approx(1.0)
    assert np.isfinite(cost.step(40))


def test_monotone_is_the_least_squares_nondecreasing_fit() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from blockdraft.models.cost import monotone

    @settings(max_examples=100, deadline=None)
    @given(st.lists(st.floats(0.0, 100.0), min_size=1, max_size=8))
    def check(values: list[float]) -> None:
        fit = np.asarray(monotone(values))
        assert np.all(np.diff(fit) >= -1e-9)
        if np.all(np.diff(values) >= 0):
            np.testing.assert_allclose(fit, values)
        assert fit.sum() == pytest.approx(sum(values))  # the fit keeps the mean
        # brute force over nearby monotone candidates: none is closer
        rng = np.random.default_rng(0)
        err = ((fit - values) ** 2).sum()
        for _ in range(50):
            cand = np.maximum.accumulate(fit + rng.normal(0, 1, fit.size))
            assert ((cand - values) ** 2).sum() >= err - 1e-6

    check()


def _on_demand_run(model: Any, prompt: list[int], match: int, max_new: int,
                   monkeypatch: Any) -> tuple[Any, list[bool], list[int], int]:
    """A decode with heads on demand, recording each step's gate answer, the lattice depth its
    drafter saw, and how often the verifier computed the deferred heads."""
    from blockdraft.verify.verifier import Verifier

    tree = CostAwareTreeDrafter(cost=curve(0.1), tables=AcceptanceTables.uniform(4, 0.9),
                                k=4, p=2, max_nodes=16, heads_on_demand=match)
    wanted: list[bool] = []
    seen: list[int] = []
    gate, draft = tree.wants_heads, tree.draft

    def recorded_gate(context: Any, certain: int) -> bool:
        wanted.append(gate(context, certain))
        return wanted[-1]

    def recorded_draft(view: Any) -> Any:
        seen.append(view.lattice.h)
        return draft(view)

    computed = [0]
    next_heads = Verifier.next_heads

    def counted(self: Any, *args: Any, **kw: Any) -> Any:
        computed[0] += 1
        return next_heads(self, *args, **kw)

    monkeypatch.setattr(tree, "wants_heads", recorded_gate)
    monkeypatch.setattr(tree, "draft", recorded_draft)
    monkeypatch.setattr(Verifier, "next_heads", counted)
    res = decode(model, prompt, tree=tree, max_new_tokens=max_new)
    return res, wanted, seen, computed[0]


@pytest.mark.parametrize("match", [1, 2])
def test_heads_on_demand_skips_the_heads_where_a_copy_matched_and_stays_lossless(
        chain_model: Any, monkeypatch: Any, match: int) -> None:
    """On a model whose output copies its prompt, steps whose best copy matched ``match``
    tokens see the certain token alone and their heads are never computed (the prefill computes
    the first step's; a verification leaves the next step's to the step that wants them); the
    output is greedy's."""
    model, order = chain_model(vocab=64, h=4)
    prompt = [int(t) for t in order[:20]] + [int(order[0])]
    want = greedy_generate(model, prompt, 40)
    res, wanted, seen, computed = _on_demand_run(model, prompt, match, 40, monkeypatch)
    assert res.tokens == want
    assert len(wanted) == len(seen) == len(res.steps)
    assert not all(wanted) and any(not w for w in wanted[1:])  # copies found, heads skipped
    assert [h == 1 for h in seen] == [not w for w in wanted]  # skipped: the certain token alone
    assert computed == 1 + sum(wanted[1:])  # the prefill's, then only the steps that want them
    assert all(s.heads_s > 0 for s, w in zip(res.steps[1:], wanted[1:], strict=True) if w)


def test_heads_on_demand_wants_the_heads_without_a_long_enough_copy(
        random_model: Any, monkeypatch: Any) -> None:
    """A random model's text rarely repeats 4 tokens: with ``match = 4`` nearly every step reads
    the heads, and the output is greedy's either way."""
    model = random_model(seed=1, vocab=64, h=4, scale=10.0)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]
    want = greedy_generate(model, prompt, 40)
    res, wanted, seen, computed = _on_demand_run(model, prompt, 4, 40, monkeypatch)
    assert res.tokens == want
    assert [h == 1 for h in seen] == [not w for w in wanted]
    assert computed == 1 + sum(wanted[1:])
    assert sum(wanted) > len(wanted) // 2


def test_heads_on_demand_online_equals_offline(chain_model: Any, tmp_path: Any) -> None:
    """The simulator shows a step whose gate skipped the heads the certain token alone, as the
    online loop does: the same accepted lengths and B."""
    model, order = chain_model(vocab=64, h=4)
    prompt = [int(t) for t in order[:20]] + [int(order[0])]
    y = greedy_generate(model, prompt, 40)

    def tree() -> Any:
        return CostAwareTreeDrafter(cost=curve(0.1), tables=AcceptanceTables.uniform(4, 0.9),
                                    k=4, p=2, max_nodes=16, heads_on_demand=2)

    online = decode(model, prompt, tree=tree(), max_new_tokens=40)
    assert online.tokens == y
    trace = Trace.from_head_logits(tmp_path / "trace",
                                   [(prompt, y, teacher_forced_logits(model, prompt, y))], K=8)
    offline = simulate(trace, tree())
    assert online.accept_lengths == offline.steps.n.tolist()
    assert online.block_efficiency == pytest.approx(offline.block_efficiency)
