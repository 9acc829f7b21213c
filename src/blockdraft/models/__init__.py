"""The models room: the reference blockwise parallel transformer, the small rescoring LM,
the tokenizers, checkpoints, loading and the greedy reference decoder (training them lives in
:mod:`blockdraft.training`).

Anything with ``heads_logits(input_ids, past) -> (logits [B, T, h, V], past)`` can stand in
for :class:`BlockwiseLM` in the rooms downstream (drafts, verify, oracle).
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from blockdraft.models.errors import ModelError

if TYPE_CHECKING:
    from blockdraft.models.blockwise import BlockwiseLM, RescorerLM
    from blockdraft.models.cache import KVCache
    from blockdraft.models.checkpoint import read_model_config, save_model
    from blockdraft.models.config import PRESETS, BlockwiseConfig
    from blockdraft.models.generate import greedy_generate
    from blockdraft.models.load import load_model, load_tokenizer
    from blockdraft.models.protocol import DecoderCache, FactoredHeadsModel, HeadsModel
    from blockdraft.models.tokenizer import BaseTokenizer, Tokenizer, TokenizerInfo

_WHERE = {
    "BlockwiseLM": "blockwise", "RescorerLM": "blockwise", "KVCache": "cache",
    "read_model_config": "checkpoint", "save_model": "checkpoint", "PRESETS": "config",
    "BlockwiseConfig": "config", "greedy_generate": "generate", "load_model": "load",
    "load_tokenizer": "load", "DecoderCache": "protocol", "FactoredHeadsModel": "protocol",
    "HeadsModel": "protocol", "BaseTokenizer": "tokenizer", "Tokenizer": "tokenizer",
    "TokenizerInfo": "tokenizer",
}
"""Each public name's module: imported at the first use (PEP 562), so that the numpy-only
modules of this room (``cost``, ``errors``) and the rooms after it (drafts, the offline
simulator, sweep workers) do not import torch until a model is used."""


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'blockdraft.models' has no attribute {name!r}")
    value = getattr(import_module(f"blockdraft.models.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "PRESETS",
    "BaseTokenizer",
    "BlockwiseConfig",
    "BlockwiseLM",
    "DecoderCache",
    "FactoredHeadsModel",
    "HeadsModel",
    "KVCache",
    "ModelError",
    "RescorerLM",
    "Tokenizer",
    "TokenizerInfo",
    "greedy_generate",
    "load_model",
    "load_tokenizer",
    "read_model_config",
    "save_model",
]
