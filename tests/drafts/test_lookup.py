"""Prompt lookup: the longest recent n-gram match (against brute force), its index against the
pure search, the draft lengths and the drafts of different lengths a combined trie holds
(decoding with it: tests/verify)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockdraft.core.tree import DraftTree
from blockdraft.drafts import CombinedDrafter, DraftError, HeadDrafter, LookupDrafter, StepView
from blockdraft.drafts.lookup import LookupIndex, lookup, lookups
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


def draft(drafter, lat: SausageLattice, context: list[int]) -> DraftTree:  # type: ignore[no-untyped-def]
    return drafter.draft(StepView(lattice=lat, context=np.asarray(context, dtype=np.int64)))


def test_draft_lengths_follow_the_match() -> None:
    drafter = LookupDrafter(lengths=(2, 3, 5))
    #          0  1  2  3  4  5  6  7  8  9 10 11 12
    context = [7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8, 30, 9]
    # the text "... 9" + certain 1: "9 1" occurred at 2-3, then 2 3 4 5 6 (a 2-gram: 3 tokens)
    tree = draft(drafter, lattice(1), context)
    assert tree.to_drafts().tokens.tolist() == [[1, 2, 3, 4]]
    assert tree.label(int(tree.leaves()[0])) == "lookup"
    # "7 8 9" + certain 1 occurred once at 0-3: a 4-gram (longer than 3): 5 tokens
    tree = draft(drafter, lattice(1), [7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    assert tree.to_drafts().tokens.tolist() == [[1, 2, 3, 4, 5, 6]]
    # no earlier occurrence of the certain token: d_1 alone
    alone = draft(drafter, lattice(33), context)
    assert alone.num_nodes == 1 and alone.to_drafts().tokens.tolist() == [[33]]
    assert drafter.needs.heads == 1 and drafter.k == 1
    assert LookupDrafter().name == "lookup(n<=4, L=2/6/10)"


def test_a_combined_trie_holds_drafts_of_different_lengths() -> None:
    combined = CombinedDrafter(HeadDrafter(k=3, p=2), LookupDrafter(lengths=(6,)))
    context = [5, 6, 7, 8, 9, 10, 11, 12, 13, 5]
    tree = draft(combined, lattice(6), context)
    batch = tree.to_drafts()
    assert batch.p == 3 and batch.h == 7
    assert batch.tokens[2].tolist() == [6, 7, 8, 9, 10, 11, 12]
    assert (batch.tokens[:2, 4:] == -1).all() and batch.lengths.tolist() == [4, 4, 7]
    # the tree's labels say which source proposed each draft (was row_source)
    assert [tree.label(int(u)) for u in tree.leaves()] == ["lattice", "lattice", "lookup"]
    assert combined.needs.k == 3 and combined.needs.heads is None  # the heads read every head


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
    assert LookupDrafter(lengths=[3, 5]).sources[0].lengths == (3, 5)  # type: ignore[attr-defined]


def _lookups_of(index: LookupIndex, text: list[int], lo: int, hi: int, count: int
                ) -> list[tuple[int, int]]:
    """The index's answer for ``text`` (its context ``text[:-1]``, the certain ``text[-1]``)."""
    index.sync(np.asarray(text[:-1], dtype=np.int64))
    assert index.text == text[:-1]
    return index.lookups(text[-1], lo, hi, count)


@settings(max_examples=200, deadline=None)
@given(text=st.lists(st.integers(0, 4), min_size=1, max_size=40), lo=st.integers(1, 3),
       extra=st.integers(0, 3), count=st.integers(1, 4), cut=st.integers(1, 40))
def test_the_index_answers_the_pure_lookups(text: list[int], lo: int, extra: int, count: int,
                                            cut: int) -> None:
    """The index grown step by step (each prefix a continuation of the last) answers what the
    pure search of the whole text does, at every step."""
    hi = lo + extra
    index = LookupIndex(max_match=hi)
    for end in sorted({min(cut, len(text)), len(text)}):
        part = text[:end]
        assert _lookups_of(index, part, lo, hi, count) == lookups(
            np.asarray(part, dtype=np.int64), lo, hi, count)


@settings(max_examples=100, deadline=None)
@given(first=st.lists(st.integers(0, 4), min_size=1, max_size=30),
       second=st.lists(st.integers(0, 4), min_size=1, max_size=30), hi=st.integers(1, 4))
def test_the_index_starts_over_on_a_text_that_does_not_continue(
        first: list[int], second: list[int], hi: int) -> None:
    """After a sync on a context that is not a continuation (another prompt, or a shorter or
    edited text), the index is that context's alone: no n-gram of the old text is found."""
    index = LookupIndex(max_match=hi)
    _lookups_of(index, first, 1, hi, 3)
    assert _lookups_of(index, second, 1, hi, 3) == lookups(
        np.asarray(second, dtype=np.int64), 1, hi, 3)
    # a text that edits the last token of the indexed one (same length, not a continuation)
    edited = [*first[:-1], first[-1] + 5]
    index.sync(np.asarray(first, dtype=np.int64))
    assert index.text == first
    assert _lookups_of(index, [*edited, 0], 1, hi, 3) == lookups(
        np.asarray([*edited, 0], dtype=np.int64), 1, hi, 3)


def test_the_drafter_keeps_its_index_across_prompts() -> None:
    """One drafter, two texts in turn: each step's copy is the pure lookup's of its own text."""
    drafter = LookupDrafter(lengths=(3,))
    a = [7, 8, 9, 1, 2, 3, 4, 7, 8]  # certain 9: copies "1 2 3"
    b = [5, 6, 1, 2, 5]  # certain 6: copies "1 2 5"
    for context, certain, want in ((a, 9, [9, 1, 2, 3]), (b, 6, [6, 1, 2, 5]),
                                   (a[:4], 5, [5])):  # 5 is only in b: no copy
        tree = draft(drafter, lattice(certain), context)
        assert tree.to_drafts().tokens.tolist()[0][: len(want)] == want
        assert tree.num_nodes == len(want)


def test_heads_on_demand_answers_from_the_best_copys_match() -> None:
    from blockdraft.drafts.lookup import Copies, HeadsOnDemand

    copies = Copies(copies=2, lengths=(8,), min_match=1, max_match=4)
    gate = HeadsOnDemand(copies, 3)
    context = np.array([5, 6, 7, 8, 9, 1, 2, 5, 6], dtype=np.int64)
    assert not gate(context, 7)  # ... 5 6 7 again: a 3-token match, the copy alone
    assert gate(context, 9)  # "6 9" occurred nowhere, "9" alone: a 1-token match
    assert gate(context, 42)  # no match at all
    assert HeadsOnDemand(copies, 1)(context, 9) is False  # any match is enough at 1
    # the gate's lookup is the source's own: the index now holds the context
    assert copies.index.text == context.tolist()
    with pytest.raises(DraftError, match="at most 4 tokens"):
        HeadsOnDemand(copies, 5)
    with pytest.raises(DraftError, match="heads_on_demand"):
        HeadsOnDemand(Copies(min_match=2), 1)
