"""The models room: the reference blockwise parallel transformer, the small rescoring LM,
the tokenizers, checkpoints, loading and the greedy reference decoder (training them lives in
:mod:`blockdraft.training`).

Anything with ``heads_logits(input_ids, past) -> (logits [B, T, h, V], past)`` can stand in
for :class:`BlockwiseLM` in the rooms downstream (drafts, verify, oracle).
"""

from blockdraft.models.blockwise import BlockwiseLM, RescorerLM
from blockdraft.models.cache import KVCache
from blockdraft.models.checkpoint import read_model_config, save_model
from blockdraft.models.config import PRESETS, BlockwiseConfig
from blockdraft.models.errors import ModelError
from blockdraft.models.generate import greedy_generate
from blockdraft.models.load import load_model, load_tokenizer
from blockdraft.models.protocol import DecoderCache, FactoredHeadsModel, HeadsModel
from blockdraft.models.tokenizer import BaseTokenizer, Tokenizer, TokenizerInfo

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
