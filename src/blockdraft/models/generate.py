"""Greedy decoding with head 1: the reference output of the lossless guarantee
(docs/definitions.md sec. 1).

Public surface:
    greedy_generate(model, prompt_ids, max_new_tokens, eos_id=None) -> list[int]
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from blockdraft.core.checks import check_int
from blockdraft.models.blockwise import BlockwiseLM
from blockdraft.models.errors import ModelError
from blockdraft.models.inputs import check_prompt
from blockdraft.models.protocol import FactoredHeadsModel


@torch.no_grad()
def greedy_generate(
    model: BlockwiseLM,
    prompt_ids: Sequence[int] | np.ndarray | torch.Tensor,
    max_new_tokens: int,
    eos_id: int | None = None,
    *,
    clock: list[float] | None = None,
) -> list[int]:
    """Plain greedy decoding with head 1 and the KV cache: the greedy reference ``y``.

    One prefill on the prompt, then one step per token; the model runs on its own device. Only
    head 1 is projected (the cost of a plain LM of the same size, the fair baseline for
    speedups); other models go through ``heads_logits``.

    Args:
        model: any model with ``heads_logits(input_ids [1, T], past) -> ([1, T, h, V], past)``
            (a :class:`BlockwiseLM` or :class:`RescorerLM`).
        prompt_ids: the prompt ``x`` (non-empty).
        max_new_tokens: at most this many tokens are generated (``>= 0``).
        eos_id: stop after generating this token (it is included in the output); None never
            stops early.
        clock: when given, receives the wall seconds of the prefill, then of every step (a
            benchmark's accounting of the call; the device synchronised).

    Returns:
        The generated ids ``y_1 .. y_m`` (the prompt not included), ``m <= max_new_tokens``.
        Ties in the argmax go to the smallest token id (``torch.argmax``).

    Raises:
        ModelError: on an empty prompt, a negative ``max_new_tokens``, or when the model would
            have to read more than ``max_seq_len`` positions (``len(prompt) + max_new_tokens
            - 1`` of them: the last generated token is never fed back).
    """
    max_new_tokens = check_int(max_new_tokens, "max_new_tokens", ModelError, minimum=0)
    config = getattr(model, "config", None)
    max_len = getattr(model, "max_seq_len", getattr(config, "max_seq_len", None))
    # the ids against the vocabulary: the model's own forward checks them (check_input_ids)
    prompt = check_prompt(prompt_ids, None, max_len, max_new_tokens, ModelError)
    if max_new_tokens == 0:
        return []
    was_training = bool(getattr(model, "training", False))
    if isinstance(model, torch.nn.Module):
        model.eval()
    device = getattr(model, "device", torch.device("cpu"))
    kwargs: dict[str, Any] = {"last_only": True} if isinstance(model, BlockwiseLM) else {}
    split = isinstance(model, FactoredHeadsModel)  # head 1 alone: a plain LM's cost per token

    def base_logits(ids: torch.Tensor, past: Any) -> tuple[torch.Tensor, Any]:
        """Head 1's raw logits ``[V]`` at the last of ``ids [1, T]``, and the cache."""
        if split:
            x, cache = model.hidden(ids, past)  # (1, T, d)
            return model.project(model.head_states(x[0, -1], heads=1))[0], cache  # (V,)
        logits, cache = model.heads_logits(ids, past, **kwargs)  # (1, T or 1, h, V)
        return logits[0, -1, 0], cache

    try:
        start = time.perf_counter()
        ids = torch.tensor([prompt], dtype=torch.long, device=device)  # (1, T)
        logits, past = base_logits(ids, None)  # (V,)
        out: list[int] = []
        while True:
            token = int(torch.argmax(logits))
            out.append(token)
            if clock is not None:
                clock.append(time.perf_counter() - start)
                start = time.perf_counter()
            if len(out) >= max_new_tokens or (eos_id is not None and token == eos_id):
                return out
            step = torch.tensor([[token]], dtype=torch.long, device=device)  # (1, 1)
            logits, past = base_logits(step, past)  # (V,)
    finally:
        if was_training and isinstance(model, torch.nn.Module):
            model.train()
