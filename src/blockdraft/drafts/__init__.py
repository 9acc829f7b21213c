"""Drafts: the `Drafter` protocol and the draft sources.

Every source yields a :class:`~blockdraft.core.batch.DraftBatch` (re-exported here; it lives
at the bottom of the house because the lattice and the rescorers return it too):

    HeadDrafter(k, p, rescorer)     the heads' lattice: vanilla, p-best 0-gram, rescored p-best
    vanilla()                       HeadDrafter(k=1, p=1)
    InputCopyDrafter(prompt_ids)    input-guided drafting (IAD): copy the prompt after a match
    CombinedDrafter(heads, iad)     the heads' drafts plus the IAD draft as one more row
"""

from blockdraft.core.batch import DraftBatch, DraftError
from blockdraft.drafts.heads import HeadDrafter, vanilla
from blockdraft.drafts.iad import CombinedDrafter, InputCopyDrafter, row_source
from blockdraft.drafts.protocol import Drafter

__all__ = [
    "CombinedDrafter", "DraftBatch", "DraftError", "Drafter", "HeadDrafter",
    "InputCopyDrafter", "row_source", "vanilla",
]
