"""Self-distillation data for Medusa heads: the base model's own greedy answers and hidden states.

docs/definitions.md sec. 10. Medusa heads are trained on what the base model itself says
(Medusa-2 self-distillation; Stern et al. sec. 6.2): for every prompt ``x`` the base's greedy
answer ``y_1 .. y_m`` (cut after the EOS, which is kept; at most ``max_new_tokens``) and the
base's final hidden states ``h_0 .. h_{m-1}`` (:mod:`~blockdraft.training.heads.generation`).
A head trained on ``h_j`` then needs no base model at all.

This module plans and runs the data step: prompts (:mod:`~blockdraft.training.heads.prompts`)
are split into held-out and training prompts and cut into fixed shards; each shard is
generated in batches of prompts sorted by length and written as one file
(:mod:`~blockdraft.training.heads.shards`) in a folder, by default
``$BLOCKDRAFT_CACHE/distill/<key>``, ``key`` a hash of every setting that changes its content.
A run stops between shards (a prompt, token or time budget), and a later run goes on from
there; a run with other settings is refused, naming each changed setting.

Public surface:
    DistillSettings                            what the data depend on (hashed into the key;
                                               :mod:`~blockdraft.training.heads.distill_shard`,
                                               with ``generate_shard``, one shard's generation)
    build_distill_set(model, prompt_ids, folder, settings, ...) -> DistillSet
    distill(base, prompt_files, ...) -> DistillSet         read, load, format, generate
    default_threads() -> int                   torch threads for a busy or a quiet machine

The command: ``blockdraft heads distill`` (:mod:`blockdraft.cli.heads`).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from blockdraft.core.files import cache_dir, write_text_atomic
from blockdraft.training.errors import TrainingError
from blockdraft.training.heads.distill_shard import FORMAT_VERSION, DistillSettings, generate_shard
from blockdraft.training.heads.generation import greedy_batch, pad_id_of
from blockdraft.training.heads.progress import ProgressBar, log_line
from blockdraft.training.heads.prompts import (
    format_prompts,
    hash_prompts,
    read_prompts,
    split_prompts,
)
from blockdraft.training.heads.shards import (
    PLAN_FILE,
    DistillSet,
    Shard,
    check_distill_folder,
    open_distill_set,
    write_shard,
)
from blockdraft.training.resume import changed_settings

__all__ = [  # DistillSettings and generate_shard live in distill_shard; importable here too
    "FORMAT_VERSION",
    "DistillSettings",
    "build_distill_set",
    "default_threads",
    "distill",
    "generate_shard",
]


def _plan(settings: DistillSettings, n: int) -> dict[str, Any]:
    train, held = split_prompts(n, settings.seed, settings.heldout_fraction, settings.heldout_min)
    shards = []
    for split, idx in (("heldout", held), ("train", train)):
        for k in range(math.ceil(idx.size / settings.shard_size)):
            part = idx[k * settings.shard_size:(k + 1) * settings.shard_size]
            shards.append({"name": f"{split}-{k:05d}", "split": split,
                           "prompts": [int(i) for i in part]})
    return {"settings": asdict(settings), "num_prompts": n, "train": [int(i) for i in train],
            "heldout": [int(i) for i in held], "shards": shards}


def build_distill_set(
    model: Any,
    prompt_ids: Sequence[Sequence[int]],
    folder: str | os.PathLike[str],
    settings: DistillSettings,
    *,
    eos_id: int | None,
    pad_id: int = 0,
    max_prompts: int | None = None,
    max_tokens: int | None = None,
    minutes: float | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = log_line,
    generate: Callable[..., tuple[list[list[int]], list[torch.Tensor]]] = greedy_batch,
    reverse: bool = False,
    remote: Callable[[list[dict[str, Any]]], Iterator[tuple[dict[str, Any], Shard, float]]]
    | None = None,
) -> DistillSet:
    """Generate the shards of a distillation set that are not there yet (held-out first).

    The plan (a seeded split, fixed shards) covers every prompt; the limits only say where this
    run stops, always between shards, so a later run with a larger limit goes on from there.

    Args:
        model: the base causal LM (eval mode, on its device, in ``settings.dtype``).
        prompt_ids: every prompt's token ids (formatted already), in input order.
        folder: the set's folder: a new or empty one (created; ``plan.json`` written first)
            or one this function wrote before with the same settings (continued).
        settings: see :class:`DistillSettings` (its ``prompts`` hash should be
            :func:`hash_prompts` of ``prompt_ids``; checked against an existing plan).
        eos_id, pad_id: see :func:`greedy_batch`.
        max_prompts: stop once this many TRAIN prompts are done (held-out shards always run).
        max_tokens: stop once this many answer tokens (both splits) are done.
        minutes: this run's time box (wall minutes): a shard is started only if it should
            end inside it (judged by the last shard's seconds per prompt).
        progress: show a progress bar (rich) on a terminal.
        log: one line per batch and per shard (tokens/s); None for silence.
        generate: the batch generator (:func:`greedy_batch`; tests pass a double).
        reverse: take the missing shards last first (held-out last): a second process on
            another core then works from the other end of the plan (each process skips
            the shards whose file exists when it comes to them).
        remote: ``remote(specs) -> (spec, shard, seconds)`` as shards finish, generated
            elsewhere (:func:`~blockdraft.training.heads.distill_ray.ray_shards`); each is
            written as it arrives. ``max_prompts`` chooses the shards; ``max_tokens`` and
            ``minutes`` are not taken with it (``model`` may then be None).

    Returns:
        The set as it stands after this run.

    Raises:
        TrainingError: ``folder`` holds a plan with other settings (each changed setting is
            named with its old and new value), or is neither a distillation folder nor empty.
    """
    if remote is not None and (max_tokens is not None or minutes is not None):
        raise TrainingError("shards generated remotely (--ray) stop by --max-prompts only; "
                            "--max-tokens and --minutes need the serial data step")
    root = Path(folder)
    plan_file = root / PLAN_FILE
    if plan_file.is_file():
        dset = open_distill_set(root)
        changed = changed_settings(
            {**dset.plan.get("settings", {}), "num_prompts": dset.plan.get("num_prompts")},
            {**asdict(settings), "num_prompts": len(prompt_ids)})
        if changed:
            raise TrainingError(
                f"{str(root)!r} holds a distillation set with other settings: "
                + ", ".join(changed) + "; pass the same settings to continue it, or another "
                "folder (the default one in the cache is keyed by the settings)")
    else:
        _check_new_set(root, minutes)
        root.mkdir(parents=True, exist_ok=True)
        write_text_atomic(plan_file, json.dumps(_plan(settings, len(prompt_ids))) + "\n")
        dset = open_distill_set(root)
    start = time.monotonic()
    summary = dset.summary()
    train_prompts = summary["train_prompts"]
    tokens_total = summary["train_tokens"] + summary["heldout_tokens"]
    todo = [s for s in dset.plan["shards"] if s["name"] not in set(dset.done)]
    if reverse:
        todo.reverse()
    run_tokens = 0
    per_prompt = 0.0  # seconds per prompt of the last shard generated
    bar = ProgressBar("distill", sum(len(s["prompts"]) for s in todo), enabled=progress)
    chosen: list[dict[str, Any]] = []  # the shards a remote generator makes

    def keep(spec: dict[str, Any], shard: Shard, seconds: float, run_tokens: int) -> int:
        """Write a finished shard; the run's tokens after it."""
        write_shard(dset.shard_path(spec["name"]), shard, {
            "prompts": str(shard.num_prompts), "tokens": str(shard.num_tokens),
            "seconds": f"{seconds:.1f}", "key": settings.key()})
        dset.done.append(spec["name"])
        run_tokens += shard.num_tokens
        if log is not None:
            log(f"shard {spec['name']}: {shard.num_prompts} prompts, {shard.num_tokens} "
                f"tokens in {seconds:.0f} s ({shard.num_tokens / max(seconds, 1e-9):.0f} "
                f"tokens/s); this run {run_tokens} tokens in {time.monotonic() - start:.0f} s")
        return run_tokens

    try:
        for spec in todo:
            if spec["split"] == "train":
                if max_prompts is not None and train_prompts >= max_prompts:
                    break
            if max_tokens is not None and tokens_total >= max_tokens:
                break
            if minutes is not None:
                # the last shard's seconds per prompt predict this one's: start it only if
                # it should end inside the box
                guess = per_prompt * len(spec["prompts"])
                if time.monotonic() - start + guess >= 60.0 * minutes:
                    break
            if dset.shard_path(spec["name"]).is_file():  # another process made it meanwhile
                if spec["name"] not in dset.done:
                    dset.done.append(spec["name"])
                continue
            if remote is not None:  # generated elsewhere: chosen here, made there
                chosen.append(spec)
                if spec["split"] == "train":
                    train_prompts += len(spec["prompts"])
                continue
            t0 = time.monotonic()
            shard = generate_shard(model, prompt_ids, spec["prompts"], settings, eos_id,
                                   pad_id, generate, bar, log, spec["name"])
            seconds = time.monotonic() - t0
            per_prompt = seconds / max(shard.num_prompts, 1)
            run_tokens = keep(spec, shard, seconds, run_tokens)
            tokens_total += shard.num_tokens
            if spec["split"] == "train":
                train_prompts += shard.num_prompts
        if remote is not None:
            for spec, shard, seconds in remote(chosen):
                bar.advance(shard.num_prompts)
                run_tokens = keep(spec, shard, seconds, run_tokens)
    finally:
        bar.close()
    order = {s["name"]: k for k, s in enumerate(dset.plan["shards"])}
    dset.done.sort(key=order.__getitem__)
    return dset


def _check_new_set(root: Path, minutes: float | None) -> None:
    """A new set may start in ``root`` (nothing there, or an empty folder) and this run may
    make some of it: a time box of 0 minutes only reads a set that exists, so it must not
    leave a new, empty one behind.

    Raises:
        TrainingError: a folder of other files, or a new set with no time to make it.
    """
    check_distill_folder(root)
    if minutes is not None and minutes <= 0:
        raise TrainingError(
            f"{str(root)!r} holds no distillation set, and a data step of {minutes:g} minutes "
            "only reads one that exists; make it first (blockdraft heads distill), or give "
            "the data step some minutes")


# ------------------------------------------------------------------------------ top level


def default_threads() -> int:
    """1 torch thread when the machine is busy (load average > 1: spinning OpenMP threads
    then slow torch down several-fold), else every core."""
    try:
        busy = os.getloadavg()[0] > 1.0
    except OSError:
        busy = True
    return 1 if busy else (os.cpu_count() or 1)


def distill(
    base: str = "smollm2",
    prompt_files: Sequence[str | os.PathLike[str]] = (),
    *,
    folder: str | os.PathLike[str] | None = None,
    dtype: str = "float32",
    max_new_tokens: int = 192,
    batch_size: int = 32,
    shard_size: int = 256,
    seed: int = 0,
    heldout_fraction: float = 0.005,
    heldout_min: int = 200,
    max_prompts: int | None = None,
    max_tokens: int | None = None,
    minutes: float | None = None,
    threads: int | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = log_line,
    reverse: bool = False,
    ray: str | None = None,
    workers: int = 2,
) -> DistillSet:
    """Self-distillation data of a base model on prompt files: load, format, generate.

    Args:
        base: a known model name (``"smollm2"``), an HF folder or a GGUF file.
        prompt_files: JSON-lines files of ``{"source", "prompt"}`` (training prompts only).
        folder: where the set lives; default ``$BLOCKDRAFT_CACHE/distill/<key>``.
        dtype: the base's dtype while generating (float32 by default: on a CPU without
            native bfloat16 matrix units, bfloat16 measured 3-6x slower here).
        max_new_tokens, batch_size, shard_size, seed, heldout_fraction, heldout_min: see
            :class:`DistillSettings`.
        max_prompts, max_tokens, minutes: where this run stops (see :func:`build_distill_set`).
        threads: torch CPU threads (default :func:`default_threads`).
        progress, log, reverse: see :func:`build_distill_set`.
        ray: generate the shards on Ray actors (``blockdraft[ray]``): ``""`` a local Ray of
            ``workers`` CPUs, else a cluster's address; None: here, serially. The set is the
            same, shard for shard (:mod:`~blockdraft.training.heads.distill_ray`).
        workers: Ray actors (one CPU and ``threads`` torch threads each).

    Returns:
        The distillation set.

    Raises:
        TrainingError: unreadable or too few prompts (checked before the model is loaded), or
            see :func:`build_distill_set`.
    """
    from blockdraft.models.hf.loading import load_causal_lm, resolve_base

    texts = read_prompts(prompt_files)  # the user's files are checked before the model loads
    split_prompts(len(texts), seed, heldout_fraction, heldout_min)  # enough of them?
    if folder is not None and not (Path(folder) / PLAN_FILE).is_file():
        _check_new_set(Path(folder), minutes)  # before the base loads
    torch.set_num_threads(threads or default_threads())
    model, tokenizer = load_causal_lm(base, dtype)
    if tokenizer is None:
        raise TrainingError(f"{base!r} has no tokenizer: cannot apply the chat template")
    t0 = time.monotonic()
    prompt_ids = format_prompts(tokenizer, texts)
    if log is not None:
        log(f"formatted {len(prompt_ids)} prompts in {time.monotonic() - t0:.1f} s")
    eos_id = tokenizer.eos_token_id
    pad_id = pad_id_of(tokenizer)
    settings = DistillSettings(
        base=f"{base}|{resolve_base(base).name}", dtype=dtype, max_new_tokens=max_new_tokens,
        batch_size=batch_size, shard_size=shard_size, seed=seed,
        heldout_fraction=heldout_fraction, heldout_min=heldout_min,
        prompts=hash_prompts(prompt_ids))
    root = Path(folder) if folder is not None else cache_dir("distill", settings.key())
    if log is not None:
        log(f"distillation set {root} (threads {torch.get_num_threads()})")
    remote = None
    if ray is not None:
        from blockdraft.training.heads.distill_ray import ray_shards

        def remote(specs: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], Shard, float]]:
            return ray_shards(base, dtype, prompt_ids, specs, settings, eos_id, pad_id,
                              address=ray or None, workers=workers, threads=threads or 1)

    return build_distill_set(model, prompt_ids, root, settings, eos_id=eos_id, pad_id=pad_id,
                             max_prompts=max_prompts, max_tokens=max_tokens, minutes=minutes,
                             progress=progress, log=log, reverse=reverse, remote=remote)

