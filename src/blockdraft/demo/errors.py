"""The demo room's error class."""

from __future__ import annotations

from blockdraft.core.errors import BlockdraftError


class DemoError(BlockdraftError):
    """The demo could not run on the given corpus, or its checks failed."""
