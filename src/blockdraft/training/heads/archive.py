"""A distillation set's answers in one small file that survives a new machine, and the set
rebuilt from it.

A distillation set (:mod:`~blockdraft.training.heads.distill`) is hours of generation: the
base's greedy answers to thousands of prompts, with its final hidden states (``[N, d]``, about
1.2 kB a token in bfloat16: gigabytes). The answers are what took the hours; the states come
back in one teacher-forced forward a shard, at prefill speed
(:func:`~blockdraft.training.heads.labels.label_batch`). So an **answers archive** keeps only
the answers and the plan, and :func:`restore_distill_set` rebuilds the set from it and the
prompts:

- the archive holds the set's plan (its settings, the held-out split, the shards), and for
  every finished shard its prompts' indices into the prompt list and their answers (token ids,
  ``uint16`` when the vocabulary fits): about 2 bytes a token, compressed; no prompt text (the
  prompts are the user's files, e.g. ``heads prompts`` over the shared data, which is not
  copied anywhere);
- it is sealed: a digest of its arrays, checked when it is read;
- a restore checks that the prompts given are those the set was made from (the plan's hash of
  their token ids, :func:`~blockdraft.training.heads.prompts.hash_prompts`), writes the same
  plan into a new folder and each archived shard with its states recomputed by the base (in the
  set's dtype); a restored set is a distillation set like any other: ``heads distill`` continues
  it where the archive stopped, ``heads train`` trains on it. It resumes: shards already there
  are kept.

Public surface:
    FORMAT, VERSION
    ArchivedShard, Archive            frozen: what an archive holds
    archive_answers(dset, path) -> Archive        written atomically
    read_archive(path) -> Archive                 checked (format, digest, shapes)
    restore_distill_set(archive, model, prompt_ids, folder, *, pad_id, batch_size, log,
                        progress) -> DistillSet
    restore(archive_path, prompt_files, folder, *, base, batch_size, threads, ...) -> DistillSet
                                                  (loads the base and formats the prompts)
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from blockdraft.core.files import atomic_path, write_text_atomic
from blockdraft.training.errors import TrainingError
from blockdraft.training.heads.labels import label_batch
from blockdraft.training.heads.progress import ProgressBar, log_line
from blockdraft.training.heads.prompts import hash_prompts
from blockdraft.training.heads.shards import (
    PLAN_FILE,
    DistillSet,
    Shard,
    check_distill_folder,
    open_distill_set,
    read_turns,
    write_shard,
)

FORMAT = "blockdraft-distill-answers"
VERSION = 1


@dataclass(frozen=True, eq=False)
class ArchivedShard:
    """One shard's answers.

    Attributes:
        name: the shard's name in the plan (``train-00003``).
        prompt_index: int64 ``[P]``, each prompt's index in the prompt list.
        answer_ids: int64 ``[N]``, the answers ``y_1 .. y_m`` of every prompt, flat.
        answer_offsets: int64 ``[P + 1]``.
    """

    name: str
    prompt_index: np.ndarray
    answer_ids: np.ndarray
    answer_offsets: np.ndarray

    @property
    def tokens(self) -> int:
        return int(self.answer_ids.size)

    def answers(self) -> list[list[int]]:
        """Every prompt's answer (shard order)."""
        off = self.answer_offsets
        return [self.answer_ids[off[p]:off[p + 1]].tolist() for p in range(off.size - 1)]


@dataclass(frozen=True, eq=False)
class Archive:
    """What an answers archive holds.

    Attributes:
        plan: the set's ``plan.json`` (settings, ``num_prompts``, the split, the shards).
        shards: the finished shards' answers, in plan order.
        digest: the SHA-256 of the arrays (hex), the archive's identity.
    """

    plan: dict[str, Any]
    shards: tuple[ArchivedShard, ...]
    digest: str

    @property
    def tokens(self) -> int:
        """Answer tokens archived (both splits)."""
        return sum(s.tokens for s in self.shards)


def _arrays(shards: Sequence[ArchivedShard]) -> dict[str, np.ndarray]:
    """The arrays an archive stores (answers as uint16 when every id fits)."""
    top = max((int(s.answer_ids.max()) for s in shards if s.tokens), default=0)
    dtype = np.uint16 if top < 2 ** 16 else np.uint32
    out: dict[str, np.ndarray] = {}
    for s in shards:
        out[f"{s.name}.index"] = s.prompt_index.astype(np.int32)
        out[f"{s.name}.offsets"] = s.answer_offsets.astype(np.int64)
        out[f"{s.name}.answers"] = s.answer_ids.astype(dtype)
    return out


