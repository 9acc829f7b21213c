"""The `Drafter` protocol: one call a step, one feedback hook.

docs/definitions.md sec. 2 (step 1) and 11. A drafter is called once per BPD step with a
:class:`StepView`: the step's sausage lattice (the heads' top-``k`` per slot; slot 1 is the
certain token), the step's tree lattice when the model's heads are prefix-conditioned (each
node's children computed lazily), the committed context and what may count. It returns one
:class:`~blockdraft.core.tree.DraftTree` rooted at the certain token: ``p`` drafts are their
trie, one draft a chain. The verifier checks every node in one forward. It never calls the
model.

After each model call the decode loop (and the offline simulator, which runs the same loop on
a trace) hands the drafter a :class:`Feedback` through :meth:`Drafter.observe`: the prefill of a
new prompt, or a verification's verdict. Drafters that learn (a prompt-lookup index, a context
LM's counts, timings) update their own state there; state lives in a plainly mutable object the
drafter owns, never in a frozen record.

What a drafter needs of a step is declared once (:class:`Needs`), never probed: the lattice
width, how many heads the next step reads, whether it reads the tree lattice or a reference
(the oracle, offline only), and the LMs it scores with (checked once against the model's
vocabulary).

Public surface:
    Needs, StepView, Feedback       frozen records
    Drafter                         the protocol: name, needs, draft(view), observe(feedback)
    OnDemandDrafter                 ... and wants_heads(context, certain) (Needs.on_demand)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from blockdraft.core.batch import DraftError
from blockdraft.core.checks import check_int
from blockdraft.core.tree import DraftTree
from blockdraft.lattice.conditional import TreeLattice
from blockdraft.lattice.sausage import LatticeError, SausageLattice
from blockdraft.lattice.search import Searchable, narrowed
from blockdraft.rescorers.base import VocabChecked


@dataclass(frozen=True)
class Needs:
    """What a drafter needs of each step, declared once.

    Attributes:
        k: arcs per slot of the lattice it reads (``>= 1``): the caller builds a lattice (and a
            tree lattice's expansions) at least this wide.
        heads: heads whose logits the next step reads: None every head; 1 the base head alone
            (a drafter that copies, whose lattice is the certain token), so a verification
            projects no other head.
        tree_lattice: it drafts from the tree lattice of prefix-conditioned heads or a draft
            layer (:attr:`StepView.tree`); a model without one is refused by name.
        reference: it reads the reference continuation (the oracle): offline only.
        lms: the LMs it scores with (rescorers, path scorers): each must fit the model's
            vocabulary (``check_vocab``, called once where a decode starts).
        sausage: it reads the step's sausage lattice beyond the certain token (False: a tree
            grown over the tree lattice alone, a copy), so a model whose chain costs what its
            tree's own expansions cost (a draft layer) need not compute the chain first.
        on_demand: it may do without the heads on some steps (heads on demand): the loop asks
            its ``wants_heads(context, certain) -> bool`` before each step's lattice, and a
            step it answers False sees the certain token alone (``lattice.h == 1``), the
            Medusa heads not computed.
    """

    k: int = 1
    heads: int | None = None
    tree_lattice: bool = False
    reference: bool = False
    lms: tuple[VocabChecked, ...] = ()
    sausage: bool = True
    on_demand: bool = False

    def __post_init__(self) -> None:
        check_int(self.k, "Needs.k", DraftError, minimum=1)
        if self.heads is not None:
            check_int(self.heads, "Needs.heads", DraftError, minimum=1)
        object.__setattr__(self, "lms", tuple(self.lms))

    def joined(self, other: Needs) -> Needs:
        """What two sources need together: the wider lattice, the heads either reads, either's
        lattices and reference, both's LMs."""
        heads = (None if self.heads is None or other.heads is None
                 else max(self.heads, other.heads))
        return Needs(k=max(self.k, other.k), heads=heads,
                     tree_lattice=self.tree_lattice or other.tree_lattice,
                     reference=self.reference or other.reference,
                     lms=self.lms + tuple(lm for lm in other.lms if lm not in self.lms),
                     sausage=self.sausage or other.sausage,
                     on_demand=self.on_demand or other.on_demand)


