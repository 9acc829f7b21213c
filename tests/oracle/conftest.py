"""Fixtures of the oracle room's tests (helpers live in ``oracle_helpers``)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from oracle_helpers import write_tiny

from blockdraft.oracle import Trace


@pytest.fixture
def tiny_trace(tmp_path: Path) -> Trace:
    return write_tiny(tmp_path / "tiny")


@pytest.fixture
def write_tiny_trace(tmp_path: Path) -> Callable[..., Trace]:
    """Write a variant of the tiny trace: ``write_tiny_trace(rows) -> Trace``."""
    counter = itertools.count()

    def make(rows: Sequence[tuple[list[int], list[int], list[list[list[int]]]]]) -> Trace:
        return write_tiny(tmp_path / f"tiny{next(counter)}", rows)

    return make
