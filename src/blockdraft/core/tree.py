"""`DraftTree`: a token tree of candidate drafts, verified in one forward pass.

See docs/definitions.md sec. 11. A leaf type (numpy only), like :class:`DraftBatch`: the tree
builders (``drafts/trees.py``) produce it, the tree verifier (``verify/tree.py``) and the
offline simulator consume it.

A tree has ``N`` nodes, the root included, in a fixed topological order (every parent before
its children). Node 0 is the root: the certain token ``d_1``. Every root path is a draft;
``p`` drafts merged on their common prefixes form a trie (:meth:`DraftTree.from_drafts`), and
a chain is a tree with one path (:meth:`DraftTree.chain`).

Public surface:
    DraftTree(tokens, parents, scores, depths=None, source="tree", labels=None)   validated,
                                                                           immutable
    DraftTree.from_drafts(batch) / DraftTree.trie_of(batch) / DraftTree.chain(tokens, scores)
    TrieIndex(root)        the (parent, token) -> node map of a trie being built
    .num_nodes, .max_depth, .children(u), .leaves(), .path(u), .paths(), .path_tokens(u),
    .label(u), .first_leaf(u)
    .ancestor_mask() -> bool [N, N],  .position_offsets() -> int64 [N] (= depths)
    .truncate(max_depth), .top(budget), .to_drafts(width=None, pad=-1)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from blockdraft.core.arrays import readonly
from blockdraft.core.batch import DraftBatch, DraftError

PAD = -1
"""The token :meth:`DraftTree.to_drafts` pads short paths with (no model token; the offline
acceptance never matches it)."""


class TrieIndex:
    """The ``(parent, token) -> node`` map of a trie being built, and its nodes' tokens and
    parents in the order they were added (mutable: one builder's). The one such map of the
    library: :meth:`DraftTree.trie_of` and the drafting pipeline's trie
    (:class:`~blockdraft.drafts.trie.Trie`) build on it.

    Args:
        root: the root's token (the certain token ``d_1``).
    """

    def __init__(self, root: int) -> None:
        self.tokens: list[int] = [int(root)]
        self.parents: list[int] = [-1]
        self._child: dict[tuple[int, int], int] = {}

    def child(self, parent: int, token: int) -> int | None:
        """The node of ``token`` below ``parent``, or None."""
        return self._child.get((parent, token))

    def extend(self, parent: int, token: int) -> tuple[int, bool]:
        """The node of ``token`` below ``parent``, added when it is new: ``(node, added)``."""
        key = (parent, token)
        node = self._child.get(key)
        if node is not None:
            return node, False
        node = self._child[key] = len(self.tokens)
        self.tokens.append(token)
        self.parents.append(parent)
        return node, True


@dataclass(frozen=True, eq=False)
class DraftTree:
    """A token tree of ``N`` nodes (the root included), parents before children.

    Attributes:
        tokens: int64 ``[N]``, each node's token id; ``tokens[0]`` is the certain token
            ``d_1``. Siblings hold distinct tokens, so distinct nodes are distinct drafts.
        parents: int64 ``[N]``, each node's parent index; ``parents[0] == -1`` (the root) and
            ``0 <= parents[u] < u`` for every other node.
        scores: float64 ``[N]``, each node's path score in natural log (docs/definitions.md
            sec. 3-4): the cumulative score of its root path under the builder (head
            log-probs, plus ``alpha`` times the LM's for a rescored tree; a trie takes the
            score of the best draft through the node). Ties between accepted paths of equal
            depth go to the higher score, then to the lower node index.
        depths: int64 ``[N]``, ``depths[0] == 0`` and ``depths[u] = depths[parents[u]] + 1``;
            computed when not given, validated when given.
        source: what built the tree (``"trie"``, ``"medusa"``, ``"confidence"``, ...).
        labels: each node's source (``"lattice"``, ``"lookup"``, ...: the first draft source
            that proposed it), or None: every node is ``source``'s.

    Raises:
        DraftError: on shapes, dtypes, a second root, a parent not before its child,
            inconsistent depths, repeated sibling tokens, a negative token or a NaN score.
    """

    tokens: np.ndarray
    parents: np.ndarray
    scores: np.ndarray
    depths: np.ndarray | None = None
    source: str = "tree"
    labels: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        tokens = np.asarray(self.tokens)
        parents = np.asarray(self.parents)
        scores = np.asarray(self.scores, dtype=np.float64)
        if tokens.ndim != 1 or tokens.size == 0:
            raise DraftError(f"DraftTree.tokens must be a non-empty [N] array, got {tokens.shape}")
        n = tokens.size
        for name, arr in (("tokens", tokens), ("parents", parents)):
            if arr.shape != (n,) or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
                raise DraftError(
                    f"DraftTree.{name} must be integers of shape ({n},), got {arr.dtype} "
                    f"{arr.shape}"
                )
        if scores.shape != (n,) or np.isnan(scores).any():
            raise DraftError(f"DraftTree.scores must be [{n}] without NaN, got {scores}")
        if (tokens < 0).any():
            raise DraftError(f"DraftTree.tokens must be token ids >= 0, got {tokens.tolist()}")
        parents = parents.astype(np.int64)
        if parents[0] != -1:
            raise DraftError(f"node 0 must be the root (parent -1), got parent {parents[0]}")
        index = np.arange(n)
        bad = (parents[1:] < 0) | (parents[1:] >= index[1:])
        if bad.any():
            u = int(np.flatnonzero(bad)[0]) + 1
            raise DraftError(
                f"node {u} has parent {int(parents[u])}; every node but the root needs a "
                "parent earlier in the order (one root, parents before children)"
            )
        depths = np.zeros(n, dtype=np.int64)
        for u in range(1, n):
            depths[u] = depths[parents[u]] + 1
        if self.depths is not None:
            given = np.asarray(self.depths)
            if given.shape != (n,) or not np.array_equal(given, depths):
                raise DraftError(
                    f"DraftTree.depths {given.tolist()} disagree with the parents "
                    f"(expected {depths.tolist()})"
                )
        pairs = parents[1:] * (int(tokens.max()) + 1) + tokens[1:]
        uniq, counts = np.unique(pairs, return_counts=True)
        if (counts > 1).any():
            dup = int(uniq[counts > 1][0])
            parent, token = divmod(dup, int(tokens.max()) + 1)
            raise DraftError(
                f"node {parent} has two children with token {token}; siblings must hold "
                "distinct tokens (merge them)"
            )
        if self.labels is not None:
            labels = tuple(str(x) for x in self.labels)
            if len(labels) != n:
                raise DraftError(f"DraftTree.labels must name each of the {n} nodes, got "
                                 f"{len(labels)}")
            object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "tokens", readonly(tokens.astype(np.int64)))
        object.__setattr__(self, "parents", readonly(parents))
        object.__setattr__(self, "scores", readonly(scores))
        object.__setattr__(self, "depths", readonly(depths))

    # ---- sizes -------------------------------------------------------------------------------

    @property
    def num_nodes(self) -> int:
        """``N``, the tokens one verification forward processes (the root included)."""
        return int(self.tokens.size)

    def __len__(self) -> int:
        return self.num_nodes

    @property
    def max_depth(self) -> int:
        """The deepest node's depth (0 for a lone root); a path holds ``max_depth + 1`` tokens."""
        return int(self._depths.max())

    @property
    def _depths(self) -> np.ndarray:
        assert self.depths is not None  # set in __post_init__
        return self.depths

    # ---- structure ---------------------------------------------------------------------------

    @cached_property
    def _children(self) -> tuple[tuple[int, ...], ...]:
        kids: list[list[int]] = [[] for _ in range(self.num_nodes)]
        for u in range(1, self.num_nodes):
            kids[int(self.parents[u])].append(u)
        return tuple(tuple(k) for k in kids)

    def children(self, node: int) -> tuple[int, ...]:
        """The children of ``node``, in node order."""
        return self._children[node]

    def leaves(self) -> np.ndarray:
        """int64 ``[L]``: the nodes without children, in node order."""
        has_child = np.zeros(self.num_nodes, dtype=bool)
        has_child[self.parents[1:]] = True
        return np.flatnonzero(~has_child).astype(np.int64)

    def path(self, node: int) -> np.ndarray:
        """int64 ``[depth(node) + 1]``: the node indices from the root to ``node``."""
        out = [int(node)]
        while out[-1] != 0:
            out.append(int(self.parents[out[-1]]))
        return np.asarray(out[::-1], dtype=np.int64)

    def path_tokens(self, node: int) -> np.ndarray:
        """int64 ``[depth(node) + 1]``: the draft the root path of ``node`` spells."""
        return self.tokens[self.path(node)]

    def paths(self) -> list[np.ndarray]:
        """The root-to-leaf paths (node indices), one per leaf, in leaf order."""
        return [self.path(int(leaf)) for leaf in self.leaves()]

    def label(self, node: int) -> str:
        """Node ``node``'s source: its label, else the tree's ``source``."""
        return self.source if self.labels is None else self.labels[node]

    def first_leaf(self, node: int) -> int:
        """The leaf reached from ``node`` by following each node's first child (the lowest
        index): for a trie of drafts (:meth:`from_drafts`), the end of the first (best) draft
        through ``node``."""
        u = int(node)
        while self.children(u):
            u = self.children(u)[0]
        return u

    def ancestor_mask(self) -> np.ndarray:
        """bool ``[N, N]``: ``mask[u, v]`` is True when node ``u`` attends to node ``v``, i.e.
        ``v`` is ``u`` itself or one of its ancestors (docs/definitions.md sec. 11)."""
        n = self.num_nodes
        mask = np.zeros((n, n), dtype=bool)
        mask[0, 0] = True
        for u in range(1, n):
            mask[u] = mask[self.parents[u]]
            mask[u, u] = True
        return mask

    def position_offsets(self) -> np.ndarray:
        """int64 ``[N]``: each node's position after the prefix (its depth): node ``u`` sits at
        ``prefix length + depths[u]``."""
        return self._depths.copy()

    # ---- building ----------------------------------------------------------------------------

    @classmethod
    def from_drafts(cls, batch: DraftBatch) -> DraftTree:
        """The ``p`` drafts of ``batch`` merged on their common prefixes (a trie).

        Nodes are numbered in order of first appearance, row by row (so the trie of a batch
        lists its leaves in the batch's row order); a node's score is the score of the first
        (best) draft through it, so the tree's tie rule picks the batch's winner. Repeated
        drafts merge into one path; a row ends at its first :data:`PAD` (a shorter draft).

        Raises:
            DraftError: when the drafts do not share the certain token ``d_1``.
        """
        return cls.trie_of(batch)[0]

    @classmethod
    def trie_of(cls, batch: DraftBatch) -> tuple[DraftTree, np.ndarray]:
        """:meth:`from_drafts` and each draft token's node: int64 ``[p, w]`` (a padded position
        repeats its row's last node).

        Raises:
            DraftError: when the drafts do not share the certain token ``d_1``.
        """
        if not isinstance(batch, DraftBatch):
            raise DraftError(f"from_drafts needs a DraftBatch, got {type(batch).__name__}")
        first = batch.tokens[:, 0]
        if (first != first[0]).any():
            raise DraftError(f"drafts must share the certain token d_1, got {first.tolist()}")
        index = TrieIndex(int(first[0]))
        scores = [float(batch.scores[0])]
        nodes = np.zeros(batch.tokens.shape, dtype=np.int64)
        for r, (row, score) in enumerate(zip(batch.tokens.tolist(), batch.scores.tolist(),
                                             strict=True)):
            node = 0
            for j, tok in enumerate(row[1:], start=1):
                if tok != PAD:  # padding: a shorter draft (DraftBatch.lengths) keeps its node
                    node, new = index.extend(node, int(tok))
                    if new:
                        scores.append(float(score))
                nodes[r, j] = node
        tree = cls(tokens=np.asarray(index.tokens), parents=np.asarray(index.parents),
                   scores=np.asarray(scores), source=f"trie:{batch.source}")
        return tree, nodes

    @classmethod
    def chain(cls, tokens: Sequence[int] | np.ndarray, scores: Any = None) -> DraftTree:
        """One draft as a tree of one path (node ``i`` is ``tokens[i]`` at depth ``i``).

        ``scores`` (float ``[n]``, the cumulative path scores) default to zeros.
        """
        toks = np.asarray(tokens, dtype=np.int64).reshape(-1)
        sc = np.zeros(toks.size) if scores is None else np.asarray(scores, dtype=np.float64)
        return cls(tokens=toks, parents=np.arange(-1, toks.size - 1), scores=sc, source="chain")

    def subset(self, keep: np.ndarray) -> DraftTree:
        """The nodes ``keep`` (bool ``[N]``, the root and every kept node's parent kept),
        renumbered in order.

        Raises:
            DraftError: a mask of another size, without the root, or with a node whose parent
                it drops.
        """
        keep = np.asarray(keep, dtype=bool)
        if keep.shape != (self.num_nodes,) or not keep[0] or (
                keep[1:] & ~keep[np.maximum(self.parents[1:], 0)]).any():
            raise DraftError(f"a subtree's mask must be bool [{self.num_nodes}], keep the root "
                             "and the parent of every node it keeps")
        new_index = np.cumsum(keep) - 1
        parents = np.where(self.parents[keep] >= 0, new_index[np.maximum(self.parents[keep], 0)],
                           -1)
        labels = None if self.labels is None else tuple(
            x for x, k in zip(self.labels, keep.tolist(), strict=True) if k)
        return DraftTree(tokens=self.tokens[keep], parents=parents, scores=self.scores[keep],
                         source=self.source, labels=labels)

    def truncate(self, max_depth: int) -> DraftTree:
        """The nodes of depth at most ``max_depth`` (``>= 0``), in the same order."""
        if max_depth >= self.max_depth:
            return self
        return self.subset(self._depths <= max(int(max_depth), 0))

    def top(self, budget: int) -> DraftTree:
        """The first ``budget`` nodes (``>= 1``; a prefix of a topological order is a tree)."""
        if budget >= self.num_nodes:
            return self
        keep = np.zeros(self.num_nodes, dtype=bool)
        keep[: max(int(budget), 1)] = True
        return self.subset(keep)

    # ---- as drafts ---------------------------------------------------------------------------

    def to_drafts(self, width: int | None = None, pad: int = PAD) -> DraftBatch:
        """The root-to-leaf paths as a :class:`DraftBatch` ``[L, width]``, leaves in node order.

        Args:
            width: tokens per draft, default ``max_depth + 1``. A longer path is cut to its
                first ``width`` tokens (paths that become equal are kept once, the first); a
                shorter one is padded at the end with ``pad``.
            pad: the padding token. The default ``-1`` never matches in the offline
                acceptance (``oracle.accept_lengths``), so each row's ``n`` is its path's, but
                the online verifier refuses it: to verify these rows as a batch, pass a real
                token id, and mind that padding may then be accepted beyond the tree's verdict.

        Returns:
            Rows in leaf order with ``scores = head_scores =`` the leaf's score (not re-sorted;
            a trie from :meth:`from_drafts` gives back its batch's rows and order),
            ``lm_scores`` zeros.
        """
        w = self.max_depth + 1 if width is None else max(int(width), 1)
        rows: list[list[int]] = []
        row_scores: list[float] = []
        seen: set[tuple[int, ...]] = set()
        for leaf in self.leaves().tolist():
            toks = self.path_tokens(leaf)[:w].tolist()
            toks += [int(pad)] * (w - len(toks))
            if tuple(toks) in seen:
                continue
            seen.add(tuple(toks))
            rows.append(toks)
            row_scores.append(float(self.scores[leaf]))
        sc = np.asarray(row_scores)
        return DraftBatch(tokens=np.asarray(rows, dtype=np.int64), scores=sc, head_scores=sc,
                          lm_scores=np.zeros_like(sc), source=self.source)

    def __repr__(self) -> str:
        return (f"DraftTree(num_nodes={self.num_nodes}, max_depth={self.max_depth}, "
                f"leaves={self.leaves().size}, source={self.source!r})")