@dataclass(frozen=True, eq=False)
class StepView:
    """What a drafter sees of one step.

    Attributes:
        lattice: the sausage lattice ``[h, k]`` (slot 1 the certain token alone); with
            prefix-conditioned heads, the heads' greedy chain's top-k.
        context: int64 ``[L]``, the committed text before the certain token (the prompt
            first), oldest first.
        prompt_length: how many of ``context``'s tokens are the prompt.
        tree: the step's tree lattice (prefix-conditioned heads, a draft layer), or None.
        max_depth: the deepest node that can count this step (the tokens still wanted, the
            model's context): deeper nodes are cut before the verification.
        reference: the reference continuation from the certain token on (offline, a trace:
            ``y_{t+1}, y_{t+2}, ...``), or None.
    """

    lattice: SausageLattice
    context: np.ndarray
    prompt_length: int = 0
    tree: TreeLattice | None = None
    max_depth: int | None = None
    reference: np.ndarray | None = None

    @property
    def certain(self) -> int:
        """The certain token ``d_1`` (every draft's root)."""
        return int(self.lattice.tokens[0, 0])

    @property
    def searchable(self) -> Searchable:
        """The lattice a search walks: the tree lattice when there is one, else the sausage."""
        return self.tree if self.tree is not None else self.lattice

    def sausage(self, k: int) -> SausageLattice:
        """The sausage lattice cut to ``k`` arcs a slot.

        Raises:
            DraftError: a lattice narrower than ``k`` (the caller builds it ``needs.k`` wide).
        """
        try:
            out = narrowed(self.lattice, k)
        except LatticeError as e:
            raise DraftError(str(e)) from e
        assert isinstance(out, SausageLattice)
        return out

    def tree_lattice(self, k: int) -> Searchable:
        """The tree lattice, ``k`` arcs a node at most (a model's expansions may be wider when
        the drafter's sources read several widths)."""
        assert self.tree is not None  # declared (Needs.tree_lattice): checked where it starts
        return narrowed(self.tree, k)

    @property
    def text(self) -> np.ndarray:
        """The committed text with the certain token: ``context + [d_1]``."""
        return np.append(self.context, self.certain)


@dataclass(frozen=True, eq=False)
class Feedback:
    """What a model call decided, for :meth:`Drafter.observe`.

    Attributes:
        context: int64, the committed text before the next step's certain token.
        certain: the next step's certain token.
        start: this was the prefill of a new prompt (nothing was verified): state that belongs
            to the text starts over.
        tree: the tree verified (None at the start).
        node: the accepted node of ``tree`` (0 at the start).
        n: accepted draft tokens.
        draft_s: seconds the drafter spent on the step; forward_s: seconds in the model.
    """

    context: np.ndarray
    certain: int
    start: bool = False
    tree: DraftTree | None = None
    node: int = 0
    n: int = 0
    draft_s: float = 0.0
    forward_s: float = 0.0


@runtime_checkable
class Drafter(Protocol):
    """A draft source: one tree a step (see the module docstring). A drafter that declares
    ``needs.on_demand`` is an :class:`OnDemandDrafter`.

    Attributes:
        name: a label for tables and reports.
        needs: what it needs of a step (:class:`Needs`).
    """

    @property
    def name(self) -> str: ...

    @property
    def needs(self) -> Needs: ...

    def draft(self, view: StepView) -> DraftTree:
        """The step's tree: its root is ``view.certain``; node ``u`` at depth ``d`` guesses the
        token at ``t + 1 + d``."""
        ...

    def observe(self, feedback: Feedback) -> None:
        """The outcome of the model call after the last :meth:`draft` (or a new prompt's
        prefill)."""
        ...


class OnDemandDrafter(Drafter, Protocol):
    """A drafter that declares ``needs.on_demand``: it says, before each step's lattice is
    built, whether that step's drafts read the heads (heads on demand)."""

    def wants_heads(self, context: np.ndarray, certain: int) -> bool:
        """Whether the step after ``context`` (the committed text before the certain token
        ``certain``) drafts from the heads; False: it sees the certain token alone."""
        ...
