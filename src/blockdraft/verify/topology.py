"""A token tree's topology compiled once into device tensors: what its verification forward
reads besides the tokens.

A tree's forward needs each node's depth (its position is ``past.length + depth``) and its
ancestor mask (which nodes each node attends to). Both depend only on the parents array, not
on the tokens; a static tree (Medusa's) repeats one topology every step, a chain every step of
its length, and trees sized by cost repeat a few. :class:`TreeTopologies` keeps them on the
device, keyed by the parents' bytes: a step of a known topology makes no host mask and copies
nothing to the device but its tokens (Medusa compiles its tree's buffers once the same way;
SGLang's EAGLE keeps the draft tree's mask on the device).

Public surface:
    Topology            frozen: depths int64 [N], mask bool [N, N], on the device
    TreeTopologies(device, size=256)    mutable cache: .of(tree) -> Topology, .hits, .misses
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch

from blockdraft.core.tree import DraftTree


@dataclass(frozen=True, eq=False)
class Topology:
    """One tree topology on the device.

    Attributes:
        depths: int64 ``[N]``, node ``u``'s depth (the root's 0): positions are
            ``past.length + depths``.
        mask: bool ``[N, N]``, ``mask[u, v]``: node ``u`` attends to node ``v`` (its ancestors
            and itself; :meth:`DraftTree.ancestor_mask`).
    """

    depths: torch.Tensor
    mask: torch.Tensor


class TreeTopologies:
    """The topologies a verifier has met, compiled once each (mutable: a least-recently-used
    cache of at most ``size`` topologies).

    Args:
        device: where the tensors live (the model's device).
        size: topologies kept (a decode whose trees change every step evicts the oldest).
    """

    def __init__(self, device: torch.device, size: int = 256) -> None:
        self.device = torch.device(device)
        self.size = int(size)
        self.hits = 0
        self.misses = 0
        self._kept: OrderedDict[bytes, Topology] = OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    def of(self, tree: DraftTree) -> Topology:
        """The tree's depths and ancestor mask on the device (made at the first tree of its
        parents, then reused)."""
        key = tree.parents.tobytes()
        found = self._kept.get(key)
        if found is not None:
            self.hits += 1
            self._kept.move_to_end(key)
            return found
        self.misses += 1
        made = Topology(
            depths=torch.tensor(tree.depths, dtype=torch.int64, device=self.device),  # (N,)
            mask=torch.tensor(tree.ancestor_mask(), device=self.device))  # (N, N)
        self._kept[key] = made
        if len(self._kept) > self.size:
            self._kept.popitem(last=False)
        return made
