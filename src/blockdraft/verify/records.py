"""The records of a decode: one :class:`DecodeStep` per verification call, one
:class:`DecodeResult` per prompt (frozen, numpy/torch free apart from the drafts they hold)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from blockdraft.core.batch import DraftBatch
from blockdraft.core.efficiency import block_efficiency
from blockdraft.core.tree import DraftTree


@dataclass(frozen=True, eq=False)
class DecodeStep:
    """One verification call of the decode loop (or of the offline simulator, which runs the
    same loop on a trace).

    Attributes:
        position: index in :attr:`DecodeResult.tokens` of this step's certain token ``d_1``.
        tree: the token tree verified (docs/definitions.md sec. 11; a batch of drafts is its
            trie, one draft a chain), cut to the depth that could count.
        winner: the accepted node of ``tree`` (the deepest accepted one).
        n: accepted draft tokens (none after an EOS).
        source: which source proposed the accepted node first (``"lattice"``, ``"lookup"``,
            ``"iad"``, ...: ``tree.label(winner)``).
        accept_lengths: ``n`` of every root-to-leaf path of ``tree`` (leaves in node order).
        tokens: the tokens this call yielded: ``d_2 .. d_{1+n}`` then the next certain token,
            cut after EOS and at ``max_new_tokens`` (``min(1 + n, remaining)`` of them).
        forward_s: wall seconds in the model's forward pass (the base head at every node
            included).
        draft_s: wall seconds drafting (the drafter's search and rescoring).
        other_s: wall seconds elsewhere in the step (criterion, cache selection, book-keeping).
        lattice_s: wall seconds building this step's lattice from the heads (their top-k).
        heads_s: wall seconds in the model for the heads (Medusa ResBlocks, projection and
            top-k at the accepted node; 0 when the drafter reads head 1 only): the next step's,
            computed by this step's call, or, heads on demand, this step's, computed when its
            drafter wanted them.
        calls: serial model calls the step took: 1, or 2 when the runtime confirmed a tree's
            path with a chain forward (ONNX Runtime int8 and q4).
    """

    position: int
    tree: DraftTree
    winner: int
    n: int
    source: str
    accept_lengths: tuple[int, ...]
    tokens: tuple[int, ...]
    forward_s: float = 0.0
    draft_s: float = 0.0
    other_s: float = 0.0
    lattice_s: float = 0.0
    heads_s: float = 0.0
    calls: int = 1

    @property
    def drafts(self) -> DraftBatch:
        """The tree's root-to-leaf paths as drafts (``tree.to_drafts()``: a trie gives back
        the batch it was made of, padded with -1)."""
        return self.tree.to_drafts()

    @property
    def draft(self) -> np.ndarray:
        """int64: the accepted draft: the root path of :attr:`winner`'s first leaf (a trie's
        first (best) draft through the accepted node)."""
        return self.tree.path_tokens(self.tree.first_leaf(self.winner))


@dataclass(frozen=True, eq=False)
class DecodeResult:
    """The output of :func:`decode` for one prompt.

    Attributes:
        tokens: the generated ids ``y_1 .. y_m`` (the prompt excluded; EOS included when it
            stopped the decode). A list, like :func:`~blockdraft.models.greedy_generate`'s,
            so the two compare with ``==``.
        calls: serial calls of the model, the prefill included (0 when nothing was asked).
        steps: one record per verification call.
        prompt_length: tokens in the prompt.
        stopped: ``"eos"``, ``"max_new_tokens"``, or ``"empty"`` (``max_new_tokens == 0``).
        criterion: the acceptance criterion, as a string (``"exact"`` is lossless).
        drafter: the draft strategy's name.
        prefill_s: wall seconds of the prompt's forward pass.
        wall_s: wall seconds of the whole decode.
    """

    tokens: list[int]
    calls: int
    steps: tuple[DecodeStep, ...]
    prompt_length: int
    stopped: str
    criterion: str
    drafter: str
    prefill_s: float
    wall_s: float

    @property
    def block_efficiency(self) -> float:
        """``B = len(tokens) / calls`` (docs/definitions.md sec. 2, the rule of
        :func:`~blockdraft.core.efficiency.block_efficiency`), ``1 <= B <= h``; 0.0 without
        calls."""
        return block_efficiency(len(self.tokens), self.calls)

    @property
    def accept_lengths(self) -> list[int]:
        """The winner's ``n`` of every step."""
        return [s.n for s in self.steps]

    @property
    def forward_s(self) -> float:
        """Wall seconds in the model's forward passes, the prefill included."""
        return self.prefill_s + sum(s.forward_s for s in self.steps)

    @property
    def draft_s(self) -> float:
        """Wall seconds building lattices and drafting (rescoring included)."""
        return sum(s.lattice_s + s.draft_s for s in self.steps)

    @property
    def split(self) -> TimeSplit:
        """Where the call's wall time went (:class:`TimeSplit`)."""
        steps = self.steps
        return TimeSplit(
            wall_s=self.wall_s, prefill_s=self.prefill_s,
            forward_s=sum(s.forward_s for s in steps), heads_s=sum(s.heads_s for s in steps),
            lattice_s=sum(s.lattice_s for s in steps), draft_s=sum(s.draft_s for s in steps),
            other_s=sum(s.other_s for s in steps), steps=len(steps), tokens=len(self.tokens))


@dataclass(frozen=True)
class TimeSplit:
    """One decode call's wall time, split (seconds; sums of one call or of several).

    ``wall_s = prefill_s + steps_s + outside_s``: the prompt's forward, the verification
    steps (each: forward, the next heads, the lattice, the drafting, the rest), and what the
    call spent outside both (its set-up: drafter objects, checks, the result's records).

    Attributes:
        wall_s, prefill_s, forward_s, heads_s, lattice_s, draft_s, other_s: seconds.
        steps: verification steps; tokens: tokens generated.
    """

    wall_s: float
    prefill_s: float
    forward_s: float
    heads_s: float
    lattice_s: float
    draft_s: float
    other_s: float
    steps: int
    tokens: int

    @classmethod
    def greedy(cls, wall_s: float, clock: list[float], tokens: int) -> TimeSplit:
        """A greedy loop's call from ``greedy_generate(..., clock=clock)``: the prefill is
        ``clock[0]``, every later entry a step, all of it forward."""
        return cls(wall_s=wall_s, prefill_s=clock[0], forward_s=sum(clock[1:]), heads_s=0.0,
                   lattice_s=0.0, draft_s=0.0, other_s=0.0, steps=len(clock) - 1,
                   tokens=tokens)

    @property
    def steps_s(self) -> float:
        """Seconds in the verification steps."""
        return self.forward_s + self.heads_s + self.lattice_s + self.draft_s + self.other_s

    @property
    def outside_s(self) -> float:
        """Seconds outside the prefill and the steps."""
        return self.wall_s - self.prefill_s - self.steps_s

    def __add__(self, other: TimeSplit) -> TimeSplit:
        return TimeSplit(
            wall_s=self.wall_s + other.wall_s, prefill_s=self.prefill_s + other.prefill_s,
            forward_s=self.forward_s + other.forward_s, heads_s=self.heads_s + other.heads_s,
            lattice_s=self.lattice_s + other.lattice_s, draft_s=self.draft_s + other.draft_s,
            other_s=self.other_s + other.other_s, steps=self.steps + other.steps,
            tokens=self.tokens + other.tokens)
