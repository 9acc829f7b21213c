"""Input-guided drafting: unique, ambiguous and absent matches; the combined drafter."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from blockdraft.core.tree import DraftTree
from blockdraft.drafts import DraftError, HeadDrafter, StepView
from blockdraft.drafts.iad import CombinedDrafter, InputCopyDrafter, input_copy, input_match
from blockdraft.lattice import SausageLattice

V = 40
#         0   1   2   3   4   5   6   7   8   9  10
PROMPT = [10, 11, 12, 13, 14, 20, 21, 10, 11, 15, 16]  # "10 11" twice, then 12 / then 15
P = np.asarray(PROMPT, dtype=np.int64)


def lattice(certain: int, h: int = 4, k: int = 3, seed: int = 0) -> SausageLattice:
    """A random h-slot lattice whose slot 1 (the certain token) is ``certain``; heads 2..h
    prefer tokens 30, 31, ... (never in the prompt)."""
    logits = np.random.default_rng(seed).normal(size=(h, V))
    logits[0, certain] = 10.0
    for i in range(1, h):
        logits[i, 29 + i] = 10.0
    return SausageLattice.from_logits(logits, k)


def match(committed: Sequence[int], min_match: int = 2, prompt: np.ndarray = P) -> int | None:
    return input_match(prompt, committed, min_match)


def copy(lat: SausageLattice, context: Sequence[int], min_match: int = 2) -> np.ndarray | None:
    return input_copy(P, lat, np.asarray(context, dtype=np.int64), min_match)


def draft(drafter, lat: SausageLattice, context: Sequence[int],  # type: ignore[no-untyped-def]
          prompt_length: int = 0) -> DraftTree:
    return drafter.draft(StepView(lattice=lat, context=np.asarray(context, dtype=np.int64),
                                  prompt_length=prompt_length))


def leaf_labels(tree: DraftTree) -> list[str]:
    """Which source proposed each draft's last token (the drafts in order)."""
    return [tree.label(int(leaf)) for leaf in tree.leaves()]


def test_unique_match_copies_what_follows() -> None:
    # committed "... 13 14": occurs once (positions 3-4), followed by 20 21 10
    assert match([1, 2, 13, 14]) == 5
    row = copy(lattice(14), [1, 2, 13])
    assert row is not None and row.tolist() == [14, 20, 21, 10]
    tree = draft(InputCopyDrafter(PROMPT, min_match=2), lattice(14), [1, 2, 13])
    drafts = tree.to_drafts()
    assert drafts.p == 1 and drafts.tokens[0].tolist() == [14, 20, 21, 10]
    assert leaf_labels(tree) == ["iad"]
    assert drafts.scores[0] == -np.inf  # 20 is not among slot 2's top 3
    # "21 10 11" is unique although "10 11" is not: a longer suffix disambiguates
    assert match([21, 10, 11]) == 9
    # the prompt runs out after "15": the rest of the block is the heads' vanilla draft
    lat = lattice(15)
    got = copy(lat, [10, 11])
    assert got is not None and got.tolist() == [15, 16, *lat.vanilla()[2:].tolist()]
    # without a prompt of its own, the drafter copies from the step's prompt
    own = draft(InputCopyDrafter(min_match=2), lattice(14), [*PROMPT, 1, 2, 13],
                prompt_length=len(PROMPT))
    assert own.to_drafts().tokens.tolist() == [[14, 20, 21, 10]]
    assert leaf_labels(own) == ["iad"]


def test_ambiguous_and_absent_matches_draft_nothing() -> None:
    assert match([10, 11]) is None  # twice in the prompt, nothing longer to compare
    assert match([5, 10, 11]) is None  # "5 10 11" is nowhere
    assert match([3, 4]) is None  # not in the prompt at all
    assert match([15, 16]) is None  # only at the very end: nothing follows to copy
    assert match([14]) is None  # shorter than min_match
    assert match([99, 14]) is None  # "14" is unique but "99 14" does not match
    assert match([99, 14], min_match=1) == 5
    assert copy(lattice(3), [4]) is None
    InputCopyDrafter([7])  # a valid prompt, but
    assert match([7, 7], prompt=np.array([7])) is None  # a one-token prompt has no follower


def test_draft_falls_back_to_vanilla() -> None:
    iad = InputCopyDrafter(PROMPT)
    lat = lattice(3)
    fallback = draft(iad, lat, [4])
    assert fallback.to_drafts().tokens.tolist() == [lat.vanilla().tolist()]
    assert leaf_labels(fallback) == ["lattice"]
    assert leaf_labels(draft(iad, lattice(14), [13])) == ["iad"]
    assert iad.k == 1 and iad.needs.k == 1 and iad.name == "iad(m>=2)"


def test_combined_appends_one_labelled_row() -> None:
    heads = HeadDrafter(k=3, p=2)
    combined = CombinedDrafter(heads, InputCopyDrafter(PROMPT))
    lat = lattice(14)
    tree = draft(combined, lat, [12, 13])
    batch = tree.to_drafts()
    base = draft(heads, lat, [12, 13]).to_drafts()
    assert batch.p == 3
    np.testing.assert_array_equal(batch.tokens[:2], base.tokens)
    assert batch.tokens[2].tolist() == [14, 20, 21, 10]
    assert batch.scores[2] == -np.inf and np.all(np.diff(batch.scores) <= 0)
    # the tree's labels say which source proposed each draft (was row_source)
    assert leaf_labels(tree) == ["lattice", "lattice", "iad"]
    assert combined.k == 3 and combined.name == "2-best 0-gram (k=3) + iad(m>=2)"
    # no match: the heads' drafts unchanged
    alone = draft(combined, lattice(3), [4])
    assert alone.to_drafts().tokens.tolist() == draft(heads, lattice(3), [4]).to_drafts(
        ).tokens.tolist()
    assert set(alone.labels or ()) == {"lattice"}
    assert leaf_labels(draft(heads, lat, [12, 13]))[1] == "lattice"


def test_combined_skips_a_copy_the_heads_already_drafted() -> None:
    logits = np.full((3, V), -5.0)
    logits[0, 14], logits[1, 20], logits[2, 21] = 10.0, 10.0, 10.0  # heads agree with the copy
    lat = SausageLattice.from_logits(logits, 2)
    tree = draft(CombinedDrafter(HeadDrafter(k=2, p=1), InputCopyDrafter(PROMPT)), lat, [13])
    assert tree.to_drafts().p == 1 and set(tree.labels or ()) == {"lattice"}
    only = draft(InputCopyDrafter(PROMPT), lat, [13])
    assert only.to_drafts().tokens.tolist() == [[14, 20, 21]] and leaf_labels(only) == ["iad"]
    assert only.to_drafts().scores[0] == pytest.approx(lat.path_score([14, 20, 21]))


def test_bad_input() -> None:
    with pytest.raises(DraftError, match="non-empty prompt"):
        InputCopyDrafter([])
    with pytest.raises(DraftError, match="min_match must be an integer >= 1, got 0"):
        InputCopyDrafter(PROMPT, min_match=0)
    with pytest.raises(DraftError, match="1-D"):
        InputCopyDrafter([[1, 2]])
    with pytest.raises(DraftError, match="negative"):
        InputCopyDrafter([1, -2])
    with pytest.raises(DraftError, match="heads must be a drafter .* got object"):
        CombinedDrafter(object(), InputCopyDrafter(PROMPT))  # type: ignore[arg-type]
    with pytest.raises(DraftError, match="copy must be a drafter .*InputCopyDrafter.* got "
                                         "object"):
        CombinedDrafter(HeadDrafter(), object())  # type: ignore[arg-type]
