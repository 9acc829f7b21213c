"""The verify room's error class."""

from __future__ import annotations

from blockdraft.core.errors import BlockdraftError


class VerifyError(BlockdraftError, ValueError):
    """The verifier or the decode loop was given invalid input.

    Messages name the offending value and say what to do about it.
    """
