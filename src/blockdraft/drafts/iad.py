"""Input-guided drafting (IAD; Ge et al. 2022, sec. 3.1): copy the input.

See docs/definitions.md sec. 9.

When the committed text ends with a stretch that occurs exactly once in the input (the prompt),
the input tokens that follow that occurrence are a good guess of what comes next (editing,
summarisation, code and retrieval tasks copy long spans). The draft is
``d_1 = the certain token`` followed by the ``h - 1`` input tokens after the match.

Public surface:
    InputCopyDrafter(prompt_ids, min_match=2)
        .match(committed) -> int | None        where the copy starts in the prompt
        .copy(lattice, context) -> DraftBatch | None   the IAD draft (one row), or None
        .propose(lattice, context) -> DraftBatch       the IAD draft, else the vanilla draft
    CombinedDrafter(heads, iad)
        .propose(lattice, context) -> DraftBatch       the heads' drafts + a copy source's
                                                       draft (IAD, or prompt lookup) as one more
                                                       (last) row, source "<heads>+<copy>"
    row_source(batch, row) -> str                      "iad"/"lookup" for the copy row, else
                                                       the source

The match: the committed text is ``context + [d_1]`` (the context is the committed prefix
before the certain token, as every drafter receives it). Its suffix of ``m`` tokens must occur
exactly once in the prompt, at an occurrence followed by at least one prompt token, for some
``m >= min_match``; the suffix grows from ``min_match`` until it is unique (a longer suffix
disambiguates a repeated stretch), and drafting gives up when it occurs nowhere or is still
ambiguous when the committed text runs out. When fewer than ``h - 1`` prompt tokens follow the
match, the remaining slots take the heads' argmax (the vanilla draft).

Scores of an IAD draft (natural log): ``head_scores`` is the sum of the lattice's head scores
of its tokens, ``-inf`` when a token is outside its slot's top ``k`` (the lattice cannot score
it); ``lm_scores`` is 0 (no LM). In a combined batch the IAD row's ``scores`` entry is ``-inf``
so that the batch stays ordered best first: it ranks after every head draft, and a verifier
that breaks ties by index prefers the heads' drafts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from blockdraft.core.batch import DraftBatch, DraftError
from blockdraft.core.checks import check_int, check_token_ids
from blockdraft.core.tree import PAD
from blockdraft.drafts.protocol import Drafter
from blockdraft.lattice.sausage import SausageLattice

IAD_SOURCE = "iad"
"""``DraftBatch.source`` of an input-copy draft; a combined batch is ``"<heads>+iad"``."""
COPY_SOURCES = (IAD_SOURCE, "lookup")
"""Sources of the copy row a :class:`CombinedDrafter` appends (input copy, prompt lookup)."""


@dataclass(frozen=True, eq=False)
class InputCopyDrafter:
    """Draft by copying the prompt after a unique match of the committed suffix (IAD).

    Attributes:
        prompt_ids: the input ``x`` (int64 ``[L]``, read-only, non-empty).
        min_match: shortest committed suffix (tokens, the certain token included) that may
            anchor a copy, ``>= 1``. Short anchors copy more often and more wrongly; 2-4 suits
            subword text.
        name: a label for tables (default ``"iad(m>=<min_match>)"``).

    Raises:
        DraftError: on an empty or non-integer prompt, or ``min_match < 1``.
    """

    prompt_ids: Any
    min_match: int = 2
    name: str = ""

    def __post_init__(self) -> None:
        prompt = check_token_ids(self.prompt_ids, "prompt_ids", DraftError)
        if prompt.size == 0:
            raise DraftError("InputCopyDrafter needs a non-empty prompt to copy from")
        prompt.setflags(write=False)
        object.__setattr__(self, "prompt_ids", prompt)
        object.__setattr__(
            self, "min_match", check_int(self.min_match, "min_match", DraftError, minimum=1)
        )
        if not self.name:
            object.__setattr__(self, "name", f"iad(m>={self.min_match})")

    @property
    def k(self) -> int:
        """Lattice width this drafter reads: 1 (the certain token and the vanilla fallback)."""
        return 1

    def match(self, committed: Sequence[int] | np.ndarray) -> int | None:
        """Where the copy starts: the prompt index right after the unique occurrence of the
        shortest suffix of ``committed`` (``>= min_match`` tokens) that occurs once.

        Only occurrences followed by at least one prompt token count (one ending at the end
        of the prompt has nothing to copy).

        Returns:
            ``e`` with ``prompt[e - m : e] == committed[-m:]`` and ``e < len(prompt)``, or
            None when no suffix of ``min_match`` or more tokens occurs exactly once.
        """
        text = check_token_ids(committed, "committed", DraftError)
        prompt = self.prompt_ids
        if text.size < self.min_match or prompt.size < 2:
            return None
        # Candidate exclusive ends e of a match, with a continuation prompt[e] to copy.
        ends = np.flatnonzero(prompt[:-1] == text[-1]) + 1  # (c,)
        m = 1
        while ends.size:
            if m >= self.min_match and ends.size == 1:
                return int(ends[0])
            if m == text.size:
                return None  # still ambiguous and nothing left of the committed text
            m += 1
            ends = ends[ends >= m]  # the occurrence must lie inside the prompt
            ends = ends[prompt[ends - m] == text[-m]]
        return None

    def copy(
        self, lattice: SausageLattice, context: Sequence[int] | np.ndarray
    ) -> DraftBatch | None:
        """The IAD draft as a one-row batch (source ``"iad"``), or None without a match.

        Args:
            lattice: the step's lattice (slot 1's top arc is the certain token ``d_1``).
            context: the committed prefix before ``d_1``, oldest first.
        """
        certain = int(lattice.tokens[0, 0])
        committed = np.append(check_token_ids(context, "context", DraftError), certain)
        start = self.match(committed)
        if start is None:
            return None
        h = lattice.h
        copied = self.prompt_ids[start : start + h - 1]
        draft = np.concatenate(
            ([certain], copied, lattice.vanilla()[1 + copied.size :])
        ).astype(np.int64)  # (h,)
        score = lattice.path_score(draft, missing=-np.inf)
        return DraftBatch(
            tokens=draft[None],
            scores=np.array([score]),
            head_scores=np.array([score]),
            lm_scores=np.zeros(1),
            requested=1,
            source=IAD_SOURCE,
        )

    def propose(
        self, lattice: SausageLattice, context: Sequence[int] | np.ndarray
    ) -> DraftBatch:
        """The IAD draft when the committed suffix matches the prompt uniquely, else the
        vanilla draft of the heads (source ``"lattice"``)."""
        row = self.copy(lattice, context)
        return lattice.best_paths(1) if row is None else row


@dataclass(frozen=True, eq=False)
class CombinedDrafter:
    """The heads' drafts with a copy source's draft as one extra path (Ge et al.'s IAD beside
    BPD; or a :class:`~blockdraft.drafts.lookup.LookupDrafter`).

    Attributes:
        heads: the head drafter (a :class:`~blockdraft.drafts.heads.HeadDrafter` or anything
            with ``propose(lattice, context)``).
        iad: the copy source: an :class:`InputCopyDrafter`, a
            :class:`~blockdraft.drafts.lookup.LookupDrafter`, or anything with
            ``copy(lattice, context) -> DraftBatch | None``.
        name: a label for tables (default ``"<heads> + <iad>"``).

    The combined batch holds the heads' ``p`` drafts, then the copy as row ``p`` when there is
    one and it is not already among them; its source is ``"<heads>+<copy's source>"`` and
    :func:`row_source` tells the rows apart. Rows of different lengths share the array: the
    shorter ones end with ``-1`` padding (:attr:`DraftBatch.lengths`).
    """

    heads: Drafter
    iad: Any
    name: str = ""

    def __post_init__(self) -> None:
        if not callable(getattr(self.heads, "propose", None)):
            raise DraftError(
                f"heads must have propose(lattice, context), got {type(self.heads).__name__}"
            )
        if not callable(getattr(self.iad, "copy", None)):
            raise DraftError(f"iad must be an InputCopyDrafter or another copy source with "
                             f"copy(lattice, context), got {type(self.iad).__name__}")
        if not self.name:
            label = getattr(self.heads, "name", type(self.heads).__name__)
            object.__setattr__(self, "name", f"{label} + {self.iad.name}")

    @property
    def k(self) -> int:
        """Lattice width the head drafter reads."""
        return int(getattr(self.heads, "k", 1))

    def propose(
        self, lattice: SausageLattice, context: Sequence[int] | np.ndarray
    ) -> DraftBatch:
        """The heads' drafts, plus the copy as the last row when it adds a new path."""
        batch = self.heads.propose(lattice, context)
        row = self.iad.copy(lattice, context)
        if row is None:
            return batch
        width = max(batch.h, row.h)
        tokens = np.full((batch.p + 1, width), PAD, dtype=np.int64)
        tokens[: batch.p, : batch.h] = batch.tokens
        tokens[batch.p, : row.h] = row.tokens[0]
        if bool((tokens[: batch.p] == tokens[batch.p]).all(axis=1).any()):
            return batch
        return DraftBatch(
            tokens=tokens,
            scores=np.append(batch.scores, -np.inf),  # ranked after every head draft
            head_scores=np.append(batch.head_scores, row.head_scores),
            lm_scores=np.append(batch.lm_scores, 0.0),
            alpha=batch.alpha,
            requested=batch.requested + 1,
            source=f"{batch.source}+{row.source}",
        )


def row_source(batch: DraftBatch, row: int) -> str:
    """Where row ``row`` of ``batch`` came from: the copy source (``"iad"``, ``"lookup"``) for
    the copy row of a combined batch (its last row), otherwise the batch's source."""
    for copy_source in COPY_SOURCES:
        suffix = "+" + copy_source
        if batch.source.endswith(suffix):
            return copy_source if row == batch.p - 1 else batch.source[: -len(suffix)]
    return batch.source
