"""DraftBatch validation and HeadDrafter strategies."""

from __future__ import annotations

import numpy as np
import pytest

from blockdraft.drafts import DraftBatch, DraftError, HeadDrafter, StepView, vanilla
from blockdraft.lattice import SausageLattice


def rows(drafter, lattice: SausageLattice, context=()) -> DraftBatch:  # type: ignore[no-untyped-def]
    """The drafter's drafts of one step: its tree's root-to-leaf paths (a trie of p drafts
    gives its rows back, in order)."""
    view = StepView(lattice=lattice, context=np.asarray(context, dtype=np.int64))
    return drafter.draft(view).to_drafts()


def make_batch(p=3, h=4, **kw):
    scores = -np.arange(p, dtype=float)
    return DraftBatch(tokens=np.arange(p * h).reshape(p, h), scores=scores,
                      head_scores=scores, lm_scores=np.zeros(p), **kw)


def test_batch_is_validated_and_read_only():
    b = make_batch()
    assert (b.p, b.h, len(b), b.requested, b.exhausted) == (3, 4, 3, 3, False)
    with pytest.raises(ValueError):
        b.tokens[0, 0] = 1
    assert make_batch(requested=5).exhausted
    with pytest.raises(DraftError, match=r"shape \(3,\)"):
        DraftBatch(tokens=np.zeros((3, 2), dtype=int), scores=np.zeros(2),
                   head_scores=np.zeros(3), lm_scores=np.zeros(3))
    with pytest.raises(DraftError, match="non-empty"):
        DraftBatch(tokens=np.zeros((0, 2), dtype=int), scores=np.zeros(0),
                   head_scores=np.zeros(0), lm_scores=np.zeros(0))
    with pytest.raises(DraftError, match="integers"):
        DraftBatch(tokens=np.zeros((1, 2)), scores=np.zeros(1), head_scores=np.zeros(1),
                   lm_scores=np.zeros(1))
    with pytest.raises(DraftError, match="NaN"):
        DraftBatch(tokens=np.zeros((1, 2), dtype=int), scores=np.array([np.nan]),
                   head_scores=np.zeros(1), lm_scores=np.zeros(1))


def test_top_keeps_order():
    b = make_batch(p=4).top(2)
    assert b.p == 2 and b.tokens[1, 0] == 4 and b.requested == 2


def test_head_drafter_vanilla_and_pbest():
    rng = np.random.default_rng(0)
    lat = SausageLattice.from_logits(rng.normal(size=(5, 30)), k=8)
    v = rows(vanilla(), lat)
    assert v.p == 1
    np.testing.assert_array_equal(v.tokens[0], lat.vanilla())
    d = rows(HeadDrafter(k=4, p=6), lat)
    assert d.p == 6 and (np.isin(d.tokens[:, 1:], lat.tokens[1:, :4])).all()
    # the trie of the p best gives back the p best paths, in order
    assert d.tokens.tolist() == SausageLattice(
        tokens=lat.tokens[:, :4], scores=lat.scores[:, :4]).best_paths(6).tokens.tolist()
    assert "6-best 0-gram" in HeadDrafter(k=4, p=6).name
    assert HeadDrafter(k=4, p=6).needs.k == 4 and HeadDrafter(k=4, p=6).k == 4
    with pytest.raises(DraftError, match="positive integer"):
        HeadDrafter(k=0)


def test_head_drafter_refuses_a_lattice_narrower_than_its_k():
    lat = SausageLattice.from_logits(np.random.default_rng(0).normal(size=(5, 30)), k=8)
    with pytest.raises(DraftError, match="needs a lattice of width k >= 16"):
        rows(HeadDrafter(k=16, p=3), lat)
