"""Drafts made on the device, from the tensors a step leaves there (issue 41, item 2): the heads'
chain and prompt lookup as torch operations, no host round trip.

The host drafters (:mod:`blockdraft.drafts`, pure numpy) read the heads' top-k and the committed
text on the host; a step kept on the device (one captured graph: forward, acceptance, the next
heads and the next draft) needs the same drafts from device tensors. These functions compute
exactly the host drafters' trees (tested equal on CPU tensors, the drafts room's own rules:
:func:`~blockdraft.drafts.heads.vanilla`, :func:`~blockdraft.drafts.lookup.LookupDrafter`),
with static shapes and no host synchronisation, so a graph can capture them: the text is a
buffer of ``C`` rows and its length a 0-d device tensor, a draft a padded row and its length.

- **chain** (vanilla BPD): the certain token (the base head's argmax) and each further head's
  argmax over its columns (a shortlist's ids, ascending; ties to the smaller id, the host's
  rule), the prefix heads' greedy chain included (their logits along it);
- **prompt lookup**: the longest suffix n-gram of the text (``min_match <= n <= max_match``)
  that occurred before with a token after it, its most recent occurrence, and the
  ``lengths[n - 1]`` tokens after it (the last entry for longer matches), cut at the text's
  end; none: the certain token alone.

- **chain + lookup** (:func:`merge_copy`): the heads' chain and the copy in one trie, the
  host's :func:`~blockdraft.drafts.iad.CombinedDrafter` of vanilla and prompt lookup: the
  chain's nodes, then the copy's tokens after the prefix it shares with the chain, hanging off
  the chain's node there (padding: ``-1`` tokens under the root, last);
- **static tree** (Medusa's, issue 41): a fixed topology (:class:`~.device_tree.StaticTree`),
  node ``u`` at depth ``d`` holding rank ``ranks[u]`` of the top-k of the head guessing depth
  ``d``, the root the certain token: the tokens of
  :func:`~blockdraft.drafts.trees.medusa_tree` over the heads' top-k, gathered in one index.
  The top-k is taken with the host's order and tie rule (:func:`topk_columns`: logit
  descending, then column ascending: :func:`~blockdraft.models.topk.topk_logprobs`'s), exact
  on the device: each logit's bits and its column make one distinct integer key.

A chain draft is :class:`DeviceDraft`, a padded row of ``1 + D`` ids and its count;
:meth:`DeviceDraft.tree` reads it back as a :class:`~blockdraft.core.tree.DraftTree` (one
small copy to the host).

Public surface:
    DeviceDraft          frozen: tokens int64 [1 + D] (-1 past count), count int64 []
        .tree() -> DraftTree                    the chain, on the host
    chain_draft(base [V], heads [n, C], ids=None) -> DeviceDraft
    lookup_draft(text [C], size [], min_match=1, max_match=4, lengths=(2, 6, 10)) -> DeviceDraft
    topk_columns(logits [n, C], k) -> int64 [n, k]       the host's top-k order, exactly
    tree_draft(tree, certain [1], heads [D, C], ids=None) -> int64 [T]   a static tree's tokens
    tree_columns(tree, heads [D, C]) -> int64 [T]        the columns of its nodes' tokens
    merge_copy(chain [1 + D], copy) -> (tokens [T], parents [T], depths [T])
                                     a chain and a lookup copy in one trie, T = 1 + D + Lmax
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from blockdraft.core.tree import DraftTree
from blockdraft.models.errors import ModelError
from blockdraft.models.runtimes.device_tree import TreeTensors


@dataclass(frozen=True, eq=False)
class DeviceDraft:
    """One chain draft on the device.

    Attributes:
        tokens: int64 ``[1 + D]``: the certain token, then the draft (``-1`` past ``count``).
        count: int64 ``[]``: the nodes of the chain (the root included), ``1 <= count <= 1 + D``.
    """

    tokens: torch.Tensor
    count: torch.Tensor

    def tree(self) -> DraftTree:
        """The chain as a :class:`DraftTree` (scores zero), read back to the host."""
        row = self.tokens.cpu().numpy()[: int(self.count)]
        return DraftTree(tokens=row, parents=np.arange(-1, row.size - 1),
                         scores=np.zeros(row.size))


def chain_draft(base: torch.Tensor, heads: torch.Tensor,
                ids: torch.Tensor | None = None) -> DeviceDraft:
    """Vanilla BPD's chain: the base head's argmax, then each head's.

    Args:
        base: float ``[V]``, the base head's logits at the accepted node.
        heads: float ``[n, C]``, heads 2..n+1's logits over their ``C`` columns (the whole
            vocabulary, or a shortlist; the prefix heads' along their greedy chain).
        ids: int64 ``[C]``, the token id of each column (a shortlist, ascending), or None.

    Returns:
        A :class:`DeviceDraft` of ``1 + n`` tokens (``count = 1 + n``).
    """
    certain = base.argmax(-1, keepdim=True)  # (1,)
    best = heads.argmax(-1)  # (n,): the first maximum, the smallest column: the smallest id
    if ids is not None:
        best = ids.to(best.device)[best]
    tokens = torch.cat((certain, best))  # (1 + n,)
    return DeviceDraft(tokens=tokens, count=torch.full((), tokens.numel(), dtype=torch.int64,
                                                       device=tokens.device))


def lookup_draft(text: torch.Tensor, size: torch.Tensor | int, min_match: int = 1,
                 max_match: int = 4, lengths: Sequence[int] = (2, 6, 10)) -> DeviceDraft:
    """Prompt lookup's copy over the text on the device (the module docstring's rule, that of
    :func:`blockdraft.drafts.lookup.lookup` and :class:`~blockdraft.drafts.lookup.Copies`).

    Args:
        text: int64 ``[C]``, a buffer whose first ``size`` entries are the committed text and
            the certain token, last (the rest is never read).
        size: the text's length (``1 <= size <= C``), a 0-d device tensor or an int.
        min_match, max_match: the shortest and longest suffix n-gram tried.
        lengths: draft tokens after a match of 1, 2, ... tokens (the last entry for longer).

    Returns:
        A :class:`DeviceDraft` of ``1 + max(lengths)`` slots: the certain token, then the copy.

    Raises:
        ModelError: bad settings (checked on the host; nothing on the device is read).
    """
    if not 1 <= min_match <= max_match or not lengths or min(lengths) < 1:
        raise ModelError(f"lookup_draft needs 1 <= min_match <= max_match and lengths >= 1, "
                         f"got {min_match}, {max_match}, {tuple(lengths)}")
    dev = text.device
    c = int(text.shape[0])
    n_at = torch.as_tensor(size, dtype=torch.int64, device=dev)  # ()
    ends = torch.arange(c, device=dev)  # (C,): a candidate occurrence's exclusive end e
    last = (n_at - 1).clamp(min=0)
    run = torch.ones(c, dtype=torch.bool, device=dev)
    matched = torch.zeros(c, dtype=torch.int64, device=dev)  # (C,): matched suffix length
    for j in range(max_match):  # suffix token j from the end against the token before e - j
        here = ends - 1 - j
        mine = n_at - 1 - j
        same = text[here.clamp(min=0)] == text[mine.clamp(min=0)]
        run = run & same & (here >= 0) & (j + 1 <= n_at - 1)  # n <= size - 1 tokens
        matched = matched + run.to(torch.int64)
    valid = (ends >= 1) & (ends <= n_at - 1) & (matched >= min_match)  # a token follows e
    key = torch.where(valid, matched * c + ends, torch.full_like(ends, -1))  # longest, latest
    best = key.argmax()
    found = key[best] >= 0
    n = matched[best]
    rank = n.clamp(min=1, max=len(lengths))  # (): which entry of lengths
    want = torch.zeros((), dtype=torch.int64, device=dev)  # () copy length, 0: none
    for i, length in enumerate(lengths, start=1):  # host ints as kernel scalars: no copy
        want = want + (rank == i) * int(length)
    want = want * found
    longest = max(lengths)
    slot = torch.arange(longest, device=dev)  # (D,)
    at = best + slot
    keep = (slot < want) & (at < n_at)
    copy = torch.where(keep, text[at.clamp(max=c - 1)], torch.full_like(at, -1))  # (D,)
    tokens = torch.cat((text[last][None], copy))  # (1 + D,)
    return DeviceDraft(tokens=tokens, count=1 + keep.sum())


def topk_columns(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Each row's ``k`` best columns ordered by (logit descending, column ascending), the rule
    of :func:`~blockdraft.models.topk.topk_logprobs`, exactly and on the device: the logits in
    float32 (bfloat16's are exact there), ``-0.0`` as ``+0.0``, their bits mapped to integers
    of the same order, and each key ``bits * C + (C - 1 - column)`` distinct, so one
    ``torch.topk`` over the keys has no tie left to break.

    Args:
        logits: float ``[n, C]`` raw logits (``C < 2**24``; ``-inf`` masks a column).
        k: columns per row, ``1 <= k <= C``.

    Returns:
        int64 ``[n, k]``, the columns.
    """
    c = int(logits.shape[-1])
    z = logits.float() + 0.0  # (n, C): -0.0 + 0.0 is +0.0
    bits = z.view(torch.int32)
    ordered = bits ^ ((bits >> 31) & 0x7FFFFFFF)  # (n, C) int32: the floats' order
    column = torch.arange(c, device=z.device)
    key = ordered.to(torch.int64) * c + (c - 1 - column)  # (n, C): distinct
    return key.topk(k, dim=-1).indices  # (n, k): sorted, best first


