"""Local neural rescoring (Kim Alg. 2) against brute force, its cache against a fresh rescorer,
and the ONNX Runtime backend against torch."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from neural_testlib import MAX_SEQ_LEN, VOCAB, brute_beam, lm_logprobs, peaky_lm, random_lattice

from blockdraft.lattice import SausageLattice
from blockdraft.lattice.sausage import log_softmax
from blockdraft.models import BlockwiseConfig, BlockwiseLM, RescorerLM, save_model
from blockdraft.rescorers import Rescorer, RescorerError
from blockdraft.rescorers.neural import NeuralRescorer, export_rescorer_onnx, time_step
from blockdraft.rescorers.neural.backends import log_normaliser
from blockdraft.rescorers.neural.onnx_export import export_rescorer_bytes
from blockdraft.rescorers.neural.onnx_runtime import OnnxStepRunner


@pytest.fixture(scope="module")
def lm():
    return peaky_lm(0)


@pytest.fixture(scope="module")
def onnx_bytes(lm) -> bytes:
    return export_rescorer_bytes(lm)


@pytest.fixture(scope="module")
def onnx_rescorer(lm, onnx_bytes, tmp_path_factory) -> NeuralRescorer:
    path = tmp_path_factory.mktemp("onnx") / "lm.onnx"
    path.write_bytes(onnx_bytes)
    return NeuralRescorer(lm, backend="onnx", onnx_path=path)


def assert_same(batch, tokens, head, lm_scores, alpha, tol=1e-4):
    np.testing.assert_array_equal(batch.tokens, tokens)
    np.testing.assert_allclose(batch.head_scores, head, atol=1e-9)
    np.testing.assert_allclose(batch.lm_scores, lm_scores, atol=tol)
    np.testing.assert_allclose(batch.scores, batch.head_scores + alpha * batch.lm_scores,
                               atol=1e-9)


# ---- the search against brute force ---------------------------------------------------------


@pytest.mark.parametrize("alpha", [0.5, 1.0, 3.0])
def test_greedy_is_kims_algorithm_2(lm, alpha):
    rng = np.random.default_rng(1)
    rescorer = NeuralRescorer(lm, alpha=alpha)
    assert isinstance(rescorer, Rescorer)
    changed = 0
    for trial in range(8):
        lattice = random_lattice(rng, h=5, k=6)
        context = rng.integers(0, VOCAB, int(rng.integers(1, 12))).tolist()
        batch = rescorer.rescore(lattice, context)
        tokens, head, lm_scores = brute_beam(lm, lattice, context, alpha, p=1)
        assert_same(batch, tokens, head, lm_scores, alpha)
        assert batch.source == "neural" and batch.p == 1 and batch.alpha == alpha
        assert batch.tokens[0, 0] == lattice.tokens[0, 0]  # the certain token stays
        assert rescorer.last_stats is not None and rescorer.last_stats.draft_fed == 4
        np.testing.assert_allclose(batch.head_scores[0], lattice.path_score(batch.tokens[0]))
        changed += int(not np.array_equal(batch.tokens[0], lattice.vanilla()))
        del trial
    assert changed > 0  # the LM does change drafts, so the comparison means something


@pytest.mark.parametrize("p", [2, 5])
def test_beam_equals_brute_force_beam(lm, p):
    rng = np.random.default_rng(2)
    rescorer = NeuralRescorer(lm, alpha=1.0)
    for _ in range(4):
        lattice = random_lattice(rng, h=4, k=4)
        context = rng.integers(0, VOCAB, 7)
        batch = rescorer.rescore(lattice, context, p=p)
        tokens, head, lm_scores = brute_beam(lm, lattice, context.tolist(), 1.0, p=p)
        assert_same(batch, tokens, head, lm_scores, 1.0)
        assert batch.requested == p and len({tuple(r) for r in batch.tokens.tolist()}) == batch.p


def test_slot_one_with_several_arcs_and_empty_context(lm):
    """Analysis lattices: slot 1 is chosen like the others, r_1 from the context; with an
    empty context (no BOS) slot 1 gets no LM score."""
    rng = np.random.default_rng(3)
    rescorer = NeuralRescorer(lm, alpha=2.0)
    for context in ([], [5], rng.integers(0, VOCAB, 9).tolist()):
        lattice = random_lattice(rng, h=4, k=5, certain_first=False)
        for p in (1, 3):
            batch = rescorer.rescore(lattice, context, p=p)
            assert_same(batch, *brute_beam(lm, lattice, context, 2.0, p=p), alpha=2.0)


def test_bos_is_put_before_the_context(lm):
    rng = np.random.default_rng(4)
    rescorer = NeuralRescorer(lm, alpha=1.0, bos_id=0)
    for context in ([], rng.integers(0, VOCAB, 6).tolist()):
        lattice = random_lattice(rng, h=4, k=5, certain_first=False)
        batch = rescorer.rescore(lattice, context)
        assert_same(batch, *brute_beam(lm, lattice, [0, *context], 1.0, p=1), alpha=1.0)


def test_alpha_zero_is_the_vanilla_draft_and_the_exact_p_best(lm):
    rng = np.random.default_rng(5)
    rescorer = NeuralRescorer(lm, alpha=0.0)
    for _ in range(5):
        lattice = random_lattice(rng, h=5, k=4)
        context = rng.integers(0, VOCAB, 5)
        batch = rescorer.rescore(lattice, context)
        np.testing.assert_array_equal(batch.tokens[0], lattice.vanilla())
        np.testing.assert_allclose(batch.scores, batch.head_scores)
        best = lattice.best_paths(6)
        beam = rescorer.rescore(lattice, context, p=6)
        np.testing.assert_array_equal(beam.tokens, best.tokens)
        np.testing.assert_allclose(beam.scores, best.scores, atol=1e-9)


def test_beam_returns_every_path_of_a_small_lattice(lm):
    lattice = SausageLattice(tokens=np.array([[3, -1], [4, 7], [9, 2]]),
                             scores=np.array([[0.0, -np.inf], [-0.1, -0.9], [-0.2, -0.4]]))
    batch = NeuralRescorer(lm).rescore(lattice, [1, 2], p=10)
    assert batch.p == 4 and batch.exhausted
    assert assert_sorted(batch.scores)
    one = NeuralRescorer(lm).rescore(SausageLattice(tokens=np.array([[3]]),
                                                    scores=np.array([[0.0]])), [], p=2)
    assert one.tokens.tolist() == [[3]] and one.lm_scores.tolist() == [0.0]


def assert_sorted(scores: np.ndarray) -> bool:
    return bool(np.all(np.diff(scores) <= 1e-12))


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), h=st.integers(1, 5), k=st.integers(1, 5),
       n_ctx=st.integers(0, 10), alpha=st.sampled_from([0.0, 0.5, 1.0, 4.0]))
def test_greedy_property(lm, seed, h, k, n_ctx, alpha):
    rng = np.random.default_rng(seed)
    lattice = random_lattice(rng, h=h, k=k, certain_first=bool(rng.integers(2)))
    context = rng.integers(0, VOCAB, n_ctx).tolist()
    batch = NeuralRescorer(lm, alpha=alpha).rescore(lattice, context)
    assert_same(batch, *brute_beam(lm, lattice, context, alpha, p=1), alpha=alpha)


# ---- the cache ------------------------------------------------------------------------------


class FedCounter:
    """Counts the token positions a model's ``hidden`` is fed (wraps the bound method)."""

    def __init__(self, model) -> None:
        self.fed = 0
        self.calls = 0
        self._inner = model.hidden
        model.hidden = self

    def __call__(self, input_ids, past=None, *args, **kwargs):
        self.fed += int(input_ids.numel())
        self.calls += 1
        return self._inner(input_ids, past, *args, **kwargs)


