"""The files of a distillation set: a plan and one safetensors file per shard.

A distillation set is a folder holding ``plan.json`` (settings, the held-out split, the shard
list) and one ``<split>-<nnnnn>.safetensors`` file per shard, written atomically when the
whole shard is done, so an interrupted run leaves no partial shard and a re-run skips finished
ones. A shard of ``P`` prompts with ``N`` answer tokens holds

    ``prompt_index``    int64 ``[P]``       indices into the prompt list (input order)
    ``prompt_ids``      int32 ``[sum |x|]`` the formatted prompts' token ids, flat
    ``prompt_offsets``  int64 ``[P + 1]``
    ``answer_ids``      int32 ``[N]``       ``y_1 .. y_m`` of every prompt, flat
    ``answer_offsets``  int64 ``[P + 1]``
    ``hidden``          ``[N, d]`` (bfloat16 by default): row ``answer_offsets[p] + j`` is
                        ``h_j`` of prompt ``p``, so ``answer_ids`` at the same row is the base's
                        prediction from that state.
    ``text_ids``        int32 ``[N]``, only in a set labelled by one forward over a text
                        (:mod:`~blockdraft.training.heads.labels`): the text ``t_1 .. t_m``
                        the states were computed on; ``answer_ids`` then holds the base's
                        own prediction at each position (equal where the text is the base's
                        greedy answer).

Public surface:
    PLAN_FILE                                   ``plan.json``: what makes a folder a set
    SET_FILES                                   the names a set's folder holds (globs)
    Shard, write_shard(path, shard, metadata), read_shard(path)
    read_answers(path) -> [int32 array]         a shard's answers only (no hidden states)
    read_turns(path) -> [(index, prompt, answer)]  its prompts and answers (no hidden states)
    DistillSet, open_distill_set(folder)        what a folder holds so far
    check_distill_folder(folder) -> Path        a set can be made or continued there
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from blockdraft.core.files import atomic_path
from blockdraft.training.errors import TrainingError
from blockdraft.training.resume import check_run_folder

SPLITS = ("heldout", "train")
PLAN_FILE = "plan.json"
SET_FILES = (PLAN_FILE, *(f"{split}-*.safetensors" for split in SPLITS))
"""Glob patterns of every name a distillation set's folder holds (the plan and the shards)."""


@dataclass
class Shard:
    """One shard's contents (see the module docstring for the layout)."""

    prompt_index: np.ndarray  # int64 [P]
    prompt_ids: np.ndarray  # int32 [sum |x|]
    prompt_offsets: np.ndarray  # int64 [P + 1]
    answer_ids: np.ndarray  # int32 [N]
    answer_offsets: np.ndarray  # int64 [P + 1]
    hidden: torch.Tensor  # [N, d]
    text_ids: np.ndarray | None = None  # int32 [N]: the text labelled (labelled sets only)

    @property
    def num_prompts(self) -> int:
        return int(self.prompt_index.size)

    @property
    def num_tokens(self) -> int:
        return int(self.answer_ids.size)

    def answer(self, p: int) -> list[int]:
        """Prompt ``p``'s answer ``y_1 .. y_m`` (``p`` indexes this shard)."""
        return [int(t) for t in self.answer_ids[self.answer_offsets[p]:self.answer_offsets[p + 1]]]

    def prompt(self, p: int) -> list[int]:
        """Prompt ``p``'s token ids."""
        return [int(t) for t in self.prompt_ids[self.prompt_offsets[p]:self.prompt_offsets[p + 1]]]

    @classmethod
    def from_lists(
        cls,
        prompt_index: Sequence[int],
        prompts: Sequence[Sequence[int]],
        answers: Sequence[Sequence[int]],
        hidden: Sequence[torch.Tensor],
    ) -> Shard:
        """A shard of ``P`` prompts: their indices, token ids, answers and ``[m_p, d]`` states
        (all in the same order)."""
        return cls(
            prompt_index=np.asarray(prompt_index, dtype=np.int64),
            prompt_ids=np.concatenate([np.asarray(x, dtype=np.int32) for x in prompts]),
            prompt_offsets=_offsets([len(x) for x in prompts]),
            answer_ids=np.concatenate([np.asarray(y, dtype=np.int32) for y in answers]),
            answer_offsets=_offsets([len(y) for y in answers]),
            hidden=torch.cat(list(hidden)),
        )


