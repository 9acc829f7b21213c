"""The step engine: predict -> verify -> accept -> observe, online and offline alike.

docs/definitions.md sec. 2, 6 and 11. One loop runs every decode of blockdraft, against a model
(:func:`~blockdraft.verify.decode.decode`: the verifier's forward decides) or against a trace
(:func:`~blockdraft.oracle.simulate.simulate`: the recorded greedy tokens decide), so the offline
simulation is the online decode by construction::

    d_1 = steps.prefill(prompt)                      # call 1: the certain token
    drafter.observe(start)
    while not done:
        heads   = drafter.wants_heads(context, d)     # heads on demand (when it declares so)
        view    = steps.view(context, ..., heads)     # the step's lattice (and tree lattice)
        tree    = drafter.draft(view)                 # 1. predict (no model call)
        verdict = steps.verify(tree, eos_id)          # 2. verify: one call
        new     = accept(verdict, remaining, eos_id)  # 3. accept: d_2..d_{1+n}, next certain
        drafter.observe(feedback)                     #    the drafter learns

A step verifies a token tree (a batch of drafts is its trie, one draft a chain), cut to the
depth that can still count (the tokens still wanted, the model's context): ``remaining + 1``
columns check every draft token that can count, so ``n`` is the simulator's; when the model's
context is full one column fewer is fed (``n`` may then be one less: the same tokens and ``B``).

Counting (docs/definitions.md sec. 2): the prefill yields 1 token (``d_1``), every verification
call ``min(1 + n, remaining)`` (``d_2 .. d_{1+n}`` and the next certain token), cut after EOS.

Public surface:
    Steps                     the protocol of what verifies (a model, a trace)
    Verdict                   frozen: what one verification decided
    accept(verdict, tree, remaining, eos_id) -> tuple[int, ...]
    step(drafter, steps, context, prompt_length, depth, certain, eos_id, vocab_size) -> Stepped
        predict and verify one step (the one call of a drafter)
    run(drafter, steps, prompt, max_new_tokens, eos_id, vocab_size) -> Run
    Run                       frozen: tokens, steps (DecodeStep), prefill_s, stopped
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol, cast

import numpy as np

from blockdraft.core.tree import DraftTree
from blockdraft.drafts.protocol import Drafter, Feedback, OnDemandDrafter, StepView
from blockdraft.verify.errors import VerifyError
from blockdraft.verify.records import DecodeStep


@dataclass(frozen=True, eq=False)
class Verdict:
    """What one verification call decided.

    Attributes:
        n: accepted draft tokens, ``0 <= n <= depth`` (none after an EOS).
        node: the accepted node (the deepest accepted one; ties: the higher score).
        path: the accepted path's nodes, the root first.
        next_token: the next certain token (the base head's argmax at the accepted node).
        accept_lengths: ``n`` of every root-to-leaf path (leaves in node order).
        forward_s: seconds in the model's forward (0 offline).
        heads_s: seconds in the model for the next step's heads (0 offline).
        calls: serial model calls it took (2 when a runtime confirmed a tree's path with a
            chain forward; 1 offline).
    """

    n: int
    node: int
    path: tuple[int, ...]
    next_token: int
    accept_lengths: tuple[int, ...]
    forward_s: float = 0.0
    heads_s: float = 0.0
    calls: int = 1


class Steps(Protocol):
    """What verifies a decode's steps: the model (a verifier) or a trace (the recorded greedy
    tokens). It holds the state between calls (the cache and the next heads, or the position)."""

    def prefill(self, prompt: list[int]) -> int:
        """The prompt's call: the first certain token ``d_1``."""
        ...

    def room(self) -> int | None:
        """Positions still free after the cached ones (the model's context), None: no limit."""
        ...

    @property
    def heads_s(self) -> float:
        """Seconds the last :meth:`view` spent computing heads the verification left to it
        (heads on demand; 0 otherwise)."""
        ...

    def view(self, context: np.ndarray, prompt_length: int, max_depth: int,
             heads: bool = True) -> StepView:
        """The step's :class:`StepView` (its lattice built from the last call's heads);
        ``heads`` False: the certain token alone (the drafter does without the heads)."""
        ...

    def verify(self, tree: DraftTree, eos_id: int | None) -> Verdict:
        """One verification call over ``tree`` (cut to what can count); keeps the accepted
        path for the next step."""
        ...


def accept(verdict: Verdict, tree: DraftTree, remaining: int, eos_id: int | None
           ) -> tuple[int, ...]:
    """Step 3: the tokens one verification call yields: ``d_2 .. d_{1+n}`` of the accepted path
    (``d_1`` was yielded by the call before) and the next certain token, cut after the first EOS
    and at ``remaining`` tokens."""
    new = [int(tree.tokens[u]) for u in verdict.path[1:]] + [verdict.next_token]
    if eos_id is not None and eos_id in new:
        new = new[: new.index(eos_id) + 1]
    return tuple(new[:remaining])


