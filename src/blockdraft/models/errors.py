"""The models room's error class."""

from __future__ import annotations

from blockdraft.core.errors import BlockdraftError


class ModelError(BlockdraftError, ValueError):
    """A model, tokenizer, checkpoint or training run was given invalid input.

    Messages name the offending value (or file) and say what to do about it.
    """
