"""Hugging Face causal LMs with Medusa heads behind blockdraft's model protocol
(docs/definitions.md sec. 10).

Public surface (details in each module):
    HFBlockwiseModel(base, heads, tokenizer=None)   a transformers causal LM + Medusa heads as
                                                    a FactoredHeadsModel           (adapter)
    HFBlockwiseConfig, check_supported                                             (adapter)
    HFCache               the model's own KV cache, immutable (crop, expand, gather) (cache)
    HFTokenizer           a transformers tokenizer with blockdraft's interface   (tokenizer)
    load_hf_tokenizer(folder, vocab_size=None)                                    (tokenizer)
    MedusaHeads, ResBlock                                                           (medusa)
    EagleHeads, read_eagle_heads   an EAGLE draft layer as the heads             (eagle_heads)
    LAYOUTS, detect_layout, read_heads, read_heads_config, write_heads, HeadsConfig
                          Medusa-1, Medusa-2 full, Medusa version 2, vLLM         (formats)
    KNOWN_MODELS, load_causal_lm, resolve_base, smollm2_gguf, dense_folder        (loading)
    read_gguf_header      a GGUF file's header, checked against the file            (gguf)
    cache_problem, write_manifest   the model cache's manifest             (model_cache)

Nothing here imports ``transformers`` until a model is built or loaded.
"""

from blockdraft.models.hf.adapter import HFBlockwiseConfig, HFBlockwiseModel, check_supported
from blockdraft.models.hf.cache import HFCache
from blockdraft.models.hf.eagle_heads import EagleHeads, read_eagle_heads
from blockdraft.models.hf.formats import (
    LAYOUTS,
    HeadsConfig,
    detect_layout,
    read_heads,
    read_heads_config,
    write_heads,
)
from blockdraft.models.hf.loading import (
    KNOWN_MODELS,
    dense_folder,
    load_causal_lm,
    resolve_base,
    smollm2_gguf,
)
from blockdraft.models.hf.medusa import MedusaHeads, ResBlock
from blockdraft.models.hf.tokenizer import HFTokenizer, load_hf_tokenizer

__all__ = [
    "KNOWN_MODELS",
    "LAYOUTS",
    "EagleHeads",
    "HFBlockwiseConfig",
    "HFBlockwiseModel",
    "HFCache",
    "HFTokenizer",
    "HeadsConfig",
    "MedusaHeads",
    "ResBlock",
    "check_supported",
    "dense_folder",
    "detect_layout",
    "load_causal_lm",
    "load_hf_tokenizer",
    "read_eagle_heads",
    "read_heads",
    "read_heads_config",
    "resolve_base",
    "smollm2_gguf",
    "write_heads",
]
