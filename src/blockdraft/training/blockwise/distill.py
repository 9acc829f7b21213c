"""Sequence-level distillation data (Stern et al. 2018 sec. 6.2): the base model's own greedy
outputs, for training the heads on what the base will actually say."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from blockdraft.models.blockwise import BlockwiseLM
from blockdraft.models.generate import greedy_generate
from blockdraft.training.errors import TrainingError


def distill_targets(
    model: BlockwiseLM,
    prompts: Sequence[Sequence[int] | np.ndarray],
    max_new_tokens: int,
    eos_id: int | None = None,
) -> np.ndarray:
    """Sequence-level distillation data (Stern sec. 6.2): the base model's own greedy outputs.

    Each prompt is followed by head 1's greedy continuation (:func:`greedy_generate`), and
    with ``eos_id`` by an EOS when the continuation did not end with one; the results are
    concatenated into one stream for ``train(..., mode="heads")``, so the heads learn to
    predict what the base model will actually say.

    Returns:
        int64 ``[N]`` token stream.

    Raises:
        TrainingError: on an empty prompt list.
        ModelError: on a prompt :func:`greedy_generate` rejects.
    """
    if len(prompts) == 0:
        raise TrainingError("distill_targets needs at least one prompt")
    parts: list[np.ndarray] = []
    for prompt in prompts:
        out = list(prompt) + greedy_generate(model, prompt, max_new_tokens, eos_id)
        if eos_id is not None and out[-1] != eos_id:
            out.append(eos_id)
        parts.append(np.asarray(out, dtype=np.int64))
    return np.concatenate(parts)
