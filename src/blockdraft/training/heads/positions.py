"""A distillation split as flat training positions: ``h_j`` and the greedy tokens after it.

docs/definitions.md sec. 10. Row ``r`` of a split holds the base's final hidden state ``h_j``
and ``y_{j+1}``, the base's greedy token from it; Medusa head ``i`` (blockdraft head
``i + 1``) at row ``r`` has the target ``y_{j+1+i}``, row ``r + i``, while the answer lasts.

Public surface:
    IGNORE                                     the target of a position past the answer's end
    PositionData, load_positions(dset, split)  answer ids + hidden states, flat
    head_targets(data, rows, n) -> [B, n]      each row's targets for heads 1..n
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from blockdraft.training.errors import TrainingError
from blockdraft.training.heads.shards import DistillSet

IGNORE = -100


@dataclass
class PositionData:
    """The positions of one split, flat across its shards.

    Attributes:
        hidden: ``[N, d]`` the base's final hidden states ``h_j`` (stored dtype).
        targets: int64 ``[N]``: row ``r`` holds the base's greedy token from ``hidden[r]``.
        remaining: int64 ``[N]``: answer tokens after ``targets[r]`` in its answer, so head
            ``i`` has a target at row ``r`` iff ``i <= remaining[r]``
            (``targets[r + i]``).
        prompts: prompts in the split.
        ids: int64 ``[N]``: the targets as vocabulary ids where ``targets`` was renumbered
            (a training vocabulary); None when ``targets`` are the ids.
    """

    hidden: torch.Tensor
    targets: torch.Tensor
    remaining: torch.Tensor
    prompts: int
    ids: torch.Tensor | None = None

    @property
    def token_ids(self) -> torch.Tensor:
        """int64 ``[N]``: the base's greedy token from each row as a vocabulary id (``targets``
        unless a restricted vocabulary renumbered them)."""
        return self.targets if self.ids is None else self.ids

    @property
    def tokens(self) -> int:
        return int(self.targets.numel())

    def usable(self) -> torch.Tensor:
        """Rows where at least head 1 has a target (int64 ``[M]``)."""
        return torch.nonzero(self.remaining >= 1).flatten()


def load_positions(dset: DistillSet, split: str) -> PositionData:
    """The finished shards of ``split`` of a distillation set as flat positions.

    Raises:
        TrainingError: the split has no finished shard.
    """
    shards = dset.load(split)
    if not shards:
        raise TrainingError(f"the distillation set {dset.folder} has no finished {split} shard")
    hidden, targets, remaining = [], [], []
    prompts = 0
    for shard in shards:
        offsets = shard.answer_offsets
        lengths = np.diff(offsets)
        rows = np.arange(offsets[-1]) - np.repeat(offsets[:-1], lengths)  # j in each answer
        remaining.append(torch.from_numpy(np.repeat(lengths, lengths) - 1 - rows))
        targets.append(torch.from_numpy(shard.answer_ids.astype(np.int64)))
        hidden.append(shard.hidden)
        prompts += shard.num_prompts
    return PositionData(torch.cat(hidden), torch.cat(targets), torch.cat(remaining), prompts)


def head_targets(data: PositionData, rows: torch.Tensor, n: int) -> torch.Tensor:
    """int64 ``[B, n]``: column ``i - 1`` is ``y_{j+1+i}`` or :data:`IGNORE`."""
    offsets = torch.arange(1, n + 1)
    index = (rows[:, None] + offsets).clamp(max=data.tokens - 1)
    tgt = data.targets[index]
    return torch.where(offsets <= data.remaining[rows, None], tgt, IGNORE)