def test_cache_feeds_only_new_tokens_and_agrees_with_a_fresh_rescorer():
    model = peaky_lm(0)
    rescorer = NeuralRescorer(model, alpha=1.0)
    counter = FedCounter(model)
    rng = np.random.default_rng(6)
    h = 5
    context = rng.integers(0, VOCAB, 6).tolist()
    expected_new = len(context)
    for step in range(10):
        lattice = random_lattice(rng, h=h, k=5)
        before = counter.fed
        batch = rescorer.rescore(lattice, context)
        stats = rescorer.last_stats
        assert stats is not None and stats.window_start == 0
        assert stats.context_fed == expected_new and stats.reused == len(context) - expected_new
        assert stats.draft_fed == h - 1
        assert counter.fed - before == expected_new + (h - 1)  # new context + h - 1 drafts
        fresh = NeuralRescorer(peaky_lm(0), alpha=1.0).rescore(lattice, context)
        np.testing.assert_array_equal(batch.tokens, fresh.tokens)
        np.testing.assert_allclose(batch.scores, fresh.scores, atol=1e-4)
        # Extend the context by new tokens the draft does not start with.
        n_new = int(rng.integers(1, 4))
        new = [(int(batch.tokens[0, 0]) + 1 + j) % VOCAB for j in range(n_new)]
        context = context + new
        expected_new = n_new
        del step


