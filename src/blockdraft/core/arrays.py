"""Small array helpers shared by every room (numpy only; torch is never imported here)."""

from __future__ import annotations

from typing import Any

import numpy as np


def as_numpy(x: Any) -> np.ndarray:
    """A numpy view of a numpy array or a torch tensor (detached, float32 if floating, on the
    CPU), without importing torch."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):
        x = x.detach()
        if x.is_floating_point():
            x = x.float()
        x = x.cpu().numpy()
    return np.asarray(x)


def readonly(a: Any, dtype: Any = None) -> np.ndarray:
    """A read-only copy of ``a`` (optionally cast to ``dtype``)."""
    arr = np.array(a, dtype=dtype, copy=True)
    arr.setflags(write=False)
    return arr
