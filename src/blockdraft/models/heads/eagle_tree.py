"""`EagleTree`: one step's tree lattice over an EAGLE draft layer, grown a depth at a time.

After a verification the draft layer has read the base's features at every committed position
(its KV cache of ``L`` positions, :class:`~blockdraft.models.heads.eagle.DraftLayerState`);
its output at the last one (``p``, whose next token is the certain token ``c``) gives the
certain token's children. A node deeper in the tree, the prefix ``(c, t_2 .. t_i)``, is one
more position of the layer: it reads its parent's output feature and its own last token
``t_i`` at position ``p + i - 1``, attends to the ``L`` context positions, to the draft rows
of its ancestors and to itself (a tree mask over the layer's draft KV), and its logits give its
children. This is EAGLE-2's tree: each node computed once, by the layer forward of its depth.

Batching a depth. The searches (:mod:`blockdraft.lattice.search`) expand one node at a time,
best first. A node the search asks for that is not computed yet is computed in one forward
together with the other nodes of its depth the search is likely to ask for next: the ``width``
best not yet computed, by cumulative log-probability, among the children of every computed
node of the depth above (EAGLE-2's "expand the top-k by confidence"). The greedy chain (the
heads' top-k a step reports, :meth:`chain`) is so computed a depth at a time with its
frontier, and a tree grown afterwards mostly finds its nodes computed. A node's arcs are the
same whichever batch computed it (its ancestors alone are attended to): only which nodes are
computed ahead depends on the batching, never a node's children.

Mutable: it remembers the nodes computed and the draft rows they wrote (one step long; the
next verification starts a new tree on the grown context).

Public surface:
    StepFn        ``(features [1, M, F], tokens [1, M], positions [1, M], kv, mask) -> EagleStep``
    EagleTree(step, token_ids, kv, feature, logits, position, certain, depth, width=None)
        .arcs(prefix, k) -> (ids int64 [k], log-probs float64 [k])
        .expand(prefix, k) -> (ids, log-probs)         the TreeLattice callback's rule
        .chain(k, n) -> (ids [n, k], log-probs [n, k])  the greedy chain's top-k
        .states(n) -> [n, d]                            the chain's output features
        .computed, .forwards
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from blockdraft.models.topk import topk_logprobs

StepFn = Callable[..., Any]
"""The layer's forward: ``(features [1, M, F or d], tokens int64 [1, M], positions int64 [1, M],
kv (k, v) or None, mask bool [1, M, S + M] or None) -> EagleStep`` (``logits [1, M, Vs]``,
``features [1, M, d]``, the cache grown by ``M``)."""

_NONE = (np.zeros(0, dtype=np.int64), np.zeros(0))


@dataclass
class _Node:
    """A computed node: its output feature ``[d]``, logits ``[Vs]``, the draft rows its
    position attends to (its ancestors' and its own; the root has none: it is a context
    position) and its path's cumulative log-probability."""

    feature: torch.Tensor
    logits: torch.Tensor
    rows: tuple[int, ...]
    score: float


