"""The oracle room's errors.

Public surface:
    OracleError        invalid input to the oracle room (a trace, a strategy, positions, ...)
    TraceFormatError   a trace directory that is missing, truncated, malformed or invalid
Both are also ``ValueError`` (through :class:`OracleError`).
"""

from __future__ import annotations

from blockdraft.core.errors import BlockdraftError


class OracleError(BlockdraftError, ValueError):
    """The oracle room was given invalid input (a trace, a strategy, positions, ...)."""


class TraceFormatError(OracleError):
    """A trace directory is missing, truncated, malformed or holds invalid values."""