def _offsets(lengths: Sequence[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(np.asarray(lengths, dtype=np.int64))]).astype(np.int64)


def write_shard(path: Path, shard: Shard, metadata: dict[str, str]) -> None:
    """Write one shard atomically (a crash leaves no file)."""
    from safetensors.torch import save_file

    tensors = {
        "prompt_index": torch.from_numpy(shard.prompt_index.astype(np.int64)),
        "prompt_ids": torch.from_numpy(shard.prompt_ids.astype(np.int32)),
        "prompt_offsets": torch.from_numpy(shard.prompt_offsets.astype(np.int64)),
        "answer_ids": torch.from_numpy(shard.answer_ids.astype(np.int32)),
        "answer_offsets": torch.from_numpy(shard.answer_offsets.astype(np.int64)),
        "hidden": shard.hidden.contiguous(),
    }
    if shard.text_ids is not None:
        tensors["text_ids"] = torch.from_numpy(shard.text_ids.astype(np.int32))
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata=metadata)


def _unreadable() -> tuple[type[BaseException], ...]:
    """What reading a damaged shard raises (safetensors' own error is no OSError)."""
    from safetensors import SafetensorError

    return (OSError, ValueError, RuntimeError, SafetensorError)


def _damaged(path: str | os.PathLike[str], e: BaseException) -> TrainingError:
    return TrainingError(
        f"cannot read distillation shard {str(path)!r}: {' '.join(str(e).split())}; the "
        "shard is damaged (truncated or overwritten): delete it, and the command that made "
        "its set (heads distill or heads label) makes it again")


def read_shard(path: str | os.PathLike[str]) -> Shard:
    """Read a shard written by :func:`write_shard`.

    Raises:
        TrainingError: a missing or unreadable file (naming it).
    """
    from safetensors.torch import load_file

    try:
        t = load_file(str(path))
    except _unreadable() as e:
        raise _damaged(path, e) from e
    return Shard(
        prompt_index=t["prompt_index"].numpy(),
        prompt_ids=t["prompt_ids"].numpy(),
        prompt_offsets=t["prompt_offsets"].numpy(),
        answer_ids=t["answer_ids"].numpy(),
        answer_offsets=t["answer_offsets"].numpy(),
        hidden=t["hidden"],
        text_ids=t["text_ids"].numpy() if "text_ids" in t else None,
    )


def _tensors(path: str | os.PathLike[str], *names: str) -> list[np.ndarray]:
    """The named tensors of a shard file, as numpy arrays, without reading the others.

    Raises:
        TrainingError: a missing or unreadable file.
    """
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="np") as f:
            return [f.get_tensor(name) for name in names]
    except _unreadable() as e:
        raise _damaged(path, e) from e


def read_answers(path: str | os.PathLike[str]) -> list[np.ndarray]:
    """The answers ``y_1 .. y_m`` of every prompt of a shard (int32 arrays, shard order),
    read without the hidden states.

    Raises:
        TrainingError: a missing or unreadable file.
    """
    ids, offsets = _tensors(path, "answer_ids", "answer_offsets")
    return [ids[offsets[p]:offsets[p + 1]] for p in range(offsets.size - 1)]


def read_turns(path: str | os.PathLike[str]) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """``(prompt index, prompt ids, answer ids)`` of every prompt of a shard (shard order),
    read without the hidden states: what the base was asked and what it answered.

    Raises:
        TrainingError: a missing or unreadable file.
    """
    index, x, x_off, y, y_off = _tensors(path, "prompt_index", "prompt_ids", "prompt_offsets",
                                         "answer_ids", "answer_offsets")
    return [(int(index[p]), x[x_off[p]:x_off[p + 1]], y[y_off[p]:y_off[p + 1]])
            for p in range(index.size)]