class EagleTree:
    """One step's tree lattice over a draft layer (see the module docstring).

    Args:
        step: the layer's forward (:data:`StepFn`).
        token_ids: int64 ``[Vs]`` the base ids of the logits' columns (ascending), or None
            (the column is the id).
        kv: the layer's cache of the ``L`` committed positions ``(k, v)``, each
            ``[1, kv_heads, L, head_dim]``.
        feature: ``[d]`` the layer's output at the last committed position ``position``.
        logits: ``[Vs]`` its logits there (the certain token's children).
        position: the last committed position ``p``.
        certain: the certain token ``c`` (the root).
        depth: draft tokens a path may hold (``h - 1``): prefixes of up to ``depth`` tokens have
            children.
        width: nodes a depth's forward computes at most (EAGLE-2's top-k); None: the ``k``
            arcs a node of the call that computes it.
    """

    def __init__(self, step: StepFn, token_ids: torch.Tensor | None, kv: Any,
                 feature: torch.Tensor, logits: torch.Tensor, position: int, certain: int,
                 depth: int, width: int | None = None) -> None:
        self._step = step
        self._ids = None if token_ids is None else token_ids.cpu()
        self._kv = kv
        self._draft: tuple[torch.Tensor, torch.Tensor] | None = None  # (k, v) [1, Hkv, D, hd]
        self.position, self.certain = int(position), int(certain)
        self.depth, self.width = int(depth), width
        self._nodes: dict[tuple[int, ...], _Node] = {
            (self.certain,): _Node(feature, logits, (), 0.0)}
        self._arcs: dict[tuple[tuple[int, ...], int], tuple[np.ndarray, np.ndarray]] = {}
        self.forwards = 0

    @property
    def computed(self) -> int:
        """Nodes computed so far (the root included)."""
        return len(self._nodes)

    @property
    def context_length(self) -> int:
        """``L``: the committed positions the layer's cache holds."""
        return 0 if self._kv is None else int(self._kv[0].shape[2])

    # ---- the lattice ------------------------------------------------------------------------

    def expand(self, prefix: tuple[int, ...], k: int) -> tuple[np.ndarray, np.ndarray]:
        """The children of ``prefix`` (the tree lattice's rule): ``()`` gives the certain token
        (log-prob 0); a prefix from the certain token of at most ``depth`` tokens its ``k``
        best arcs; anything else none."""
        if not prefix:
            return np.asarray([self.certain], dtype=np.int64), np.zeros(1)
        if prefix[0] != self.certain or len(prefix) > self.depth:
            return _NONE
        return self.arcs(tuple(int(t) for t in prefix), k)

    def arcs(self, prefix: tuple[int, ...], k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best children of a computed or computable node: ``(ids int64 [k],
        log-probs float64 [k])`` over the draft vocabulary, ordered by (logit desc, id asc)
        (id ``-1``, ``-inf`` past its size), computing the node (with its depth's frontier)
        first when it is not yet."""
        key = (prefix, k)
        if key not in self._arcs:
            if prefix not in self._nodes:
                self._compute(prefix, k)
            ids, scores = topk_logprobs(self._nodes[prefix].logits[None], k, self._ids)
            self._arcs[key] = (ids[0], scores[0])
        return self._arcs[key]

    def chain(self, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The greedy chain's top ``k`` at draft steps ``1 .. n`` (row ``j``: the children of
        the chain's node of ``j + 1`` tokens, the chain following each row's first id):
        ``(ids int64 [n, k], log-probs float64 [n, k])``, padded (``-1``, ``-inf``) after a
        node without children."""
        ids = np.full((n, k), -1, dtype=np.int64)
        scores = np.full((n, k), -np.inf)
        prefix: tuple[int, ...] = (self.certain,)
        for j in range(min(n, self.depth)):
            ids[j], scores[j] = self.arcs(prefix, k)
            if ids[j, 0] < 0:
                break
            prefix = (*prefix, int(ids[j, 0]))
        return ids, scores

    def states(self, n: int) -> torch.Tensor:
        """The output features of the greedy chain's first ``n`` nodes (the root first):
        ``[n, d]``, each the state whose logits give the chain's next draft."""
        prefix: tuple[int, ...] = (self.certain,)
        out = []
        for j in range(n):
            if prefix not in self._nodes:
                self._compute(prefix, 1)
            out.append(self._nodes[prefix].feature)
            if j + 1 < n:
                prefix = (*prefix, int(self.arcs(prefix, 1)[0][0]))
        return torch.stack(out)

    # ---- computing a depth ------------------------------------------------------------------

    def _frontier(self, prefix: tuple[int, ...], k: int) -> list[tuple[int, ...]]:
        """``prefix`` and up to ``width - 1`` other uncomputed nodes of its depth, best
        cumulative log-probability first: the children (``k`` arcs each) of the computed nodes
        one level up."""
        size = len(prefix)
        if prefix[:-1] not in self._nodes:  # a search reaches a node after its parent
            self._compute(prefix[:-1], k)
        ranked: list[tuple[float, int, tuple[int, ...]]] = []
        for above, node in list(self._nodes.items()):
            if len(above) != size - 1:
                continue
            ids, scores = self.arcs(above, k)
            for token, score in zip(ids.tolist(), scores.tolist(), strict=True):
                child = (*above, token)
                if token >= 0 and child != prefix and child not in self._nodes:
                    ranked.append((-(node.score + score), len(ranked), child))
        ranked.sort()
        width = k if self.width is None else self.width
        return [prefix] + [child for _, _, child in ranked[: max(width, 1) - 1]]

    def _score(self, prefix: tuple[int, ...], k: int) -> float:
        """The cumulative log-probability of an uncomputed node (its parent's arc; ``-inf``
        outside the parent's ``k`` best)."""
        ids, scores = self.arcs(prefix[:-1], k)
        hit = np.flatnonzero(ids == prefix[-1])
        return self._nodes[prefix[:-1]].score + (float(scores[hit[0]]) if hit.size else -np.inf)

    def _compute(self, prefix: tuple[int, ...], k: int) -> None:
        """One layer forward over ``prefix`` and its depth's frontier (module docstring)."""
        batch = self._frontier(prefix, k)
        parents = [self._nodes[p[:-1]] for p in batch]
        m, length, drafted = len(batch), self.context_length, self._draft_rows
        dev = parents[0].feature.device
        features = torch.stack([above.feature for above in parents])[None]  # (1, M, d)
        tokens = torch.tensor([[node[-1] for node in batch]], dtype=torch.int64, device=dev)
        positions = torch.full((1, m), self.position + len(prefix) - 1, dtype=torch.int64,
                               device=dev)
        mask = torch.zeros(1, m, length + drafted + m, dtype=torch.bool, device=dev)
        mask[..., :length] = True  # every committed position
        for j, above in enumerate(parents):
            if above.rows:
                mask[0, j, [length + r for r in above.rows]] = True  # the ancestors' draft rows
            mask[0, j, length + drafted + j] = True  # itself
        kv = self._kv if self._draft is None else (
            torch.cat((self._kv[0], self._draft[0]), dim=2),
            torch.cat((self._kv[1], self._draft[1]), dim=2))
        out = self._step(features, tokens, positions, kv, mask)
        self.forwards += 1
        new = (out.kv[0][:, :, length + drafted:], out.kv[1][:, :, length + drafted:])
        self._draft = new if self._draft is None else (
            torch.cat((self._draft[0], new[0]), dim=2), torch.cat((self._draft[1], new[1]), dim=2))
        scores = [self._score(node, k) for node in batch]
        for j, (node, parent) in enumerate(zip(batch, parents, strict=True)):
            self._nodes[node] = _Node(out.features[0, j], out.logits[0, j],
                                   (*parent.rows, drafted + j), scores[j])

    @property
    def _draft_rows(self) -> int:
        return 0 if self._draft is None else int(self._draft[0].shape[2])

    def __repr__(self) -> str:
        return (f"EagleTree(certain={self.certain}, depth={self.depth}, width={self.width}, "
                f"computed={self.computed}, forwards={self.forwards})")
