"""Input-guided drafting: unique, ambiguous and absent matches; the combined drafter."""

from __future__ import annotations

import numpy as np
import pytest

from blockdraft.drafts import DraftBatch, DraftError, HeadDrafter
from blockdraft.drafts.iad import CombinedDrafter, InputCopyDrafter, row_source
from blockdraft.lattice import SausageLattice

V = 40
#         0   1   2   3   4   5   6   7   8   9  10
PROMPT = [10, 11, 12, 13, 14, 20, 21, 10, 11, 15, 16]  # "10 11" twice, then 12 / then 15


def lattice(certain: int, h: int = 4, k: int = 3, seed: int = 0) -> SausageLattice:
    """A random h-slot lattice whose slot 1 (the certain token) is ``certain``; heads 2..h
    prefer tokens 30, 31, ... (never in the prompt)."""
    logits = np.random.default_rng(seed).normal(size=(h, V))
    logits[0, certain] = 10.0
    for i in range(1, h):
        logits[i, 29 + i] = 10.0
    return SausageLattice.from_logits(logits, k)


def test_unique_match_copies_what_follows() -> None:
    iad = InputCopyDrafter(PROMPT, min_match=2)
    # committed "... 13 14": occurs once (positions 3-4), followed by 20 21 10
    assert iad.match([1, 2, 13, 14]) == 5
    draft = iad.copy(lattice(14), [1, 2, 13])
    assert draft is not None and draft.source == "iad" and draft.p == 1
    assert draft.tokens[0].tolist() == [14, 20, 21, 10]
    assert draft.head_scores[0] == -np.inf  # 20 is not among slot 2's top 3
    # "21 10 11" is unique although "10 11" is not: a longer suffix disambiguates
    assert iad.match([21, 10, 11]) == 9
    # the prompt runs out after "15": the rest of the block is the heads' vanilla draft
    lat = lattice(15)
    assert iad.copy(lat, [10, 11]).tokens[0].tolist() == [15, 16, *lat.vanilla()[2:].tolist()]


def test_ambiguous_and_absent_matches_draft_nothing() -> None:
    iad = InputCopyDrafter(PROMPT, min_match=2)
    assert iad.match([10, 11]) is None  # twice in the prompt, nothing longer to compare
    assert iad.match([5, 10, 11]) is None  # "5 10 11" is nowhere
    assert iad.match([3, 4]) is None  # not in the prompt at all
    assert iad.match([15, 16]) is None  # only at the very end: nothing follows to copy
    assert iad.match([14]) is None  # shorter than min_match
    assert iad.match([99, 14]) is None  # "14" is unique but "99 14" does not match
    assert InputCopyDrafter(PROMPT, min_match=1).match([99, 14]) == 5
    assert iad.copy(lattice(3), [4]) is None
    assert InputCopyDrafter([7]).match([7, 7]) is None  # a one-token prompt has no follower


def test_propose_falls_back_to_vanilla() -> None:
    iad = InputCopyDrafter(PROMPT)
    lat = lattice(3)
    fallback = iad.propose(lat, [4])
    assert fallback.source == "lattice" and fallback.tokens[0].tolist() == lat.vanilla().tolist()
    assert iad.propose(lattice(14), [13]).source == "iad"
    assert iad.k == 1 and iad.name == "iad(m>=2)"


def test_combined_appends_one_labelled_row() -> None:
    heads = HeadDrafter(k=3, p=2)
    combined = CombinedDrafter(heads, InputCopyDrafter(PROMPT))
    lat = lattice(14)
    batch = combined.propose(lat, [12, 13])
    base = heads.propose(lat, [12, 13])
    assert isinstance(batch, DraftBatch) and batch.p == 3 and batch.source == "lattice+iad"
    np.testing.assert_array_equal(batch.tokens[:2], base.tokens)
    assert batch.tokens[2].tolist() == [14, 20, 21, 10]
    assert batch.scores[2] == -np.inf and np.all(np.diff(batch.scores) <= 0)
    assert batch.requested == 3 and not batch.exhausted
    assert [row_source(batch, j) for j in range(3)] == ["lattice", "lattice", "iad"]
    assert combined.k == 3 and combined.name == "2-best 0-gram (k=3) + iad(m>=2)"
    # no match: the heads' batch unchanged
    assert combined.propose(lattice(3), [4]).source == "lattice"
    assert row_source(base, 1) == "lattice"


def test_combined_skips_a_copy_the_heads_already_drafted() -> None:
    logits = np.full((3, V), -5.0)
    logits[0, 14], logits[1, 20], logits[2, 21] = 10.0, 10.0, 10.0  # heads agree with the copy
    lat = SausageLattice.from_logits(logits, 2)
    batch = CombinedDrafter(HeadDrafter(k=2, p=1), InputCopyDrafter(PROMPT)).propose(lat, [13])
    assert batch.p == 1 and batch.source == "lattice"
    only = InputCopyDrafter(PROMPT).copy(lat, [13])
    assert only is not None and only.head_scores[0] == pytest.approx(lat.path_score([14, 20, 21]))


def test_bad_input() -> None:
    with pytest.raises(DraftError, match="non-empty prompt"):
        InputCopyDrafter([])
    with pytest.raises(DraftError, match="min_match must be an integer >= 1, got 0"):
        InputCopyDrafter(PROMPT, min_match=0)
    with pytest.raises(DraftError, match="1-D"):
        InputCopyDrafter([[1, 2]])
    with pytest.raises(DraftError, match="negative"):
        InputCopyDrafter([1, -2])
    with pytest.raises(DraftError, match="propose"):
        CombinedDrafter(object(), InputCopyDrafter(PROMPT))  # type: ignore[arg-type]
    with pytest.raises(DraftError, match="InputCopyDrafter"):
        CombinedDrafter(HeadDrafter(), object())  # type: ignore[arg-type]
