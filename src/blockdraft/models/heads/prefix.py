"""`PrefixRule`: prefix-conditioned (Hydra-style) heads, each reading the token before its target.

Head ``j + 2`` (prefix head ``j``, :class:`~blockdraft.models.hf.prefix_heads.PrefixHeads`)
reads the base's state ``x`` and the embedding of the token just before its target. The rule,
for every runtime:

- **the greedy chain**: head 0 reads the base's greedy token at ``x`` (``first``), head ``j``
  the argmax of head ``j - 1`` over the shortlist (ties to the smaller id). The chain's states
  are the heads' states, its top-``k`` the step's lattice slots (the 1-best path of the lattice
  is the chain a Hydra model drafts; the other arcs are conditioned on that chain);
- **the tree lattice** (:func:`tree_expander`): depth 1 is ``first``; a node of depth ``i`` is
  expanded by head ``i - 1`` reading the node's last token, its top ``k`` as natural-log
  probabilities; each ``(head, token)`` evaluated once a step, the chain's nodes not at all.

What a runtime computes its own way is its backend's (:class:`PrefixBackend`): the chain (a
loop over the heads in PyTorch, one graph on ONNX Runtime) and one node's expansion.

Public surface:
    PrefixBackend    chain_states(x, n), chain_topk(x, k, n, first), node(x, k)
    PrefixRule(backend)                            a HeadsRule of kind "prefix"
    tree_expander(certain, num_heads, node, chain=None) -> expand
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Protocol

import numpy as np
import torch

from blockdraft.models.heads.rule import HeadsBackend, HeadsRule, padded

Node = Callable[[int, int], tuple[np.ndarray, np.ndarray]]
"""``(head, token) -> (ids int64 [k'], log-probs float64 [k'])``: head ``head``'s top arcs when
it reads ``token``."""
Expand = Callable[[tuple[int, ...]], tuple[np.ndarray, np.ndarray]]
"""``expand(prefix) -> (ids, log-probs)``: the children of a node of a tree lattice."""


class PrefixBackend(HeadsBackend, Protocol):
    """What a runtime computes for prefix heads."""

    def chain_states(self, x: torch.Tensor, n: int) -> torch.Tensor:
        """Prefix heads ``0 .. n - 1``'s states along their greedy chain from the base's
        greedy token at ``x [..., d]``: ``[..., n, d]``."""
        ...

    def chain_topk(self, x: torch.Tensor, k: int, n: int, first: Any
                   ) -> tuple[np.ndarray, np.ndarray]:
        """The chain's top-``k'`` at ``x [M, d]`` (``first``: the base's greedy tokens, or None
        to project them): ``(ids int64 [M, n, k'], log-probs)``, ``k' <= k``."""
        ...

    def node(self, x: torch.Tensor, k: int) -> Node:
        """One step's node evaluation at ``x [d]``, ``k`` arcs a node (building it runs
        nothing)."""
        ...


class PrefixRule(HeadsRule):
    """Prefix-conditioned heads over a backend (see the module docstring)."""

    kind: ClassVar[str] = "prefix"
    conditional: ClassVar[bool] = True
    backend: PrefixBackend

    def states(self, x: torch.Tensor, n: int) -> torch.Tensor:
        """Prefix heads ``0 .. n - 1``'s states along their greedy chain at ``x``."""
        return self.backend.chain_states(x, n)

    def head_topk(self, x: torch.Tensor, k: int, n: int, first: Any = None
                  ) -> tuple[np.ndarray, np.ndarray]:
        """The greedy chain's top-``k`` at ``x [M, d]`` (heads ``2 .. n``; ``first``: the
        base's greedy tokens at ``x``, projected when not given)."""
        return padded(*self.backend.chain_topk(x, k, n - 1, first), k)

    def expander(self, x: torch.Tensor, k: int, first: int | None = None,
                 chain: tuple[np.ndarray, np.ndarray] | None = None) -> Expand:
        """The tree lattice at ``x [d]`` (:func:`tree_expander`): depth 1 the base's greedy
        token ``first`` (projected when not given), ``k`` arcs a node; ``chain``: the greedy
        chain's top ``k`` from :meth:`head_topk` at ``x``, which spares their evaluation.
        Building it with ``first`` runs nothing."""
        certain = int(self.backend.greedy(x)) if first is None else int(first)
        return tree_expander(certain, self.num_heads, self.backend.node(x, k), chain)


def tree_expander(certain: int, num_heads: int, node: Node,
                  chain: tuple[np.ndarray, np.ndarray] | None = None) -> Expand:
    """The expansion rule of one step's tree lattice over any runtime's heads.

    A node's children depend only on its depth and its last token (head ``depth - 1`` reads
    that token's embedding beside the step's fixed state), so each ``(head, token)`` is
    evaluated once per step, and the greedy chain's nodes not at all when ``chain`` (the
    chain's top-k, which the step computed already: ``head_topk``) is given.

    Args:
        certain: the base's greedy token (depth 1, log-prob 0).
        num_heads: prefix heads ``n``: nodes deeper than ``n`` have no children.
        node: ``(head, token) -> (ids int64 [k'], log-probs float64 [k'])``, head ``head``'s
            top arcs when it reads ``token`` (the node's last token).
        chain: ``(ids [m, k], log-probs [m, k])``, heads ``0 .. m-1`` along the greedy chain
            from ``certain`` (row ``j`` reads row ``j - 1``'s first id; ids ``< 0`` are
            padding), or None.

    Returns:
        ``expand(prefix) -> (ids int64 [k'], log-probs float64 [k'])``: the root's child is
        ``certain``; a prefix deeper than the heads, or not starting with ``certain``, has no
        children.
    """
    none = (np.zeros(0, dtype=np.int64), np.zeros(0))
    seen: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
    if chain is not None:
        token = certain
        for j, (ids, scores) in enumerate(zip(*chain, strict=True)):
            keep = ids >= 0
            seen[(j, token)] = (ids[keep].astype(np.int64), scores[keep].astype(np.float64))
            if not keep.any():
                break
            token = int(ids[0])

    def expand(prefix: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        if not prefix:
            return np.asarray([certain], dtype=np.int64), np.zeros(1)
        depth = len(prefix)
        if prefix[0] != certain or depth > num_heads:
            return none
        key = (depth - 1, int(prefix[-1]))
        if key not in seen:
            seen[key] = node(*key)
        return seen[key]

    return expand
