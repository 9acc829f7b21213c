"""Prompt lookup: draft what followed the latest occurrence of the text's last few tokens.

See docs/definitions.md sec. 9. The committed text (the prompt, what was generated, and the
certain token ``d_1``) ends with some n-gram; when that n-gram occurred earlier in the text,
the tokens that followed its occurrence are a good guess of what comes next (summaries, QA,
translation, code and rewriting copy spans of the input; generations repeat themselves).

The rule (measured against transformers' prompt lookup on the benchmark's chat tasks, see the
README): the LONGEST suffix n-gram of the text, ``max_match >= n >= min_match`` tokens, that
occurred before; its MOST RECENT earlier occurrence; and a draft whose length grows with ``n``
(a one-token match is a weak hint: a short draft; a three-token match copies a long span):
``lengths[n - 1]`` tokens (the last entry for longer matches). transformers takes the first
occurrence of a 2- or 1-gram and always drafts 10 tokens. Without a match the draft is ``d_1``
alone: the step costs one greedy token, no guess of the heads' is verified. Ranked copies
(:func:`lookups`) add the next most recent occurrences whose continuations differ, then those of
shorter matches: a token tree's distinct branches.

The source keeps an index of the text's n-grams (:class:`LookupIndex`), extended by the tokens
each verification commits (:meth:`Copies.observe`), so a step reads the occurrences of its
suffix instead of scanning the text; it gives exactly :func:`lookups`' copies (tested).

Public surface:
    lookup(text, min_match, max_match) -> (start, n) | None     the match, pure
    lookups(text, min_match, max_match, count) -> [(start, n), ...]   ranked matches, pure
    LookupIndex(max_match)         mutable: .sync(context), .lookups(certain, min, max, count)
    Copies(copies=1, lengths=(2, 6, 10), min_match=1, max_match=4)   a source; .found(context,
                                   certain, count): its ranked copy starts
    HeadsOnDemand(copies, match)   the gate: heads only when no copy matched ``match`` tokens
    LookupDrafter(min_match=1, max_match=4, lengths=(2, 6, 10), name="") -> Pipeline
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from blockdraft.core.batch import DraftError
from blockdraft.core.checks import check_int
from blockdraft.drafts.pipeline import Pipeline
from blockdraft.drafts.protocol import Feedback, Needs, StepView
from blockdraft.drafts.trie import Trie

LOOKUP_SOURCE = "lookup"
"""The label of prompt lookup's nodes."""
DEFAULT_LENGTHS = (2, 6, 10)
"""Draft tokens after a 1-, 2- and 3+-token match: the best of the settings tried on the
benchmark's chat tasks under ONNX Runtime's float32 cost curve on a 2-core CPU (a forward over
T tokens costs about 1 + 0.075 (T - 1) one-token forwards); on a GPU, where a forward over 16
tokens costs what one does, longer drafts pay (e.g. ``(10, 12, 16)``)."""


def lookup(text: np.ndarray, min_match: int, max_match: int) -> tuple[int, int] | None:
    """Where the copy starts: ``(start, n)`` for the longest suffix n-gram of ``text``
    (``max_match >= n >= min_match``) that occurs earlier with a token after it, at its most
    recent such occurrence (``text[start - n : start] == text[-n:]``, ``start < len(text)``),
    or None when even the shortest suffix occurs nowhere before.
    """
    found = lookups(text, min_match, max_match, 1)
    return found[0] if found else None


def lookups(text: np.ndarray, min_match: int, max_match: int, count: int
            ) -> list[tuple[int, int]]:
    """Up to ``count`` copy starts ``(start, n)``, ranked: first :func:`lookup`'s (the longest
    suffix match, its most recent occurrence), then the next most recent occurrences of that
    match whose continuation ``text[start]`` differs from every one taken, then those of
    shorter matches (down to ``min_match``). Distinct continuations make distinct copies (a
    token tree's distinct branches)."""
    size = int(text.size)
    if size < 2:
        return []
    by_n: list[np.ndarray] = []  # exclusive ends of the n-gram matches, n = 1, 2, ...
    ends = np.flatnonzero(text[:-1] == text[-1]) + 1
    n = 1
    while ends.size and n <= min(max_match, size - 1):
        by_n.append(ends)
        n += 1
        ends = ends[ends >= n]
        ends = ends[text[ends - n] == text[-n]]
    return _ranked([e[::-1].tolist() for e in by_n], text, min_match, count)


