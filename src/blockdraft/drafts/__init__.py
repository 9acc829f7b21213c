"""Drafts: the `DraftBatch` type every draft source yields, and the draft sources.

`DraftBatch` is a leaf type (numpy only) that the lattice and the rescorers also return, so
this package imports its strategies lazily to keep the import graph acyclic.
"""

from typing import Any

from blockdraft.drafts.batch import DraftBatch, DraftError

__all__ = [
    "CombinedDrafter", "DraftBatch", "DraftError", "HeadDrafter", "InputCopyDrafter",
    "row_source", "vanilla",
]

_LAZY = {"HeadDrafter": "heads", "vanilla": "heads", "InputCopyDrafter": "iad",
         "CombinedDrafter": "iad", "row_source": "iad"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"blockdraft.drafts.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'blockdraft.drafts' has no attribute {name!r}")
