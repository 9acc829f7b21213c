"""Prefix-conditioned (Hydra-style) heads on ONNX Runtime: the ``drafts`` graph is their greedy
chain and the ``expand`` graph one node of their tree lattice. Both equal the PyTorch adapter's
(ids exactly, log-probabilities within float rounding) with and without a shortlist, on both
graph families; decoding on ONNX Runtime is lossless and accepts what PyTorch accepts."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from hf_testlib import V, randomize, tiny_hf_base

pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

from blockdraft.drafts import (  # noqa: E402
    ConditionalDrafter,
    ConditionalTreeDrafter,
    HeadDrafter,
)
from blockdraft.models import greedy_generate  # noqa: E402
from blockdraft.models.hf import HFBlockwiseModel  # noqa: E402
from blockdraft.models.hf.prefix_heads import PrefixHeads  # noqa: E402
from blockdraft.models.runtimes import on_runtime  # noqa: E402
from blockdraft.verify import decode  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_grad", "private_cache")


def tiny(kind: str = "llama", shortlist: int | None = 40, seed: int = 0) -> HFBlockwiseModel:
    """A tiny random Llama or GPT-2 (hf_testlib) with 3 random prefix heads (their prefix
    projections random too, so each head really reads the token before its target)."""
    heads = randomize(PrefixHeads(64, 3, 1), seed + 1, scale=0.3)
    if shortlist is not None:
        g = torch.Generator().manual_seed(seed + 2)
        heads.set_shortlist(torch.randperm(V, generator=g)[:shortlist], vocab_size=V)
    return HFBlockwiseModel(tiny_hf_base(kind, seed, init=0.3), heads)


@pytest.mark.parametrize(("kind", "shortlist"), [("llama", 40), ("llama", None),
                                                 ("gpt2", 40)])
def test_the_chain_graph_equals_the_torch_chain(kind: str, shortlist: int | None) -> None:
    model = tiny(kind, shortlist)
    ort = on_runtime(model, "onnxruntime", "float32")
    assert ort.conditional_heads and model.conditional_heads
    assert ort.heads_digest == model.heads_digest  # what a trace records, on either runtime
    x, _ = model.hidden(torch.randint(2, V, (1, 12), generator=torch.Generator().manual_seed(3)))
    x = x[0]  # (12, d)
    first = model.lm_head(x).argmax(-1)
    np.testing.assert_allclose(ort.head_states(x).numpy(), model.head_states(x).numpy(),
                               rtol=1e-4, atol=1e-4)
    for k in (1, 4, 50):
        for given in (None, first):
            want_ids, want_sc = model.head_topk(x, k, first=given)
            got_ids, got_sc = ort.head_topk(x, k, first=given)
            assert got_ids.shape == want_ids.shape == (12, 3, k)
            np.testing.assert_array_equal(got_ids, want_ids)
            np.testing.assert_allclose(got_sc, want_sc, rtol=1e-4, atol=1e-4)
        ids2, _ = ort.head_topk(x, k, heads=2, first=first)
        np.testing.assert_array_equal(ids2, ort.head_topk(x, k, first=first)[0][:, :1])
    # another first token changes what every head reads: the graph really conditions on it
    other = (first + 1) % V
    assert not np.array_equal(ort.head_topk(x, 4, first=other)[0],
                              ort.head_topk(x, 4, first=first)[0])
    np.testing.assert_array_equal(ort.head_topk(x, 4, first=other)[0],
                                  model.head_topk(x, 4, first=other)[0])


@pytest.mark.parametrize("shortlist", [40, None])
def test_the_expand_graph_equals_the_torch_expander(shortlist: int | None) -> None:
    model = tiny("llama", shortlist)
    ort = on_runtime(model, "onnxruntime", "float32")
    x, _ = model.hidden(torch.randint(2, V, (1, 5), generator=torch.Generator().manual_seed(4)))
    rng = np.random.default_rng(0)
    for t in range(5):
        state = x[0, t]
        certain = int(model.lm_head(state).argmax())
        want, got = model.expander(state, 5, certain), ort.expander(state, 5, certain)
        assert ort.expander(state, 5) is not None  # projects its own root when not given
        prefixes: list[tuple[int, ...]] = [(), (certain,), (certain + 1,)]
        for depth in range(1, 4):
            prefixes.append((certain, *rng.integers(0, V, depth).tolist()))
        for prefix in prefixes:
            (wi, ws), (gi, gs) = want(prefix), got(prefix)
            np.testing.assert_array_equal(gi, wi)
            np.testing.assert_allclose(gs, ws, rtol=1e-4, atol=1e-4)
        assert len(got((certain, 3, 4, 5))[0]) == 0  # deeper than the heads: a leaf


def test_decoding_on_onnx_runtime_is_lossless_and_accepts_what_torch_accepts() -> None:
    model = tiny("llama", 40)
    ort = on_runtime(model, "onnxruntime", "float32")
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(2, V, (n,), generator=g).tolist() for n in (5, 9, 14)]
    prompts[2] = prompts[2] * 3  # repeats: prompt lookup finds copies
    want = [greedy_generate(model, p, 24, eos_id=None) for p in prompts]
    for drafter in (HeadDrafter(k=1, p=1), ConditionalDrafter(k=1, p=1),
                    ConditionalDrafter(k=3, p=6, max_expansions=None),
                    ConditionalTreeDrafter(k=3, budget=12),
                    ConditionalTreeDrafter(k=3, budget=12, lookup=True, copy_length=6)):
        calls = {}
        for name, m in (("torch", model), ("ort", ort)):
            outs = decode(m, prompts, max_new_tokens=24, eos_id=None, drafter=drafter)
            assert [o.tokens for o in outs] == [list(w) for w in want], (name, drafter)
            calls[name] = [o.calls for o in outs]
        assert calls["ort"] == calls["torch"], drafter
        if drafter.source.startswith("conditional tree"):  # its trees accept something
            assert sum(len(w) for w in want) / sum(calls["ort"]) > 1.0
    int8 = on_runtime(model, "onnxruntime", "int8")
    outs = decode(int8, prompts, drafter=HeadDrafter(k=1, p=1), max_new_tokens=24, eos_id=None)
    assert [o.tokens for o in outs] == [greedy_generate(int8, p, 24, eos_id=None)
                                        for p in prompts]


def test_the_chain_seeds_the_expander_and_each_node_is_evaluated_once() -> None:
    """Seeded with the step's chain top-k, the expander gives what it computes itself, never
    evaluates a chain node, and evaluates any (head, token) once; a wrong chain is used as
    given (the seed is trusted: the verifier computes both at the same state)."""
    from blockdraft.lattice.conditional import conditional_pbest
    from blockdraft.models.hf.prefix_heads import tree_expander

    model = tiny("llama", 40)
    ort = on_runtime(model, "onnxruntime", "float32")
    x, _ = model.hidden(torch.randint(2, V, (1, 6), generator=torch.Generator().manual_seed(7)))
    for m in (model, ort):
        for t in range(6):
            state = x[0, t]
            certain = int(model.lm_head(state).argmax())
            chain = m.head_topk(state[None], 4, first=torch.tensor([certain]))
            plain = m.expander(state, 4, certain)
            seeded = m.expander(state, 4, certain, chain=(chain[0][0], chain[1][0]))
            want = conditional_pbest(plain, 4, 6)
            got = conditional_pbest(seeded, 4, 6)
            np.testing.assert_array_equal(got.tokens, want.tokens)
            np.testing.assert_allclose(got.scores, want.scores, rtol=1e-4, atol=1e-4)
    calls: list[tuple[int, int]] = []

    def node(head: int, token: int) -> tuple[np.ndarray, np.ndarray]:
        calls.append((head, token))
        return np.array([token + 1, token + 2]), np.log(np.array([0.6, 0.4]))

    chain = (np.array([[5, 6], [6, 7], [8, -1]]), np.log(np.array([[.6, .4], [.6, .4],
                                                                   [1., 1.]])))
    expand = tree_expander(4, 3, node, chain)
    assert expand((4,))[0].tolist() == [5, 6] and expand((4, 5))[0].tolist() == [6, 7]
    assert expand((4, 5, 6))[0].tolist() == [8]  # padding dropped
    assert calls == []  # the chain's nodes: from the seed
    expand((4, 6, 6))  # the same head reading the same token: the same children
    assert calls == []
    assert expand((4, 5, 7))[0].tolist() == [8, 9] and calls == [(2, 7)]
    expand((4, 6, 7))
    expand((4, 6))
    assert calls == [(2, 7), (1, 6)]
    assert len(expand((4, 5, 6, 7))[0]) == 0 and len(expand((3,))[0]) == 0


def test_the_cost_aware_tree_lattice_is_the_default_and_sizes_by_cost() -> None:
    """Told nothing, decode drafts prefix heads' tree lattice cut by the model's cost curve,
    losslessly; the steeper the curve, the smaller the trees (a node must pay for its row),
    and without a curve the tree keeps its whole budget."""
    from blockdraft.drafts import Grown, StepView, default_drafter
    from blockdraft.lattice.conditional import TreeLattice
    from blockdraft.lattice.sausage import SausageLattice
    from blockdraft.models.cost import CostCurve

    model = tiny("llama", 40)
    ort = on_runtime(model, "onnxruntime", "float32")
    drafter = default_drafter(ort)
    grown = drafter.sources[0]  # the tree grown over the tree lattice, cut by the cost curve
    assert isinstance(grown, Grown) and grown.tree_lattice and grown.cut is not None
    assert grown.cut.cost is not None
    g = torch.Generator().manual_seed(6)
    prompts = [torch.randint(2, V, (n,), generator=g).tolist() for n in (6, 11)]
    outs = decode(ort, prompts, max_new_tokens=20, eos_id=None)
    assert [o.tokens for o in outs] == [greedy_generate(ort, p, 20, eos_id=None)
                                        for p in prompts]
    nodes = (1, 2, 4, 8, 16, 32)

    def curve(slope: float) -> CostCurve:
        return CostCurve(nodes=nodes, step_ms=tuple(10 + slope * (n - 1) for n in nodes),
                         heads_ms=0.5, greedy_ms=10.0)

    x, _ = model.hidden(torch.tensor([prompts[1]]))
    sizes = {}
    for slope in (None, 0.0, 2.0, 50.0):
        tree_drafter = ConditionalTreeDrafter(k=4, budget=16,
                                              cost=None if slope is None else curve(slope))
        got = []
        for t in range(len(prompts[1])):
            state = x[0, t]
            certain = int(model.lm_head(state).argmax())
            expand = model.expander(state, 4, certain)
            lattice = SausageLattice(tokens=np.full((4, 1), certain), scores=np.zeros((4, 1)))
            view = StepView(lattice=lattice, context=np.zeros(0, dtype=np.int64),
                            tree=TreeLattice(4, expand))
            got.append(len(tree_drafter.draft(view).tokens))
        sizes[slope] = got
    assert all(n == 16 for n in sizes[None])
    assert sum(sizes[0.0]) >= sum(sizes[2.0]) >= sum(sizes[50.0])
    assert sum(sizes[50.0]) < sum(sizes[0.0]) and max(sizes[50.0]) < 16


def test_a_trace_of_prefix_heads_simulates_their_vanilla_chain_exactly(tmp_path: Any) -> None:
    """A trace of a model with prefix heads stores, at each position, the heads along their
    greedy chain (each head reading the one before's argmax): the offline simulation of
    vanilla drafting gives the online decode's calls, prompt for prompt."""
    from blockdraft.oracle import Trace, simulate
    from blockdraft.oracle.record import record_trace

    model = tiny("llama", 40)
    g = torch.Generator().manual_seed(8)
    prompts = [torch.randint(2, V, (n,), generator=g).tolist() for n in (5, 9, 12)]
    for m in (model, on_runtime(model, "onnxruntime", "float32")):
        folder = tmp_path / type(m).__name__
        record_trace(m, prompts, folder, max_new_tokens=24, K=4)
        offline = simulate(Trace.open(folder), HeadDrafter(k=1, p=1))
        online = decode(m, prompts, drafter=HeadDrafter(k=1, p=1), max_new_tokens=24,
                        eos_id=None)
        assert list(offline.calls) == [o.calls for o in online]
        # step for step the same drafted chain (each head conditioned on the one before)
        # (a last step's tree is cut to what can count; the offline row fills it with top-1s)
        want = [step.draft.tolist() for o in online for step in o.steps]
        assert [row[: len(w)] for row, w in zip(offline.steps.drafts.tolist(), want,
                                                 strict=True)] == want
        assert sum(len(w) == 4 for w in want) > len(want) // 2  # whole chains, mostly
