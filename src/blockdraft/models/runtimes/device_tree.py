"""A draft tree's topology fixed for a whole decode, on the device: what a step kept on the device
(:mod:`.device_step`) verifies every step, whatever its tokens.

A static tree is its nodes' parents and each node's rank: node ``u`` at depth ``d >= 1`` holds
rank ``ranks[u]`` of the top-k of the head guessing depth ``d`` (Medusa's rank paths,
:func:`blockdraft.drafts.trees.medusa_tree`), the root the certain token. Three shapes:

- **greedy**: the root alone (``T = 1``): a greedy step;
- **chain** of ``D`` draft tokens (``T = D + 1``): vanilla BPD, every rank 0 (each head's
  argmax);
- **Medusa tree** from rank paths (``choices``, in node order: by depth, then
  lexicographically, as :func:`blockdraft.drafts.trees.sort_choices` orders them; a path's
  prefixes before it): ``T = 1 + len(choices)`` nodes, the topology the host's
  :class:`~blockdraft.drafts.trees.MedusaTreeDrafter` drafts with the same choices.

:meth:`StaticTree.on` compiles it into device tensors once (:class:`TreeTensors`): depths, the
ancestor mask, each node's parent as a gather index, the leaves, and the selector of the nodes
at each depth of a root path, which the acceptance (:mod:`.device_accept`) and the next draft
read with static shapes.

Public surface:
    StaticTree          frozen: parents int64 [T], ranks int64 [T]
        .greedy(), .chain(D), .from_choices(choices)
        .size (T), .max_depth, .k, .is_chain, .leaves, .draft_tree(tokens) -> DraftTree
        .on(device) -> TreeTensors
    TreeTensors         frozen: the topology's tensors on one device
    tensors_of(parents [T], depths [T], max_depth) -> TreeTensors    a topology made on the
                                        device (a step's own: leaves every node, ranks zero)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from blockdraft.core.tree import DraftTree
from blockdraft.models.errors import ModelError


@dataclass(frozen=True, eq=False)
class TreeTensors:
    """A static tree's topology on one device (see the module docstring).

    Attributes:
        depths: int64 ``[T]``, node ``u``'s depth (the root's 0).
        mask: bool ``[T, T]``, ``mask[u, v]``: ``v`` is ``u`` or one of its ancestors.
        parents: int64 ``[T]``, node ``u``'s parent (the root's: 0, itself).
        nonroot: bool ``[T]``, every node but the root.
        ranks: int64 ``[T]``, node ``u``'s rank in its head's top-k (the root's 0).
        leaves: int64 ``[L]``, the nodes without children, in node order.
        levels: bool ``[D + 1, T]``, ``levels[j, u]``: node ``u`` has depth ``j``.
        k: the top-k width the ranks read (``1 + max rank``), a host int.
    """

    depths: torch.Tensor
    mask: torch.Tensor
    parents: torch.Tensor
    nonroot: torch.Tensor
    ranks: torch.Tensor
    leaves: torch.Tensor
    levels: torch.Tensor
    k: int


@dataclass(frozen=True, eq=False)
class StaticTree:
    """A draft tree's fixed topology (see the module docstring).

    Attributes:
        parents: int64 ``[T]``, ``-1`` for the root (node 0), a parent before its child.
        ranks: int64 ``[T]``, each node's rank in the top-k of its depth's head (root: 0).
        name: a label for records (``"greedy"``, ``"chain D=4"``, ``"medusa tree N=16"``).
    """

    parents: np.ndarray
    ranks: np.ndarray
    name: str = ""

    def __post_init__(self) -> None:
        parents = np.asarray(self.parents, dtype=np.int64).reshape(-1)
        ranks = np.asarray(self.ranks, dtype=np.int64).reshape(-1)
        t = parents.size
        if t == 0 or parents[0] != -1 or ranks.size != t or (ranks < 0).any() or ranks[0] != 0:
            raise ModelError(f"a static tree needs a root (parent -1) first and a rank >= 0 per "
                             f"node, got parents {parents.tolist()}, ranks {ranks.tolist()}")
        if t > 1 and ((parents[1:] < 0) | (parents[1:] >= np.arange(1, t))).any():
            raise ModelError(f"a static tree's parents must come before their children, got "
                             f"{parents.tolist()}")
        object.__setattr__(self, "parents", parents)
        object.__setattr__(self, "ranks", ranks)

    @classmethod
    def greedy(cls) -> StaticTree:
        """The root alone: one greedy step (``T = 1``)."""
        return cls(np.array([-1]), np.array([0]), name="greedy")

    @classmethod
    def chain(cls, depth: int) -> StaticTree:
        """A chain of ``depth`` draft tokens after the root (every rank 0: vanilla BPD)."""
        if depth < 0:
            raise ModelError(f"a chain's depth must be >= 0, got {depth}")
        return cls(np.arange(-1, depth), np.zeros(depth + 1, dtype=np.int64),
                   name=f"chain D={depth}")

    @classmethod
    def from_choices(cls, choices: Sequence[Sequence[int]], name: str = "") -> StaticTree:
        """Medusa's tree of rank paths ``choices`` in node order (see the module docstring).

        Raises:
            ModelError: an empty or repeated path, a negative rank, or a path before its
                prefix.
        """
        node_of: dict[tuple[int, ...], int] = {(): 0}
        parents, ranks = [-1], [0]
        for c in choices:
            path = tuple(int(r) for r in c)
            parent = node_of.get(path[:-1])
            if not path or min(path) < 0 or path in node_of or parent is None:
                raise ModelError(f"Medusa choice {list(path)}: rank paths must be non-empty, "
                                 "distinct, >= 0 and in node order (each after its prefix; "
                                 "blockdraft.drafts.trees.sort_choices orders them)")
            node_of[path] = len(parents)
            parents.append(parent)
            ranks.append(path[-1])
        return cls(np.array(parents), np.array(ranks),
                   name=name or f"medusa tree N={len(parents)}")

    @cached_property
    def shape(self) -> DraftTree:
        """The topology as a :class:`DraftTree` (token ``u`` at node ``u``, scores zero)."""
        return self.draft_tree(np.arange(self.size))

    @property
    def size(self) -> int:
        """``T``, the nodes one verification forward processes (the root included)."""
        return int(self.parents.size)

    @property
    def max_depth(self) -> int:
        """``D``, the deepest node's depth: the heads the next draft reads."""
        return self.shape.max_depth

    @property
    def k(self) -> int:
        """The top-k width the ranks read (``1 + max rank``)."""
        return 1 + int(self.ranks.max())

    @property
    def is_chain(self) -> bool:
        """Whether every node's parent is the node before it (no row to move on acceptance)."""
        return bool(np.array_equal(self.parents, np.arange(-1, self.size - 1)))

    @property
    def leaves(self) -> np.ndarray:
        """int64 ``[L]``: the nodes without children, in node order."""
        return self.shape.leaves()

    @property
    def key(self) -> tuple[bytes, bytes]:
        """What identifies the topology (its parents and ranks)."""
        return self.parents.tobytes(), self.ranks.tobytes()

    def draft_tree(self, tokens: np.ndarray) -> DraftTree:
        """The tree holding ``tokens`` (int ``[T]``), scores zero (a step's record)."""
        return DraftTree(tokens=np.asarray(tokens, dtype=np.int64), parents=self.parents,
                         scores=np.zeros(self.size))

    def on(self, device: torch.device) -> TreeTensors:
        """The topology's tensors on ``device`` (made once per decoder)."""
        shape = self.shape
        depths = np.asarray(shape.depths)
        levels = depths[None, :] == np.arange(self.max_depth + 1)[:, None]  # (D + 1, T)

        def put(a: np.ndarray) -> torch.Tensor:
            return torch.as_tensor(np.array(a)).to(device)  # a writable copy

        return TreeTensors(depths=put(depths), mask=put(shape.ancestor_mask()),
                           parents=put(np.maximum(self.parents, 0)),
                           nonroot=put(np.arange(self.size) > 0), ranks=put(self.ranks),
                           leaves=put(self.leaves), levels=put(levels), k=self.k)


def tensors_of(parents: torch.Tensor, depths: torch.Tensor, max_depth: int) -> TreeTensors:
    """The :class:`TreeTensors` of a topology made on the device, in static shapes (no host
    synchronisation): ``parents`` int64 ``[T]`` (node 0 the root, its parent itself; a parent
    before its child), ``depths`` int64 ``[T]``, every depth at most ``max_depth`` (a host
    int). The ancestor mask is ``max_depth`` gathers (each row: itself and its parent's row);
    ``leaves`` lists every node (the verdict's ``n`` of each node's root path), ``ranks`` are
    zero."""
    t = int(parents.numel())
    dev = parents.device
    own = torch.eye(t, dtype=torch.bool, device=dev)  # (T, T)
    mask = own
    for _ in range(max_depth):
        mask = own | mask[parents]
    steps = torch.arange(max_depth + 1, device=dev)
    node = torch.arange(t, device=dev)
    return TreeTensors(depths=depths, mask=mask, parents=parents, nonroot=node > 0,
                       ranks=torch.zeros_like(depths), leaves=node,
                       levels=depths[None, :] == steps[:, None], k=1)
