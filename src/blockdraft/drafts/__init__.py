"""Drafts: the `Drafter` protocol and the draft sources.

Every source yields a :class:`~blockdraft.core.batch.DraftBatch` (re-exported here; it lives
at the bottom of the house because the lattice and the rescorers return it too):

    HeadDrafter(k, p, rescorer)     the heads' lattice: vanilla, p-best 0-gram, rescored p-best
    vanilla()                       HeadDrafter(k=1, p=1)
    InputCopyDrafter(prompt_ids)    input-guided drafting (IAD): copy the prompt after a match
    LookupDrafter(min_match, max_match, lengths)   prompt lookup: copy what followed the
                                    latest earlier occurrence of the text's last n-gram
    CombinedDrafter(heads, iad)     the heads' drafts plus a copy (IAD or lookup) as one row
    ConditionalDrafter(k, p, scorer, alpha)   the p best paths of prefix-conditioned heads'
                                    tree lattice (exact, with or without an LM), in a decode
    ConditionalTreeDrafter(k, budget)   EAGLE-2's tree over that lattice: the budget most
                                    probable nodes, in a decode

Token trees (docs/definitions.md sec. 11; ``DraftTree`` lives in ``core/tree.py``), each a
``TreeDrafter`` (``propose_tree(lattice, context) -> DraftTree``):

    TrieDrafter(drafter, budget)            any drafter's p drafts merged into a trie
    MedusaTreeDrafter(choices, budget)      a static Medusa tree (MC_SIM_7B_63 by default);
        MedusaTreeDrafter.calibrated(acc, budget): Medusa's calibrated tree
    ConfidenceTreeDrafter(k, budget)        EAGLE-2 style: the N most confident nodes
    CostAwareTreeDrafter(cost, tables, k, p, rescorer, lookup)   the heads' chain, rescored
                                            p-best paths and prompt lookup in one trie, cut to
                                            the size that pays on the runtime's cost curve,
                                            by acceptance rates measured on training answers
                                            (AcceptanceTables)
    RescoredTreeDrafter(lm, k, budget, alpha)   best-first by head + alpha x LM score (an
        NgramLM, or a path scorer of the rescorers room: NeuralPathScorer(rescorer_lm) of
        ``blockdraft.rescorers.neural`` for a small neural LM)
"""

from blockdraft.core.batch import DraftBatch, DraftError
from blockdraft.core.tree import DraftTree
from blockdraft.drafts.budget import CostAwareTreeDrafter, TreeStats, select_nodes
from blockdraft.drafts.calibration import AcceptanceTables
from blockdraft.drafts.conditional import ConditionalDrafter, ConditionalTreeDrafter
from blockdraft.drafts.heads import HeadDrafter, vanilla
from blockdraft.drafts.iad import CombinedDrafter, InputCopyDrafter, row_source
from blockdraft.drafts.lookup import LookupDrafter
from blockdraft.drafts.protocol import Drafter, TreeDrafter
from blockdraft.drafts.trees import (
    MC_SIM_7B_63,
    ConfidenceTreeDrafter,
    MedusaTreeDrafter,
    RescoredTreeDrafter,
    TrieDrafter,
    calibrated_choices,
    confidence_tree,
    medusa_tree,
    rescored_tree,
    sort_choices,
    trie_tree,
)

__all__ = [
    "MC_SIM_7B_63", "AcceptanceTables", "CombinedDrafter", "ConditionalDrafter",
    "ConditionalTreeDrafter",
    "ConfidenceTreeDrafter",
    "CostAwareTreeDrafter", "DraftBatch", "DraftError", "TreeStats", "select_nodes",
    "DraftTree", "Drafter", "HeadDrafter", "InputCopyDrafter", "LookupDrafter",
    "MedusaTreeDrafter",
    "RescoredTreeDrafter", "TreeDrafter", "TrieDrafter", "calibrated_choices",
    "confidence_tree", "medusa_tree", "rescored_tree", "row_source", "sort_choices",
    "trie_tree", "vanilla",
]
