"""Acceptance criteria on handcrafted logits (each n checked by hand), their properties, and
Criterion validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from blockdraft.verify import CRITERIA, Criterion, VerifyError
from blockdraft.verify.criteria import (
    accepted_length,
    exact_matches,
    token_rank,
    topk_matches,
)

# Base-head logits at the h = 4 input positions of one draft (V = 6). Position j checks the
# draft token d_{2+j}; position 3 follows d_4 and is never checked.
POS = [
    [5.0, 4.0, 3.0, 0.0, 0.0, 0.0],  # argmax 0; 1 is 2nd (gap 1); 2 is 3rd (gap 2)
    [0.0, 0.0, 6.0, 5.5, 0.0, 0.0],  # argmax 2; 3 is 2nd (gap 0.5)
    [0.0, 0.0, 0.0, 0.0, 2.0, 7.0],  # argmax 5; 4 is 2nd (gap 5)
    [1.0, 0.0, 0.0, 0.0, 0.0, 0.0],
]
TOKENS = torch.tensor([
    [3, 1, 2, 4],  # d_2 = 2nd best, d_3 = argmax, d_4 = 2nd best (far)
    [3, 0, 3, 5],  # d_2 = argmax, d_3 = 2nd best (close), d_4 = argmax
])
LOGITS = torch.tensor([POS, POS])  # (p=2, h=4, V=6)


@pytest.mark.parametrize(
    ("criterion", "expected"),
    [
        (Criterion.exact(), [0, 1]),
        (Criterion.topk(1), [0, 1]),
        (Criterion.topk(2), [3, 3]),
        (Criterion.distance(0.5), [0, 1]),
        (Criterion.distance(1), [3, 3]),
        (Criterion.min_block(1), [0, 1]),
        (Criterion.min_block(3), [2, 2]),  # a step yields >= 3 tokens: n >= 2
        (Criterion.min_block(9), [3, 3]),  # capped at the h - 1 = 3 draft tokens
        (Criterion.gadpp(2, 1.0), [2, 3]),  # row 0: d_4's gap 5 > tau
        (Criterion.gadpp(2, 5.0), [3, 3]),
        (Criterion.gadpp(1, 100.0), [0, 1]),
        (Criterion.gadpp(3, 0.7), [0, 3]),  # row 0: d_2's gap 1 > 0.7
    ],
)
def test_criteria_by_hand(criterion: Criterion, expected: list[int]) -> None:
    n = criterion.accept_lengths(TOKENS, LOGITS)
    assert n.dtype == torch.int64 and n.tolist() == expected
    # numpy inputs and log-probs give the same answer
    assert criterion.accept_lengths(TOKENS.numpy(), LOGITS.numpy()).tolist() == expected
    assert criterion.accept_lengths(TOKENS, LOGITS.log_softmax(-1)).tolist() == expected


def test_typical_by_hand() -> None:
    probs = [0.5, 0.3, 0.17, 0.01, 0.01, 0.01]
    entropy = -sum(q * math.log(q) for q in probs)  # 1.147 nats
    logits = torch.log(torch.tensor(probs)).expand(3, 1, 4, 6).reshape(3, 4, 6).clone()
    tokens = torch.tensor([[0, 2, 2, 2], [0, 1, 0, 3], [0, 0, 1, 2]])
    # delta exp(-H) = 0.3 * 0.318 = 0.095 < eps = 0.25: tokens with P > 0.095 pass (0, 1, 2)
    assert 0.3 * math.exp(-entropy) < 0.25
    assert Criterion.typical(0.25, 0.3).accept_lengths(tokens, logits).tolist() == [3, 2, 3]
    # delta = 1: min(0.25, 0.318) = 0.25: only P(0) = 0.5 and P(1) = 0.3 pass
    assert Criterion.typical(0.25, 1.0).accept_lengths(tokens, logits).tolist() == [0, 2, 2]


def test_ties_go_to_the_smaller_id() -> None:
    logits = torch.tensor([[[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]])  # (1, 2, 3): 0 and 1 tie
    assert exact_matches(torch.tensor([[0]]), logits[:, :1]).item()
    assert not exact_matches(torch.tensor([[1]]), logits[:, :1]).item()
    assert token_rank(torch.tensor([[0, 2], [1, 1]]), logits.expand(2, 2, 3)).tolist() == [
        [0, 2], [1, 1]
    ]
    assert not topk_matches(torch.tensor([[1]]), logits[:, :1], 1).item()
    assert topk_matches(torch.tensor([[1]]), logits[:, :1], 2).item()


def test_accepted_length_is_the_leading_run() -> None:
    m = torch.tensor([[True, True, False, True], [False, True, True, True],
                      [True, True, True, True]])
    assert accepted_length(m).tolist() == [2, 0, 4]


def test_a_block_of_one_accepts_nothing() -> None:
    for c in (Criterion.exact(), Criterion.topk(5), Criterion.min_block(4)):
        assert c.accept_lengths(torch.tensor([[3], [1]]), torch.zeros(2, 1, 6)).tolist() == [0, 0]


@settings(max_examples=60, deadline=None)
@given(p=st.integers(1, 4), h=st.integers(1, 6), v=st.integers(2, 8), seed=st.integers(0, 10**6),
       lo=st.integers(1, 3), l=st.integers(1, 8))
def test_topk1_is_exact_and_min_block_floor(  # noqa: E741
    p: int, h: int, v: int, seed: int, lo: int, l: int  # noqa: E741
) -> None:
    rng = np.random.default_rng(seed)
    logits = torch.tensor(rng.integers(0, lo + 1, size=(p, h, v)), dtype=torch.float32)  # ties
    tokens = torch.tensor(rng.integers(0, v, size=(p, h)))
    exact = Criterion.exact().accept_lengths(tokens, logits)
    assert torch.equal(Criterion.topk(1).accept_lengths(tokens, logits), exact)
    assert torch.equal(Criterion.gadpp(1, 10.0).accept_lengths(tokens, logits), exact)
    assert torch.equal(Criterion.distance(0.9).accept_lengths(tokens, logits), exact)
    n = Criterion.min_block(l).accept_lengths(tokens, logits)
    assert (1 + n >= min(l, h)).all() and (n <= h - 1).all() and (n >= exact).all()
    # wider criteria accept at least as much as exact
    assert (Criterion.topk(2).accept_lengths(tokens, logits) >= exact).all()


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Criterion.topk(0), r"k must be an integer >= 1, got 0"),
        (lambda: Criterion.topk(1.5), r"k must be an integer, got 1.5"),
        (lambda: Criterion.topk(True), r"k must be a number, got True"),
        (lambda: Criterion.distance(-1), r"eps must be >= 0, got -1"),
        (lambda: Criterion.distance(float("nan")), r"eps must be finite"),
        (lambda: Criterion.min_block(0), r"l must be an integer >= 1, got 0"),
        (lambda: Criterion.gadpp(0, 1.0), r"beta must be an integer >= 1, got 0"),
        (lambda: Criterion.gadpp(2, -0.5), r"tau must be >= 0, got -0.5"),
        (lambda: Criterion.typical(0.0, 0.3), r"eps is a probability threshold in \(0, 1\]"),
        (lambda: Criterion.typical(1.5, 0.3), r"got 1.5"),
        (lambda: Criterion.typical(0.1, 0.0), r"delta must be > 0"),
        (lambda: Criterion("nope"), r"unknown acceptance criterion 'nope'"),
        (lambda: Criterion("topk"), r"topk needs parameter\(s\) \['k'\]"),
        (lambda: Criterion("exact", {"k": 2}), r"exact takes parameters none, got unknown"),
        (lambda: Criterion.parse("topk:k"), r"expected key=value, got 'k'"),
        (lambda: Criterion.parse("topk:k=two"), r"k must be a number, got 'two'"),
        (lambda: Criterion.parse(3), r"got 3"),  # type: ignore[arg-type]
    ],
)
def test_invalid_parameters_are_named(build, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(VerifyError, match=message):
        build()
    assert issubclass(VerifyError, ValueError)


def test_parse_round_trip_and_lossless() -> None:
    for c in (Criterion.exact(), Criterion.topk(4), Criterion.distance(2.5), Criterion.min_block(3),
              Criterion.gadpp(5, 3.0), Criterion.typical(0.09, 0.3)):
        assert Criterion.parse(str(c)) == c
        assert c.name in CRITERIA
    assert Criterion.parse("gad++:beta=5,tau=3") == Criterion.gadpp(5, 3.0)
    assert Criterion("topk", {"k": 4}) == Criterion("topk", (("k", 4),)) == Criterion.topk(4)
    assert Criterion.parse("topk:k=4").kwargs == {"k": 4}
    lossless = [Criterion.exact(), Criterion.topk(1), Criterion.distance(0.5),
                Criterion.min_block(1), Criterion.gadpp(1, 2.0)]
    lossy = [Criterion.topk(2), Criterion.distance(1), Criterion.min_block(2),
             Criterion.gadpp(2, 2.0), Criterion.typical(0.09, 0.3)]
    assert all(c.lossless for c in lossless) and not any(c.lossless for c in lossy)
    assert hash(Criterion.topk(4)) == hash(Criterion.parse("topk:k=4"))


def test_mismatched_shapes_and_ids() -> None:
    with pytest.raises(VerifyError, match=r"logits must be \[p, h, V\]"):
        Criterion.exact().accept_lengths(TOKENS, LOGITS[:, :3])
    with pytest.raises(VerifyError, match="outside the vocabulary"):
        Criterion.topk(2).accept_lengths(torch.tensor([[0, 6]]), torch.zeros(1, 2, 6))


# ---- item 2 of "Nothing lost, nothing silently wrong": parameters the model cannot meet
def test_criterion_refuses_a_repeated_parameter():
    with pytest.raises(VerifyError, match="k is given twice"):
        Criterion.parse("topk:k=4,k=5")
    with pytest.raises(VerifyError, match="tau is given twice"):
        Criterion.parse("gadpp:beta=2,tau=1,tau=2")
    assert Criterion.parse("topk:k=4") == Criterion.topk(4)


def test_criterion_ranges_are_checked_against_the_model(random_model):
    from blockdraft.verify import Verifier

    model = random_model(vocab=64, h=4)
    with pytest.raises(VerifyError, match=r"topk\(k=99999\).*\[1, 64\]"):
        Verifier(model, "topk:k=99999")
    with pytest.raises(VerifyError, match=r"gadpp\(beta=65\).*\[1, 64\]"):
        Verifier(model, "gadpp:beta=65,tau=1")
    with pytest.raises(VerifyError, match=r"min_block\(l=100\).*h = 4.*\[1, 4\]"):
        Verifier(model, "min_block:l=100")
    Verifier(model, "topk:k=64")
    Verifier(model, "min_block:l=4")


def test_tree_acceptance_checks_k_against_the_logits():
    import torch

    from blockdraft.drafts import DraftTree
    from blockdraft.verify.acceptance import tree_accepted

    tree = DraftTree(tokens=np.array([1, 2]), parents=np.array([-1, 0]), scores=np.zeros(2))
    with pytest.raises(VerifyError, match=r"\[1, 8\]"):
        tree_accepted(tree, torch.zeros(tree.num_nodes, 8), "topk:k=9")
