"""Distillation prompts: read the JSON-lines prompt files, split them, apply the chat template.

docs/definitions.md sec. 10. Prompts are training data only (never evaluation text).

A prompt file holds one JSON object a line: ``{"source": ..., "prompt": "..."}`` (one user
turn) or ``{"source": ..., "messages": [{"role": ..., "content": ...}, ...]}`` (a conversation
whose last turn is the user's: multi-turn follow-ups). A :data:`Prompt` is the text of the
first or the ``(role, content)`` turns of the second.

Public surface:
    MIN_PROMPTS                                2: one held out, one to train on
    Prompt, ROLES                              str | tuple[(role, content), ...]
    read_prompts(paths) -> list[Prompt]        the JSON lines above
    read_prompts_with_sources(paths) -> list[(source, prompt)]
    split_prompts(n, seed, fraction, minimum) -> (train, heldout)   index arrays, disjoint
    as_messages(prompt) -> [{"role", "content"}]                     the chat template's input
    format_prompts(tokenizer, prompts) -> list[list[int]]           the chat template
    hash_prompts(prompt_ids) -> str                                 the data's identity
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from blockdraft.core.checks import check_int
from blockdraft.core.jsonl import iter_jsonl
from blockdraft.training.errors import TrainingError

MIN_PROMPTS = 2
"""The fewest prompts a distillation set can be made of: one held out, one to train on."""

Prompt = str | tuple[tuple[str, str], ...]
"""One user turn's text, or a conversation as ``(role, content)`` turns ending with the user's."""
ROLES = ("system", "user", "assistant")


def _messages(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    """A ``"messages"`` field checked: a non-empty list of ``{"role", "content"}`` objects
    with known roles and string contents, the last one the user's."""
    expected = (f'{where}: "messages" must be a non-empty list of {{"role": ..., "content": '
                f'...}} objects (roles {", ".join(ROLES)}), the last one the user\'s')
    if not isinstance(value, list) or not value:
        raise TrainingError(expected)
    turns: list[tuple[str, str]] = []
    for turn in value:
        if not (isinstance(turn, dict) and turn.get("role") in ROLES
                and isinstance(turn.get("content"), str)):
            raise TrainingError(f"{expected}; got {json.dumps(turn)[:80]}")
        turns.append((turn["role"], turn["content"]))
    if turns[-1][0] != "user":
        raise TrainingError(f"{expected}; the last turn is the {turns[-1][0]}'s")
    return tuple(turns)


def read_prompts(paths: Sequence[str | os.PathLike[str]]) -> list[Prompt]:
    """The prompt of every line of the given JSON-lines files, in order: the ``"prompt"``
    text, or the ``"messages"`` turns.

    Raises:
        TrainingError: a missing file, a line that is not a JSON object with a string
            ``"prompt"`` or valid ``"messages"``, or no prompts at all.
    """
    return [prompt for _, prompt in read_prompts_with_sources(paths)]


def read_prompts_with_sources(paths: Sequence[str | os.PathLike[str]]
                              ) -> list[tuple[str, Prompt]]:
    """``(source, prompt)`` of every line of the given JSON-lines files, in order (``source``
    is the line's ``"source"`` string, ``""`` when it has none).

    Raises:
        TrainingError: as :func:`read_prompts`.
    """
    items: list[tuple[str, Prompt]] = []
    for path in paths:
        p = Path(path)
        if not p.is_file():
            raise TrainingError(f"prompt file {str(p)!r} does not exist" if not p.exists()
                                else f"prompt file {str(p)!r} is not a file")
        try:
            for number, obj in iter_jsonl(p, TrainingError):
                prompt: Prompt
                if "messages" in obj and "prompt" not in obj:
                    prompt = _messages(obj["messages"], f"{p}:{number}")
                elif isinstance(obj.get("prompt"), str):
                    prompt = obj["prompt"]
                else:
                    raise TrainingError(
                        f'{p}:{number}: expected an object with a string "prompt" '
                        '(one {"source": ..., "prompt": ...} a line) or a "messages" list')
                source = obj.get("source")
                items.append((source if isinstance(source, str) else "", prompt))
        except UnicodeDecodeError as e:
            raise TrainingError(f"{p}: not UTF-8 text ({e.reason} at byte {e.start}); "
                                "re-encode the file as UTF-8") from None
    if not items:
        raise TrainingError("no prompts in " + ", ".join(str(p) for p in paths)
                            + ' (JSON lines of {"source": ..., "prompt": ...} expected)')
    return items


def split_prompts(
    n: int, seed: int = 0, fraction: float = 0.02, minimum: int = 200
) -> tuple[np.ndarray, np.ndarray]:
    """A seeded shuffle of ``range(n)`` cut into (train, held-out) index arrays (int64).

    The held-out part has ``max(minimum, round(fraction * n))`` prompts, at most ``n - 1``
    (at least one prompt is left to train on). The two arrays are disjoint and together hold
    every index once; both depend only on ``(n, seed, fraction, minimum)``.

    Raises:
        TrainingError: fewer than 2 prompts (one is held out, one trained on), or
            ``fraction`` outside ``[0, 1)``.
    """
    n = check_int(n, "n", TrainingError, minimum=0)
    if n < MIN_PROMPTS:
        raise TrainingError(
            f"{n} prompt{'' if n == 1 else 's'}: a distillation set needs at least "
            f"{MIN_PROMPTS}, one held out to evaluate the heads on and one to train them on "
            "(a few thousand train good heads); add prompts to the prompt files")
    if not 0.0 <= fraction < 1.0:
        raise TrainingError(f"heldout fraction must lie in [0, 1), got {fraction!r}")
    order = np.random.default_rng(seed).permutation(n).astype(np.int64)
    held = min(max(int(minimum), int(round(fraction * n))), n - 1)
    return order[held:], order[:held]


def as_messages(prompt: Prompt) -> list[dict[str, str]]:
    """A prompt as the chat template's ``messages``: a text is one user turn."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [{"role": role, "content": content} for role, content in prompt]


def format_prompts(tokenizer: Any, texts: Sequence[Prompt]) -> list[list[int]]:
    """Each prompt (a text: one user turn; or its turns) in the tokenizer's chat template,
    with the generation prompt (``add_generation_prompt=True``), as token ids.

    Raises:
        TrainingError: the tokenizer has no chat template.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise TrainingError("the tokenizer has no chat template; pass token ids instead")
    out: list[list[int]] = []
    for text in texts:
        ids = tokenizer.apply_chat_template(
            as_messages(text), add_generation_prompt=True, tokenize=True
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