def _digest(arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def archive_answers(dset: DistillSet, path: str | os.PathLike[str]) -> Archive:
    """Write ``dset``'s finished shards' answers and its plan to ``path`` (a compressed
    ``.npz``, atomically: an interrupted write leaves no file).

    Raises:
        TrainingError: a set without finished shards, or a labelled set (its answers are
            another base's predictions on a text, not a generation: archive its source).
    """
    if dset.labelled:
        raise TrainingError(f"{dset.folder} is a labelled set (one forward over another set's "
                            "texts): archive the generated set it labels instead")
    if not dset.done:
        raise TrainingError(f"{dset.folder} has no finished shard to archive")
    shards = []
    for name in dset.done:
        turns = read_turns(dset.shard_path(name))
        answers = [y.astype(np.int64) for _, _, y in turns]
        shards.append(ArchivedShard(
            name=name, prompt_index=np.asarray([i for i, _, _ in turns], dtype=np.int64),
            answer_ids=np.concatenate(answers) if answers else np.zeros(0, np.int64),
            answer_offsets=np.concatenate([[0], np.cumsum([a.size for a in answers])]).astype(
                np.int64)))
    arrays = _arrays(shards)
    digest = _digest(arrays)
    meta = {"format": FORMAT, "version": VERSION, "plan": dset.plan,
            "shards": [s.name for s in shards], "tokens": sum(s.tokens for s in shards),
            "digest": digest}
    out = Path(path)
    buffer = io.BytesIO()
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    np.savez_compressed(buffer, **arrays)  # type: ignore[arg-type]
    with atomic_path(out) as tmp:
        tmp.write_bytes(buffer.getvalue())
    return Archive(plan=dset.plan, shards=tuple(shards), digest=digest)


def read_archive(path: str | os.PathLike[str]) -> Archive:
    """The archive at ``path``, checked: its format, every shard's arrays, its digest.

    Raises:
        TrainingError: a missing, unreadable, truncated or changed file (named), or not an
            answers archive.
    """
    p = Path(path)
    try:
        with np.load(p, allow_pickle=False) as npz:
            meta = json.loads(bytes(npz["meta"]).decode())
            arrays = {name: npz[name] for name in npz.files if name != "meta"}
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, UnicodeDecodeError) as e:
        raise TrainingError(f"cannot read the answers archive {str(p)!r} ({type(e).__name__}: "
                            f"{e}); it is missing, truncated or not an archive") from e
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise TrainingError(f"{str(p)!r} is not a distillation answers archive "
                            f"(format {FORMAT!r} expected)")
    if meta.get("version") != VERSION:
        raise TrainingError(f"{str(p)!r} is an answers archive of version "
                            f"{meta.get('version')!r}; this blockdraft reads version {VERSION}")
    if _digest(arrays) != meta.get("digest"):
        raise TrainingError(f"{str(p)!r} was changed or corrupted since it was written (its "
                            "arrays do not match the digest it was written with)")
    shards = []
    for name in meta["shards"]:
        index, offsets, answers = (arrays[f"{name}.{part}"] for part in
                                   ("index", "offsets", "answers"))
        if offsets.size != index.size + 1 or int(offsets[-1]) != answers.size:
            raise TrainingError(f"{str(p)!r}: shard {name}'s offsets do not fit its answers")
        shards.append(ArchivedShard(name=name, prompt_index=index.astype(np.int64),
                                    answer_ids=answers.astype(np.int64),
                                    answer_offsets=offsets.astype(np.int64)))
    return Archive(plan=meta["plan"], shards=tuple(shards), digest=str(meta["digest"]))


def _torch_dtype(name: str) -> torch.dtype:
    """The torch dtype a set stores its states in (its settings' ``hidden_dtype``)."""
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16,
             "float16": torch.float16}.get(name)
    if dtype is None:
        raise TrainingError(f"the archived set stores its states in {name!r}, which this "
                            "blockdraft does not know")
    return dtype


