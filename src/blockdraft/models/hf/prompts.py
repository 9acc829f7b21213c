"""Distillation prompts: read the JSON-lines prompt files, split them, apply the chat template.

docs/definitions.md sec. 10. Prompts are training data only (never evaluation text).

Public surface:
    read_prompts(paths) -> list[str]           ``{"source", "prompt"}`` JSON lines
    split_prompts(n, seed, fraction, minimum) -> (train, heldout)   index arrays, disjoint
    format_prompts(tokenizer, texts) -> list[list[int]]             the chat template
    hash_prompts(prompt_ids) -> str                                 the data's identity
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from blockdraft.core.checks import check_int
from blockdraft.core.jsonl import iter_jsonl
from blockdraft.models.errors import ModelError


def read_prompts(paths: Sequence[str | os.PathLike[str]]) -> list[str]:
    """The ``"prompt"`` field of every line of the given JSON-lines files, in order.

    Raises:
        ModelError: a missing file, a line that is not a JSON object with a string
            ``"prompt"``, or no prompts at all.
    """
    texts: list[str] = []
    for path in paths:
        p = Path(path)
        if not p.is_file():
            raise ModelError(f"prompt file {str(p)!r} does not exist")
        for number, obj in iter_jsonl(p, ModelError):
            if not isinstance(obj.get("prompt"), str):
                raise ModelError(f"{p}:{number}: expected an object with a string 'prompt'")
            texts.append(obj["prompt"])
    if not texts:
        raise ModelError("no prompts in " + ", ".join(str(p) for p in paths))
    return texts


def split_prompts(
    n: int, seed: int = 0, fraction: float = 0.02, minimum: int = 200
) -> tuple[np.ndarray, np.ndarray]:
    """A seeded shuffle of ``range(n)`` cut into (train, held-out) index arrays (int64).

    The held-out part has ``max(minimum, round(fraction * n))`` prompts, at most ``n - 1``
    (at least one prompt is left to train on when ``n >= 2``). The two arrays are disjoint and
    together hold every index once; both depend only on ``(n, seed, fraction, minimum)``.

    Raises:
        ModelError: ``n < 2``, or ``fraction`` outside ``[0, 1)``.
    """
    n = check_int(n, "n", ModelError, minimum=2)
    if not 0.0 <= fraction < 1.0:
        raise ModelError(f"heldout fraction must lie in [0, 1), got {fraction!r}")
    order = np.random.default_rng(seed).permutation(n).astype(np.int64)
    held = min(max(int(minimum), int(round(fraction * n))), n - 1)
    return order[held:], order[:held]


def format_prompts(tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
    """Each text as one user turn in the tokenizer's chat template, with the generation
    prompt (``add_generation_prompt=True``), as token ids.

    Raises:
        ModelError: the tokenizer has no chat template.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise ModelError("the tokenizer has no chat template; pass token ids instead")
    out: list[list[int]] = []
    for text in texts:
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
        )
        if isinstance(ids, dict) or hasattr(ids, "keys"):  # a BatchEncoding
            ids = ids["input_ids"]
        out.append([int(i) for i in ids])
    return out


def hash_prompts(prompt_ids: Sequence[Sequence[int]]) -> str:
    """A 16-hex-digit hash of a list of token-id lists (the distillation input)."""
    h = hashlib.sha256()
    for ids in prompt_ids:
        h.update(np.asarray(ids, dtype=np.int64).tobytes())
        h.update(b"|")
    return h.hexdigest()[:16]
