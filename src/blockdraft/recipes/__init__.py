"""Recipes: the end-to-end procedures the applications share (the CLI's ``train`` and the
demo), built from the library's rooms.

Public surface: see :mod:`blockdraft.recipes.train`.
"""

from blockdraft.recipes.train import (
    eos_stream,
    model_config,
    new_model,
    split_tail,
    train_and_save,
    train_tokenizer,
)

__all__ = [
    "eos_stream",
    "model_config",
    "new_model",
    "split_tail",
    "train_and_save",
    "train_tokenizer",
]