@dataclass
class DistillSet:
    """A distillation folder: its plan and the shards finished so far.

    Attributes:
        folder: the folder.
        plan: ``plan.json``'s contents (``settings``, ``train``/``heldout`` index lists,
            ``shards``: ``[{"name", "split", "prompts"}]``).
        done: names of the shards whose file exists, in plan order.
    """

    folder: Path
    plan: dict[str, Any]
    done: list[str]

    def shard_path(self, name: str) -> Path:
        return self.folder / f"{name}.safetensors"

    @property
    def complete(self) -> bool:
        """Whether every shard of the plan is done (a run stopped by a limit leaves a set that
        is sound but not complete)."""
        return len(self.done) == len(self.plan["shards"])

    def shards(self, split: str) -> list[str]:
        """Finished shards of ``split`` (``"train"`` or ``"heldout"``), in plan order."""
        names = {s["name"] for s in self.plan["shards"] if s["split"] == split}
        return [n for n in self.done if n in names]

    def load(self, split: str) -> list[Shard]:
        """The finished shards of ``split``, read into memory."""
        return [read_shard(self.shard_path(n)) for n in self.shards(split)]

    def answers(self, split: str = "train") -> list[np.ndarray]:
        """The base model's answers of the finished shards of ``split`` (int32 arrays)."""
        return [a for n in self.shards(split) for a in read_answers(self.shard_path(n))]

    def first(self, train_tokens: int) -> DistillSet:
        """This set cut to its first finished training shards (plan order) that hold at
        least ``train_tokens`` answer tokens (all of them if they hold fewer), every held-out
        shard kept: the prefix a learning curve trains on.

        Raises:
            TrainingError: ``train_tokens`` < 1.
        """
        if isinstance(train_tokens, bool) or not isinstance(train_tokens, int) or (
                train_tokens < 1):
            raise TrainingError(f"train_tokens must be an integer >= 1, got {train_tokens!r}")
        keep, total = set(self.shards("heldout")), 0
        for name in self.shards("train"):
            if total >= train_tokens:
                break
            keep.add(name)
            total += int(_shard_metadata(self.shard_path(name)).get("tokens", 0))
        return DistillSet(self.folder, self.plan, [n for n in self.done if n in keep])

    @property
    def labelled(self) -> bool:
        """Whether the set was labelled by one forward over another set's texts
        (:mod:`~blockdraft.training.heads.labels`) rather than generated."""
        return "labels" in self.plan

    def summary(self) -> dict[str, int]:
        """Prompts and answer tokens per finished split (from the shard headers)."""
        out: dict[str, int] = {}
        for split in SPLITS:
            prompts = tokens = 0
            for name in self.shards(split):
                meta = _shard_metadata(self.shard_path(name))
                prompts += int(meta.get("prompts", 0))
                tokens += int(meta.get("tokens", 0))
            out[f"{split}_prompts"], out[f"{split}_tokens"] = prompts, tokens
        return out


def _shard_metadata(path: Path) -> dict[str, str]:
    """A shard's header (opening it checks that the file covers every tensor it lists).

    Raises:
        TrainingError: a damaged shard, named.
    """
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            return dict(f.metadata() or {})
    except _unreadable() as e:
        raise _damaged(path, e) from e


def check_shards(dset: DistillSet) -> None:
    """Open every finished shard of ``dset`` (its header, and that the file holds all it
    lists): a truncated shard is named before any work reads the set.

    Raises:
        TrainingError: the first damaged shard, named.
    """
    for name in dset.done:
        _shard_metadata(dset.shard_path(name))


def check_distill_folder(folder: str | os.PathLike[str]) -> Path:
    """``folder`` as a path, if a distillation set can be made there (nothing there, or an
    empty folder) or continued there (it holds a ``plan.json``).

    Raises:
        TrainingError: a file, or a folder of other files (they are a user's, not a set's).
    """
    return check_run_folder(folder, PLAN_FILE, "a distillation folder")


def open_distill_set(folder: str | os.PathLike[str]) -> DistillSet:
    """The distillation set in ``folder`` (its ``plan.json`` and finished shards).

    Raises:
        TrainingError: no ``plan.json`` there, or one that cannot be read.
    """
    root = Path(folder)
    plan_file = root / PLAN_FILE
    if not plan_file.is_file():
        raise TrainingError(f"{str(root)!r} is not a distillation folder (no {PLAN_FILE}); "
                            "make one with blockdraft heads distill")
    try:
        plan = json.loads(plan_file.read_text(encoding="utf-8"))
        names = [s["name"] for s in plan["shards"]]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise TrainingError(f"cannot read {str(plan_file)!r} ({type(e).__name__}: {e}); the "
                            "distillation folder is damaged: delete it to start over") from e
    done = [name for name in names if (root / f"{name}.safetensors").is_file()]
    return DistillSet(root, plan, done)