def tree_draft(tree: TreeTensors, certain: torch.Tensor, heads: torch.Tensor,
               ids: torch.Tensor | None = None) -> torch.Tensor:
    """A static tree's tokens: the certain token at the root, node ``u`` at depth ``d >= 1``
    the ``ranks[u]``-th best token of the head guessing depth ``d`` (:func:`topk_columns`).

    Args:
        tree: the topology's tensors (its ranks below ``tree.k <= C``, its depth at most
            ``D``).
        certain: int64 ``[1]``, the certain token (the base head's argmax).
        heads: float ``[D, C]``, the logits of the heads guessing depths ``1 .. D`` over their
            ``C`` columns.
        ids: int64 ``[C]``, the token id of each column (a shortlist, ascending, on the
            device), or None.

    Returns:
        int64 ``[T]``, the tree's tokens in node order.
    """
    drafted = tree_columns(tree, heads)  # (T,)
    if ids is not None:
        drafted = ids[drafted]
    return torch.where(tree.nonroot, drafted, certain.expand_as(drafted))


def tree_columns(tree: TreeTensors, heads: torch.Tensor) -> torch.Tensor:
    """int64 ``[T]``: the column of node ``u``'s token, rank ``ranks[u]`` of the head guessing
    its depth (:func:`topk_columns`); the root's is the first head's best, a placeholder.

    Args:
        tree: the topology's tensors (ranks below ``tree.k <= C``, depth at most ``D``).
        heads: float ``[D, C]``, the logits of the heads guessing depths ``1 .. D``.
    """
    top = topk_columns(heads, tree.k)  # (D, k)
    slot = (tree.depths - 1).clamp(min=0)  # (T,): the root reads row 0
    return top[slot, tree.ranks]  # (T,)


