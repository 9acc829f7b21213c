"""The checks of a model's forward inputs that every model of this room shares (the reference
:class:`~blockdraft.models.BlockwiseLM` and the Hugging Face adapter
:class:`~blockdraft.models.hf.HFBlockwiseModel`).

Public surface:
    check_prompt(prompt_ids, vocab_size, max_seq_len, max_new_tokens, error, where="")
        -> list[int]      a prompt, checked once where a decode or the greedy reference starts
    check_input_ids(input_ids, vocab_size, device) -> int64 [B, T]
    check_past_fits(past, batch_size, new, device, max_seq_len) -> T_past
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from blockdraft.models.cache import KVCache
from blockdraft.models.errors import ModelError
from blockdraft.models.protocol import DecoderCache


def check_prompt(
    prompt_ids: Any,
    vocab_size: int | None,
    max_seq_len: int | None,
    max_new_tokens: int,
    error: type[Exception],
    where: str = "",
) -> list[int]:
    """A prompt (1-D token ids: a list, numpy array or tensor) as a list of ints, checked for a
    decode of ``max_new_tokens`` tokens: the one check of a prompt, for ``decode`` and
    ``greedy_generate`` alike.

    Args:
        prompt_ids: the prompt.
        vocab_size: ``V`` (ids must lie in ``[0, V)``), or None when unknown.
        max_seq_len: the model's context, or None when unknown.
        max_new_tokens: tokens the decode may generate; ``len(prompt) + max_new_tokens - 1``
            positions are read (the last token is never fed back).
        error: the caller's error class.
        where: a prefix naming the prompt among several (``"prompt 3: "``).

    Raises:
        error: an empty, non-1-D or non-integer prompt, an id outside the vocabulary, a
            prompt longer than the context or one that leaves no room for the new tokens.
    """
    if isinstance(prompt_ids, torch.Tensor):
        prompt_ids = prompt_ids.detach().cpu().numpy()
    arr = np.asarray(prompt_ids)
    if arr.size == 0:
        raise error(f"{where}the prompt is empty; decoding needs at least one token (start "
                    "with a beginning-of-text id, e.g. the EOS id)")
    if arr.ndim != 1:
        raise error(f"{where}a prompt must be 1-D token ids, got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise error(f"{where}prompt ids must be integers, got dtype {arr.dtype}")
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 and vocab_size is None:
        raise error(f"{where}token id {lo} is negative; token ids are >= 0")
    if lo < 0 or (vocab_size is not None and hi >= vocab_size):
        raise error(f"{where}token id {lo if lo < 0 else hi} is outside the model's vocabulary "
                    f"[0, {vocab_size}); was the text encoded with this model's tokenizer?")
    if max_seq_len is not None:
        if arr.size > max_seq_len:
            raise error(f"{where}the prompt has {arr.size} tokens, more than max_seq_len = "
                        f"{max_seq_len}, the model's context; shorten the prompt to at most "
                        f"{max_seq_len} tokens")
        if max_new_tokens and arr.size + max_new_tokens - 1 > max_seq_len:
            raise error(f"{where}a prompt of {arr.size} tokens + max_new_tokens = "
                        f"{max_new_tokens} needs {arr.size + max_new_tokens - 1} positions, "
                        f"more than max_seq_len = {max_seq_len}; use max_new_tokens <= "
                        f"{max_seq_len - arr.size + 1} or a shorter prompt")
    return [int(t) for t in arr]


def check_input_ids(input_ids: Any, vocab_size: int, device: torch.device) -> torch.Tensor:
    """``input_ids`` as an int64 ``[B, T]`` tensor, checked for a forward pass.

    Raises:
        ModelError: when ``input_ids`` is not a tensor of integers, not 2-D, empty, on another
            device than ``device``, or holds an id outside ``[0, vocab_size)``.
    """
    if not isinstance(input_ids, torch.Tensor):
        raise ModelError(
            f"input_ids must be a torch LongTensor [B, T], got {type(input_ids).__name__}"
        )
    dtype = input_ids.dtype
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
        raise ModelError(f"input_ids must hold integer token ids, got dtype {dtype}")
    if input_ids.dim() != 2:
        raise ModelError(
            f"input_ids must be [B, T], got shape {tuple(input_ids.shape)}; "
            "add a batch dimension with ids[None]"
        )
    B, T = input_ids.shape  # noqa: N806 - shape names as in the papers
    if B == 0 or T == 0:
        raise ModelError(
            f"input_ids is empty (shape {(B, T)}); the model needs at least one token per row"
        )
    if input_ids.device != device:
        raise ModelError(
            f"input_ids are on {input_ids.device} but the model is on {device}; "
            "move them with .to(model.device)"
        )
    lo, hi = int(input_ids.min()), int(input_ids.max())
    if lo < 0 or hi >= vocab_size:
        raise ModelError(
            f"token id {lo if lo < 0 else hi} is outside the vocabulary [0, {vocab_size}); was "
            "the text encoded with this model's tokenizer?"
        )
    return input_ids.long()


def check_past_fits(
    past: KVCache | DecoderCache | None,
    batch_size: int,
    new: int,
    device: torch.device,
    max_seq_len: int | None,
) -> int:
    """``T_past`` (0 without a cache), once ``past`` and ``new`` positions fit the model.

    The caller checks first that ``past`` is its own kind of cache, with its layers.

    Args:
        past: the cache of the preceding positions, or None.
        batch_size: the rows ``B`` of ``input_ids``; ``past`` must have ``B`` rows or 1.
        new: the positions ``T`` of ``input_ids``.
        device: the model's device, where ``past`` must be.
        max_seq_len: the model's context, or None when unknown (not checked).

    Raises:
        ModelError: on a cache with other rows or on another device, or ``T_past + T`` over
            ``max_seq_len``.
    """
    t_past = 0
    if past is not None:
        if past.batch_size not in (1, batch_size):
            raise ModelError(
                f"past has {past.batch_size} rows but input_ids has {batch_size}; pass a "
                "batch-1 cache (broadcast) or one with the same rows"
            )
        if past.device != device:
            raise ModelError(f"past is on {past.device} but the model is on {device}")
        t_past = past.length
    if max_seq_len is not None and t_past + new > max_seq_len:
        raise ModelError(
            f"sequence too long: {t_past} cached + {new} new = {t_past + new} positions exceed "
            f"the model's context max_seq_len = {max_seq_len}; shorten the prompt (keep its "
            f"last {max(max_seq_len - t_past, 0)} tokens) or use a model with a longer context"
        )
    return t_past
