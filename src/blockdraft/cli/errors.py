"""The command line's error class (one a room): a command that could not run with the arguments
it was given; ``main`` prints it as one line (exit 1, or 2 for a usage error)."""

from __future__ import annotations

from blockdraft.core.errors import BlockdraftError


class CliError(BlockdraftError):
    """A command could not run with the arguments it was given."""