def test_accepted_draft_tokens_are_already_cached(lm):
    """The decode loop's next context ends with the accepted draft tokens d_1 .. d_{1+n}: they
    were fed as draft positions, so no context position is fed again (all h: one)."""
    rng = np.random.default_rng(7)
    h = 5
    rescorer = NeuralRescorer(lm, alpha=1.0)
    for n in range(h):
        context = rng.integers(0, VOCAB, 8).tolist()
        lattice = random_lattice(rng, h=h, k=4)
        batch = rescorer.rescore(lattice, context, p=1 + n % 2)
        nxt = context + batch.tokens[0, : 1 + n].tolist()
        lattice2 = random_lattice(rng, h=h, k=4)
        again = rescorer.rescore(lattice2, nxt)
        stats = rescorer.last_stats
        assert stats is not None
        assert stats.context_fed == (1 if 1 + n == h else 0)
        assert stats.reused == len(nxt) - stats.context_fed
        fresh = NeuralRescorer(lm, alpha=1.0).rescore(lattice2, nxt)
        np.testing.assert_array_equal(again.tokens, fresh.tokens)
        np.testing.assert_allclose(again.scores, fresh.scores, atol=1e-4)


def test_a_new_text_starts_afresh(lm):
    rng = np.random.default_rng(8)
    rescorer = NeuralRescorer(lm, alpha=1.0)
    lattice = random_lattice(rng, h=4, k=4)
    rescorer.rescore(lattice, [1, 2, 3, 4, 5])
    other = [6, 2, 3, 4]
    batch = rescorer.rescore(lattice, other)
    assert rescorer.last_stats is not None
    assert rescorer.last_stats.reused == 0 and rescorer.last_stats.context_fed == 4
    assert_same(batch, *brute_beam(lm, lattice, other, 1.0, p=1), alpha=1.0)
    shorter = rescorer.rescore(lattice, [6, 2])  # a prefix of the cached ids: reused
    assert rescorer.last_stats.reused == 1 and rescorer.last_stats.context_fed == 1
    assert_same(shorter, *brute_beam(lm, lattice, [6, 2], 1.0, p=1), alpha=1.0)
    rescorer.reset()
    rescorer.rescore(lattice, [6, 2])
    assert rescorer.last_stats.reused == 0


@pytest.mark.parametrize("stride", [1, 8])
def test_long_context_keeps_a_window(lm, stride):
    rng = np.random.default_rng(9)
    h = 5
    width = MAX_SEQ_LEN - (h - 1)  # 44 context positions fit beside the h - 1 drafts
    rescorer = NeuralRescorer(lm, alpha=1.0, window_stride=stride)
    context = rng.integers(0, VOCAB, width - 3).tolist()
    starts = []
    for _ in range(12):
        lattice = random_lattice(rng, h=h, k=4)
        batch = rescorer.rescore(lattice, context)
        stats = rescorer.last_stats
        assert stats is not None
        start = stats.window_start
        assert start == rescorer.window_start(len(context), h)
        assert len(context) - start <= width and start % stride == 0
        if start > 0:  # as much context as the stride allows
            assert len(context) - start > width - stride
        if starts and start == starts[-1]:
            assert stats.context_fed <= 2  # the window did not move: only new tokens
        starts.append(start)
        assert_same(batch, *brute_beam(lm, lattice, context[start:], 1.0, p=1), alpha=1.0)
        context = context + rng.integers(0, VOCAB, 2).tolist()
    assert starts[0] == 0 and starts[-1] > 0
    if stride == 1:
        assert starts[-1] == len(context) - 2 - width  # exactly the last W tokens


