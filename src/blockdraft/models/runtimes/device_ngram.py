"""An n-gram LM's log-probability of every node of a candidate tree, on the device, in one call
(issue 41, item 2): the LM evidence of the device's cost-aware tree.

The LM is an :class:`~blockdraft.rescorers.ngram.table.NgramTable` moved to the device once
(``NgramTable.from_lm(lm).to(device)``: sorted base-V key arrays, natural-log probabilities and
back-offs; its scores equal KenLM's to float32 rounding), used as it is: this module builds the
one input it cannot build without the host, each node's history (the last ``order - 1`` LM
words before it: the committed text's tail, then its ancestors' tokens), and calls the table's
``score_next`` once for every node. The text lives in the decoder's buffer on the device and
its length is a 0-d device tensor; the topology is static (the candidate tree), so which slot
of a node's history comes from the text and which from an ancestor is an index computed once on
the host (:class:`HistoryIndex`), and a step is one gather, the restart after an unknown word
and the table's lookups: static shapes, no host synchronisation, capturable in a CUDA graph.

The conventions are the table's (and KenLM's through :class:`~blockdraft.rescorers.ngram.lm.
NgramLM`): an empty context starts at ``<s>``, a shorter one than ``order - 1`` words leaves
the slots before it empty, a token the LM does not know is word 0 (``<unk>``) and the history
restarts after it. The context LM's counts (the rescorer's second LM, learned from the text as
it grows) are not on the device: the packaged recipe gives them weight 0.

Public surface:
    DeviceLM            the protocol: order, bos, index [ids], score_next(histories, words)
    HistoryIndex.of(tree, order) -> HistoryIndex       made once per topology, on the host
    node_histories(lm, where, text [C], length [], tokens [M]) -> int64 [M, order - 1]
    node_scores(lm, where, text, length, tokens) -> float32 [M]   ln P(token | context, path)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from blockdraft.models.runtimes.device_tree import StaticTree

NONE = -1
"""A history slot without a word (the table's ``NONE``)."""


class DeviceLM(Protocol):
    """What the device reads of an n-gram table on its device (an
    :class:`~blockdraft.rescorers.ngram.table.NgramTable` after ``.to(device)``)."""

    order: int
    bos: int
    index: Any

    def score_next(self, histories: Any, words: Any) -> Any:
        """float32 ``[B]``: ``ln P(word_b | history_b)`` (histories ``[B, order - 1]`` of LM
        words, ``NONE`` where there is none; words ``[B]``)."""
        ...


@dataclass(frozen=True, eq=False)
class HistoryIndex:
    """Where each slot of each node's history comes from, for one static topology and LM
    order.

    Attributes:
        source: int64 ``[M, W]`` (``W = order - 1``): slot ``j`` of node ``u``'s history is
            entry ``source[u, j]`` of ``[text's last W words, the nodes' words]`` (below
            ``W``: the text's; else node ``source - W``, an ancestor of ``u``).
        width: ``W``.
    """

    source: torch.Tensor
    width: int

    @classmethod
    def of(cls, tree: StaticTree, order: int, device: torch.device | str) -> HistoryIndex:
        """The index of ``tree`` (its node ``u``'s history: the last ``W`` of the text's
        ``W`` words, then the words of ``u``'s ancestors from the root on)."""
        width = order - 1
        m = tree.size
        source = np.zeros((m, width), dtype=np.int64)
        for u in range(m):
            line = list(range(width))  # the text's slots, then the ancestors' nodes
            ancestors = []
            v = int(tree.parents[u])
            while v >= 0:
                ancestors.append(width + v)
                v = int(tree.parents[v])
            line += ancestors[::-1]
            source[u] = line[len(line) - width:] if width else line[:0]
        return cls(source=torch.as_tensor(source).to(device), width=width)


def _words(lm: DeviceLM, ids: torch.Tensor) -> torch.Tensor:
    """LM word indices of token ids (0: unknown, also for ids outside the table's index)."""
    size = int(lm.index.shape[0])
    inside = (ids >= 0) & (ids < size)
    return torch.where(inside, lm.index[ids.clamp(0, size - 1)], torch.zeros_like(ids))


def node_histories(lm: DeviceLM, where: HistoryIndex, text: torch.Tensor,
                   length: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """int64 ``[M, W]``: every node's history, oldest first (the table's ``histories``).

    Args:
        lm: the table on the device.
        where: the topology's :class:`HistoryIndex` for ``lm.order``.
        text: int64 ``[C]``, the buffer whose first ``length`` entries are the committed text
            before the tree's root.
        length: int64 ``[]``, the committed text's length.
        tokens: int64 ``[M]``, the nodes' token ids (the root's first).
    """
    width = where.width
    dev = tokens.device
    if width == 0:
        return torch.zeros((int(tokens.numel()), 0), dtype=torch.int64, device=dev)
    slot = torch.arange(width, device=dev)  # (W,)
    at = length - width + slot  # (W,): the text's last W positions
    tail = torch.where(at >= 0, _words(lm, text[at.clamp(min=0)]), torch.full_like(at, NONE))
    empty = torch.where(slot == width - 1, torch.full_like(slot, lm.bos),
                        torch.full_like(slot, NONE))
    tail = torch.where(length > 0, tail, empty)  # (W,): an empty text starts at <s>
    hist = torch.cat((tail, _words(lm, tokens)))[where.source]  # (M, W)
    unknown = torch.where(hist == 0, slot.expand_as(hist), torch.full_like(hist, -1))
    last = unknown.flip(1).cummax(1).values.flip(1)  # (M, W): the last unknown slot from j on
    return torch.where(slot <= last, torch.full_like(hist, NONE), hist)


def node_scores(lm: DeviceLM, where: HistoryIndex, text: torch.Tensor, length: torch.Tensor,
                tokens: torch.Tensor) -> torch.Tensor:
    """float32 ``[M]``: ``ln P(token_u | the text, u's ancestors)`` for every node, the
    table's ``score_tree`` (arguments: :func:`node_histories`)."""
    hist = node_histories(lm, where, text, length, tokens)
    return lm.score_next(hist, _words(lm, tokens))  # type: ignore[no-any-return]