@dataclass(frozen=True, eq=False)
class Run:
    """One prompt's decode by the engine.

    Attributes:
        tokens: the generated ids (EOS included when it stopped the decode).
        steps: one record per verification call.
        prefill_s: seconds of the prompt's call.
        stopped: ``"eos"`` or ``"max_new_tokens"``.
    """

    tokens: list[int]
    steps: tuple[DecodeStep, ...]
    prefill_s: float
    stopped: str


def _checked(tree: object, certain: int, vocab_size: int | None, name: str) -> DraftTree:
    """The drafter's tree, checked where it enters the loop: a DraftTree rooted at the certain
    token, every token in the vocabulary."""
    if not isinstance(tree, DraftTree):
        raise VerifyError(f"{name}.draft returned {type(tree).__name__}, not a DraftTree")
    if int(tree.tokens[0]) != certain:
        raise VerifyError(f"{name} proposed a tree rooted at {int(tree.tokens[0])}; the root "
                          f"must be the certain token d_1 = {certain}")
    hi = int(tree.tokens.max())
    if vocab_size is not None and hi >= vocab_size:
        raise VerifyError(f"{name} proposed token id {hi}, outside the model's vocabulary "
                          f"[0, {vocab_size})")
    return tree


@dataclass(frozen=True, eq=False)
class Stepped:
    """One step of the engine: the tree verified (cut to what can count), the verdict, and the
    seconds its lattice, its drafting and the heads computed on demand for it took."""

    tree: DraftTree
    verdict: Verdict
    lattice_s: float
    draft_s: float
    heads_s: float = 0.0


def step(drafter: Drafter, steps: Steps, context: np.ndarray, prompt_length: int, depth: int,
         certain: int, eos_id: int | None, vocab_size: int | None) -> Stepped:
    """Predict and verify one step: the lattice of the last call's heads (the heads computed
    now when the verification left them to a drafter that may do without: heads on demand),
    the drafter's tree (the one place a drafter is called), cut to ``depth``, one
    verification call."""
    start = time.perf_counter()
    heads = (bool(cast(OnDemandDrafter, drafter).wants_heads(context, certain))
             if drafter.needs.on_demand else True)
    gate_s = time.perf_counter() - start
    view = steps.view(context, prompt_length, depth, heads)  # the lattice of the last heads
    heads_s = steps.heads_s
    lattice_s = time.perf_counter() - start - gate_s - heads_s
    tree = _checked(drafter.draft(view), certain, vocab_size, drafter.name).truncate(depth)
    draft_s = time.perf_counter() - start - lattice_s - heads_s
    return Stepped(tree=tree, verdict=steps.verify(tree, eos_id), lattice_s=lattice_s,
                   draft_s=draft_s, heads_s=heads_s)


def run(drafter: Drafter, steps: Steps, prompt: list[int], max_new_tokens: int,
        eos_id: int | None, vocab_size: int | None = None) -> Run:
    """Decode one prompt (``max_new_tokens >= 1``) with ``drafter`` against ``steps`` (see the
    module docstring)."""
    start = time.perf_counter()
    tokens = [steps.prefill(prompt)]
    prefill_s = time.perf_counter() - start
    drafter.observe(Feedback(context=np.asarray(prompt, dtype=np.int64), certain=tokens[0],
                             start=True))
    records: list[DecodeStep] = []
    n_prompt = len(prompt)
    while len(tokens) < max_new_tokens and (eos_id is None or tokens[-1] != eos_id):
        step_start = time.perf_counter()
        remaining = max_new_tokens - len(tokens)
        room = steps.room()
        depth = remaining if room is None else min(remaining, room - 1)
        context = np.asarray(prompt + tokens[:-1], dtype=np.int64)
        # 1. predict and 2. verify: the drafter's tree over the lattice, one serial call
        done = step(drafter, steps, context, n_prompt, depth, tokens[-1], eos_id, vocab_size)
        tree, verdict = done.tree, done.verdict
        # 3. accept: d_2 .. d_{1+n}; the next certain token comes with the same call
        new = accept(verdict, tree, remaining, eos_id)
        tokens.extend(new)
        drafter.observe(Feedback(
            context=np.asarray(prompt + tokens[:-1], dtype=np.int64), certain=tokens[-1],
            tree=tree, node=verdict.node, n=verdict.n, draft_s=done.draft_s,
            forward_s=verdict.forward_s))
        records.append(DecodeStep(
            position=len(tokens) - len(new) - 1, tree=tree, winner=verdict.node, n=verdict.n,
            source=tree.label(verdict.node), accept_lengths=verdict.accept_lengths, tokens=new,
            forward_s=verdict.forward_s, draft_s=done.draft_s, lattice_s=done.lattice_s,
            heads_s=verdict.heads_s + done.heads_s, calls=verdict.calls,
            other_s=max(0.0, time.perf_counter() - step_start - done.lattice_s - done.draft_s
                        - verdict.forward_s - verdict.heads_s - done.heads_s)))
    stopped = "eos" if eos_id is not None and tokens[-1] == eos_id else "max_new_tokens"
    return Run(tokens=tokens, steps=tuple(records), prefill_s=prefill_s, stopped=stopped)