# ---- ONNX Runtime -----------------------------------------------------------------------------


def onnx_runner(model, data: bytes | None = None) -> OnnxStepRunner:
    embedding = model.transformer.wte.weight.detach().numpy()
    return OnnxStepRunner(data or export_rescorer_bytes(model), output_embedding=embedding)


def cached_keys(cache) -> np.ndarray:
    """The cache's keys as torch stacks them: ``[L, B, nh, length, hs]``."""
    return np.stack(cache.keys)[..., : cache.length].transpose(0, 1, 2, 4, 3)


def cached_values(cache) -> np.ndarray:
    return np.stack(cache.values)[:, :, :, : cache.length]


def test_onnx_graph_matches_torch_hidden_logits_and_cache(lm, onnx_bytes):
    runner = onnx_runner(lm, onnx_bytes)
    assert (runner.n_layer, runner.max_seq_len, runner.vocab_size) == (2, MAX_SEQ_LEN, VOCAB)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (3, 20), generator=g)
    with torch.no_grad():
        ref, cache = lm.hidden(ids)  # (3, 20, d)
        ref_logits, _ = lm.logits(ids)  # (3, 20, V)
    for cut in (1, 7, 19):  # an empty cache first, then the rest on top of it
        hidden0, kv = runner.step(ids[:, :cut].numpy(), runner.new_cache(3))
        hidden1, kv = runner.step(ids[:, cut:].numpy(), kv)
        hidden = np.concatenate((hidden0, hidden1), axis=1)
        np.testing.assert_allclose(hidden, ref.numpy(), atol=1e-4)
        np.testing.assert_allclose(runner.logits(hidden.reshape(-1, hidden.shape[-1])),
                                   ref_logits.numpy().reshape(-1, VOCAB), atol=1e-4)
        assert kv.length == 20 and kv.capacity >= 20
        np.testing.assert_allclose(cached_keys(kv), torch.stack(cache.keys).numpy(), atol=1e-4)
        np.testing.assert_allclose(cached_values(kv), torch.stack(cache.values).numpy(),
                                   atol=1e-4)
    # B = 1, T = 1 after a cropped batch-1 cache: RoPE positions continue from its length.
    one, _ = runner.step(ids[:1, 5:6].numpy(), kv.rows(np.array([0])).crop(5))
    np.testing.assert_allclose(one[:, 0], ref[:1, 5].numpy(), atol=1e-4)
    with pytest.raises(RescorerError, match="max_seq_len"):
        runner.step(np.zeros((1, MAX_SEQ_LEN), np.int64), kv.rows(np.array([0])).crop(1))
    with pytest.raises(RescorerError, match="rows"):
        runner.step(np.zeros((2, 1), np.int64), kv)
    with pytest.raises(RescorerError, match="output_embedding"):
        OnnxStepRunner(onnx_bytes).logits(one[0])
    # Opset 20 writes GELU as a Gelu node (18, the default, as erf arithmetic): the same graph.
    hidden20, _ = onnx_runner(lm, export_rescorer_bytes(lm, opset=20)).step(
        ids.numpy(), runner.new_cache(3))
    np.testing.assert_allclose(hidden20, ref.numpy(), atol=1e-4)