def merge_copy(chain: torch.Tensor, copy: DeviceDraft
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The chain and the copy merged into one trie, as the host's trie merges them (the chain
    first; the copy's tokens after their shared prefix are new nodes, in order), in a fixed
    layout of ``T = 1 + D + Lmax`` nodes: the chain's ``1 + D`` (node ``i`` at depth ``i``),
    then the copy's new nodes, then padding (token ``-1``, parent the root, depth 1).

    Args:
        chain: int64 ``[1 + D]``, the certain token, then the heads' argmax.
        copy: the lookup copy (:func:`lookup_draft`: the same certain token first,
            ``1 + Lmax`` slots, ``count`` of them real).

    Returns:
        ``(tokens, parents, depths)``, int64 ``[T]`` each (the root's parent: 0, itself).
    """
    d = int(chain.numel()) - 1
    lmax = int(copy.tokens.numel()) - 1
    dev = chain.device
    offset = torch.arange(1, lmax + 1, device=dev)  # (Lmax,): a copy token's depth
    copied = copy.tokens[1:]  # (Lmax,)
    agree = (offset < copy.count) & (offset <= d) & (copied == chain[offset.clamp(max=d)])
    shared = agree.to(torch.int64).cumprod(0).sum()  # (): the prefix shared with the chain
    slot = torch.arange(lmax, device=dev)  # (Lmax,): the new nodes, in order
    at = shared + 1 + slot  # (Lmax,): their depth (their offset in the copy)
    real = at < copy.count
    node = d + 1 + slot
    tokens = torch.where(real, copy.tokens[at.clamp(max=lmax)], torch.full_like(at, -1))
    parents = torch.where(real, torch.where(slot == 0, shared, node - 1), torch.zeros_like(at))
    depths = torch.where(real, at, torch.ones_like(at))
    line = torch.arange(d + 1, device=dev)  # (1 + D,): the chain
    return (torch.cat((chain, tokens)), torch.cat(((line - 1).clamp(min=0), parents)),
            torch.cat((line, depths)))
