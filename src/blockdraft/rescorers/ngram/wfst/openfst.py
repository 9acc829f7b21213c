"""The OpenFst side of the WFST backend: the lazy ``pywrapfst`` import and the reserved labels.

Labels and weights (shared with :mod:`blockdraft.lattice.fst`): token id ``t`` is OpenFst
label ``t + LABEL_OFFSET`` = ``t + 1`` (label 0 is epsilon); the LM's ``<unk>`` word has the
reserved label :data:`UNK_LABEL`. Weights are tropical costs ``-ln p`` in nats.
"""

from __future__ import annotations

from typing import Any

from blockdraft.core.extras import import_optional
from blockdraft.lattice.fst import LABEL_OFFSET
from blockdraft.rescorers.base import RescorerError

UNK_LABEL = 2**31 - 2
"""Reserved OpenFst label of the LM's ``<unk>`` word (the largest label, so arcs stay sorted)."""

MAX_TOKEN_ID = UNK_LABEL - LABEL_OFFSET - 1
"""Largest token id this backend can label (its label must stay below :data:`UNK_LABEL`)."""


def load_pywrapfst() -> Any:
    """The ``pywrapfst`` module (imported on first use), or a RescorerError with the fix."""
    return import_optional("pywrapfst", "wfst", "the wfst backend", RescorerError)
