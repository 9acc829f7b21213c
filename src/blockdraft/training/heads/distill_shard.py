"""One shard of a distillation set: the settings it depends on, and how it is generated.

A shard is the base's greedy answers and hidden states for a fixed list of prompts
(:mod:`~blockdraft.training.heads.shards` stores it). It is generated the same way in every
process, so a shard is the same whichever process made it: the serial data step
(:func:`~blockdraft.training.heads.distill.build_distill_set`) and the Ray actors
(:mod:`~blockdraft.training.heads.distill_ray`) both call :func:`generate_shard`.

Public surface:
    FORMAT_VERSION                             bumped when the shard contents change meaning
    DistillSettings                            what the data depend on (hashed into the key)
    generate_shard(model, prompt_ids, indices, settings, eos_id, pad_id, ...) -> Shard
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from blockdraft.training.heads.generation import greedy_batch
from blockdraft.training.heads.progress import ProgressBar
from blockdraft.training.heads.shards import Shard

FORMAT_VERSION = "1"
"""Bumped whenever the shard contents change meaning; part of the cache key."""


@dataclass(frozen=True)
class DistillSettings:
    """Every setting the distillation data depend on (all are hashed into the cache key).

    Attributes:
        base: the base model's identity (a name such as ``"smollm2"`` and its resolved folder).
        dtype: the dtype the base runs in (``"bfloat16"``).
        max_new_tokens: answer length cap, tokens.
        batch_size: prompts generated together (bfloat16 results depend slightly on it).
        shard_size: prompts per shard file.
        seed: seeds the shuffle and the held-out split.
        heldout_fraction: share of the prompts held out (for evaluation only).
        heldout_min: at least this many prompts held out (fewer only if there are fewer).
        hidden_dtype: the dtype the hidden states are stored in.
        prompts: a hash of the prompt token ids (the files, the template and the tokenizer).
    """

    base: str
    dtype: str = "bfloat16"
    max_new_tokens: int = 192
    batch_size: int = 32
    shard_size: int = 256
    seed: int = 0
    heldout_fraction: float = 0.02
    heldout_min: int = 200
    hidden_dtype: str = "bfloat16"
    prompts: str = ""
    version: str = field(default=FORMAT_VERSION)

    def key(self) -> str:
        """A 16-hex-digit hash of every field: the cache folder's name."""
        raw = json.dumps(asdict(self), sort_keys=True).encode()
        return hashlib.sha256(raw).hexdigest()[:16]


def generate_shard(
    model: Any,
    prompt_ids: Sequence[Sequence[int]] | Mapping[int, Sequence[int]],
    indices: Sequence[int],
    settings: DistillSettings,
    eos_id: int | None,
    pad_id: int,
    generate: Callable[..., tuple[list[list[int]], list[torch.Tensor]]] = greedy_batch,
    bar: ProgressBar | None = None,
    log: Callable[[str], None] | None = None,
    name: str = "",
) -> Shard:
    """Generate one shard: its prompts (``prompt_ids[i]`` for ``i`` in ``indices``) sorted by
    length, in batches of ``batch_size`` (the same shard in any process: Ray actors run it
    too, :mod:`~blockdraft.training.heads.distill_ray`)."""
    order = sorted(indices, key=lambda i: (len(prompt_ids[i]), i))
    answers: dict[int, list[int]] = {}
    states: dict[int, torch.Tensor] = {}
    hidden_dtype = getattr(torch, settings.hidden_dtype)
    for k in range(0, len(order), settings.batch_size):
        batch = order[k:k + settings.batch_size]
        t0 = time.monotonic()
        ys, hs = generate(model, [prompt_ids[i] for i in batch], settings.max_new_tokens,
                          eos_id, pad_id)
        n = 0
        for i, y, h in zip(batch, ys, hs, strict=True):
            answers[i], states[i] = y, h.to(hidden_dtype)
            n += len(y)
        seconds = time.monotonic() - t0
        if bar is not None:
            bar.advance(len(batch), info=f"{n / max(seconds, 1e-9):.0f} tokens/s")
        if log is not None and not sys.stderr.isatty():
            log(f"  {name} batch {k // settings.batch_size}: {len(batch)} prompts "
                f"(length {len(prompt_ids[batch[0]])}-{len(prompt_ids[batch[-1]])}), {n} tokens "
                f"in {seconds:.1f} s ({n / max(seconds, 1e-9):.0f} tokens/s)")
    keep = list(indices)  # the plan's order
    return Shard.from_lists(keep, [prompt_ids[i] for i in keep], [answers[i] for i in keep],
                            [states[i] for i in keep])