def test_onnx_buffers_grow_and_rows_crop_keep_every_position():
    """A longer model: the buffers start at 64 positions and grow (copied) as tokens arrive
    one by one; rows (with repeats) and crop-then-overwrite give what torch computes."""
    model = peaky_lm(2, max_seq_len=200)
    runner = onnx_runner(model)
    ids = torch.from_numpy(np.random.default_rng(0).integers(0, VOCAB, (1, 150)))
    with torch.no_grad():
        ref, cache = model.hidden(ids)
    kv = runner.new_cache()
    assert kv.capacity == 0
    capacities = []
    hidden, kv = runner.step(ids[:, :20].numpy(), kv)
    for t in range(20, 150):
        hidden, kv = runner.step(ids[:, t : t + 1].numpy(), kv)
        capacities.append(kv.capacity)
        np.testing.assert_allclose(hidden[0, 0], ref[0, t].numpy(), atol=1e-4)
    assert capacities[0] == 64 and sorted(set(capacities)) == [64, 128, 192]
    assert capacities == sorted(capacities)
    np.testing.assert_allclose(cached_keys(kv), torch.stack(cache.keys).numpy(), atol=1e-4)
    # Rows with repeats, each extended by its own token: batch rows stay independent.
    beam = kv.crop(100).rows(np.array([0, 0, 0]))
    assert beam.batch_size == 3 and beam.length == 100 and beam.keys[0] is not kv.keys[0]
    other = (ids[0, 100:101].numpy() + np.arange(3)) % VOCAB
    hidden, beam = runner.step(other[:, None], beam)
    with torch.no_grad():
        expect, _ = model.hidden(torch.cat((ids[:, :100].expand(3, -1),
                                            torch.from_numpy(other)[:, None]), dim=1))
    np.testing.assert_allclose(hidden[:, 0], expect[:, -1].numpy(), atol=1e-4)
    # Crop, then overwrite the positions after the crop in place.
    short = kv.crop(60)
    assert short.keys[0] is kv.keys[0]
    hidden, short = runner.step(ids[:, 100:102].numpy(), short)
    with torch.no_grad():
        expect, _ = model.hidden(torch.cat((ids[:, :60], ids[:, 100:102]), dim=1))
    np.testing.assert_allclose(hidden, expect[:, 60:].numpy(), atol=1e-4)


def test_log_normaliser_is_the_log_softmax_normaliser():
    rng = np.random.default_rng(16)
    logits = (rng.normal(size=(5, 300)) * 6).astype(np.float32)
    expect = logits.astype(np.float64) - log_softmax(logits)
    np.testing.assert_allclose(log_normaliser(logits), expect[:, 0], rtol=0, atol=1e-6)


def test_onnx_and_torch_choose_the_same_drafts(lm, onnx_rescorer):
    rng = np.random.default_rng(10)
    torch_rescorer = NeuralRescorer(lm, alpha=1.0)
    context = rng.integers(0, VOCAB, 5).tolist()
    for i in range(30):
        lattice = random_lattice(rng, h=int(rng.integers(2, 7)), k=int(rng.integers(1, 9)),
                                 certain_first=i % 5 != 0)
        p = 1 if i % 3 else 3
        a = torch_rescorer.rescore(lattice, context, p=p)
        b = onnx_rescorer.rescore(lattice, context, p=p)
        np.testing.assert_array_equal(a.tokens, b.tokens)
        np.testing.assert_allclose(a.scores, b.scores, atol=1e-4)
        np.testing.assert_allclose(a.lm_scores, b.lm_scores, atol=1e-4)
        assert torch_rescorer.last_stats == onnx_rescorer.last_stats
        # Extend (sometimes by the draft itself), or start a new text now and then.
        context = (context + a.tokens[0, : int(rng.integers(1, 3))].tolist() if i % 7
                   else rng.integers(0, VOCAB, 5).tolist())
        context = context[-30:]


