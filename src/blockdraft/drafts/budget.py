"""One draft tree from every source, as large as pays on the runtime: the cost-aware tree.

Three sources guess the next tokens in different ways: the heads' top-1 chain (vanilla BPD),
the ``p`` best paths of the heads' lattice under an LM (rescored p-best: the heads' guesses made
coherent, the context's n-grams included when the rescorer has a context LM), and prompt lookup
(a copy of what followed the text's last n-gram). :func:`CostAwareTreeDrafter` merges them into
one trie and keeps the part that pays, the pipeline's parts composed:

1. every node ``u`` gets ``q(u)``, its probability of acceptance given its parent's, from
   :class:`~blockdraft.drafts.calibration.AcceptanceTables` (measured on held-out training
   answers: the node's head log-probability and LM log-probability, its place in a lookup
   copy; several sources combined as independent evidence: :class:`~blockdraft.drafts.rates
   .TableRates`);
2. ``a(u) = q(u) a(parent)`` is the probability that ``u`` is on the accepted path, and the
   tokens a step yields are ``1 + sum a(u)`` in expectation (the accepted nodes form a path);
3. the nodes are ranked by ``a`` (a child never before its parent) and the tree keeps the
   ``N`` best, ``N`` the size that maximises expected tokens per unit of time,
   ``(1 + sum_{first N - 1} a) / cost(N)``, on the runtime's measured cost curve
   (:class:`~blockdraft.drafts.cut.CostCut`; :class:`~blockdraft.drafts.cut.ChainCut` keeps
   the one path that pays best, for a runtime that verifies chains losslessly but not trees).

The tree is verified in one forward with tree attention (docs/definitions.md sec. 11), so the
output is greedy's, whatever the sources propose.

Public surface:
    CostAwareTreeDrafter(cost, tables, k=8, p=4, rescorer=None, lm=None, lookup=True,
                         copies=3, copy_length=16, max_nodes=32, chain=False, name="")
        -> Pipeline (``.last``: the last tree's TreeStats)
    TreeStats, select_nodes, keep_paying      (re-exported from the pipeline and the cut)
"""

from __future__ import annotations

from blockdraft.core.batch import DraftError
from blockdraft.core.checks import check_int, check_positive_int
from blockdraft.drafts.calibration import AcceptanceTables
from blockdraft.drafts.cut import ChainCut, CostCut, keep_paying, select_nodes
from blockdraft.drafts.heads import HeadPaths
from blockdraft.drafts.lookup import Copies, HeadsOnDemand
from blockdraft.drafts.pipeline import Pipeline, Source, TreeStats
from blockdraft.drafts.protocol import Needs
from blockdraft.drafts.rates import TableRates
from blockdraft.models.cost import CostCurve
from blockdraft.rescorers.base import PathScorer, Rescorer

__all__ = ["CostAwareTreeDrafter", "TreeStats", "keep_paying", "select_nodes"]

SOURCE = "cost-aware"
"""``DraftTree.source`` of its trees."""


def CostAwareTreeDrafter(cost: CostCurve, tables: AcceptanceTables, k: int = 8,  # noqa: N802
                         p: int = 4, rescorer: Rescorer | None = None,
                         lm: PathScorer | None = None, lookup: bool = True, copies: int = 3,
                         copy_length: int = 16, max_nodes: int = 32, chain: bool = False,
                         heads_on_demand: int | None = None, name: str = "") -> Pipeline:
    """The cost-aware tree of the heads' chain, rescored p-best paths and prompt lookup (see the
    module docstring).

    Args:
        cost: the runtime's cost curve (:func:`~blockdraft.models.cost.measure_cost_curve`).
        tables: acceptance rates (:func:`~blockdraft.oracle.fit_acceptance`, or
            :meth:`AcceptanceTables.uniform` uncalibrated).
        k: lattice arcs per slot the p-best search and the head evidence read.
        p: rescored (or 0-gram, without a rescorer) paths added; 0 for none.
        rescorer: ranks the lattice's paths (an :class:`~blockdraft.rescorers.NgramRescorer`,
            its context LM included); None: head scores alone.
        lm: scores each node's token given the context and its root path (natural log), the
            LM evidence of ``tables``; default: the rescorer's own (``path_scorer()``).
        lookup: add prompt-lookup copies (the longest recent match of the text's last 1-4
            tokens, then other matches with other continuations:
            :func:`~blockdraft.drafts.lookup.lookups`).
        copies: how many copies (ranked; the tables rate each rank).
        copy_length: tokens a copy proposes (the cut keeps what pays).
        max_nodes: the largest tree (root included).
        chain: keep one path only (the root path whose expected tokens per unit of time is
            best): for runtimes that verify chains losslessly but not trees (ONNX Runtime
            int8).
        heads_on_demand: skip the heads on a step whose best copy matched at least this many
            tokens (:class:`~blockdraft.drafts.lookup.HeadsOnDemand`: the copies alone are
            drafted and the Medusa heads are not computed); None: the heads every step.
        name: a label for tables.

    Raises:
        DraftError: a bad setting, or ``cost``/``tables`` of the wrong type.
    """
    if not isinstance(cost, CostCurve):
        raise DraftError(f"cost must be a CostCurve, got {type(cost).__name__}")
    if not isinstance(tables, AcceptanceTables):
        raise DraftError(f"tables must be AcceptanceTables, got {type(tables).__name__}")
    check_positive_int(k, "CostAwareTreeDrafter.k", DraftError)
    check_int(p, "CostAwareTreeDrafter.p", DraftError, minimum=0)
    for label, value in (("copy_length", copy_length), ("copies", copies),
                         ("max_nodes", max_nodes)):
        check_positive_int(value, f"CostAwareTreeDrafter.{label}", DraftError)
    if lm is None and rescorer is not None:
        lm = rescorer.path_scorer()
    sources: list[Source] = [HeadPaths(k=1, p=1)]  # the heads' chain
    parts = ["chain"]
    if p:
        sources.append(HeadPaths(k=k, p=p, rescorer=rescorer))
        parts.append(f"{p}-best " + ("0-gram" if rescorer is None
                                     else type(rescorer).__name__))
    gate = None
    if lookup:
        copy_source = Copies(copies=copies, lengths=(copy_length,))
        sources.append(copy_source)
        parts.append("lookup")
        if heads_on_demand is not None:
            gate = HeadsOnDemand(copy_source, heads_on_demand)
            parts.append(f"heads unless a {heads_on_demand}-match")
    elif heads_on_demand is not None:
        raise DraftError("heads_on_demand skips the heads where a copy matched: it needs the "
                         "lookup copies (lookup=True)")
    if not name:
        kind = "chain" if chain else "tree"
        name = f"cost-aware {kind} ({' + '.join(parts)}, k={k}, N<={max_nodes})"
    # the rates read the head evidence of k arcs a slot (even without p-best) and the LM
    return Pipeline(sources, rates=TableRates(tables, lm),
                    cut=ChainCut(cost, max_nodes) if chain else CostCut(cost, max_nodes),
                    name=name, source=SOURCE, needs=Needs(k=k, lms=() if lm is None else (lm,)),
                    wants_heads=gate)
