"""Rescorers: global n-gram (exact KenLM search, WFST composition) and local neural."""

from blockdraft.rescorers.base import Rescorer, RescorerError

__all__ = ["Rescorer", "RescorerError"]
