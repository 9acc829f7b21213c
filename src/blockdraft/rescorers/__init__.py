"""Rescorers: global n-gram (exact KenLM search, WFST composition) and local neural."""

from typing import Any

from blockdraft.rescorers.base import Rescorer, RescorerError

__all__ = [
    "ContextLM", "NeuralRescorer", "NgramLM", "NgramRescorer", "Rescorer", "RescorerError",
]


def __getattr__(name: str) -> Any:
    # The backends load a native library (n-gram) or torch (neural): import on first use.
    if name in ("ContextLM", "NgramLM", "NgramRescorer"):
        from blockdraft.rescorers import ngram

        return getattr(ngram, name)
    if name == "NeuralRescorer":
        from blockdraft.rescorers.neural import NeuralRescorer

        return NeuralRescorer
    raise AttributeError(f"module 'blockdraft.rescorers' has no attribute {name!r}")
