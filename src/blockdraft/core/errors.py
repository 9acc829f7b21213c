"""The root of blockdraft's error classes.

Every room of the package (lattice, rescorers, drafts, verify, oracle, models, cli) raises its
own subclass of :class:`BlockdraftError`, so callers can catch one room's failures or all of
them. Room errors also subclass :class:`ValueError` where the failure is bad input.
"""

from __future__ import annotations


class BlockdraftError(Exception):
    """Base class of every error blockdraft raises on purpose."""
