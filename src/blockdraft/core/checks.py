"""Validation shared by every room: integers and token ids.

Each function takes the calling room's error class, so a bad value is reported in that room's
terms (``raise error(message)``) and the message names the offending value and the valid range.

Public surface:
    is_int(x) -> bool                                   an int or numpy integer, not a bool
    check_int(value, name, error, minimum=None, maximum=None) -> int
    check_positive_int(value, name, error) -> int       ``>= 1``
    check_token_ids(ids, name, error, vocab_size=None) -> int64 [n]
"""

from __future__ import annotations

from typing import Any

import numpy as np


def is_int(x: Any) -> bool:
    """True for a Python or numpy integer; False for a bool (an ``int`` subclass) or a float."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def check_int(
    value: Any,
    name: str,
    error: type[Exception],
    minimum: int | None = None,
    maximum: int | None = None,
) -> int:
    """``value`` as a Python int, checked to lie in ``[minimum, maximum]`` (either bound optional).

    Raises:
        error: ``value`` is not an integer (bools and floats included), or out of range.
    """
    if not is_int(value):
        raise error(f"{name} must be an integer, got {value!r}")
    v = int(value)
    if (minimum is not None and v < minimum) or (maximum is not None and v > maximum):
        if maximum is None:
            expected = f">= {minimum}"
        elif minimum is None:
            expected = f"<= {maximum}"
        else:
            expected = f"in [{minimum}, {maximum}]"
        raise error(f"{name} must be an integer {expected}, got {value!r}")
    return v


def check_positive_int(value: Any, name: str, error: type[Exception]) -> int:
    """``value`` as a Python int ``>= 1``; else ``error`` naming ``name`` and the value."""
    if not is_int(value) or int(value) < 1:
        raise error(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def check_token_ids(
    ids: Any, name: str, error: type[Exception], vocab_size: int | None = None
) -> np.ndarray:
    """int64 ``[n]`` token ids from a sequence, numpy array or torch tensor (an empty input
    gives an empty array).

    Raises:
        error: not 1-D, not integers, a negative id, or an id ``>= vocab_size`` when given.
    """
    if hasattr(ids, "detach") and hasattr(ids, "cpu"):
        ids = ids.detach().cpu().numpy()
    arr = np.asarray(ids)
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.ndim != 1:
        raise error(f"{name} must be a 1-D sequence of token ids, got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise error(f"{name} must hold integer token ids, got dtype {arr.dtype}")
    if (arr < 0).any():
        raise error(f"{name} holds a negative token id: {int(arr[arr < 0][0])}")
    if vocab_size is not None and (arr >= vocab_size).any():
        bad = int(arr[arr >= vocab_size][0])
        raise error(
            f"{name} holds token id {bad}, outside the vocabulary [0, {vocab_size - 1}]"
        )
    return arr.astype(np.int64)
