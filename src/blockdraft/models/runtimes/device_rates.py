"""The cost-aware tree with ``N`` fixed, on the device (issue 41, item 2): every candidate node's
acceptance rate and reach as tensor operations, and the ``N`` best nodes kept.

The host's cost-aware tree (:mod:`blockdraft.drafts.rates`, :mod:`blockdraft.drafts.cut`,
docs/definitions.md sec. 11) rates each node ``u`` of a step's trie by ``q(u)``, its probability
of acceptance given its parent's, read from the acceptance tables by the bin of its head
log-probability (and of an LM's log-probability of its token given the context and its root
path, when the drafter has an LM); ``a(u) = q(u) a(parent)`` is the probability that ``u`` is
on the accepted path, and the cut keeps the root and the ``N - 1`` nodes of highest ``a`` (ties:
the shallower, then the earlier), a parent before its children (``q <= 1``). Here the trie is a
static candidate topology (:class:`~.device_tree.StaticTree`: Medusa's rank paths, tokens from
the heads' top-k) and every part is a fixed number of kernels over ``[M]`` tensors (no host
synchronisation, no branch on a value), so the size verified is static (``N``) while the
topology changes every step; :func:`subtree` gives it as :class:`~.device_tree.TreeTensors`,
which the verdict (:func:`~.device_accept.tree_verdict`) and the step's bias read as they read
a static tree's.

Exactly the host's numbers, on CPU tensors (tested): the head log-probabilities of
:func:`~blockdraft.models.topk.topk_logprobs` (the float32 logit minus the float64 normaliser
over the row), the bins of :func:`~blockdraft.drafts.calibration.bin_index` (``searchsorted``,
side left), the products of :func:`~blockdraft.drafts.rates.reach` in the same order (float64),
and the order of :func:`~blockdraft.drafts.cut.keep_paying` (two stable sorts).

Public surface:
    RateTensors         frozen: the acceptance tables on one device (float64)
        .of(tables, device)          from any object with heads, marginal, copy, head_edges
                                     and lm_edges (:class:`~blockdraft.drafts.AcceptanceTables`)
    head_logprobs(logits [D, C]) -> float64 [D, C]      natural log, over each row
    node_q(rates, depths [M], head_lp [M], lm_lp [M] | None) -> float64 [M]   the root's 1
    reach(q [M], tree) -> float64 [M]                   a(u), the root's 1
    best_nodes(a [M], depths [M], n) -> int64 [n]       the kept nodes, in node order
    subtree(tree, nodes [n]) -> TreeTensors             their topology
    RatedDraft          frozen: tokens [n], tree (TreeTensors), reach [n]
    rated_draft(candidates, rates, certain [1], heads [D, C], n, ids=None, lm=None)
        -> RatedDraft                                   the cost-aware tree's N best
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from blockdraft.models.errors import ModelError
from blockdraft.models.runtimes.device_drafts import tree_columns
from blockdraft.models.runtimes.device_tree import TreeTensors


@dataclass(frozen=True, eq=False)
class RateTensors:
    """Acceptance tables on one device (the host's
    :class:`~blockdraft.drafts.calibration.AcceptanceTables`, float64).

    Attributes:
        heads: ``[h - 1, HB, LB]``, a head token's rate by depth, head bin and LM bin.
        marginal: ``[h - 1, HB]``, the same without the LM.
        copy: ``[R, M, J]``, a lookup copy's token by rank, match length and offset.
        head_edges: ``[HB - 1]``, lm_edges: ``[LB - 1]``: the bins' upper edges (nats).
    """

    heads: torch.Tensor
    marginal: torch.Tensor
    copy: torch.Tensor
    head_edges: torch.Tensor
    lm_edges: torch.Tensor

    @classmethod
    def of(cls, tables: Any, device: torch.device | str) -> RateTensors:
        """``tables``' arrays on ``device`` (read once: its ``heads``, ``marginal``, ``copy``,
        ``head_edges`` and ``lm_edges``)."""

        def put(a: Any) -> torch.Tensor:
            return torch.as_tensor(np.array(a, dtype=np.float64)).to(device)

        return cls(heads=put(tables.heads), marginal=put(tables.marginal),
                   copy=put(tables.copy), head_edges=put(tables.head_edges),
                   lm_edges=put(tables.lm_edges))

    @property
    def depths(self) -> int:
        """Depths the tables cover; deeper nodes read the last."""
        return int(self.heads.shape[0])


def head_logprobs(logits: torch.Tensor) -> torch.Tensor:
    """float64 ``[D, C]``: each row's natural-log probabilities over its ``C`` columns, as
    :func:`~blockdraft.models.topk.topk_logprobs` computes them (the logit in float32, the
    normaliser in float64)."""
    z = logits.float().double()
    return z - torch.logsumexp(z, dim=-1, keepdim=True)


def _bins(values: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
    """:func:`~blockdraft.drafts.calibration.bin_index` on the device (NaN: bin 0)."""
    v = torch.nan_to_num(values.double(), nan=-torch.inf, posinf=torch.inf, neginf=-torch.inf)
    return torch.searchsorted(edges, v)


def node_q(rates: RateTensors, depths: torch.Tensor, head_lp: torch.Tensor,
           lm_lp: torch.Tensor | None = None) -> torch.Tensor:
    """float64 ``[M]``: each node's acceptance given its parent's, ``head_q`` of the tables
    (:meth:`~blockdraft.drafts.calibration.AcceptanceTables.head_q`), the root's (node 0) 1.

    Args:
        rates: the tables.
        depths: int64 ``[M]``, each node's depth (deeper than the tables: their last).
        head_lp: float64 ``[M]``, each node's head log-probability (``-inf``: rate 0).
        lm_lp: float ``[M]``, the LM's log-probability of each node's token given the context
            and its root path, or None (the tables' marginals).
    """
    d = depths.clamp(1, rates.depths) - 1
    hb = _bins(head_lp, rates.head_edges)
    if lm_lp is None:
        q = rates.marginal[d, hb]
    else:
        q = rates.heads[d, hb, _bins(lm_lp, rates.lm_edges)]
    q = torch.where(torch.isneginf(head_lp), torch.zeros_like(q), q)
    root = torch.arange(q.numel(), device=q.device) == 0
    return torch.where(root, torch.ones_like(q), q)


def reach(q: torch.Tensor, tree: TreeTensors) -> torch.Tensor:
    """float64 ``[M]``: ``a(u) = a(parent(u)) q(u)``, the root's 1, one depth at a time (the
    host's products, in its order)."""
    a = torch.ones_like(q)
    for depth in range(1, int(tree.levels.shape[0])):  # host ints: D kernels, no copy
        a = torch.where(tree.levels[depth], a[tree.parents] * q, a)
    return a


def best_nodes(a: torch.Tensor, depths: torch.Tensor, n: int) -> torch.Tensor:
    """int64 ``[n]``: the root and the ``n - 1`` nodes of highest ``a`` (ties: the shallower,
    then the earlier; :func:`~blockdraft.drafts.cut.keep_paying`'s order), in node order.

    Args:
        a: float64 ``[M]``, each node's reach (the root's 1, a child's at most its parent's).
        depths: int64 ``[M]``, each node's depth.
        n: the nodes kept, ``1 <= n <= M`` (a host int).
    """
    m = int(a.numel())
    by_depth = torch.sort(depths, stable=True).indices  # (M,): shallower first, then earlier
    ranked = by_depth[torch.sort(a[by_depth], descending=True, stable=True).indices]  # (M,)
    keep = torch.zeros(m, dtype=torch.bool, device=a.device).index_fill(0, ranked[:n], True)
    slot = torch.where(keep, keep.cumsum(0) - 1, torch.full_like(depths, n))  # (M,)
    nodes = torch.zeros(n + 1, dtype=torch.int64, device=a.device)
    nodes.scatter_(0, slot, torch.arange(m, device=a.device))  # slot n: discarded
    return nodes[:n]


def subtree(tree: TreeTensors, nodes: torch.Tensor) -> TreeTensors:
    """The topology of ``tree``'s ``nodes`` (int64 ``[n]``, node 0 first, each node's parent
    among them, in node order): its own :class:`TreeTensors` (``leaves``: every node; ``ranks``
    zero; ``levels`` over ``tree``'s depths)."""
    n = int(nodes.numel())
    m = int(tree.depths.numel())
    where = torch.zeros(m, dtype=torch.int64, device=nodes.device)
    where.scatter_(0, nodes, torch.arange(n, device=nodes.device))  # (M,): old -> new
    depths = tree.depths[nodes]  # (n,)
    steps = torch.arange(int(tree.levels.shape[0]), device=nodes.device)
    return TreeTensors(depths=depths, mask=tree.mask[nodes][:, nodes],
                       parents=where[tree.parents[nodes]], nonroot=tree.nonroot[:n],
                       ranks=torch.zeros_like(depths), leaves=torch.arange(n, device=nodes.device),
                       levels=depths[None, :] == steps[:, None], k=1)


@dataclass(frozen=True, eq=False)
class RatedDraft:
    """The cost-aware tree's ``N`` best nodes (see the module docstring).

    Attributes:
        tokens: int64 ``[n]``, their tokens in node order (the root the certain token).
        tree: their topology (:func:`subtree`).
        reach: float64 ``[n]``, each one's ``a(u)``.
    """

    tokens: torch.Tensor
    tree: TreeTensors
    reach: torch.Tensor


def rated_draft(candidates: TreeTensors, rates: RateTensors, certain: torch.Tensor,
                heads: torch.Tensor, n: int, ids: torch.Tensor | None = None,
                lm: Callable[[torch.Tensor], torch.Tensor] | None = None) -> RatedDraft:
    """The ``n`` best nodes by reach of the candidate tree over the heads' top-k (the host's
    ``Pipeline([RankPaths(choices)], rates=TableRates(tables, lm), cut=CostCut(None, n))``).

    Args:
        candidates: the candidate topology's tensors (``StaticTree.on``: node ``u`` at depth
            ``d`` holds rank ``ranks[u]`` of the head guessing depth ``d``).
        rates: the acceptance tables.
        certain: int64 ``[1]``, the certain token (the root).
        heads: float ``[D, C]``, the logits of the heads guessing depths ``1 .. D``.
        n: nodes kept (``1 <= n <= M``).
        ids: int64 ``[C]``, each column's token id (a shortlist), or None.
        lm: the LM's log-probability of every candidate's token given the context and its root
            path, from the candidates' tokens (int64 ``[M]`` -> float ``[M]``), or None.

    Raises:
        ModelError: ``n`` outside ``1 .. M`` (a host check).
    """
    m = int(candidates.depths.numel())
    if not 1 <= n <= m:
        raise ModelError(f"a rated tree keeps 1 to {m} of its {m} candidates, got N = {n}: "
                         "a larger candidate tree or a smaller N")
    columns = tree_columns(candidates, heads)  # (M,)
    slot = (candidates.depths - 1).clamp(min=0)
    drafted = columns if ids is None else ids[columns]
    tokens = torch.where(candidates.nonroot, drafted, certain.expand_as(drafted))  # (M,)
    lp = head_logprobs(heads)[slot, columns]  # (M,)
    head_lp = torch.where(candidates.nonroot, lp, torch.full_like(lp, -torch.inf))
    q = node_q(rates, candidates.depths, head_lp, None if lm is None else lm(tokens))
    a = reach(q, candidates)
    nodes = best_nodes(a, candidates.depths, n)
    return RatedDraft(tokens=tokens[nodes], tree=subtree(candidates, nodes), reach=a[nodes])
