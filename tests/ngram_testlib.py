"""Types shared by the n-gram tests (imported by module name: a conftest is not importable
reliably once several test folders have one)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class WordCorpus:
    """Word ids of the pydoc corpus: ``train`` (lines of ids) and ``held_out`` (one array)."""

    train: list[np.ndarray]
    held_out: np.ndarray
    vocab_size: int
    unigram: np.ndarray  # float64 [vocab_size], training frequencies (sums to 1)
