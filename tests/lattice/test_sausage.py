"""SausageLattice: construction from logits, validation, paths, p-best 0-gram vs brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from blockdraft.lattice import PAD_TOKEN, LatticeError, SausageLattice, log_softmax


def test_from_logits_keeps_the_top_k_by_log_softmax():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(5, 40))
    lat = SausageLattice.from_logits(logits, k=6, certain_first=False)
    logp = log_softmax(logits)
    for i in range(5):
        order = np.argsort(-logp[i], kind="stable")[:6]
        np.testing.assert_array_equal(lat.tokens[i], order)
        np.testing.assert_allclose(lat.scores[i], logp[i, order])
    np.testing.assert_allclose(np.exp(logp).sum(axis=1), 1.0)


def test_certain_first_keeps_only_the_argmax_in_slot_one():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(4, 30))
    lat = SausageLattice.from_logits(logits, k=5)
    assert lat.counts.tolist() == [1, 5, 5, 5]
    assert lat.tokens[0, 0] == int(np.argmax(logits[0]))
    assert (lat.tokens[0, 1:] == PAD_TOKEN).all() and np.isneginf(lat.scores[0, 1:]).all()
    assert lat.num_paths == 5**3


def test_torch_and_numpy_inputs_agree_and_batch_equals_rows():
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(3, 4, 50)).astype(np.float32)
    batch = SausageLattice.from_logits_batch(torch.from_numpy(logits), k=7)
    for b in range(3):
        one = SausageLattice.from_logits(logits[b], k=7)
        np.testing.assert_array_equal(batch[b].tokens, one.tokens)
        np.testing.assert_allclose(batch[b].scores, one.scores)


def test_ties_are_broken_by_the_smaller_token_id():
    logits = np.zeros((2, 10))  # every token tied
    lat = SausageLattice.from_logits(logits, k=3, certain_first=False)
    assert lat.tokens.tolist() == [[0, 1, 2], [0, 1, 2]]


def test_masked_tokens_become_padding():
    logits = np.full((2, 6), -np.inf)
    logits[0, 2] = 1.0
    logits[1, [1, 4]] = [0.5, 2.0]
    lat = SausageLattice.from_logits(logits, k=3, certain_first=False)
    assert lat.counts.tolist() == [1, 2]
    assert lat.tokens[1, :2].tolist() == [4, 1]


@pytest.mark.parametrize(
    ("logits", "k", "match"),
    [
        (np.zeros((0, 5)), 2, "h = 0"),
        (np.zeros((2, 5)), 6, "exceeds the vocabulary size V = 5"),
        (np.zeros((2, 5)), 0, "positive integer"),
        (np.array([[0.0, np.nan, 1.0]]), 1, "NaN"),
        (np.array([[0.0, np.inf, 1.0]]), 1, r"\+inf"),
        (np.full((2, 3), -np.inf), 1, "every logit of head 1"),
        (np.zeros(5), 1, r"\[h, V\]"),
    ],
)
def test_from_logits_rejects_bad_input(logits, k, match):
    with pytest.raises(LatticeError, match=match):
        SausageLattice.from_logits(logits, k=k)


@pytest.mark.parametrize(
    ("tokens", "scores", "match"),
    [
        ([[1, 1]], [[-1.0, -2.0]], "appears more than once"),
        ([[1, 2]], [[-2.0, -1.0]], "sorted best first"),
        ([[1, -1, 2]], [[-1.0, -np.inf, -2.0]], "padding"),
        ([[-1, -1]], [[-np.inf, -np.inf]], "no arcs"),
        ([[1, 2]], [[-1.0, np.nan]], "NaN"),
        ([[1, -5]], [[-1.0, -2.0]], "negative"),
        ([[1, 2]], [[-1.0]], "does not match"),
        (np.zeros((0, 2), dtype=int), np.zeros((0, 2)), "h >= 1"),
        ([[1.5, 2.0]], [[-1.0, -2.0]], "integer ids"),
        ([[1, 2]], [[-1.0, -np.inf]], "real arc has score -inf"),
    ],
)
def test_constructor_validates(tokens, scores, match):
    with pytest.raises(LatticeError, match=match):
        SausageLattice(tokens=np.asarray(tokens), scores=np.asarray(scores, dtype=float))


def test_lattice_is_immutable():
    lat = SausageLattice.from_logits(np.random.default_rng(0).normal(size=(2, 9)), k=3)
    with pytest.raises(ValueError):
        lat.tokens[0, 0] = 5
    with pytest.raises(AttributeError):
        lat.tokens = np.zeros((2, 3), dtype=np.int64)  # type: ignore[misc]


def test_path_score_and_arc_index():
    lat = SausageLattice(tokens=np.array([[4, 9], [7, 3]]), scores=np.array([[-0.1, -2.0],
                                                                              [-0.5, -0.7]]))
    assert lat.path_score([9, 3]) == pytest.approx(-2.7)
    assert lat.arc_index([4, 3]).tolist() == [0, 1]
    with pytest.raises(LatticeError, match="token 5 is not in slot 2"):
        lat.path_score([4, 5])
    with pytest.raises(LatticeError, match="3 tokens"):
        lat.path_score([4, 7, 3])


def brute_force_paths(lat: SausageLattice):
    slots = [lat.slot(i) for i in range(lat.h)]
    out = []
    for arcs in itertools.product(*[range(len(t)) for t, _ in slots]):
        toks = tuple(int(slots[i][0][a]) for i, a in enumerate(arcs))
        out.append((sum(float(slots[i][1][a]) for i, a in enumerate(arcs)), toks))
    out.sort(key=lambda x: -x[0])
    return out


@settings(max_examples=60, deadline=None)
@given(
    h=st.integers(1, 4),
    k=st.integers(1, 4),
    p=st.integers(1, 300),
    seed=st.integers(0, 10_000),
    certain_first=st.booleans(),
    quantize=st.booleans(),
)
def test_best_paths_equals_brute_force(h, k, p, seed, certain_first, quantize):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(h, 12))
    if quantize:  # many exact ties
        logits = np.round(logits)
    lat = SausageLattice.from_logits(logits, k=k, certain_first=certain_first)
    brute = brute_force_paths(lat)
    got = lat.best_paths(p)
    n = min(p, len(brute))
    assert got.p == n and got.exhausted == (p > len(brute)) and got.requested == p
    np.testing.assert_allclose(got.scores, [b[0] for b in brute[:n]], atol=1e-9)
    assert len({tuple(r) for r in got.tokens.tolist()}) == n
    for row, sc in zip(got.tokens.tolist(), got.scores, strict=True):
        assert lat.path_score(row) == pytest.approx(sc, abs=1e-9)
    assert (got.lm_scores == 0).all() and got.alpha == 0.0


def test_best_paths_one_is_vanilla():
    lat = SausageLattice.from_logits(np.random.default_rng(3).normal(size=(6, 20)), k=4)
    np.testing.assert_array_equal(lat.best_paths(1).tokens[0], lat.vanilla())


def test_best_paths_rejects_bad_p():
    lat = SausageLattice.from_logits(np.zeros((2, 3)), k=2)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(LatticeError, match="p must be a positive integer"):
            lat.best_paths(bad)  # type: ignore[arg-type]


@settings(max_examples=80, deadline=None)
@given(
    h=st.integers(1, 4),
    v=st.integers(1, 40),
    k=st.integers(1, 40),
    seed=st.integers(0, 10_000),
    quantize=st.booleans(),
    masked=st.floats(0.0, 0.8),
    dtype=st.sampled_from([np.float32, np.float64, np.float16]),
)
def test_from_logits_equals_a_full_sort(h, v, k, seed, quantize, masked, dtype):
    """Top k of every slot = a full sort of log_softmax by (score desc, id asc), -inf dropped."""
    k = min(k, v)
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(h, v)) * 3
    if quantize:  # many exact ties, also at the k-th place
        logits = np.round(logits)
    logits[rng.random((h, v)) < masked] = -np.inf
    logits[np.arange(h), rng.integers(0, v, size=h)] = 0.5  # one live token per slot
    logits = logits.astype(dtype)
    lat = SausageLattice.from_logits(logits, k=k, certain_first=False)
    z = logits.astype(np.float64)
    for i in range(h):
        live = np.flatnonzero(np.isfinite(z[i]))
        row = z[i] - (z[i].max() + np.log(np.exp(z[i] - z[i].max()).sum()))
        best = sorted(live.tolist(), key=lambda t, row=row: (-row[t], t))[:k]
        n = len(best)
        assert lat.tokens[i, :n].tolist() == best
        assert (lat.tokens[i, n:] == PAD_TOKEN).all()
        np.testing.assert_allclose(lat.scores[i, :n], row[best], rtol=0, atol=1e-9)
