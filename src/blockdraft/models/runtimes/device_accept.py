"""The exact verdict on a static draft tree as tensor operations: what a step kept on the device
(:mod:`.device_step`) decides without reading anything back.

The rule is :mod:`blockdraft.verify.acceptance`'s for the exact criterion (docs/definitions.md
sec. 2 and 11): node ``u`` (not the root) passes when its token is the base head's argmax at
its parent, and nothing below a non-root EOS passes; a node is accepted when it and every
ancestor pass; the accepted node is the deepest accepted one (a tree's siblings hold distinct
tokens, so the exact criterion accepts one chain; the first in node order). Here every step
is a fixed number of kernels over ``[T]`` and ``[T, T]`` tensors (static shapes, no host
synchronisation, no branch on a value), so a CUDA graph captures it:

- the accepted nodes: no ancestor-or-self of ``u`` fails (one masked reduction over the
  ancestor mask);
- the winner: the first of the deepest accepted nodes;
- the accepted path padded to ``D + 1`` nodes (the node at each depth on the winner's root
  path; node 0 past its end), the tokens it yields (``d_2 .. d_{1+n}`` then the next certain
  token, ``-1`` past them), and ``n`` of every root-to-leaf path (the deepest accepted depth on
  it: the accepted nodes of a path are a prefix of it).

Public surface:
    DeviceVerdict       frozen: accepted bool [T], winner [], n [], path [D + 1], tokens
                        [D + 1], leaf_lengths [L] (int64, on the device)
    tree_verdict(tree, tokens [T], greedy [T], eos []) -> DeviceVerdict
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from blockdraft.models.runtimes.device_tree import TreeTensors


@dataclass(frozen=True, eq=False)
class DeviceVerdict:
    """One step's verdict on the device (see the module docstring).

    Attributes:
        accepted: bool ``[T]``, the nodes accepted (the root always).
        winner: int64 ``[]``, the accepted node.
        n: int64 ``[]``, accepted draft tokens (the winner's depth).
        path: int64 ``[D + 1]``, the winner's root path (``path[j]`` the node at depth ``j``),
            0 past ``n``.
        tokens: int64 ``[D + 1]``: the accepted draft tokens ``d_2 .. d_{1+n}``, then the next
            certain token (the base head's argmax at the winner), then ``-1``.
        leaf_lengths: int64 ``[L]``, ``n`` of every root-to-leaf path (leaves in node order).
    """

    accepted: torch.Tensor
    winner: torch.Tensor
    n: torch.Tensor
    path: torch.Tensor
    tokens: torch.Tensor
    leaf_lengths: torch.Tensor


def tree_verdict(tree: TreeTensors, tokens: torch.Tensor, greedy: torch.Tensor,
                 eos: torch.Tensor) -> DeviceVerdict:
    """The exact verdict on one static tree (see the module docstring).

    Args:
        tree: the topology's tensors (:meth:`StaticTree.on <.device_tree.StaticTree.on>`).
        tokens: int64 ``[T]``, the tree's tokens (the root the certain token).
        greedy: int64 ``[T]``, the base head's argmax at every node.
        eos: int64 ``[]``, the EOS id, or ``-1`` for none.

    Returns:
        A :class:`DeviceVerdict`, every tensor on the tokens' device.
    """
    parents = tree.parents
    match = tokens == greedy[parents]  # (T,): the token is the argmax at its parent
    below_eos = (parents > 0) & (tokens[parents] == eos)  # (T,): the parent a non-root EOS
    passes = (match & ~below_eos) | ~tree.nonroot  # (T,): the root always
    accepted = ~(tree.mask & ~passes[None, :]).any(-1)  # (T,): no ancestor-or-self fails
    deep = torch.where(accepted, tree.depths, torch.full_like(tree.depths, -1))  # (T,)
    winner = (deep == deep.max()).to(torch.uint8).argmax()  # (): the first deepest one
    n = tree.depths[winner]
    on_path = tree.levels & tree.mask[winner][None, :]  # (D + 1, T)
    path = on_path.to(torch.uint8).argmax(-1)  # (D + 1,): 0 past n
    depth = torch.arange(path.numel(), device=path.device)  # (D + 1,)
    drafted = torch.cat((tokens[path[1:]], tokens.new_full((1,), -1)))  # (D + 1,)
    minus = torch.full_like(drafted, -1)
    out = torch.where(depth < n, drafted, torch.where(depth == n, greedy[winner], minus))
    leaf_lengths = (tree.mask[tree.leaves] & accepted[None, :]).sum(-1) - 1  # (L,)
    return DeviceVerdict(accepted=accepted, winner=winner, n=n, path=path, tokens=out,
                         leaf_lengths=leaf_lengths)
