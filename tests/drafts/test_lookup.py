"""Prompt lookup: the longest recent n-gram match (against brute force), the draft lengths and
the rows of different lengths a combined batch holds (decoding with it: tests/verify)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockdraft.drafts import CombinedDrafter, DraftError, HeadDrafter, LookupDrafter
from blockdraft.drafts.iad import row_source
from blockdraft.drafts.lookup import lookup
from blockdraft.lattice import SausageLattice

V = 40


def brute(text: list[int], lo: int, hi: int) -> tuple[int, int] | None:
    """The rule, spelled out: longest n in [lo, hi] with an earlier occurrence followed by a
    token; its latest such occurrence."""
    for n in range(min(hi, len(text) - 1), lo - 1, -1):
        tail = text[-n:]
        ends = [e for e in range(n, len(text)) if text[e - n:e] == tail]  # e < len(text)
        if ends:
            return ends[-1], n
    return None


@settings(max_examples=300, deadline=None)
@given(text=st.lists(st.integers(0, 4), min_size=1, max_size=30), lo=st.integers(1, 3),
       extra=st.integers(0, 3))
def test_the_match_is_the_brute_force_one(text: list[int], lo: int, extra: int) -> None:
    assert lookup(np.asarray(text), lo, lo + extra) == brute(text, lo, lo + extra)


def lattice(certain: int, h: int = 4, k: int = 3) -> SausageLattice:
    logits = np.random.default_rng(0).normal(size=(h, V))
    logits[0, certain] = 10.0
    return SausageLattice.from_logits(logits, k)


def test_draft_lengths_follow_the_match() -> None:
    drafter = LookupDrafter(lengths=(2, 3, 5))
    #          0  1  2  3  4  5  6  7  8  9 10 11 12
    context = [7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8, 30, 9]
    # the text "... 9" + certain 1: "9 1" occurred at 2-3, then 2 3 4 5 6 (a 2-gram: 3 tokens)
    row = drafter.copy(lattice(1), context)
    assert row is not None and row.source == "lookup"
    assert row.tokens[0].tolist() == [1, 2, 3, 4]
    # "7 8 9" + certain 1 occurred once at 0-3: a 4-gram (longer than 3): 5 tokens
    row = drafter.copy(lattice(1), [7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    assert row is not None and row.tokens[0].tolist() == [1, 2, 3, 4, 5, 6]
    # no earlier occurrence of the certain token: d_1 alone
    assert drafter.copy(lattice(33), context) is None
    alone = drafter.propose(lattice(33), context)
    assert alone.tokens.tolist() == [[33]] and drafter.heads_needed == 1 and drafter.k == 1
    assert LookupDrafter().name == "lookup(n<=4, L=2/6/10)"


def test_a_combined_batch_holds_rows_of_different_lengths() -> None:
    combined = CombinedDrafter(HeadDrafter(k=3, p=2), LookupDrafter(lengths=(6,)))
    context = [5, 6, 7, 8, 9, 10, 11, 12, 13, 5]
    batch = combined.propose(lattice(6), context)
    assert batch.p == 3 and batch.h == 7 and batch.source == "lattice+lookup"
    assert batch.tokens[2].tolist() == [6, 7, 8, 9, 10, 11, 12]
    assert (batch.tokens[:2, 4:] == -1).all() and batch.lengths.tolist() == [4, 4, 7]
    assert [row_source(batch, j) for j in range(3)] == ["lattice", "lattice", "lookup"]


def test_bad_settings() -> None:
    with pytest.raises(DraftError, match="max_match must be an integer >= 2, got 1"):
        LookupDrafter(min_match=2, max_match=1)
    with pytest.raises(DraftError, match="every entry of lengths must be an integer >= 1"):
        LookupDrafter(lengths=(2, 0))
    with pytest.raises(DraftError, match="at least one"):
        LookupDrafter(lengths=())


def test_lengths_must_be_a_sequence() -> None:
    from blockdraft.core.batch import DraftError
    from blockdraft.drafts import LookupDrafter

    for bad in (5, "2,6", None):
        with pytest.raises(DraftError, match="lengths must be a sequence"):
            LookupDrafter(lengths=bad)  # type: ignore[arg-type]
    assert LookupDrafter(lengths=[3, 5]).lengths == (3, 5)
