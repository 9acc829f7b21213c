"""Moved: prefix heads' drafters are compositions of the drafting pipeline now
(``ConditionalDrafter`` in :mod:`blockdraft.drafts.heads`, ``ConditionalTreeDrafter`` in
:mod:`blockdraft.drafts.grow`, both exported by :mod:`blockdraft.drafts`). Importing this module
raises an :class:`ImportError` naming them.
"""

from blockdraft.core.moved import moved_error

raise moved_error("blockdraft.drafts.conditional",
                  "from blockdraft.drafts import ConditionalDrafter, ConditionalTreeDrafter",
                  "they are compositions of the one drafting pipeline")
