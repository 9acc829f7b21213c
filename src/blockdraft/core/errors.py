"""The root of blockdraft's error classes.

Every room of the package (lattice, rescorers, drafts, verify, oracle, models, cli) raises its
own subclass of :class:`BlockdraftError`, so callers can catch one room's failures or all of
them. Room errors also subclass :class:`ValueError` where the failure is bad input. What
worked but deserves a word is a :class:`BlockdraftWarning`.
"""

from __future__ import annotations


class BlockdraftError(Exception):
    """Base class of every error blockdraft raises on purpose."""


class BlockdraftWarning(UserWarning):
    """A warning blockdraft gives on purpose: something worked, but the user should know
    (a check that could not be made, a damaged cache rebuilt). The ``blockdraft`` command
    prints each as one line on stderr (``blockdraft: warning: ...``)."""
