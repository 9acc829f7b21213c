"""Tree verification: the ``N`` nodes of a :class:`DraftTree` checked in one forward pass.

See docs/definitions.md sec. 11. The tree's tokens go in as one row after the shared prefix
cache, node ``u`` at position ``prefix length + depth(u)`` and attending to the prefix and to
its ancestors (itself included) only, so the base head at node ``u`` gives the greedy token
after ``u``'s root path, exactly what a batch of those paths would give.

Acceptance, for every criterion of :mod:`blockdraft.verify.criteria`: node ``u`` (not the root)
is accepted when its parent is, and its token passes the criterion against the base head's raw
logits at its parent (``exact``: equals their argmax). ``min_block:l=L`` accepts every node of
depth ``<= L - 1`` whose parent is accepted, and deeper only the leading run of exact matches
(``n = max(n_exact, L - 1)``, as for a batch); with ``eos_id``, no node below an EOS (other than
the root) is accepted. The accepted path is the deepest accepted node's root path; ties (not
possible with ``exact``, whose accepted nodes form one chain) go to the higher node score, then
to the lower node index. ``n`` is its depth. Only that path's keys and values are kept, moved to
the contiguous positions after the prefix (:meth:`KVCache.gather`), and the next block's head
logits are those at the accepted node.

For a trie of a :class:`DraftBatch` (``DraftTree.from_drafts``), the verdict equals
:meth:`Verifier.verify`'s on the batch: the same ``n``, the same committed tokens, the same
next logits (up to float rounding of a different attention layout).

Public surface:
    TreeVerifier(model, criterion="exact")       a Verifier that also verifies trees
        .verify_tree(past, tree, eos_id=None) -> TreeOutcome
    TreeOutcome     a VerifyOutcome: ``winner`` is the accepted node; adds ``path`` and
                    ``accepted``
    tree_accepted(tree, base_logits, criterion, eos_id=None) -> bool [N]
    tree_winner(tree, accepted) -> node
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from blockdraft.core.tree import DraftTree
from blockdraft.verify.criteria import Criterion, VerifyError
from blockdraft.verify.verifier import Verifier, VerifyOutcome, synchronize


@dataclass(frozen=True, eq=False)
class TreeOutcome(VerifyOutcome):
    """What one tree verification call decided (a :class:`VerifyOutcome`).

    Attributes (beyond :class:`VerifyOutcome`'s, whose ``n``, ``tokens``, ``next_logits``,
    ``past``, ``forward_s`` and ``accept_s`` mean the same):
        winner: the accepted node (deepest accepted; node index in the tree).
        accept_lengths: ``n`` of every root-to-leaf path, leaves in node order (the rows of
            ``tree.to_drafts()``): the depth of the deepest accepted node on the path.
        path: the accepted path's node indices, root first (``1 + n`` of them).
        accepted: bool per node, which nodes the criterion accepted.
    """

    path: tuple[int, ...] = ()
    accepted: tuple[bool, ...] = ()


def tree_accepted(
    tree: DraftTree, base_logits: torch.Tensor, criterion: Criterion | str = "exact",
    eos_id: int | None = None,
) -> np.ndarray:
    """bool ``[N]``: which nodes are accepted (the root always is; see the module doc).

    Args:
        tree: the tree.
        base_logits: float ``[N, V]``, the base head's raw logits at every node.
        criterion: the acceptance criterion.
        eos_id: when given, nothing below a non-root EOS node is accepted.
    """
    crit = Criterion.parse(criterion)
    crit.check_model(int(base_logits.shape[-1]), None)
    n = tree.num_nodes
    ok = np.zeros(n, dtype=bool)
    ok[0] = True
    if n == 1:
        return ok
    parents = tree.parents
    drafted = torch.tensor(tree.tokens[1:].tolist(), device=base_logits.device)[None]
    index = torch.tensor(parents[1:].tolist(), device=base_logits.device)
    match = crit.matches(drafted, base_logits.index_select(0, index)[None])[0]  # (N-1,)
    match_np = match.cpu().numpy()
    floor = int(crit.kwargs["l"]) - 1 if crit.name == "min_block" else 0
    depths = np.asarray(tree.depths)
    tokens = tree.tokens
    run = ok.copy()  # the criterion's leading run alone (min_block's floor aside)
    for u in range(1, n):
        par = int(parents[u])
        if not ok[par] or (eos_id is not None and par != 0 and tokens[par] == eos_id):
            continue
        run[u] = bool(run[par] and match_np[u - 1])
        ok[u] = run[u] or depths[u] <= floor
    return ok


def tree_winner(tree: DraftTree, accepted: np.ndarray) -> int:
    """The accepted node: the deepest accepted one; ties to the higher score, then the lower
    index (docs/definitions.md sec. 11)."""
    depths = np.asarray(tree.depths)
    cand = np.flatnonzero(accepted)
    deepest = cand[depths[cand] == depths[cand].max()]
    best = deepest[tree.scores[deepest] == tree.scores[deepest].max()]
    return int(best[0])


def _leaf_lengths(tree: DraftTree, accepted: np.ndarray) -> tuple[int, ...]:
    """``n`` of every root-to-leaf path (leaves in node order)."""
    depths = np.asarray(tree.depths)
    best = np.zeros(tree.num_nodes, dtype=np.int64)  # deepest accepted depth on the root path
    for u in range(1, tree.num_nodes):
        best[u] = depths[u] if accepted[u] else best[tree.parents[u]]
    return tuple(int(best[leaf]) for leaf in tree.leaves())


class TreeVerifier(Verifier):
    """A :class:`Verifier` that also verifies token trees (docs/definitions.md sec. 11).

    The model must take ``position_ids`` and ``tree_mask`` in ``hidden`` (factored models:
    :class:`~blockdraft.models.BlockwiseLM`, :class:`~blockdraft.models.hf.HFBlockwiseModel`)
    or in ``heads_logits``. The batch path (:meth:`Verifier.verify`) is unchanged.
    """

    @torch.no_grad()
    def verify_tree(
        self, past: Any, tree: DraftTree, eos_id: int | None = None
    ) -> TreeOutcome:
        """Feed the tree's ``N`` nodes in one call on ``past``; accept the best path.

        Args:
            past: the batch-1 cache of the committed prefix (every token before the root).
            tree: the tree; its root is the certain token ``d_1``.
            eos_id: as in :meth:`Verifier.verify`.

        Returns:
            A :class:`TreeOutcome`: ``n``, the committed path tokens ``d_1 .. d_{1+n}``, the
            next block's head logits ``[h, V]`` (at the accepted node) and the cache of the
            prefix and the path (``length = old + 1 + n``, contiguous positions).

        Raises:
            VerifyError: on a tree that is not a :class:`DraftTree`, a token outside the
                vocabulary, a tree deeper than the model's context allows, a missing or
                multi-row ``past``, or a model without tree inputs.
        """
        self._check_tree(past, tree)
        dev = self.device
        tokens = torch.tensor(tree.tokens.tolist(), dtype=torch.long, device=dev)[None]
        positions = torch.as_tensor(past.length + np.asarray(tree.depths), device=dev)  # (N,)
        mask = torch.as_tensor(tree.ancestor_mask(), device=dev)  # (N, N)
        model: Any = self.model
        start = time.perf_counter()
        if self._factored:
            x, cache = model.hidden(tokens, past, position_ids=positions, tree_mask=mask)
            base = model.project(model.head_states(x[0], heads=1))[:, 0]  # (N, V)
            states: torch.Tensor = x[0]  # (N, d)
        else:
            logits, cache = model.heads_logits(tokens, past, position_ids=positions,
                                               tree_mask=mask)  # (1, N, h, V)
            base, states = logits[0, :, 0], logits[0]  # (N, V), (N, h, V)
        synchronize(dev)
        forward_s = time.perf_counter() - start

        start = time.perf_counter()
        accepted = tree_accepted(tree, base, self.criterion, eos_id)
        node = tree_winner(tree, accepted)
        path = tree.path(node)
        keep = np.concatenate([np.arange(past.length), past.length + path])
        new_past = cache.gather(torch.as_tensor(keep, device=dev))
        synchronize(dev)
        accept_s = time.perf_counter() - start

        start = time.perf_counter()
        if self._factored:
            next_logits = model.project(model.head_states(states[node]))  # (h, V)
        else:
            next_logits = states[node].clone()  # (h, V)
        synchronize(dev)
        forward_s += time.perf_counter() - start
        return TreeOutcome(
            n=int(path.size - 1),
            winner=node,
            tokens=tuple(int(t) for t in tree.tokens[path]),
            next_logits=next_logits,
            past=new_past,
            accept_lengths=_leaf_lengths(tree, accepted),
            forward_s=forward_s,
            accept_s=accept_s,
            path=tuple(int(u) for u in path),
            accepted=tuple(bool(a) for a in accepted),
        )

    def _check_tree(self, past: Any, tree: DraftTree) -> None:
        """Refuse trees and caches one call cannot verify (see :meth:`verify_tree`)."""
        if not isinstance(tree, DraftTree):
            raise VerifyError(f"tree must be a DraftTree, got {type(tree).__name__}")
        # the deepest node sits at position past.length + max_depth: max_depth + 1 positions
        self._check_past(
            past, call="verify_tree", needs="gather", tokens=tree.tokens, what="tree",
            positions=tree.max_depth + 1,
            shorten=lambda room: f"truncate it (tree.truncate({room - 1}))",
        )
