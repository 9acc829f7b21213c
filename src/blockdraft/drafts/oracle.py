"""The oracle path of the top-``k`` lattice: a drafter that reads the reference (offline only).

docs/definitions.md sec. 5. At a step whose certain token is ``y_{t+1}``, the oracle drafts the
longest run of the reference ``y_{t+2}, y_{t+3}, ...`` whose every token is in its slot's top
``k`` (then the slots' top-1 tokens), so it accepts ``n_oracle(t, k)``: an upper bound on the
``n`` of any single draft from that lattice at that position. It needs the reference
(``Needs.reference``), which only a trace gives: the offline simulator runs it, a decode
refuses it by name.

Public surface:
    ReferencePath(k)      a source
    Oracle(k) -> Pipeline the oracle drafter, named ``oracle (k=K)``
"""

from __future__ import annotations

import numpy as np

from blockdraft.core.batch import DraftError
from blockdraft.core.checks import check_positive_int
from blockdraft.drafts.pipeline import Pipeline
from blockdraft.drafts.protocol import Feedback, Needs, StepView
from blockdraft.drafts.trie import Trie


class ReferencePath:
    """The oracle's draft (see the module docstring) as a source.

    Args:
        k: arcs per slot, ``>= 1``.
    """

    label = "oracle"

    def __init__(self, k: int) -> None:
        self.k = check_positive_int(k, "Oracle.k", DraftError)
        self.needs = Needs(k=self.k, reference=True)

    def add(self, view: StepView, trie: Trie) -> None:
        assert view.reference is not None  # declared: only a trace's steps have one
        lattice = view.lattice
        ref = view.reference  # y_{t+1}, y_{t+2}, ...
        draft = lattice.vanilla()
        top = lattice.tokens[:, : self.k]
        n = 0
        while n + 1 < lattice.h and n + 1 < ref.size and bool(
                np.any(top[n + 1] == ref[n + 1])):
            n += 1
        draft[1: 1 + n] = ref[1: 1 + n]
        trie.add(draft, 0.0, self.label)

    def observe(self, feedback: Feedback) -> None:
        """Nothing to learn."""


def Oracle(k: int) -> Pipeline:  # noqa: N802
    """The oracle path of the top-``k`` lattice (docs/definitions.md sec. 5): at every step it
    accepts ``n_oracle(t, k)``, an upper bound on the ``n`` of any ``p = 1`` strategy drafting
    from that lattice *at that position*.

    ``B_oracle(k)`` is, as in docs/definitions.md sec. 5 and Kim et al., ``B`` when every step
    uses that draft. It is not a strict upper bound on another strategy's ``B`` over a whole
    text: a strategy that accepts fewer tokens lands on a different position, which can happen
    to have a better lattice. Nor is ``B_oracle(k)`` monotone in ``k`` for the same reason,
    though ``n_oracle(t, k)`` is at every position.
    """
    source = ReferencePath(k)
    return Pipeline([source], name=f"oracle (k={source.k})", source="oracle")
