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
alone: the step costs one greedy token, no guess of the heads' is verified.

Public surface:
    LookupDrafter(min_match=1, max_match=4, lengths=(2, 6, 10))
        .copy(lattice, context) -> DraftBatch | None    the lookup draft (one row), or None
        .propose(lattice, context) -> DraftBatch        the lookup draft, else d_1 alone
        .heads_needed = 1                               it reads the certain token only
    lookup(text, min_match, max_match) -> (start, n) | None     the match, pure
    lookups(text, min_match, max_match, count) -> [(start, n), ...]   ranked matches with
                                                       distinct continuations, pure
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from blockdraft.core.batch import DraftBatch, DraftError
from blockdraft.core.checks import check_int, check_token_ids
from blockdraft.lattice.sausage import SausageLattice

LOOKUP_SOURCE = "lookup"
"""``DraftBatch.source`` of a lookup draft (one of ``iad.COPY_SOURCES``)."""
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
    size = int(text.size)
    ends = np.flatnonzero(text[:-1] == text[-1]) + 1  # exclusive ends of 1-gram matches
    found: tuple[int, int] | None = None
    n = 1
    while ends.size and n <= min(max_match, size - 1):
        if n >= min_match:
            found = (int(ends[-1]), n)  # the most recent occurrence of this n-gram
        n += 1
        ends = ends[ends >= n]
        ends = ends[text[ends - n] == text[-n]]
    return found


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
    out: list[tuple[int, int]] = []
    taken: set[int] = set()
    for n in range(len(by_n), min_match - 1, -1):
        for end in by_n[n - 1][::-1].tolist():  # the most recent first
            nxt = int(text[end])
            if nxt not in taken:
                taken.add(nxt)
                out.append((end, n))
                if len(out) == count:
                    return out
    return out


@dataclass(frozen=True, eq=False)
class LookupDrafter:
    """Draft by looking the text's last tokens up in the text itself (see the module doc).

    Attributes:
        min_match: shortest suffix n-gram that may anchor a copy (``>= 1``).
        max_match: longest suffix n-gram tried (``>= min_match``).
        lengths: draft tokens after ``d_1`` for a match of 1, 2, ... tokens (the last entry
            for longer ones); each ``>= 1``.
        name: a label for tables (default ``"lookup(n<=4, L=2/6/10)"``).

    Raises:
        DraftError: on a bad setting.
    """

    min_match: int = 1
    max_match: int = 4
    lengths: tuple[int, ...] = DEFAULT_LENGTHS
    name: str = ""

    def __post_init__(self) -> None:
        lo = check_int(self.min_match, "min_match", DraftError, minimum=1)
        hi = check_int(self.max_match, "max_match", DraftError, minimum=lo)
        if isinstance(self.lengths, (str, bytes)) or not isinstance(self.lengths, Sequence):
            raise DraftError("lengths must be a sequence of draft lengths, one per match length "
                             f"(e.g. (2, 6, 10)), got {self.lengths!r}")
        lengths = tuple(check_int(x, "every entry of lengths", DraftError, minimum=1)
                        for x in self.lengths)
        if not lengths:
            raise DraftError("lengths must name at least one draft length")
        object.__setattr__(self, "min_match", lo)
        object.__setattr__(self, "max_match", hi)
        object.__setattr__(self, "lengths", lengths)
        if not self.name:
            object.__setattr__(self, "name", f"lookup(n<={hi}, L={'/'.join(map(str, lengths))})")

    @property
    def k(self) -> int:
        """Lattice width this drafter reads: 1 (the certain token)."""
        return 1

    @property
    def heads_needed(self) -> int:
        """Heads whose logits it reads at the next step: the base's alone (the certain
        token), so a verification call projects no Medusa head."""
        return 1

    def copy(self, lattice: SausageLattice, context: Sequence[int] | np.ndarray
             ) -> DraftBatch | None:
        """The lookup draft as a one-row batch (source ``"lookup"``), or None without a match.

        Args:
            lattice: the step's lattice (slot 1's top arc is the certain token ``d_1``).
            context: the committed text before ``d_1`` (the prompt and the output so far).
        """
        certain = int(lattice.tokens[0, 0])
        text = np.append(check_token_ids(context, "context", DraftError), certain)
        found = lookup(text, self.min_match, self.max_match)
        if found is None:
            return None
        start, n = found
        length = self.lengths[min(n, len(self.lengths)) - 1]
        draft = np.concatenate(([certain], text[start : start + length])).astype(np.int64)
        return DraftBatch(tokens=draft[None], scores=np.zeros(1), head_scores=np.zeros(1),
                          lm_scores=np.zeros(1), requested=1, source=LOOKUP_SOURCE)

    def propose(self, lattice: SausageLattice, context: Any) -> DraftBatch:
        """The lookup draft, else ``d_1`` alone (a greedy step's cost)."""
        row = self.copy(lattice, context)
        if row is not None:
            return row
        certain = int(lattice.tokens[0, 0])
        return DraftBatch(tokens=np.array([[certain]]), scores=np.zeros(1),
                          head_scores=np.zeros(1), lm_scores=np.zeros(1), requested=1,
                          source=LOOKUP_SOURCE)
