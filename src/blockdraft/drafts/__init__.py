"""Drafts: the `DraftBatch` type every draft source yields, and the draft sources.

`DraftBatch` is a leaf type (numpy only) that the lattice and the rescorers also return, so
this package imports its strategies lazily to keep the import graph acyclic.
"""

from typing import Any

from blockdraft.drafts.batch import DraftBatch, DraftError

__all__ = ["DraftBatch", "DraftError", "HeadDrafter", "vanilla"]


def __getattr__(name: str) -> Any:
    if name in ("HeadDrafter", "vanilla"):
        from blockdraft.drafts import heads

        return getattr(heads, name)
    raise AttributeError(f"module 'blockdraft.drafts' has no attribute {name!r}")
