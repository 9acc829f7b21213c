"""The one trie of a step: every source's drafts merged, node by node.

docs/definitions.md sec. 11. The sources of a drafter (the heads' paths, a grown tree, prompt
lookup's copies, ...) propose drafts that share prefixes: a :class:`Trie` merges them, so the
verifier checks each distinct prefix once. It owns the ``(parent, token) -> node`` map (the only
one in the drafting pipeline) and what the sources said about each node: the score of the first
draft through it (the tie rule of the verdict picks the best-scored path), the source that
proposed it first (its label: which source a step's accepted path came from), and the
prompt-lookup copies through it (the evidence :mod:`~blockdraft.drafts.rates` rates them by).

Nodes are numbered in the order they are first added, so a parent always comes before its
children and the trie of a batch lists its drafts' leaves in the batch's order (the tree of
:meth:`DraftTree.from_drafts <blockdraft.core.tree.DraftTree.from_drafts>`).

Public surface:
    Trie(root, score=0.0, label="")       mutable, one step: .add(row, score, label) -> nodes,
        .add_tree(tree, label) -> nodes, .note_copy(nodes, match, rank), .child(parent, token),
        .size, .path(u), .depths, .tree(keep=None, scores=None, source)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from blockdraft.core.batch import DraftError
from blockdraft.core.tree import PAD, DraftTree, TrieIndex


class Trie:
    """The merged drafts of one step (see the module docstring). Mutable: built by a step's
    sources, read by its rates and cut, then dropped.

    Args:
        root: the certain token ``d_1``.
        score: the root's score (the first draft's, when a draft is added first).
        label: the root's source label.
    """

    def __init__(self, root: int, score: float | None = None, label: str = "") -> None:
        self._index = TrieIndex(int(root))
        self.tokens = self._index.tokens  # node order, shared with the index
        self.parents = self._index.parents
        self.depth: list[int] = [0]
        self.scores: list[float] = [0.0 if score is None else float(score)]
        self.labels: list[str] = [label]
        self.copies: list[tuple[list[int], int, int]] = []  # (nodes, match, rank)
        self._root_scored = score is not None

    @property
    def size(self) -> int:
        """Nodes, the root included."""
        return len(self.tokens)

    @property
    def root(self) -> int:
        """The certain token."""
        return self.tokens[0]

    @property
    def depths(self) -> np.ndarray:
        """int64 ``[M]``: each node's depth."""
        return np.asarray(self.depth, dtype=np.int64)

    def child(self, parent: int, token: int) -> int | None:
        """The node of ``token`` below ``parent``, or None."""
        return self._index.child(parent, token)

    def path(self, node: int) -> tuple[int, ...]:
        """The tokens from the root to ``node`` (the root's included)."""
        out = []
        u = node
        while u >= 0:
            out.append(self.tokens[u])
            u = self.parents[u]
        return tuple(out[::-1])

    def _extend(self, parent: int, token: int, score: float, label: str) -> int:
        node, new = self._index.extend(parent, token)
        if new:
            self.depth.append(self.depth[parent] + 1)
            self.scores.append(score)
            self.labels.append(label)
        return node

    def add(self, row: Sequence[int] | np.ndarray, score: float = 0.0, label: str = ""
            ) -> list[int]:
        """Merge a draft: ``row`` starts with the root token and ends at its first :data:`PAD`
        (``-1``) or its end; returns the nodes of its tokens after the root. A node first added
        here takes ``score`` and ``label`` (the root too, for the first draft).

        Raises:
            DraftError: a row that does not start with the root (the certain token).
        """
        tokens = np.asarray(row).tolist()
        if not tokens or tokens[0] != self.tokens[0]:
            raise DraftError(f"a draft must start with the certain token d_1 = {self.tokens[0]}, "
                             f"got {tokens[:1]}")
        if not self._root_scored:
            self.scores[0], self.labels[0], self._root_scored = float(score), label, True
        nodes: list[int] = []
        node = 0
        for token in tokens[1:]:
            if token == PAD:
                break
            node = self._extend(node, int(token), float(score), label)
            nodes.append(node)
        return nodes

    def add_tree(self, tree: DraftTree, label: str = "") -> np.ndarray:
        """Merge a tree rooted at the root token (each node keeps its own score); returns
        int64 ``[N]``, the trie node of each of its nodes."""
        if int(tree.tokens[0]) != self.tokens[0]:
            raise DraftError(f"a tree must be rooted at the certain token d_1 = "
                             f"{self.tokens[0]}, got {int(tree.tokens[0])}")
        scores = tree.scores.tolist()
        if not self._root_scored:
            self.scores[0], self.labels[0], self._root_scored = scores[0], label, True
        where = np.zeros(tree.num_nodes, dtype=np.int64)
        parents = tree.parents.tolist()
        for u, token in enumerate(tree.tokens.tolist()[1:], start=1):
            where[u] = self._extend(int(where[parents[u]]), token, scores[u], label)
        return where

    def note_copy(self, nodes: list[int], match: int, rank: int) -> None:
        """Record a prompt-lookup copy through ``nodes`` (its tokens after the root, in order):
        ``match`` tokens matched, the ``rank``-th copy of the step (the rates read it)."""
        self.copies.append((nodes, int(match), int(rank)))

    def tree(self, keep: np.ndarray | None = None, scores: np.ndarray | None = None,
             source: str = "trie") -> DraftTree:
        """The trie as a :class:`DraftTree` (every node, or the nodes ``keep`` (bool ``[M]``:
        the root and each kept node's parent kept), scored by ``scores`` (float ``[M]``, default
        each node's own)."""
        tree = DraftTree(tokens=np.asarray(self.tokens, dtype=np.int64),
                         parents=np.asarray(self.parents, dtype=np.int64),
                         scores=np.asarray(self.scores if scores is None else scores),
                         source=source, labels=tuple(self.labels))
        return tree if keep is None else tree.subset(keep)
