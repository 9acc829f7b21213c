"""blockdraft: refine the block drafts of blockwise parallel decoding.

A blockwise parallel LM guesses the next ``h`` tokens with ``h`` independent heads; blockdraft
turns each head's top-``k`` into a sausage lattice, rescores it with an n-gram LM (exact KenLM
search or WFST composition) or a small neural LM, and hands the ``p`` best drafts to a verifier.

Public API::

    from blockdraft import SausageLattice, NgramLM, NgramRescorer, DraftBatch, Trace
"""

from __future__ import annotations

from typing import Any

from blockdraft.core.batch import DraftBatch
from blockdraft.core.errors import BlockdraftError
from blockdraft.core.version import __version__
from blockdraft.lattice.sausage import SausageLattice

__all__ = [
    "BlockdraftError",
    "DraftBatch",
    "NgramLM",
    "NgramRescorer",
    "SausageLattice",
    "Trace",
    "__version__",
]


def __getattr__(name: str) -> Any:
    # The n-gram room loads a native library and the oracle room matplotlib-free numpy code;
    # import them on first use so `import blockdraft` stays cheap.
    if name in ("NgramLM", "NgramRescorer"):
        from blockdraft.rescorers import ngram

        return getattr(ngram, name)
    if name == "Trace":
        from blockdraft.oracle.trace import Trace

        return Trace
    raise AttributeError(f"module 'blockdraft' has no attribute {name!r}")