@torch.no_grad()
def restore_distill_set(archive: Archive, model: Any, prompt_ids: Sequence[Sequence[int]],
                        folder: str | os.PathLike[str], *, pad_id: int = 0,
                        batch_size: int = 16, log: Callable[[str], None] | None = log_line,
                        progress: bool = True) -> DistillSet:
    """The distillation set of ``archive`` rebuilt in ``folder``: the same plan, each archived
    shard with its prompts (from ``prompt_ids``), its answers and the base's final hidden states
    along them (one teacher-forced forward per batch of ``batch_size`` prompts, in the model's
    dtype). Shards already in the folder are kept (it resumes).

    Args:
        archive: the archive (:func:`read_archive`).
        model: the base causal LM the set was made with (eval mode, in the set's dtype).
        prompt_ids: every prompt's token ids (formatted), in input order: the list the set was
            made from (checked by its hash).
        folder: a new or empty folder, or one a restore of this archive began.
        pad_id: the id padding is filled with.
        batch_size: prompts per forward.
        log: a line per shard; progress: a progress bar (rich) on a terminal.

    Raises:
        TrainingError: prompts other than the set's (their hash), a folder holding another set,
            or a folder of other files.
    """
    settings = archive.plan.get("settings", {})
    if hash_prompts(prompt_ids) != settings.get("prompts") or len(prompt_ids) != archive.plan.get(
            "num_prompts"):
        raise TrainingError(
            f"these {len(prompt_ids)} prompts are not the ones the archived set was made from "
            f"({archive.plan.get('num_prompts')} prompts, hash {settings.get('prompts')}); pass "
            "the same prompt files (and the same base: its chat template formats them)")
    root = check_distill_folder(folder)
    plan = {**archive.plan, "restored_from": archive.digest}
    plan_file = root / PLAN_FILE
    if plan_file.is_file():
        have = open_distill_set(root)
        if have.plan.get("restored_from") != archive.digest:
            raise TrainingError(f"{str(root)!r} holds another distillation set; restore into a "
                                "new folder")
    else:
        root.mkdir(parents=True, exist_ok=True)
        write_text_atomic(plan_file, json.dumps(plan) + "\n")
    dset = open_distill_set(root)
    todo = [s for s in archive.shards if s.name not in set(dset.done)]
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    stored = _torch_dtype(str(settings.get("hidden_dtype", "bfloat16")))
    bar = ProgressBar("restore", sum(s.prompt_index.size for s in todo), enabled=progress)
    try:
        for shard in todo:
            start = time.monotonic()
            prompts = [list(prompt_ids[int(i)]) for i in shard.prompt_index]
            answers = shard.answers()
            order = sorted(range(len(prompts)), key=lambda b: len(prompts[b]) + len(answers[b]))
            hidden: list[torch.Tensor | None] = [None] * len(prompts)
            for at in range(0, len(order), batch_size):
                rows = order[at: at + batch_size]
                _, states = label_batch(model, [prompts[b] for b in rows],
                                        [answers[b] for b in rows], pad_id)
                for b, h in zip(rows, states, strict=True):
                    hidden[b] = h.to(stored)
                bar.advance(len(rows))
            made = Shard.from_lists(shard.prompt_index.tolist(), prompts, answers,
                                    [h for h in hidden if h is not None])
            seconds = time.monotonic() - start
            write_shard(dset.shard_path(shard.name), made, {
                "prompts": str(made.num_prompts), "tokens": str(made.num_tokens),
                "seconds": f"{seconds:.1f}", "key": key, "restored_from": archive.digest})
            dset.done.append(shard.name)
            if log is not None:
                log(f"shard {shard.name}: {made.num_prompts} prompts, {made.num_tokens} tokens "
                    f"restored in {seconds:.0f} s")
    finally:
        bar.close()
    return open_distill_set(root)


def restore(
    archive_path: str | os.PathLike[str],
    prompt_files: Sequence[str | os.PathLike[str]],
    folder: str | os.PathLike[str],
    *,
    base: str | None = None,
    batch_size: int = 16,
    threads: int | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = log_line,
) -> DistillSet:
    """Rebuild an archived distillation set: read and check the archive, load the base it was
    made with (in the set's dtype), format the prompt files with its chat template and
    :func:`restore_distill_set` into ``folder``.

    Args:
        archive_path: the answers archive (:func:`archive_answers`).
        prompt_files: the JSON-lines prompt files the set was made from, in the same order.
        folder: a new or empty folder, or one a restore of this archive began.
        base: the base model (default: the one the archive's settings name).
        batch_size, progress, log: see :func:`restore_distill_set`.
        threads: torch CPU threads (default: :func:`~.distill.default_threads`).

    Raises:
        TrainingError: see :func:`read_archive` and :func:`restore_distill_set` (the archive
            and the folder are checked before the base loads).
    """
    from blockdraft.models.hf.loading import load_causal_lm
    from blockdraft.training.heads.distill import default_threads
    from blockdraft.training.heads.generation import pad_id_of
    from blockdraft.training.heads.prompts import format_prompts, read_prompts

    archive = read_archive(archive_path)
    settings = archive.plan.get("settings", {})
    texts = read_prompts(prompt_files)
    if len(texts) != archive.plan.get("num_prompts"):
        raise TrainingError(
            f"the prompt files hold {len(texts)} prompts; the archived set was made from "
            f"{archive.plan.get('num_prompts')}: pass the files that made it, in their order")
    check_distill_folder(folder)
    name = base or str(settings.get("base", "smollm2")).split("|")[0]
    torch.set_num_threads(threads or default_threads())
    model, tokenizer = load_causal_lm(name, str(settings.get("dtype", "float32")))
    if tokenizer is None:
        raise TrainingError(f"{name!r} has no tokenizer: cannot apply the chat template")
    return restore_distill_set(archive, model, format_prompts(tokenizer, texts), folder,
                               pad_id=pad_id_of(tokenizer), batch_size=batch_size, log=log,
                               progress=progress)
