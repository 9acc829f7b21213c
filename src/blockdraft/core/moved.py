"""Public names that moved or went away, and the error that says where to go instead.

A public name that moves keeps its import path, or fails with a message naming the new one
(docs/architecture.md). A module lists what left it in a mapping and installs
:func:`moved_getattr` as its module ``__getattr__`` (PEP 562): importing or reading an old name
raises an :class:`ImportError` (not an ``AttributeError``, whose message Python replaces in
``from module import name``) that names the replacement and why.

Public surface:
    moved_error(old, new, why) -> ImportError
    moved_getattr(module, moved) -> a module ``__getattr__``
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any


def moved_error(old: str, new: str, why: str) -> ImportError:
    """The error for the old dotted name ``old``: use ``new`` instead, because ``why``."""
    return ImportError(f"{old} moved to {new} ({why})", name=old)


def moved_getattr(module: str, moved: Mapping[str, tuple[str, str]]
                  ) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``module`` whose names ``moved`` (old name -> (its
    replacement, why)) fail naming their replacement; other missing names are the usual
    :class:`AttributeError`."""

    def __getattr__(name: str) -> Any:
        if name in moved:
            new, why = moved[name]
            raise moved_error(f"{module}.{name}", new, why)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
