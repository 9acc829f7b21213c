"""The verdict on a token tree, given the base head's logits at its nodes (pure functions).

See docs/definitions.md sec. 2 and 11. Node ``u`` (not the root) is accepted when its parent
is, and its token passes the criterion against the base head's raw logits at its parent
(``exact``: equals their argmax). ``min_block:l=L`` accepts every node of depth ``<= L - 1``
whose parent is accepted, and deeper only the leading run of matches (``n = max(n_exact,
L - 1)``); with ``eos_id``, no node below an EOS (other than the root) is accepted. The
accepted path ends at the deepest accepted node; ties (impossible with ``exact``, whose
accepted nodes form one chain) go to the higher node score, then to the lower node index.

A batch of ``p`` drafts is verified as its trie (:meth:`DraftTree.from_drafts`): a draft's
``n`` is the depth of the deepest accepted node on its path, and the winner is the first draft
with the largest ``n`` (:func:`row_lengths`), as a batched forward would decide.

Public surface:
    tree_accepted(tree, base_logits, criterion, eos_id=None) -> bool [N]
    accepted_nodes(tree, base, parent_rows, crit, eos_id) -> bool [N]   the same from the
                                   logits at some rows and each node's parent row, trusted
    accepted_from(tree, match, floor=0, eos_id=None) -> bool [N]   the one walk of a verdict
    reference_matches(tree, reference) -> bool [N - 1]   the exact matches on a trace
    tree_winner(tree, accepted) -> node
    leaf_lengths(tree, accepted) -> n of every root-to-leaf path
    row_lengths(tree, accepted, nodes) -> n of every draft
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from blockdraft.core.tree import DraftTree

if TYPE_CHECKING:  # the verdict's walk is numpy; only the logits' matches need torch
    import torch

    from blockdraft.verify.criteria import Criterion


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

    Raises:
        VerifyError: a criterion the logits cannot satisfy (``topk`` k > V).
    """
    from blockdraft.verify.criteria import Criterion

    crit = Criterion.parse(criterion)
    crit.check_model(int(base_logits.shape[-1]), None)
    return accepted_nodes(tree, base_logits, tree.parents[1:], crit, eos_id)


def accepted_nodes(tree: DraftTree, base: torch.Tensor, parent_rows: np.ndarray,
                   crit: Criterion, eos_id: int | None) -> np.ndarray:
    """:func:`tree_accepted` from the base head's raw logits ``base [I, V]`` at some nodes and,
    for each non-root node (node order), the row of its parent in ``base``
    (``parent_rows [N - 1]``), for a criterion already checked against the model: the
    verifier's per-step path (it projects the base head at every node, so its rows are the
    parents themselves).
    """
    import torch

    if tree.num_nodes == 1:
        return np.ones(1, dtype=bool)
    dev = base.device
    drafted = torch.tensor(tree.tokens[1:], device=dev)  # (N-1,)
    rows = torch.tensor(parent_rows, device=dev)  # (N-1,)
    if crit.name == "exact":  # one argmax per row, not one per node
        match = drafted == base.argmax(-1)[rows]
    else:
        match = crit.matches(drafted[None], base[rows][None])[0]  # (N-1,)
    floor = int(crit.kwargs["l"]) - 1 if crit.name == "min_block" else 0
    return accepted_from(tree, match.cpu().numpy(), floor, eos_id)


def accepted_from(tree: DraftTree, match: np.ndarray, floor: int = 0,
                  eos_id: int | None = None) -> np.ndarray:
    """bool ``[N]``: the accepted nodes, from whether each non-root node's token passes the
    criterion at its parent (``match`` bool ``[N - 1]``, node order): a node is accepted when
    its parent is and it matches (or, ``min_block``, its depth is at most ``floor``), nothing
    below a non-root EOS. The one walk of every verdict, online (the verifier's logits) and
    offline (a trace's reference: :func:`reference_matches`)."""
    n = tree.num_nodes
    ok = np.zeros(n, dtype=bool)
    ok[0] = True
    parents = tree.parents.tolist()
    depths = np.asarray(tree.depths).tolist() if floor else None
    tokens = tree.tokens.tolist()
    run = ok.copy()  # the criterion's leading run alone (min_block's floor aside)
    for u in range(1, n):
        par = parents[u]
        if not ok[par] or (eos_id is not None and par != 0 and tokens[par] == eos_id):
            continue
        run[u] = bool(run[par] and match[u - 1])
        ok[u] = run[u] or (depths is not None and depths[u] <= floor)
    return ok


def reference_matches(tree: DraftTree, reference: np.ndarray) -> np.ndarray:
    """bool ``[N - 1]``: whether each non-root node's token is the reference's at its depth
    (``reference [r]``: the greedy continuation from the certain token on, ``reference[0]`` the
    root's; a node deeper than it never matches): the exact criterion's matches on a trace."""
    depths = np.asarray(tree.depths)[1:]
    inside = depths < reference.size
    out = np.zeros(depths.size, dtype=bool)
    out[inside] = tree.tokens[1:][inside] == reference[depths[inside]]
    return out


def tree_winner(tree: DraftTree, accepted: np.ndarray) -> int:
    """The accepted node: the deepest accepted one; ties to the higher score, then the lower
    index (docs/definitions.md sec. 11)."""
    depths = np.asarray(tree.depths)
    cand = np.flatnonzero(accepted)
    deepest = cand[depths[cand] == depths[cand].max()]
    best = deepest[tree.scores[deepest] == tree.scores[deepest].max()]
    return int(best[0])


def _deepest_on_path(tree: DraftTree, accepted: np.ndarray) -> np.ndarray:
    """int64 ``[N]``: the depth of the deepest accepted node on each node's root path."""
    depths = np.asarray(tree.depths)
    best = np.zeros(tree.num_nodes, dtype=np.int64)
    for u in range(1, tree.num_nodes):
        best[u] = depths[u] if accepted[u] else best[tree.parents[u]]
    return best


def leaf_lengths(tree: DraftTree, accepted: np.ndarray) -> tuple[int, ...]:
    """``n`` of every root-to-leaf path (leaves in node order)."""
    best = _deepest_on_path(tree, accepted)
    return tuple(int(best[leaf]) for leaf in tree.leaves())


def row_lengths(tree: DraftTree, accepted: np.ndarray, nodes: np.ndarray) -> tuple[int, ...]:
    """``n`` of every draft: the deepest accepted depth on its path (``nodes``: each draft
    token's node, :meth:`DraftTree.trie_of`)."""
    best = _deepest_on_path(tree, accepted)
    return tuple(int(best[row[-1]]) for row in nodes)