def _ranked(recent_first: list[list[int]], text: np.ndarray | list[int], min_match: int,
            count: int) -> list[tuple[int, int]]:
    """The ranked copies from each match length's occurrence ends (most recent first)."""
    out: list[tuple[int, int]] = []
    taken: set[int] = set()
    for n in range(len(recent_first), min_match - 1, -1):
        for end in recent_first[n - 1]:
            nxt = int(text[end])
            if nxt not in taken:
                taken.add(nxt)
                out.append((end, n))
                if len(out) == count:
                    return out
    return out


class LookupIndex:
    """The n-grams of a text (up to ``max_match`` tokens) and the ends of their occurrences
    (mutable: it grows with the text). ``lookups(certain, ...)`` answers :func:`lookups` for
    the text ``context + [certain]`` without scanning it.

    Args:
        max_match: the longest n-gram indexed.
    """

    def __init__(self, max_match: int) -> None:
        self.max_match = max_match
        self._text: list[int] = []
        self._mirror = np.zeros(256, dtype=np.int64)  # the text as an array, for sync
        self._ends: dict[tuple[int, ...], list[int]] = {}

    @property
    def text(self) -> list[int]:
        """The indexed text."""
        return self._text

    def reset(self) -> None:
        """Forget the text (a new prompt)."""
        self._text = []
        self._ends = {}

    def extend(self, tokens: Sequence[int]) -> None:
        """Append ``tokens`` to the text, indexing the n-grams that end in them."""
        text, ends = self._text, self._ends
        start = len(text)
        for token in tokens:
            text.append(int(token))
            end = len(text)
            for n in range(1, min(self.max_match, end) + 1):
                ends.setdefault(tuple(text[end - n:end]), []).append(end)
        if len(text) > self._mirror.size:
            grown = np.zeros(max(len(text), 2 * self._mirror.size), dtype=np.int64)
            grown[:start] = self._mirror[:start]
            self._mirror = grown
        self._mirror[start:len(text)] = text[start:]

    def sync(self, context: np.ndarray) -> None:
        """Make the indexed text ``context``: extend it when ``context`` continues it, else
        start over (a comparison of the whole indexed text: whatever the caller did between
        two steps, the index is the context's)."""
        size = int(context.size)
        have = len(self._text)
        if size < have or not np.array_equal(context[:have], self._mirror[:have]):
            self.reset()
            have = 0
        if size > have:
            self.extend(context[have:].tolist())

    def lookups(self, certain: int, min_match: int, max_match: int, count: int
                ) -> list[tuple[int, int]]:
        """:func:`lookups` of ``text + [certain]``."""
        text = self._text
        size = len(text) + 1
        suffix = [*text[len(text) - min(max_match, size - 1) + 1:], certain] if text else []
        recent_first: list[list[int]] = []
        for n in range(1, min(max_match, size - 1) + 1):
            found = self._ends.get(tuple(suffix[len(suffix) - n:]))
            if not found:
                break
            recent_first.append(found[::-1])
        full = text + [certain]
        return _ranked(recent_first, full, min_match, count)


