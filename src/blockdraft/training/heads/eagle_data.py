"""A distillation split as whole answers for an EAGLE draft layer, with the base's features.

A draft layer attends over a sequence with its own KV cache, so it trains on whole answers,
not on flat positions (:mod:`~blockdraft.training.heads.positions`). A prompt ``x`` (``n``
tokens) with the text ``t_1 .. t_m`` its states were computed along (the base's greedy answer
in a generated set) and the base's own next tokens ``g_1 .. g_m`` (its answer; ``g_{j+1}``
predicted from ``h_j``) is one sequence. Its positions ``p`` are those of the base's forward
over ``x + t_1 .. t_{m-1}``; answer position ``j`` (state ``h_j``, the root of a draft after
``t_{j+1}`` is accepted) is ``p = n - 1 + j``. At each position the layer reads the base
feature ``f_p`` and the token after it, ``w_{p+1}`` (the prompt's next token, then ``t``), and
its target is the base's next token after that: ``g_{j+2}`` at answer position ``j`` (the
token the draft's first step must guess), none at prompt positions or past the answer.

The features (``context``, ``fusion``):

- ``"answer"`` with ``"top"``: the set's stored states ``h_0 .. h_{m-1}`` (the base's final
  hidden states, after its final norm): no base run; the sequence is the answer's positions;
- otherwise one teacher-forced forward of the base over ``x + t_1 .. t_{m-1}`` per batch
  (:func:`~blockdraft.training.heads.labels.forward_states`): the final norm's output
  (``"top"``) or the residual stream entering the layers ``fuse_layers`` (``"layers"``),
  concatenated; with ``"answer"`` the sequence is then cut to the answer's positions.

Nothing is cached on disk; a run keeps its held-out batches' features in memory.

Public surface:
    EagleSequences, load_sequences(dset, split, stored) -> EagleSequences
        .positions(indices) -> PositionData      their answers as flat positions
        .weights() -> [P]                        targets per sequence (sampling weights)
    EagleBatch                                   features, tokens, positions, targets, roots
        .valid(k) -> bool [B, T]                 rows scored at unrolled step k
    FeatureMaker(fusion, context, base=None, fuse_layers=(), pad_id=0)
        .batch(seqs, indices) -> EagleBatch
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from blockdraft.models.hf.eagle_heads import decoder_layers
from blockdraft.training.errors import TrainingError
from blockdraft.training.heads.generation import final_norm
from blockdraft.training.heads.labels import forward_states
from blockdraft.training.heads.positions import IGNORE, PositionData
from blockdraft.training.heads.shards import DistillSet


@dataclass
class EagleSequences:
    """The sequences of one split (see the module docstring), in shard order.

    Attributes:
        prompts: the prompts' token ids (int64 arrays).
        texts: ``t_1 .. t_m`` (the tokens the states were computed along).
        answers: ``g_1 .. g_m`` (the base's own next tokens: the targets).
        hidden: ``[N, d]`` the stored states of every answer, flat (None when not read).
        offsets: int64 ``[P + 1]``: sequence ``s``'s states are ``hidden[offsets[s]:
            offsets[s + 1]]``.
    """

    prompts: list[np.ndarray]
    texts: list[np.ndarray]
    answers: list[np.ndarray]
    hidden: torch.Tensor | None
    offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.answers)

    @property
    def tokens(self) -> int:
        """Answer tokens in all."""
        return int(self.offsets[-1])

    def weights(self) -> torch.Tensor:
        """float ``[P]``: each sequence's targets (``m - 1``), its sampling weight (a batch
        of sequences so drawn sees each answer position as often as flat sampling would)."""
        return torch.tensor([max(a.size - 1, 0) for a in self.answers], dtype=torch.float64)

    def positions(self, indices: Sequence[int]) -> PositionData:
        """The answers of ``indices`` as flat positions (no states), in that order: what
        :func:`~blockdraft.training.heads.data_curve.chain_block_efficiency` walks."""
        answers = [self.answers[s].astype(np.int64) for s in indices]
        lengths = np.array([a.size for a in answers], dtype=np.int64)
        flat = np.concatenate(answers) if answers else np.zeros(0, dtype=np.int64)
        rows = np.arange(flat.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        remaining = np.repeat(lengths, lengths) - 1 - rows
        return PositionData(torch.zeros(flat.size, 0), torch.from_numpy(flat),
                            torch.from_numpy(remaining), len(answers))


def load_sequences(dset: DistillSet, split: str, stored: bool) -> EagleSequences:
    """The finished shards of ``split`` as sequences; ``stored``: keep their states.

    Raises:
        TrainingError: the split has no finished shard.
    """
    shards = dset.load(split)
    if not shards:
        raise TrainingError(f"the distillation set {dset.folder} has no finished {split} shard")
    prompts, texts, answers, hidden = [], [], [], []
    for shard in shards:
        text = shard.answer_ids if shard.text_ids is None else shard.text_ids
        for p in range(shard.num_prompts):
            a, b = shard.answer_offsets[p], shard.answer_offsets[p + 1]
            prompts.append(shard.prompt_ids[shard.prompt_offsets[p]:
                                            shard.prompt_offsets[p + 1]].astype(np.int64))
            texts.append(text[a:b].astype(np.int64))
            answers.append(shard.answer_ids[a:b].astype(np.int64))
        if stored:
            hidden.append(shard.hidden)
    lengths = [a.size for a in answers]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return EagleSequences(prompts, texts, answers, torch.cat(hidden) if stored else None,
                          offsets)


@dataclass
class EagleBatch:
    """Sequences padded on the right to ``T`` positions.

    Attributes:
        features: float32 ``[B, T, F]`` the base features.
        tokens: int64 ``[B, T]`` the token after each position (0 in padding).
        positions: int64 ``[B, T]`` the base's positions.
        targets: int64 ``[B, T]`` the base's next token after ``tokens`` (base ids;
            :data:`~blockdraft.training.heads.positions.IGNORE` where there is none).
        roots: int64 ``[B]`` the index of answer position 0 (``h_0``) in each row.
        lengths: int64 ``[B]`` the answers' lengths ``m``.
    """

    features: torch.Tensor
    tokens: torch.Tensor
    positions: torch.Tensor
    targets: torch.Tensor
    roots: torch.Tensor
    lengths: torch.Tensor

    def valid(self, k: int) -> torch.Tensor:
        """bool ``[B, T]``: the rows scored at unrolled step ``k`` (a target, and a root ``k``
        rows back inside the answer)."""
        rows = torch.arange(self.targets.shape[1])
        return (self.targets != IGNORE) & (rows[None, :] - k >= self.roots[:, None])

    @property
    def count(self) -> int:
        """Positions with a target (step 0's)."""
        return int((self.targets != IGNORE).sum())


def _pad(rows: list[torch.Tensor], value: float | int) -> torch.Tensor:
    """``B`` tensors ``[T_b, ...]`` stacked, right-padded to the longest with ``value``."""
    longest = max(r.shape[0] for r in rows)
    out = rows[0].new_full((len(rows), longest, *rows[0].shape[1:]), value)
    for b, r in enumerate(rows):
        out[b, :r.shape[0]] = r
    return out


class FeatureMaker:
    """Where a batch's base features come from (see the module docstring).

    Args:
        fusion: ``"top"`` or ``"layers"``.
        context: ``"answer"`` or ``"prompt"``.
        base: the ``transformers`` base (eval mode; its dtype is the forward's); needed
            unless the features are the stored states.
        fuse_layers: with ``"layers"``, the ``hidden_states`` indices (the residual stream
            entering decoder layer ``i``: the output of layer ``i - 1``).
        pad_id: the id the forward's padding is filled with.

    Raises:
        TrainingError: a base is needed and none was given, or a layer index outside it.
    """

    def __init__(self, fusion: str, context: str, base: Any = None,
                 fuse_layers: Sequence[int] = (), pad_id: int = 0) -> None:
        self.stored = fusion == "top" and context == "answer"
        self.context = context
        self.base = base
        self.pad_id = pad_id
        self.modules: list[Any] = []
        if self.stored:
            return
        if base is None:
            raise TrainingError(f"fusion {fusion!r} with context {context!r} computes its "
                                "features with the base: pass the base model")
        if fusion == "top":
            self.modules = [final_norm(base)]
        else:
            layers = decoder_layers(base)
            bad = [i for i in fuse_layers if not 1 <= i <= len(layers)]
            if bad or not fuse_layers:
                raise TrainingError(f"fuse_layers {list(fuse_layers)} must be indices in "
                                    f"[1, {len(layers)}] (the base's decoder layers)")
            self.modules = [layers[i - 1] for i in fuse_layers]

    def batch(self, seqs: EagleSequences, indices: Sequence[int]) -> EagleBatch:
        """The batch of sequences ``indices`` (in that order).

        Raises:
            TrainingError: stored features asked of sequences read without their states.
        """
        m = [seqs.answers[s].size for s in indices]
        n = [seqs.prompts[s].size for s in indices]
        if self.stored:
            if seqs.hidden is None:
                raise TrainingError("these sequences were read without their stored states "
                                    "(load_sequences(..., stored=True))")
            feats = [seqs.hidden[seqs.offsets[s]:seqs.offsets[s + 1]].float() for s in indices]
        else:
            rows = [np.concatenate([seqs.prompts[s], seqs.texts[s][:-1]]).tolist()
                    for s in indices]
            states = torch.cat(forward_states(self.base, rows, self.modules, self.pad_id),
                               dim=-1).float().cpu()  # (B, T, F)
            feats = []
            for b, length in enumerate(len(r) for r in rows):
                start = n[b] - 1 if self.context == "answer" else 0
                feats.append(states[b, start:length])
        tokens, positions, targets, roots = [], [], [], []
        for b, s in enumerate(indices):
            answer = torch.from_numpy(seqs.answers[s])
            after = torch.cat((answer[1:], answer.new_full((1,), IGNORE)))  # g_{j+2}
            if self.context == "answer":  # rows: answer positions j = 0 .. m - 1
                tokens.append(torch.from_numpy(seqs.texts[s]))
                positions.append(torch.arange(m[b]) + n[b] - 1)
                targets.append(after)
                roots.append(0)
            else:  # rows: every position of x + t_1 .. t_{m-1}
                whole = torch.from_numpy(np.concatenate([seqs.prompts[s], seqs.texts[s]]))
                tokens.append(whole[1:])
                positions.append(torch.arange(n[b] + m[b] - 1))
                targets.append(torch.cat((torch.full((n[b] - 1,), IGNORE), after)))
                roots.append(n[b] - 1)
        return EagleBatch(_pad(feats, 0.0), _pad(tokens, 0), _pad(positions, 0),
                          _pad(targets, IGNORE), torch.tensor(roots, dtype=torch.int64),
                          torch.tensor(m, dtype=torch.int64))
