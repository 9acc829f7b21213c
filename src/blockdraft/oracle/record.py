"""Record a trace from a real model: greedy-decode once, then one teacher-forced pass.

docs/definitions.md sec. 6: with exact verification the committed text is always the greedy
output ``y``, and the heads' logits at position ``t`` depend only on ``x, y_<=t``. So per
prompt ``x``:

1. ``y = greedy_generate(model, x, max_new_tokens, eos_id)`` (head 1 with the KV cache);
2. one teacher-forced forward over ``x + y_1..y_{m-1}``; the outputs at input positions
   ``len(x) - 1 .. len(x) + m - 2`` are the lattices at ``t = 0 .. m - 1``;
3. ``TraceWriter.add_logits`` keeps each head's top-``K`` log-probs and full entropy.

The model is any object with ``heads_logits(input_ids [1, T], past=None) -> (logits [1, T, h,
V], past)`` (the reference :class:`~blockdraft.models.BlockwiseLM`, or an adapter), so this
module depends on the models room only through that protocol and its greedy reference.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from blockdraft.models.capabilities import capabilities_of
from blockdraft.oracle.errors import OracleError
from blockdraft.oracle.trace import Trace, TraceWriter


def teacher_forced_logits(model: Any, prompt: Sequence[int], greedy: Sequence[int]) -> Any:
    """``[m, h, V]`` head logits at positions ``t = 0 .. m-1`` (torch, on the model's device).

    Raises:
        OracleError: when prompt + continuation exceed the model's context.
    """
    import torch

    ids = list(prompt) + list(greedy[:-1])
    max_len = capabilities_of(model).max_seq_len
    if max_len is not None and len(ids) > max_len:
        raise OracleError(
            f"prompt ({len(prompt)} tokens) + continuation ({len(greedy)}) exceed the model's "
            f"context of {max_len} tokens; use a shorter prompt or max_new_tokens"
        )
    device = model.device
    with torch.no_grad():
        logits, _ = model.heads_logits(torch.tensor([ids], dtype=torch.long, device=device))
    return logits[0, len(prompt) - 1:]


def record_trace(
    model: Any,
    prompts: Iterable[Sequence[int]],
    path: str | Path,
    *,
    max_new_tokens: int,
    eos_id: int | None = None,
    K: int = 16,
    signature: Mapping[str, Any] | None = None,
    overwrite: bool = False,
    progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None,
) -> Trace:
    """Greedy-decode each prompt and write the trace of docs/definitions.md sec. 6.

    Args:
        model: a heads model (see the module docstring), in eval mode.
        prompts: token-id sequences, each non-empty.
        path: the trace directory to write.
        max_new_tokens: the greedy continuation's length cap (EOS stops earlier and is kept).
        eos_id: the end-of-text id, or None.
        K: top-K kept per head (>= every k analysed later).
        signature: settings to record (model, data, ...); h, K, V and the code version are
            added by the writer.
        overwrite: replace an existing trace (only once the new one is complete and opens;
            a failed or interrupted run leaves the old one as it was).
        progress: wraps the prompt loop (e.g. a progress bar).

    Returns:
        The trace, opened.
    """
    from blockdraft.models.generate import greedy_generate

    prompt_lists = [list(map(int, p)) for p in prompts]
    if not prompt_lists:
        raise OracleError("no prompts to trace")
    for i, p in enumerate(prompt_lists):
        if not p:
            raise OracleError(f"prompt {i} is empty; every prompt needs at least one token")
    h = int(model.config.h)
    v = int(model.config.vocab_size)
    items: Iterable[list[int]] = progress(prompt_lists) if progress else prompt_lists
    with TraceWriter(path, h=h, K=K, V=v, signature=dict(signature or {}),
                     overwrite=overwrite) as writer:
        for prompt in items:
            y = greedy_generate(model, prompt, max_new_tokens, eos_id=eos_id)
            if not y:
                raise OracleError(f"the model generated nothing for a prompt of {len(prompt)} "
                                  "tokens (max_new_tokens = 0?)")
            logits = teacher_forced_logits(model, prompt, y)
            writer.add_logits(np.asarray(prompt), np.asarray(y), logits)
    return Trace.open(path)