def test_onnx_and_torch_agree_through_buffer_growth_window_jumps_and_resets():
    """A decode loop on a longer LM: the ONNX buffers grow (and are re-made when the window
    jumps); greedy and beam steps, resets, and a new text in between."""
    model = peaky_lm(3, max_seq_len=120)
    rng = np.random.default_rng(17)
    a = NeuralRescorer(model, alpha=1.5, window_stride=16)
    b = NeuralRescorer(model, alpha=1.5, backend="onnx", window_stride=16)
    context = rng.integers(0, VOCAB, 30).tolist()
    capacities = set()
    jumped = False
    for i in range(40):
        lattice = random_lattice(rng, h=6, k=int(rng.integers(2, 7)), certain_first=i % 6 != 1)
        p = 3 if i % 5 == 4 else 1
        x, y = a.rescore(lattice, context, p=p), b.rescore(lattice, context, p=p)
        np.testing.assert_array_equal(x.tokens, y.tokens)
        np.testing.assert_allclose(x.scores, y.scores, atol=1e-4)
        np.testing.assert_allclose(x.lm_scores, y.lm_scores, atol=1e-4)
        assert a.last_stats == b.last_stats
        capacities.add(b._state.capacity)
        jumped = jumped or b.last_stats.window_start > 0
        if i == 20:
            a.reset()
            b.reset()
        if i == 30:  # a new text
            context = rng.integers(0, VOCAB, 10).tolist()
        else:  # accept part of the draft (sometimes all of it, sometimes a correction)
            n = int(rng.integers(1, 7))
            context = context + x.tokens[0, :n].tolist() + ([int(rng.integers(VOCAB))]
                                                            if i % 3 == 0 else [])
    assert len(capacities) >= 2 and max(capacities) <= 120 and jumped


def test_a_certain_first_token_is_fed_with_the_new_context(lm):
    """When the context has uncached tokens and slot 1 holds one arc, they go in one forward."""
    rng = np.random.default_rng(18)
    h = 5
    for backend in ("torch", "onnx"):
        rescorer = NeuralRescorer(lm, backend=backend)
        context = rng.integers(0, VOCAB, 8).tolist()
        rescorer.rescore(random_lattice(rng, h=h, k=4), context)
        assert rescorer.last_stats is not None
        assert rescorer.last_stats.context_fed == 8 and rescorer.last_stats.forwards == h - 1
        batch = rescorer.rescore(random_lattice(rng, h=h, k=4, certain_first=False), context)
        assert rescorer.last_stats.context_fed == 0 and rescorer.last_stats.forwards == h - 1
        nxt = context + batch.tokens[0, :2].tolist()  # cached: no context position fed
        rescorer.rescore(random_lattice(rng, h=h, k=4), nxt)
        assert rescorer.last_stats.context_fed == 0 and rescorer.last_stats.forwards == h - 1
        lattice = random_lattice(rng, h=h, k=4, certain_first=False)
        other = nxt + [int(batch.tokens[0, 0]) + 1]  # one new token, slot 1 uncertain
        fed = rescorer.rescore(lattice, other)
        assert rescorer.last_stats.context_fed == 1 and rescorer.last_stats.forwards == h
        assert_same(fed, *brute_beam(lm, lattice, other, 1.0, p=1), alpha=1.0)


def test_onnx_cache_is_dropped_when_a_call_fails_midway(lm):
    """The ONNX buffers are written in place: a call that fails after writing some positions
    must not leave a cache that claims them."""
    rng = np.random.default_rng(19)
    rescorer = NeuralRescorer(lm, backend="onnx")
    context = rng.integers(0, VOCAB, 9).tolist()
    lattice = random_lattice(rng, h=5, k=4)
    expect = rescorer.rescore(lattice, context)
    runner = rescorer._lm.runner
    real_step = runner.step
    calls = []

    def failing_step(ids, cache):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_step(ids, cache)

    runner.step = failing_step
    other = random_lattice(rng, h=5, k=4)
    with pytest.raises(KeyboardInterrupt):
        rescorer.rescore(other, context)
    runner.step = real_step
    again = rescorer.rescore(lattice, context)
    assert rescorer.last_stats is not None and rescorer.last_stats.reused == 0
    np.testing.assert_array_equal(again.tokens, expect.tokens)
    np.testing.assert_allclose(again.scores, expect.scores, atol=1e-6)
    rescorer.reset()  # and reuse after a plain reset
    assert_same(rescorer.rescore(other, context), *brute_beam(lm, other, context, 1.0, p=1),
                alpha=1.0)
    assert rescorer.last_stats.reused == 0


