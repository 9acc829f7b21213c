"""Drafts: one drafting pipeline, its parts, the named strategies composed of them, and the one
factory that builds a strategy from its declarative spec.

A drafter is called once a step with a :class:`StepView` and returns one
:class:`~blockdraft.core.tree.DraftTree` (``p`` drafts are their trie, one draft a chain); it
hears each model call's outcome through ``observe`` (:mod:`~blockdraft.drafts.protocol`). Every
drafter is a :class:`Pipeline` (:mod:`~blockdraft.drafts.pipeline`)::

    sources -> Trie -> Rates -> Cut -> DraftTree

    sources   HeadPaths (the heads' p best: vanilla, p-best 0-gram, rescored), TreePaths (a tree
              lattice's p best), Grown (a tree grown best first over any lattice's expand:
              EAGLE-2's, rescored, cost-aware), RankPaths (Medusa's static trees), Copies
              (prompt lookup), InputCopy (IAD), ReferencePath (the oracle, offline)
    Trie      the one (parent, token) -> node map (drafts/trie.py)
    Rates     TableRates (acceptance tables over a sausage), ArcRates (a tree lattice's arcs)
    Cut       KeepAll, FirstNodes(N), CostCut(cost, N), ChainCut(cost, N)

The named strategies are functions composing these parts (each returns a :class:`Pipeline`):

    HeadDrafter(k, p, rescorer), vanilla()        the heads' p best drafts, one trie
    LookupDrafter(min_match, max_match, lengths)  prompt lookup
    InputCopyDrafter(prompt_ids, min_match)       input-guided drafting (IAD)
    CombinedDrafter(heads, copy)                  two drafters' sources in one trie
    TrieDrafter(drafter, budget)                  a drafter's trie cut to its first N nodes
    MedusaTreeDrafter(choices, budget), calibrated_tree_drafter(acc, budget)
    ConfidenceTreeDrafter(k, budget), RescoredTreeDrafter(lm, k, budget, alpha)
    CostAwareTreeDrafter(cost, tables, k, p, rescorer, lookup, ...)   Medusa heads' default
    ConditionalDrafter(k, p, scorer, alpha)       a tree lattice's p best paths
    ConditionalTreeDrafter(k, budget, cost, lookup, tables)   prefix heads' default
    Oracle(k)                                     the top-k oracle (offline)

    DraftSpec(strategy, ...).build(resources, caps, cost, lossless)   the one factory
    default_spec(caps), default_drafter(model)     what decode(model, ids) drafts with
"""

from blockdraft.core.batch import DraftBatch, DraftError
from blockdraft.core.moved import moved_getattr
from blockdraft.core.tree import DraftTree
from blockdraft.drafts.budget import CostAwareTreeDrafter
from blockdraft.drafts.calibration import AcceptanceTables
from blockdraft.drafts.cut import ChainCut, CostCut, FirstNodes, KeepAll, keep_paying, select_nodes
from blockdraft.drafts.default import default_drafter, default_spec
from blockdraft.drafts.grow import (
    ConditionalTreeDrafter,
    ConfidenceTreeDrafter,
    Grown,
    RescoredTreeDrafter,
    confidence_tree,
    rescored_tree,
)
from blockdraft.drafts.heads import ConditionalDrafter, HeadDrafter, HeadPaths, TreePaths, vanilla
from blockdraft.drafts.iad import CombinedDrafter, InputCopy, InputCopyDrafter
from blockdraft.drafts.lookup import Copies, LookupDrafter
from blockdraft.drafts.oracle import Oracle, ReferencePath
from blockdraft.drafts.pipeline import Pipeline, Source, TreeStats
from blockdraft.drafts.protocol import Drafter, Feedback, Needs, StepView
from blockdraft.drafts.rates import ArcRates, TableRates
from blockdraft.drafts.spec import DraftSpec, Resources
from blockdraft.drafts.trees import (
    MC_SIM_7B_63,
    MedusaTreeDrafter,
    RankPaths,
    TrieDrafter,
    calibrated_choices,
    calibrated_tree_drafter,
    medusa_tree,
    sort_choices,
    trie_tree,
)
from blockdraft.drafts.trie import Trie

__all__ = [
    "MC_SIM_7B_63", "AcceptanceTables", "ArcRates", "ChainCut", "CombinedDrafter",
    "ConditionalDrafter", "ConditionalTreeDrafter", "ConfidenceTreeDrafter", "Copies",
    "CostAwareTreeDrafter", "CostCut", "DraftBatch", "DraftError", "DraftSpec", "DraftTree",
    "Drafter", "Feedback", "FirstNodes", "Grown", "HeadDrafter", "HeadPaths", "InputCopy",
    "InputCopyDrafter", "KeepAll", "LookupDrafter", "MedusaTreeDrafter", "Needs", "Oracle",
    "Pipeline", "RankPaths", "ReferencePath", "RescoredTreeDrafter", "Resources", "Source",
    "StepView", "TableRates", "TreePaths", "TreeStats", "Trie", "TrieDrafter",
    "calibrated_choices", "calibrated_tree_drafter", "confidence_tree", "default_drafter",
    "default_spec", "keep_paying", "medusa_tree", "rescored_tree", "select_nodes",
    "sort_choices", "trie_tree", "vanilla",
]

__getattr__ = moved_getattr("blockdraft.drafts", {
    "TreeDrafter": ("blockdraft.drafts.Drafter", "every drafter returns a DraftTree from one "
                    "call, draft(view): a batch of drafts is its trie"),
    "row_source": ("DraftTree.label(node) or DecodeStep.source", "a tree labels each node "
                   "with the source that proposed it"),
    "ConditionalDrafter.propose_conditional": ("ConditionalDrafter(...).draft(view)", "one "
                                               "drafter call"),
})

