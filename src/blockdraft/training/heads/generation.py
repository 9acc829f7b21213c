"""Batched greedy generation that records the base's final hidden states on the way.

docs/definitions.md sec. 10. ``h_j`` is the base's final hidden state (after the final norm)
at the position whose prediction is ``y_{j+1}``: ``h_0`` at the prompt's last token, ``h_j`` at
``y_j``. A forward hook on the final norm records the prefill's last position and every step's
new position, so no second pass is run. Prompts are left-padded; a row leaves the batch (and
the KV cache) as soon as it has produced its EOS or ``max_new_tokens`` tokens.

Public surface:
    final_norm(model) -> torch.nn.Module       the module whose output is ``h_j``
    greedy_batch(model, prompts, max_new_tokens, eos_id, pad_id) -> (answers, hidden)
    pad_id_of(tokenizer) -> int                the id left padding is filled with
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from blockdraft.core.checks import check_positive_int
from blockdraft.models.hf.body import cache_argument, call_with_cache
from blockdraft.training.errors import TrainingError


def final_norm(model: Any) -> torch.nn.Module:
    """The module whose output is the base's final hidden state (Llama-style ``model.norm``,
    GPT-2's ``transformer.ln_f``).

    Raises:
        TrainingError: neither is found.
    """
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    for owner in (decoder, getattr(model, "model", None), getattr(model, "transformer", None)):
        for name in ("norm", "ln_f", "final_layernorm"):
            module = getattr(owner, name, None) if owner is not None else None
            if isinstance(module, torch.nn.Module):
                return module
    raise TrainingError(f"cannot find the final norm of {type(model).__name__}")


def pad_id_of(tokenizer: Any) -> int:
    """The tokenizer's pad id, else its EOS id, else 0 (padding is masked out: any valid id
    serves)."""
    if tokenizer.pad_token_id is not None:
        return int(tokenizer.pad_token_id)
    return int(tokenizer.eos_token_id or 0)


@torch.no_grad()
def greedy_batch(
    model: Any,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    eos_id: int | None,
    pad_id: int = 0,
) -> tuple[list[list[int]], list[torch.Tensor]]:
    """Greedy answers of a batch of prompts and the base's final hidden states along them.

    One left-padded prefill, then one step per token on the model's own KV cache; a row that
    has produced ``eos_id`` (kept) or ``max_new_tokens`` tokens leaves the batch.

    Args:
        model: a ``transformers`` causal LM (eval mode) with a final norm (:func:`final_norm`).
        prompts: ``B`` non-empty token-id lists.
        max_new_tokens: answer length cap ``>= 1``.
        eos_id: the end-of-sequence id (None: answers always have ``max_new_tokens`` tokens).
        pad_id: the id padding is filled with (masked out; any valid id).

    Returns:
        ``answers[b] = [y_1 .. y_m]`` and ``hidden[b]`` of shape ``[m, d]`` (the model's dtype):
        row ``j`` is ``h_j``, the final-norm output at the position predicting ``y_{j+1}``.
    """
    max_new_tokens = check_positive_int(max_new_tokens, "max_new_tokens", TrainingError)
    if not prompts or any(len(p) == 0 for p in prompts):
        raise TrainingError("greedy_batch needs a non-empty list of non-empty prompts")
    device = next(model.parameters()).device
    b = len(prompts)
    longest = max(len(p) for p in prompts)
    ids = torch.full((b, longest), pad_id, dtype=torch.long)
    mask = torch.zeros((b, longest), dtype=torch.long)
    for row, p in enumerate(prompts):
        ids[row, longest - len(p):] = torch.as_tensor(list(p), dtype=torch.long)
        mask[row, longest - len(p):] = 1
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (B, T)

    captured: list[torch.Tensor] = []

    def hook(_module: Any, _inputs: Any, output: Any) -> None:
        out = output[0] if isinstance(output, tuple) else output
        captured.append(out[:, -1, :].detach())  # (b_active, d): the newest position

    from transformers import DynamicCache

    argument = cache_argument(model)
    if argument is None:
        raise TrainingError(f"{type(model).__name__}.forward takes no key/value cache")
    handle = final_norm(model).register_forward_hook(hook)
    answers: list[list[int]] = [[] for _ in range(b)]
    hidden: list[list[torch.Tensor]] = [[] for _ in range(b)]
    try:
        active = torch.arange(b)
        cache = DynamicCache()
        inputs, attention, pos = ids, mask, positions
        while True:
            captured.clear()
            out, cache = call_with_cache(model, argument, cache, input_ids=inputs,
                                         attention_mask=attention, position_ids=pos,
                                         logits_to_keep=1)
            if len(captured) != 1:
                raise TrainingError(f"the final-norm hook fired {len(captured)} times in a forward")
            state = captured[0].cpu()  # (b_active, d)
            nxt = out.logits[:, -1, :].argmax(-1).cpu()  # (b_active,)
            keep: list[int] = []
            for k, row in enumerate(active.tolist()):
                token = int(nxt[k])
                answers[row].append(token)
                hidden[row].append(state[k])
                if not (token == eos_id or len(answers[row]) >= max_new_tokens):
                    keep.append(k)
            if not keep:
                break
            if len(keep) < len(active):
                index = torch.as_tensor(keep, dtype=torch.long)
                active = active[index]
                cache.batch_select_indices(index.to(device))
                attention = attention[index.to(device)]
                pos = pos[index.to(device)]
                nxt = nxt[index]
            attention = torch.cat([attention, attention.new_ones(len(keep), 1)], dim=1)
            pos = pos[:, -1:] + 1
            inputs = nxt.view(-1, 1).to(device)
    finally:
        handle.remove()
    return answers, [torch.stack(rows) for rows in hidden]