def test_untied_output_embedding_and_stale_graph_formats(lm, onnx_bytes):
    """An LM with its own lm_head scores with it on both backends; a file that is not a step
    graph of the current format is refused with a hint to re-export."""
    import onnx

    torch.manual_seed(4)
    cfg = BlockwiseConfig.tiny(h=1, vocab_size=VOCAB, max_seq_len=MAX_SEQ_LEN, d_model=32,
                               n_head=2, d_ff=64, tie_embeddings=False)
    model = RescorerLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.normal_(0.0, 1.0)
    rng = np.random.default_rng(20)
    context = rng.integers(0, VOCAB, 6).tolist()
    for p in (1, 3):
        lattice = random_lattice(rng, h=4, k=5)
        x = NeuralRescorer(model).rescore(lattice, context, p=p)
        y = NeuralRescorer(model, backend="onnx").rescore(lattice, context, p=p)
        assert_same(x, *brute_beam(model, lattice, context, 1.0, p=p), alpha=1.0)
        np.testing.assert_array_equal(x.tokens, y.tokens)
        np.testing.assert_allclose(x.scores, y.scores, atol=1e-4)
    proto = onnx.load_from_string(onnx_bytes)
    del proto.metadata_props[:]
    with pytest.raises(RescorerError, match="re-export"):
        OnnxStepRunner(proto.SerializeToString())


def test_onnx_export_is_cached_next_to_a_checkpoint(lm, tmp_path):
    path = export_rescorer_onnx(lm, tmp_path)
    assert path == tmp_path / "rescorer.onnx" and path.is_file()
    stamp = path.stat().st_mtime_ns
    os.utime(path, ns=(stamp - 10**9, stamp - 10**9))
    assert export_rescorer_onnx(lm, tmp_path) == path
    assert path.stat().st_mtime_ns == stamp - 10**9  # same weights: reused, not rewritten
    export_rescorer_onnx(lm, path, opset=20)
    assert path.stat().st_mtime_ns != stamp - 10**9  # another opset: exported again
    os.utime(path, ns=(stamp - 10**9, stamp - 10**9))
    export_rescorer_onnx(peaky_lm(1), path, opset=20)
    assert path.stat().st_mtime_ns != stamp - 10**9  # other weights: exported again
    model_dir = save_model(lm, tmp_path / "model")
    rescorer = NeuralRescorer(model_dir, backend="onnx")
    assert rescorer.onnx_file == model_dir / "rescorer.onnx" and rescorer.onnx_file.is_file()
    rng = np.random.default_rng(11)
    lattice = random_lattice(rng, h=4, k=4)
    ctx = [1, 2, 3]
    np.testing.assert_array_equal(rescorer.rescore(lattice, ctx).tokens,
                                  NeuralRescorer(lm).rescore(lattice, ctx).tokens)


# ---- bad input --------------------------------------------------------------------------------


