"""The decode loop's steps verified by the model: :class:`ModelSteps` (the engine's
:class:`~blockdraft.verify.engine.Steps` online).

It holds what one call leaves for the next: the cache of the committed text and the heads at
the accepted node (the base head's logits, the other heads' top-k taken in the runtime, and the
tree lattice's expander when the heads are prefix-conditioned). For a drafter that may do without
the Medusa heads (``Needs.on_demand``) the verification leaves them to the next view, which
computes them only when the drafter wants them (heads on demand). A step's view builds the sausage
lattice from them (:func:`~blockdraft.lattice.step.step_lattice`) and wraps the expander in a
:class:`~blockdraft.lattice.conditional.TreeLattice`; a verification runs one forward over the
tree (:meth:`Verifier.run <blockdraft.verify.verifier.Verifier.run>`) and keeps its accepted
path.

Public surface:
    ModelSteps(verifier, needs)
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from blockdraft.core.tree import DraftTree
from blockdraft.drafts.protocol import Needs, StepView
from blockdraft.lattice.conditional import TreeLattice
from blockdraft.lattice.step import step_lattice
from blockdraft.verify.engine import Verdict
from blockdraft.verify.verifier import Verifier, synchronize


class ModelSteps:
    """A decode's steps verified by ``verifier``'s model (mutable: the cache and the next heads
    between calls).

    Args:
        verifier: the verifier (its model and criterion).
        needs: the drafter's needs: the lattice width ``k`` and the heads it reads.
    """

    def __init__(self, verifier: Verifier, needs: Needs) -> None:
        self.verifier = verifier
        self.k = needs.k
        self.heads = needs.heads
        if needs.tree_lattice and not needs.sausage and verifier.caps.stateful_heads:
            # a draft layer's chain is its tree's own nodes, computed depth by depth as the tree
            # grows: the drafter reads the tree alone, so the step computes no chain first
            # (prefix heads keep theirs: one run of their graph that seeds their tree)
            self.heads = 1
        # heads on demand: the verification leaves the Medusa heads to the view that wants them
        # (the verifier decides which heads can wait: Verifier.run's defer_heads)
        self.defer = needs.on_demand
        self._past: Any = None
        self._logits: torch.Tensor | None = None
        self._topk: tuple[np.ndarray, np.ndarray] | None = None
        self._expand: Any = None
        self._state: torch.Tensor | None = None  # the accepted node's state, heads deferred
        self.heads_s = 0.0

    def prefill(self, prompt: list[int]) -> int:
        v = self.verifier
        self._logits, self._topk, self._past, self._expand = v.prefill_heads(
            prompt, self.heads, self.k)
        synchronize(v.device)
        return int(torch.argmax(self._logits[0]))

    def room(self) -> int | None:
        limit = self.verifier.max_seq_len
        return None if limit is None else limit - int(self._past.length)

    def view(self, context: np.ndarray, prompt_length: int, max_depth: int,
             heads: bool = True) -> StepView:
        assert self._logits is not None
        self.heads_s = 0.0
        if heads and self._state is not None:  # the heads the verification left, now wanted
            start = time.perf_counter()
            self._logits, self._topk = self.verifier.next_heads(
                self._state, self._logits[0], self.heads, self.k)
            synchronize(self.verifier.device)
            self._state = None
            self.heads_s = time.perf_counter() - start
        logits, topk = (self._logits, self._topk) if heads else (self._logits[:1], None)
        lattice = step_lattice(logits, topk, self.k)
        h = self.verifier.h or lattice.h  # the model's: the sausage may be the certain token alone
        tree = None if self._expand is None else TreeLattice(h, self._expand)
        return StepView(lattice=lattice, context=context, prompt_length=prompt_length,
                        tree=tree, max_depth=max_depth)

    def verify(self, tree: DraftTree, eos_id: int | None) -> Verdict:
        out = self.verifier.run(self._past, tree, eos_id, self.heads, self.k,
                                defer_heads=self.defer)
        self._past, self._logits, self._topk = out.past, out.next_logits, out.next_topk
        self._expand, self._state = out.next_expand, out.next_state
        return Verdict(n=out.n, node=out.winner, path=out.path, next_token=out.next_token,
                       accept_lengths=out.accept_lengths, forward_s=out.forward_s,
                       heads_s=out.heads_s, calls=out.calls)
