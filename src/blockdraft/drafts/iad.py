"""Input-guided drafting (IAD; Ge et al. 2022, sec. 3.1): copy the input; and drafters combined.

See docs/definitions.md sec. 9.

When the committed text ends with a stretch that occurs exactly once in the input (the prompt),
the input tokens that follow that occurrence are a good guess of what comes next (editing,
summarisation, code and retrieval tasks copy long spans). The draft is
``d_1 = the certain token`` followed by the ``h - 1`` input tokens after the match.

The match (:func:`input_match`): the committed text is ``context + [d_1]``. Its suffix of ``m``
tokens must occur exactly once in the prompt, at an occurrence followed by at least one prompt
token, for some ``m >= min_match``; the suffix grows from ``min_match`` until it is unique (a
longer suffix disambiguates a repeated stretch), and drafting gives up when it occurs nowhere or
is still ambiguous when the committed text runs out. When fewer than ``h - 1`` prompt tokens
follow the match, the remaining slots take the heads' argmax (the vanilla draft).

Scores of an IAD draft (natural log): the sum of the lattice's head scores of its tokens,
``-inf`` when a token is outside its slot's top ``k`` (the lattice cannot score it).

Public surface:
    input_match(prompt, committed, min_match) -> int | None    where the copy starts, pure
    input_copy(prompt, lattice, context, min_match) -> int64 [h] | None   the IAD draft, pure
    InputCopy(prompt_ids=None, min_match=2, fallback=True)   a source (the view's prompt
                                                             when no prompt is given)
    InputCopyDrafter(prompt_ids=None, min_match=2, name="") -> Pipeline   IAD, else vanilla
    CombinedDrafter(heads, copy, name="") -> Pipeline   two drafters' sources in one trie
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from blockdraft.core.batch import DraftError
from blockdraft.core.checks import check_int, check_token_ids
from blockdraft.drafts.pipeline import Pipeline
from blockdraft.drafts.protocol import Feedback, Needs, StepView
from blockdraft.drafts.trie import Trie
from blockdraft.lattice.sausage import SausageLattice

IAD_SOURCE = "iad"
"""The label of an input copy's nodes."""


def input_match(prompt: np.ndarray, committed: Sequence[int] | np.ndarray,
                min_match: int) -> int | None:
    """Where the copy starts: the prompt index right after the unique occurrence of the
    shortest suffix of ``committed`` (``>= min_match`` tokens) that occurs once in ``prompt``.

    Only occurrences followed by at least one prompt token count (one ending at the end of the
    prompt has nothing to copy).

    Returns:
        ``e`` with ``prompt[e - m : e] == committed[-m:]`` and ``e < len(prompt)``, or None
        when no suffix of ``min_match`` or more tokens occurs exactly once.
    """
    text = np.asarray(committed, dtype=np.int64)
    if text.size < min_match or prompt.size < 2:
        return None
    ends = np.flatnonzero(prompt[:-1] == text[-1]) + 1  # exclusive ends with a continuation
    m = 1
    while ends.size:
        if m >= min_match and ends.size == 1:
            return int(ends[0])
        if m == text.size:
            return None  # still ambiguous and nothing left of the committed text
        m += 1
        ends = ends[ends >= m]  # the occurrence must lie inside the prompt
        ends = ends[prompt[ends - m] == text[-m]]
    return None


def input_copy(prompt: np.ndarray, lattice: SausageLattice, context: np.ndarray,
               min_match: int) -> np.ndarray | None:
    """The IAD draft ``[h]`` (the certain token, the prompt tokens after the match, then the
    lattice's vanilla tokens), or None without a match."""
    certain = int(lattice.tokens[0, 0])
    start = input_match(prompt, np.append(context, certain), min_match)
    if start is None:
        return None
    copied = prompt[start: start + lattice.h - 1]
    return np.concatenate(([certain], copied, lattice.vanilla()[1 + copied.size:])).astype(
        np.int64)


class InputCopy:
    """The IAD draft as a source (see the module docstring); with ``fallback``, the heads'
    vanilla draft when nothing matches.

    Args:
        prompt_ids: the input ``x`` to copy from; None: the step's own prompt
            (``view.context[:view.prompt_length]``).
        min_match: shortest committed suffix (tokens, the certain token included) that may
            anchor a copy, ``>= 1``. Short anchors copy more often and more wrongly; 2-4 suits
            subword text.
        fallback: add the vanilla draft when there is no match.

    Raises:
        DraftError: an empty or non-integer prompt, or ``min_match < 1``.
    """

    label = IAD_SOURCE

    def __init__(self, prompt_ids: Any = None, min_match: int = 2, fallback: bool = True
                 ) -> None:
        self.prompt: np.ndarray | None = None
        if prompt_ids is not None:
            prompt = check_token_ids(prompt_ids, "prompt_ids", DraftError)
            if prompt.size == 0:
                raise DraftError("InputCopyDrafter needs a non-empty prompt to copy from")
            self.prompt = prompt
        self.min_match = check_int(min_match, "min_match", DraftError, minimum=1)
        self.fallback = bool(fallback)
        self.needs = Needs(k=1)

    def add(self, view: StepView, trie: Trie) -> None:
        prompt = self.prompt if self.prompt is not None else view.context[:view.prompt_length]
        draft = input_copy(prompt, view.lattice, view.context, self.min_match)
        if draft is None:
            if self.fallback:
                best = view.lattice.best_paths(1)
                trie.add(best.tokens[0], float(best.scores[0]), best.source)
            return
        trie.add(draft, view.lattice.path_score(draft, missing=-np.inf), self.label)

    def observe(self, feedback: Feedback) -> None:
        """Nothing to learn."""


def InputCopyDrafter(prompt_ids: Any = None, min_match: int = 2,  # noqa: N802
                     name: str = "") -> Pipeline:
    """IAD alone: the input copy when the committed suffix matches the prompt uniquely, else the
    heads' vanilla draft."""
    source = InputCopy(prompt_ids, min_match, fallback=True)
    return Pipeline([source], name=name or f"iad(m>={source.min_match})", source="trie")


def CombinedDrafter(heads: Pipeline, copy: Pipeline, name: str = "") -> Pipeline:  # noqa: N802
    """The heads' drafts with a copy source's draft beside them (Ge et al.'s IAD beside BPD, or
    prompt lookup), merged into one trie: the two drafters' sources in order (a copy of what the
    heads drafted adds nothing; the copy's own nodes are labelled by it).

    Raises:
        DraftError: either argument not a drafter of this pipeline.
    """
    for what, drafter in (("heads", heads), ("copy", copy)):
        if not isinstance(drafter, Pipeline):
            raise DraftError(f"CombinedDrafter's {what} must be a drafter (HeadDrafter, "
                             f"LookupDrafter, InputCopyDrafter, ...), got "
                             f"{type(drafter).__name__}")
    sources = list(heads.sources)
    for source in copy.sources:
        if isinstance(source, InputCopy) and source.fallback:  # the heads draft already
            source = InputCopy(source.prompt, source.min_match, fallback=False)
        sources.append(source)
    return Pipeline(sources, name=name or f"{heads.name} + {copy.name}", source=heads.source)
