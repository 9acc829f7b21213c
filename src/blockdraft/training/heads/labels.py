"""Labels from one forward: the base's hidden states and next-token predictions along a text.

docs/definitions.md sec. 10. Heads need, at each answer position ``j``, the base's final hidden
state ``h_j`` and the base's greedy tokens after it. Generating the answer token by token
(:mod:`~blockdraft.training.heads.generation`) gives both at generation speed. One
teacher-forced forward over ``x + t_1 .. t_{m-1}`` gives every ``h_j`` (the final-norm output
at the position that predicts ``t_{j+1}``) at once, at prefill speed, and with it the base's
own prediction ``g_{j+1} = argmax lm_head(h_j)``:

- where ``t`` is the base's own greedy answer (same model, runtime and precision), ``g = t``
  and the states are the generation path's, up to float rounding;
- elsewhere (text from a faster generator: another precision, another runtime, larger
  batches; or any text the base would plausibly write) ``g`` is the base's prediction on that
  text, which is what a labelled shard stores as its answer (the heads' targets), the text
  beside it (``text_ids``).

A labelled set mirrors a source distillation set shard for shard: the same plan (prompts,
held-out split, shard names), each finished source shard's text labelled by this base in this
dtype. A run labels the source shards not labelled yet, so it resumes, and a later run takes
the shards the source has gained since.

Public surface:
    label_batch(model, prompts, texts, pad_id) -> (labels, hidden)     one forward
    forward_states(model, rows, modules, pad_id) -> [[B, T, d]]  modules' outputs, one forward
    LabelSettings                                what a labelled set depends on (its key)
    label_distill_set(model, source, folder, settings, ...) -> DistillSet
    label(source, base=..., ...) -> DistillSet  load the base and run
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from blockdraft.core.files import cache_dir, write_text_atomic
from blockdraft.training.errors import TrainingError
from blockdraft.training.heads.generation import final_norm
from blockdraft.training.heads.progress import ProgressBar, log_line
from blockdraft.training.heads.shards import (
    PLAN_FILE,
    DistillSet,
    Shard,
    check_distill_folder,
    check_shards,
    open_distill_set,
    read_shard,
    write_shard,
)
from blockdraft.training.resume import changed_settings

FORMAT_VERSION = "1"

Labeller = Callable[[Any, Sequence[Sequence[int]], Sequence[Sequence[int]], int],
                    tuple[list[list[int]], list[torch.Tensor]]]


@torch.no_grad()
def forward_states(model: Any, rows: Sequence[Sequence[int]], modules: Sequence[Any],
                   pad_id: int = 0) -> list[torch.Tensor]:
    """One teacher-forced forward over ``B`` token rows, right-padded (positions ``0 .. |r| - 1``
    as unpadded; padding after a row is never attended to by it), and the outputs of
    ``modules`` (the base's final norm, decoder layers) along them.

    Args:
        model: a ``transformers`` causal LM (eval mode).
        rows: ``B`` non-empty token-id lists.
        modules: modules of ``model`` whose output (the first of a tuple) to keep.
        pad_id: the id padding is filled with.

    Returns:
        One ``[B, T, d]`` tensor per module (the model's dtype, on its device; ``T`` the
        longest row), row ``b``'s positions ``0 .. |rows[b]| - 1`` first.

    Raises:
        TrainingError: a module that did not run exactly once.
    """
    device = next(model.parameters()).device
    longest = max(len(r) for r in rows)
    ids = torch.full((len(rows), longest), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), longest), dtype=torch.long)
    for b, r in enumerate(rows):
        ids[b, :len(r)] = torch.as_tensor(list(r), dtype=torch.long)
        mask[b, :len(r)] = 1
    captured: list[list[torch.Tensor]] = [[] for _ in modules]

    def hook(index: int) -> Any:
        def keep(_module: Any, _inputs: Any, output: Any) -> None:
            captured[index].append((output[0] if isinstance(output, tuple) else output).detach())
        return keep

    handles = [m.register_forward_hook(hook(i)) for i, m in enumerate(modules)]
    try:
        model(input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=False,
              logits_to_keep=1)
    finally:
        for handle in handles:
            handle.remove()
    if any(len(c) != 1 for c in captured):
        raise TrainingError(f"a hooked module fired {[len(c) for c in captured]} times in one "
                            "forward (once each expected)")
    return [c[0] for c in captured]


@torch.no_grad()
def label_batch(
    model: Any,
    prompts: Sequence[Sequence[int]],
    texts: Sequence[Sequence[int]],
    pad_id: int = 0,
) -> tuple[list[list[int]], list[torch.Tensor]]:
    """The base's predictions and final hidden states along ``B`` texts, in one forward.

    The rows ``x_b + t_b[:-1]`` run in one forward (:func:`forward_states`).

    Args:
        model: a ``transformers`` causal LM (eval mode) with a final norm and a plain
            ``lm_head`` (no logit soft-capping).
        prompts: ``B`` non-empty token-id lists.
        texts: ``B`` non-empty token-id lists ``t_1 .. t_m`` (the answers to label).
        pad_id: the id padding is filled with (never attended to).

    Returns:
        ``labels[b] = [g_1 .. g_m]`` (``g_{j+1}`` the base's argmax at ``h_j``) and
        ``hidden[b]`` of shape ``[m, d]`` (the model's dtype): row ``j`` is ``h_j``.

    Raises:
        TrainingError: empty or mismatched inputs, or a model whose logits are not
            ``lm_head(h)``.
    """
    if not prompts or len(prompts) != len(texts):
        raise TrainingError(f"label_batch needs as many texts as prompts (>= 1), got "
                            f"{len(prompts)} prompts and {len(texts)} texts")
    if any(len(x) == 0 for x in prompts) or any(len(t) == 0 for t in texts):
        raise TrainingError("label_batch needs non-empty prompts and texts")
    config = getattr(model, "config", None)
    if getattr(config, "final_logit_softcapping", None):
        raise TrainingError(f"{type(model).__name__} soft-caps its logits: its predictions "
                            "are not lm_head(h), which one-forward labels assume")
    rows = [list(x) + list(t[:-1]) for x, t in zip(prompts, texts, strict=True)]
    states = forward_states(model, rows, [final_norm(model)], pad_id)[0]  # (B, T, d)
    head = model.get_output_embeddings()
    labels: list[list[int]] = []
    hidden: list[torch.Tensor] = []
    for b, (x, t) in enumerate(zip(prompts, texts, strict=True)):
        h = states[b, len(x) - 1:len(x) - 1 + len(t)]  # (m, d): h_0 .. h_{m-1}
        labels.append(head(h).argmax(-1).cpu().tolist())
        hidden.append(h.cpu())
    return labels, hidden


@dataclass(frozen=True)
class LabelSettings:
    """What a labelled set depends on (all hashed into its key).

    Attributes:
        base: the labelling base's identity (a name and its resolved folder).
        dtype: the dtype the base runs in while labelling (float32: the precision decoding
            is judged in).
        batch_size: texts per forward (sorted by length).
        hidden_dtype: the dtype the hidden states are stored in.
        source: the source set's identity (:func:`source_key`).
    """

    base: str
    dtype: str = "float32"
    batch_size: int = 16
    hidden_dtype: str = "bfloat16"
    source: str = ""
    version: str = field(default=FORMAT_VERSION)

    def key(self) -> str:
        """A 16-hex-digit hash of every field: the default folder's name."""
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()
                              ).hexdigest()[:16]


def source_key(source: DistillSet) -> str:
    """A source set's identity: its plan's settings and shard list (not how far it got)."""
    raw = json.dumps([source.plan.get("settings"), source.plan.get("shards")], sort_keys=True)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def label_distill_set(
    model: Any,
    source: DistillSet,
    folder: str | os.PathLike[str],
    settings: LabelSettings,
    *,
    pad_id: int = 0,
    max_tokens: int | None = None,
    minutes: float | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = log_line,
    labeller: Labeller = label_batch,
) -> DistillSet:
    """Label the finished shards of ``source`` that ``folder`` lacks (held-out first).

    Args:
        model: the base (eval mode, in ``settings.dtype``).
        source: the set whose texts (its answers) are labelled.
        folder: the labelled set: new or empty (its plan, the source's with these settings,
            is written first) or one this function wrote with the same settings.
        settings: see :class:`LabelSettings` (``source`` is checked against ``source``).
        pad_id: see :func:`label_batch`.
        max_tokens: stop once this many tokens (both splits) are labelled in all.
        minutes: this run's time box; a shard starts only if it should end inside it.
        progress, log: a progress bar; one line per shard.
        labeller: the one-forward labeller (:func:`label_batch`; tests pass doubles).

    Returns:
        The labelled set as it stands after this run.

    Raises:
        TrainingError: ``settings.source`` is not ``source``'s, or ``folder`` holds another
            set (each changed setting named) or other files.
    """
    if settings.source != source_key(source):
        raise TrainingError(f"settings.source {settings.source!r} is not the source set's "
                            f"identity {source_key(source)!r}")
    root = check_distill_folder(folder)
    plan_file = root / PLAN_FILE
    fresh: tuple[Path, Path | None] | None = None  # what this run made (plan, folder)
    if plan_file.is_file():
        dset = open_distill_set(root)
        changed = changed_settings(dset.plan.get("settings", {}), asdict(settings))
        if changed:
            raise TrainingError(
                f"{str(root)!r} holds a labelled set with other settings: " + ", ".join(changed)
                + "; pass the same settings to continue it, or another folder")
    else:
        made = not root.exists()
        root.mkdir(parents=True, exist_ok=True)
        plan = {**source.plan, "settings": asdict(settings),
                "labels": {"source": str(source.folder), "source_settings":
                           source.plan.get("settings")}}
        write_text_atomic(plan_file, json.dumps(plan) + "\n")
        dset = open_distill_set(root)
        fresh = (plan_file, root if made else None)  # taken back if no shard gets labelled
    todo = [name for name in source.done if name not in set(dset.done)]
    todo.sort(key=lambda n: not n.startswith("heldout"))
    summary = dset.summary()
    total = summary["train_tokens"] + summary["heldout_tokens"]
    start, per_shard = time.monotonic(), 0.0
    bar = ProgressBar("label", len(todo), enabled=progress)
    done_before = len(dset.done)
    try:
        for name in todo:
            if max_tokens is not None and total >= max_tokens:
                break
            if minutes is not None and time.monotonic() - start + per_shard >= 60.0 * minutes:
                break
            t0 = time.monotonic()
            shard, agree = _label_shard(model, read_shard(source.shard_path(name)), settings,
                                        pad_id, labeller)
            seconds = time.monotonic() - t0
            per_shard = seconds
            write_shard(dset.shard_path(name), shard, {
                "prompts": str(shard.num_prompts), "tokens": str(shard.num_tokens),
                "seconds": f"{seconds:.1f}", "key": settings.key(), "agree": f"{agree:.6f}"})
            dset.done.append(name)
            total += shard.num_tokens
            bar.advance(1, info=f"{shard.num_tokens / max(seconds, 1e-9):.0f} tokens/s")
            if log is not None and not sys.stderr.isatty():
                log(f"labelled {name}: {shard.num_prompts} texts, {shard.num_tokens} tokens in "
                    f"{seconds:.0f} s ({shard.num_tokens / max(seconds, 1e-9):.0f} tokens/s), "
                    f"labels equal to the text at {agree:.1%} of positions")
    except BaseException:
        if fresh is None or len(dset.done) > done_before:
            raise
        # this run made the set and labelled nothing: leave nothing half-made behind
        fresh[0].unlink(missing_ok=True)
        if fresh[1] is not None:
            with contextlib.suppress(OSError):
                fresh[1].rmdir()
        raise
    finally:
        bar.close()
    order = {s["name"]: k for k, s in enumerate(dset.plan["shards"])}
    dset.done.sort(key=order.__getitem__)
    return dset


def _label_shard(model: Any, source: Shard, settings: LabelSettings, pad_id: int,
                 labeller: Labeller) -> tuple[Shard, float]:
    """One source shard labelled: its texts sorted by length, in batches; the share of
    positions whose label equals the text's token."""
    p = source.num_prompts
    prompts = [source.prompt(k) for k in range(p)]
    texts = [source.answer(k) for k in range(p)]
    order = sorted(range(p), key=lambda k: (len(prompts[k]) + len(texts[k]), k))
    labels: dict[int, list[int]] = {}
    states: dict[int, torch.Tensor] = {}
    dtype = getattr(torch, settings.hidden_dtype)
    for k in range(0, p, settings.batch_size):
        batch = order[k:k + settings.batch_size]
        ys, hs = labeller(model, [prompts[i] for i in batch], [texts[i] for i in batch], pad_id)
        for i, y, h in zip(batch, ys, hs, strict=True):
            if len(y) != len(texts[i]) or h.shape[0] != len(texts[i]):
                raise TrainingError(f"the labeller returned {len(y)} labels for a text of "
                                    f"{len(texts[i])} tokens")
            labels[i], states[i] = y, h.to(dtype)
    keep = range(p)
    shard = Shard.from_lists(source.prompt_index.tolist(), prompts, [labels[i] for i in keep],
                             [states[i] for i in keep])
    shard.text_ids = source.answer_ids.astype(np.int32)
    agree = float(np.mean(shard.answer_ids == shard.text_ids)) if shard.num_tokens else 1.0
    return shard, agree


def label(
    source: str | os.PathLike[str],
    base: str = "smollm2",
    *,
    folder: str | os.PathLike[str] | None = None,
    dtype: str = "float32",
    batch_size: int = 16,
    hidden_dtype: str = "bfloat16",
    max_tokens: int | None = None,
    minutes: float | None = None,
    threads: int | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = log_line,
) -> DistillSet:
    """Label a distillation set's texts with a base in one forward each (load, then run).

    Args:
        source: the source distillation folder (``blockdraft heads distill``).
        base: a known model name (``"smollm2"``), an HF folder or a GGUF file.
        folder: the labelled set; default ``$BLOCKDRAFT_CACHE/labels/<key>``.
        dtype, batch_size, hidden_dtype: see :class:`LabelSettings`.
        max_tokens, minutes, progress, log: see :func:`label_distill_set`.
        threads: torch CPU threads (default: :func:`~.distill.default_threads`).

    Returns:
        The labelled set.

    Raises:
        TrainingError: no source set there, or see :func:`label_distill_set`.
    """
    from blockdraft.models.hf.loading import load_causal_lm, resolve_base
    from blockdraft.training.heads.distill import default_threads
    from blockdraft.training.heads.generation import pad_id_of

    src = open_distill_set(source)
    if not src.done:
        raise TrainingError(f"{str(source)!r} has no finished shard to label yet")
    check_shards(src)  # a damaged shard is named now, before the base loads or a folder is made
    if folder is not None:
        check_distill_folder(folder)  # before the base loads
    settings = LabelSettings(base=f"{base}|{resolve_base(base).name}", dtype=dtype,
                             batch_size=batch_size, hidden_dtype=hidden_dtype,
                             source=source_key(src))
    torch.set_num_threads(threads or default_threads())
    model, tokenizer = load_causal_lm(base, dtype)
    root = Path(folder) if folder is not None else cache_dir("labels", settings.key())
    if log is not None:
        log(f"labelled set {root} of {src.folder} (threads {torch.get_num_threads()})")
    pad = pad_id_of(tokenizer) if tokenizer is not None else 0
    return label_distill_set(model, src, root, settings, pad_id=pad, max_tokens=max_tokens,
                             minutes=minutes, progress=progress, log=log)