class Copies:
    """Prompt lookup's ranked copies (see the module docstring), each labelled ``"lookup"``
    and noted on the trie (the rates read their match length, offset and rank). Its index is
    mutable state (:class:`LookupIndex`), kept up to date by :meth:`observe`.

    Args:
        copies: copies a step (ranked, distinct continuations).
        lengths: tokens a copy proposes after a match of 1, 2, ... tokens (the last entry for
            longer ones); each ``>= 1``.
        min_match: shortest suffix n-gram that may anchor a copy (``>= 1``).
        max_match: longest suffix n-gram tried (``>= min_match``).

    Raises:
        DraftError: on a bad setting.
    """

    label = LOOKUP_SOURCE

    def __init__(self, copies: int = 1, lengths: Sequence[int] = DEFAULT_LENGTHS,
                 min_match: int = 1, max_match: int = 4) -> None:
        self.copies = check_int(copies, "copies", DraftError, minimum=1)
        self.min_match = check_int(min_match, "min_match", DraftError, minimum=1)
        self.max_match = check_int(max_match, "max_match", DraftError, minimum=self.min_match)
        if isinstance(lengths, (str, bytes)) or not isinstance(lengths, Sequence):
            raise DraftError("lengths must be a sequence of draft lengths, one per match length "
                             f"(e.g. (2, 6, 10)), got {lengths!r}")
        self.lengths = tuple(check_int(x, "every entry of lengths", DraftError, minimum=1)
                             for x in lengths)
        if not self.lengths:
            raise DraftError("lengths must name at least one draft length")
        self.needs = Needs(k=1, heads=1, sausage=False)
        self.index = LookupIndex(self.max_match)

    def found(self, context: np.ndarray, certain: int, count: int) -> list[tuple[int, int]]:
        """Up to ``count`` ranked copy starts ``(start, n)`` after ``context + [certain]``
        (:func:`lookups`, answered by the index, which ``context`` brings up to date)."""
        self.index.sync(context)
        return self.index.lookups(certain, self.min_match, self.max_match, count)

    def add(self, view: StepView, trie: Trie) -> None:
        found = self.found(view.context, view.certain, self.copies)
        if not found:
            return
        text = np.append(view.context, view.certain)
        for rank, (start, n) in enumerate(found, start=1):
            length = self.lengths[min(n, len(self.lengths)) - 1]
            row = np.concatenate(([view.certain], text[start:start + length]))
            trie.note_copy(trie.add(row, -np.inf, self.label), n, rank)

    def observe(self, feedback: Feedback) -> None:
        """A new prompt starts the index over; a verification extends it."""
        if feedback.start:
            self.index.reset()
        self.index.sync(feedback.context)


class HeadsOnDemand:
    """Heads on demand: a step whose best copy (``copies``' first lookup) matched at least
    ``match`` tokens of the text's end drafts from the copies alone, and its heads are never
    computed (a :class:`~blockdraft.drafts.pipeline.Pipeline`'s ``wants_heads``).

    Where the text repeats itself (summaries, translation, quoting), the copy is what pays and
    the heads' drafts rarely change the path a chain keeps; on a runtime whose forward is cheap
    (4-bit blocks) the heads, their lattice and the search are a fifth of the step. Longer
    matches make a copy likelier to be right (the acceptance tables' copy rates).

    Args:
        copies: the pipeline's copy source (its index answers the lookup; the step's own
            ``add`` then reads the same answer).
        match: the shortest best match that skips the heads (``min_match <= match <=
            max_match`` of ``copies``).

    Raises:
        DraftError: a ``match`` the copies can never reach, or below their shortest.
    """

    def __init__(self, copies: Copies, match: int) -> None:
        self.copies = copies
        self.match = check_int(match, "heads_on_demand (a match length)", DraftError,
                               minimum=copies.min_match)
        if self.match > copies.max_match:
            raise DraftError(f"heads_on_demand = {match}: the copies match at most "
                             f"{copies.max_match} tokens, so the heads would never be skipped; "
                             f"use {copies.min_match}..{copies.max_match}, or None")

    def __call__(self, context: np.ndarray, certain: int) -> bool:
        """True (the step wants the heads) unless the best copy after ``context + [certain]``
        matched ``match`` tokens or more."""
        found = self.copies.found(context, certain, 1)
        return not found or found[0][1] < self.match


def LookupDrafter(min_match: int = 1, max_match: int = 4,  # noqa: N802
                  lengths: Sequence[int] = DEFAULT_LENGTHS, name: str = "") -> Pipeline:
    """Prompt lookup alone (the module docstring): the copy, else ``d_1`` alone; it reads the
    base head only (``needs.heads == 1``)."""
    source = Copies(copies=1, lengths=lengths, min_match=min_match, max_match=max_match)
    label = f"lookup(n<={source.max_match}, L={'/'.join(map(str, source.lengths))})"
    return Pipeline([source], name=name or label, source=LOOKUP_SOURCE)