def test_bad_input_is_a_clear_rescorer_error(lm):
    rescorer = NeuralRescorer(lm)
    lattice = random_lattice(np.random.default_rng(12), h=3, k=3)
    big = SausageLattice(tokens=np.array([[5], [VOCAB + 3]]), scores=np.zeros((2, 1)))
    with pytest.raises(RescorerError, match=f"vocabulary mismatch.*{VOCAB + 3}.*slot 2"):
        rescorer.rescore(big, [1])
    with pytest.raises(RescorerError, match=f"context token id {VOCAB}"):
        rescorer.rescore(lattice, [1, VOCAB])
    with pytest.raises(RescorerError, match="negative token id: -2"):
        rescorer.rescore(lattice, [1, -2])
    for p in (0, -1, 1.5, True, "2"):
        with pytest.raises(RescorerError, match="p must be a positive integer"):
            rescorer.rescore(lattice, [1], p=p)  # type: ignore[arg-type]
    with pytest.raises(RescorerError, match="SausageLattice"):
        rescorer.rescore(lattice.tokens, [1])  # type: ignore[arg-type]
    for alpha in (-0.1, float("nan"), float("inf")):
        with pytest.raises(RescorerError, match="alpha must be a finite number >= 0"):
            NeuralRescorer(lm, alpha=alpha)
    with pytest.raises(RescorerError, match="backend must be one of"):
        NeuralRescorer(lm, backend="jax")
    with pytest.raises(RescorerError, match="must be a RescorerLM"):
        NeuralRescorer(BlockwiseLM(BlockwiseConfig.tiny(vocab_size=VOCAB)))
    with pytest.raises(RescorerError, match="bos_id"):
        NeuralRescorer(lm, bos_id=VOCAB)
    with pytest.raises(RescorerError, match="window_stride"):
        NeuralRescorer(lm, window_stride=0)
    with pytest.raises(RescorerError, match="max_seq_len"):
        long = random_lattice(np.random.default_rng(0), h=MAX_SEQ_LEN + 1, k=1)
        rescorer.rescore(long, [1])
    with pytest.raises(RescorerError, match="not a blockdraft model directory"):
        NeuralRescorer("/nonexistent/model")
    with pytest.raises(RescorerError, match="RescorerLM"):
        export_rescorer_onnx(BlockwiseLM(BlockwiseConfig.tiny(vocab_size=VOCAB)), "x.onnx")


def test_time_step_reports_a_median(lm):
    rng = np.random.default_rng(13)
    lattice = random_lattice(rng, h=4, k=4)
    ms = time_step(NeuralRescorer(lm), lattice, rng.integers(0, VOCAB, 10), repeats=3)
    assert ms > 0
    with pytest.raises(RescorerError, match="repeats"):
        time_step(NeuralRescorer(lm), lattice, [1], repeats=0)


def test_lm_logprobs_helper_is_a_distribution(lm):
    r = lm_logprobs(lm, [1, 2, 3])
    assert r is not None and abs(float(np.exp(r).sum()) - 1) < 1e-9


# ---- larger and other devices -------------------------------------------------------------------


@pytest.mark.slow
def test_small_preset_onnx_agrees_with_torch_at_h9_k16():
    """The CPU model's size (``BlockwiseConfig.small(h=1)``: V = 4096, 512 positions)."""
    torch.manual_seed(0)
    model = RescorerLM(BlockwiseConfig.small(h=1)).eval()
    rng = np.random.default_rng(14)
    a = NeuralRescorer(model)
    b = NeuralRescorer(model, backend="onnx")
    context = rng.integers(0, 4096, 200).tolist()
    for i in range(6):
        lattice = random_lattice(rng, h=9, k=16, vocab=4096, scale=3.0)
        x, y = a.rescore(lattice, context, p=1 + 3 * (i % 2)), b.rescore(lattice, context,
                                                                         p=1 + 3 * (i % 2))
        np.testing.assert_array_equal(x.tokens, y.tokens)
        np.testing.assert_allclose(x.scores, y.scores, atol=1e-3)
        context = context + x.tokens[0, :3].tolist()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_torch_backend_on_cuda_agrees_with_cpu():
    rng = np.random.default_rng(15)
    cpu = NeuralRescorer(peaky_lm(0))
    gpu = NeuralRescorer(peaky_lm(0), device="cuda")
    assert gpu.model.device.type == "cuda"
    context = rng.integers(0, VOCAB, 8).tolist()
    for p in (1, 3):
        lattice = random_lattice(rng, h=5, k=5)
        x, y = cpu.rescore(lattice, context, p=p), gpu.rescore(lattice, context, p=p)
        np.testing.assert_array_equal(x.tokens, y.tokens)
        np.testing.assert_allclose(x.scores, y.scores, atol=1e-3)
    try:
        onnx_gpu = NeuralRescorer(peaky_lm(0), backend="onnx", device="cuda")
    except RescorerError as e:  # a CPU-only onnxruntime: the error says what to install
        assert "onnxruntime-gpu" in str(e)
    else:
        lattice = random_lattice(rng, h=5, k=5)
        np.testing.assert_array_equal(onnx_gpu.rescore(lattice, context).tokens,
                                      cpu.rescore(lattice, context).tokens)
