"""The offline BPD simulator: block efficiency of any drafting strategy from a trace.

docs/definitions.md sec. 2 and 6. With exact verification the committed text is the greedy
reference ``y``, so one trace gives every step's lattice, and walking ``t <- t + 1 + n`` from
``t = 0`` gives the accepted lengths ``n`` and the block efficiency ``B`` of any strategy, no
model needed. The walk is the decode loop's own step engine (:func:`blockdraft.verify.run`)
with the trace's verdict in place of the model's (:class:`TraceSteps`): the same drafter calls,
the same truncation to what can count, the same counting, so offline equals online by
construction.

Public surface:
    simulate(trace, strategy, *, examples=None, progress=False) -> SimulationResult
        walk every (or the chosen) example's trajectory under ``strategy``.
    simulate_at_positions(trace, strategy, example, t) -> StepRecords
        the step outcome at given positions (e.g. the vanilla trajectory's,
        docs/definitions.md sec. 7).
    TraceSteps(example, k)        the engine's steps verified by a trace example
    TraceMismatchWarning          warned when head 1's stored top-1 differs from ``y``
    tree_accept_length(tree, greedy_ids, t) -> (n, node)   a token tree's verdict
A strategy is a drafter (:class:`~blockdraft.drafts.Drafter`: ``HeadDrafter``, a tree builder,
:class:`Oracle`, ...) or a :class:`~blockdraft.drafts.DraftSpec`; each step gives it the lattice
at ``t`` of width ``needs.k`` (slot 1 = the stored top-1 of head 1 alone), the context ``x,
y_1..y_t`` and the reference ``y_{t+1}, ...`` (which only the oracle reads). A strategy that
needs a tree lattice (prefix heads) is refused: a trace stores sausages.
Re-exported from the modules that define them:
    Oracle(k), accept_lengths, oracle_accept_lengths                   (acceptance)
    StepRecords, SimulationResult                                      (results)

Conventions. A step at position ``t`` (committed prefix ``x, y_1..y_t``; ``y_{t+1}`` is
already certain) asks the strategy for a tree rooted at ``y_{t+1}``, verifies it in one call and
accepts ``n``, the depth of the deepest node whose root path matches ``y_{t+1..}`` (a match past
``y_m`` is impossible); its ``winner`` is that node, its ``drafts`` row the path to the node's
first leaf (a trie's best draft through it) followed by the lattice's top-1 tokens. The call
makes ``1 + n`` tokens certain, ``min(1 + n, m - (t + 1))`` of them inside ``y``; then ``t <- t
+ 1 + n``. The prefill is one call that makes ``y_1`` certain; an example is done when ``y_m``
is certain (``t + 1 >= m``).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from blockdraft.core.checks import check_positive_int
from blockdraft.core.efficiency import call_tokens
from blockdraft.core.errors import BlockdraftError
from blockdraft.core.tree import DraftTree
from blockdraft.drafts.protocol import Drafter, StepView
from blockdraft.drafts.spec import DraftSpec
from blockdraft.lattice.sausage import SausageLattice
from blockdraft.oracle.acceptance import Oracle, accept_lengths, oracle_accept_lengths
from blockdraft.oracle.errors import OracleError
from blockdraft.oracle.results import SimulationResult, StepRecords
from blockdraft.oracle.trace import Trace, TraceExample
from blockdraft.verify.acceptance import accepted_from, reference_matches, tree_winner
from blockdraft.verify.engine import Verdict, run, step
from blockdraft.verify.errors import VerifyError
from blockdraft.verify.records import DecodeStep

__all__ = [
    "Oracle",
    "SimulationResult",
    "StepRecords",
    "TraceMismatchWarning",
    "TraceSteps",
    "accept_lengths",
    "oracle_accept_lengths",
    "simulate",
    "simulate_at_positions",
    "tree_accept_length",
]

Strategy = Drafter | DraftSpec
"""What :func:`simulate` walks: a drafter, or a spec (built here, without a model)."""


class TraceMismatchWarning(UserWarning):
    """Head 1's stored top-1 differs from the greedy token somewhere in a trace."""


def tree_accept_length(tree: DraftTree, greedy_ids: np.ndarray, t: int) -> tuple[int, int]:
    """Exact acceptance of a token tree at position ``t`` (docs/definitions.md sec. 11).

    Args:
        tree: the tree built at ``t`` (its root is ``y_{t+1}``).
        greedy_ids: int ``[m]``, ``y_1 .. y_m``.
        t: the position, ``0 <= t < m``.

    Returns:
        ``(n, node)``: the deepest node whose root path matches ``y_{t+1..}`` (nodes past
        ``y_m`` never match) and its depth ``n``. Siblings are distinct, so the matching
        nodes form one chain.
    """
    reference = np.asarray(greedy_ids, dtype=np.int64)[t:]
    node = tree_winner(tree, accepted_from(tree, reference_matches(tree, reference)))
    return int(np.asarray(tree.depths)[node]), node


class TraceSteps:
    """The step engine's steps verified by a trace example (:class:`~blockdraft.verify.Steps`
    offline; mutable: the position between calls).

    Args:
        example: the trace example.
        k: the lattice width each step builds (``<= K``).
    """

    def __init__(self, example: TraceExample, k: int) -> None:
        self.example = example
        self.k = k
        self.y = np.asarray(example.greedy_ids, dtype=np.int64)
        self.t = 0

    def prefill(self, prompt: list[int]) -> int:
        self.t = 0
        return int(self.y[0])

    def room(self) -> int | None:
        return None

    heads_s = 0.0  # the trace holds every step's heads: none computed on demand

    def view(self, context: np.ndarray, prompt_length: int, max_depth: int,
             heads: bool = True) -> StepView:
        view = self.view_at(self.t, max_depth)
        if heads:
            return view
        lattice = view.lattice  # the certain token alone, as online without the heads
        return dataclasses.replace(view, lattice=SausageLattice(tokens=lattice.tokens[:1],
                                                                scores=lattice.scores[:1]))

    def view_at(self, t: int, max_depth: int | None = None) -> StepView:
        """The step at position ``t``: the trace's lattice there, its slot 1 the certain token
        ``y_{t+1}`` (head 1's stored top-1, but where a numerical tie made them differ: the
        walk follows ``y``, and :func:`simulate` warns)."""
        ex = self.example
        lattice = ex.lattice(t, self.k)
        certain = int(self.y[t])
        if int(lattice.tokens[0, 0]) != certain:  # a tie between the greedy run and the trace
            tokens = lattice.tokens.copy()
            tokens[0, 0] = certain
            lattice = SausageLattice(tokens=tokens, scores=lattice.scores)
        return StepView(lattice=lattice, context=ex.context(t),
                        prompt_length=int(ex.prompt_ids.size), max_depth=max_depth,
                        reference=self.y[t:])

    def verify(self, tree: DraftTree, eos_id: int | None) -> Verdict:
        return self.verify_at(self.t, tree, advance=True)

    def verify_at(self, t: int, tree: DraftTree, advance: bool = False) -> Verdict:
        """The trace's verdict on ``tree`` at position ``t`` (``advance``: walk on)."""
        matches = reference_matches(tree, self.y[t:])
        accepted = accepted_from(tree, matches)
        node = tree_winner(tree, accepted)
        n = int(np.asarray(tree.depths)[node])
        nxt = t + 1 + n
        if advance:
            self.t = nxt
        leaves = tree.leaves()
        best = _deepest_accepted(tree, accepted)
        return Verdict(n=n, node=node, path=tuple(int(u) for u in tree.path(node)),
                       next_token=int(self.y[nxt]) if nxt < self.y.size else -1,
                       accept_lengths=tuple(int(best[leaf]) for leaf in leaves))


def _deepest_accepted(tree: DraftTree, accepted: np.ndarray) -> list[int]:
    """The depth of the deepest accepted node on each node's root path."""
    depths = np.asarray(tree.depths).tolist()
    parents = tree.parents.tolist()
    best = [0] * tree.num_nodes
    for u in range(1, tree.num_nodes):
        best[u] = depths[u] if accepted[u] else best[parents[u]]
    return best


def _strategy(trace: Trace, strategy: Any) -> tuple[Drafter, int]:
    """A strategy checked against a trace: the drafter and its lattice width."""
    if isinstance(strategy, DraftSpec):
        try:
            strategy = strategy.build()
        except BlockdraftError as e:
            raise OracleError(f"strategy {strategy.label!r}: {e}") from e
    if not isinstance(strategy, Drafter):
        raise OracleError(f"strategy must be a drafter (draft(view), observe(feedback): "
                          f"HeadDrafter, a tree builder, Oracle) or a DraftSpec, got "
                          f"{type(strategy).__name__}")
    needs = strategy.needs
    if needs.tree_lattice:
        raise OracleError(f"strategy {strategy.name!r} drafts from the tree lattice of "
                          "prefix-conditioned heads, which a trace does not store (it holds each "
                          "head's top-K, a sausage): decode it online")
    k = check_positive_int(needs.k, f"strategy {strategy.name!r}: k", OracleError)
    if k > trace.K:
        raise OracleError(
            f"strategy {strategy.name!r} reads k = {k} arcs per slot, but the trace stores "
            f"only K = {trace.K}; use k <= {trace.K} or re-trace with K >= {k}"
        )
    return strategy, k


def _draft_row(step: DecodeStep, vanilla: np.ndarray) -> np.ndarray:
    """A step's accepted draft as a row of ``h`` tokens (the lattice's top-1 after it)."""
    draft = vanilla.copy()
    path = step.draft[: draft.size]
    draft[: path.size] = path
    return draft


def _example_indices(trace: Trace, examples: Iterable[int] | slice | None) -> np.ndarray:
    n = trace.num_examples
    if examples is None:
        idx = np.arange(n, dtype=np.int64)
    elif isinstance(examples, slice):
        idx = np.arange(n, dtype=np.int64)[examples]
    else:
        idx = np.asarray(list(examples) if not isinstance(examples, np.ndarray) else examples)
        if idx.size == 0:
            idx = idx.astype(np.int64)
        if idx.ndim != 1 or idx.dtype.kind not in "iu":
            raise OracleError(f"examples must be 1-D integer indices, got {examples!r}")
        idx = idx.astype(np.int64)
        bad = (idx < 0) | (idx >= n)
        if bad.any():
            raise OracleError(
                f"example index {int(idx[bad][0])} is out of range for a trace of {n} examples"
            )
    if idx.size == 0:
        raise OracleError(
            f"no examples to simulate (trace {trace.path} has {n}); B is undefined"
        )
    return idx


def _warn_mismatches(trace: Trace, ex: np.ndarray, ts: np.ndarray) -> None:
    if ex.size:
        first = ", ".join(f"(example {e}, t = {t})" for e, t in zip(ex[:3], ts[:3], strict=True))
        warnings.warn(
            f"trace {trace.path}: head 1's stored top-1 differs from the greedy token y_(t+1) "
            f"at {ex.size} position(s), e.g. {first}: numerical ties between the greedy run "
            "and the teacher-forced pass; the simulation follows y (see "
            "SimulationResult.mismatch_example / mismatch_t)",
            TraceMismatchWarning,
            stacklevel=3,
        )


# ---------------------------------------------------------------------------- public
def simulate(
    trace: Trace,
    strategy: Strategy,
    *,
    examples: Iterable[int] | slice | None = None,
    progress: bool = False,
) -> SimulationResult:
    """Simulate BPD with exact verification under ``strategy`` (docs/definitions.md sec. 2, 6).

    Args:
        trace: the trace.
        strategy: a drafter (:class:`~blockdraft.drafts.HeadDrafter`: vanilla, p-best 0-gram,
            rescored; a tree builder; :class:`Oracle`) or a
            :class:`~blockdraft.drafts.DraftSpec`. Each step gives it the lattice at ``t`` of
            width ``needs.k`` (slot 1 = the stored top-1 of head 1 alone), the context ``x,
            y_1..y_t`` (int64) and the reference from ``y_{t+1}`` on.
        examples: trace indices (or a slice) to simulate; all by default.
        progress: show a progress bar over examples (rich) on stderr.

    Returns:
        The per-step records, per-example calls and ``B``.

    Raises:
        OracleError: if the strategy is not one, reads ``k > K`` or a tree lattice, proposes a
            tree not rooted at the certain token, or ``examples`` is empty or out of range.

    Warns:
        TraceMismatchWarning: when head 1's stored top-1 differs from ``y_{t+1}`` somewhere in
            the simulated examples (counted and located in the result).
    """
    drafter, k = _strategy(trace, strategy)
    idx = _example_indices(trace, examples)
    rows: dict[str, list[Any]] = {key: [] for key in StepRecords.__dataclass_fields__}
    calls = np.empty(idx.size, dtype=np.int64)
    generated = np.empty(idx.size, dtype=np.int64)
    mis_e: list[np.ndarray] = []
    mis_t: list[np.ndarray] = []
    order: Iterable[tuple[int, int]] = enumerate(idx.tolist())
    if progress:
        from rich.progress import track

        order = track(list(order), description=f"simulating {drafter.name}")
    for j, e in order:
        ex = trace[e]
        m = ex.m
        steps = TraceSteps(ex, k)
        try:
            out = run(drafter, steps, ex.prompt_ids.tolist(), m, None)
        except VerifyError as err:
            raise OracleError(f"strategy {drafter.name!r} at example {e}: {err}") from err
        vanilla = np.asarray(ex.topk_ids[:, :, 0], dtype=np.int64)  # (m, h)
        for record in out.steps:
            t = record.position
            rows["example"].append(e)
            rows["t"].append(t)
            rows["n"].append(record.n)
            rows["tokens"].append(len(record.tokens))
            rows["winner"].append(record.winner)
            rows["drafts"].append(_draft_row(record, vanilla[t]))
            rows["num_drafts"].append(int(record.tree.leaves().size))
            rows["nodes"].append(record.tree.num_nodes)
        calls[j] = 1 + len(out.steps)
        generated[j] = m
        mt = ex.head1_mismatches()
        mis_e.append(np.full(mt.size, e, dtype=np.int64))
        mis_t.append(mt)
    steps_rec = StepRecords(
        example=np.asarray(rows["example"], dtype=np.int64),
        t=np.asarray(rows["t"], dtype=np.int64),
        n=np.asarray(rows["n"], dtype=np.int64),
        tokens=np.asarray(rows["tokens"], dtype=np.int64),
        winner=np.asarray(rows["winner"], dtype=np.int64),
        drafts=(
            np.stack(rows["drafts"]).astype(np.int64)
            if rows["drafts"]
            else np.zeros((0, trace.h), dtype=np.int64)
        ),
        num_drafts=np.asarray(rows["num_drafts"], dtype=np.int64),
        nodes=np.asarray(rows["nodes"], dtype=np.int64),
    )
    mismatch_example = np.concatenate(mis_e)
    mismatch_t = np.concatenate(mis_t)
    _warn_mismatches(trace, mismatch_example, mismatch_t)
    return SimulationResult(
        strategy=drafter.name,
        k=k,
        h=trace.h,
        examples=idx,
        generated=generated,
        calls=calls,
        steps=steps_rec,
        mismatch_example=mismatch_example,
        mismatch_t=mismatch_t,
        signature=trace.signature,
    )


def simulate_at_positions(
    trace: Trace,
    strategy: Strategy,
    example: Sequence[int] | np.ndarray,
    t: Sequence[int] | np.ndarray,
) -> StepRecords:
    """The step outcome of ``strategy`` at given positions, not along its own trajectory.

    Used to compare strategies at the same positions (docs/definitions.md sec. 7: wins, ties,
    losses at the vanilla trajectory's positions, ``vanilla_result.steps.example`` and
    ``.steps.t``).

    Args:
        trace: the trace.
        strategy: as in :func:`simulate`.
        example: int ``[S]``, trace indices.
        t: int ``[S]``, positions, ``0 <= t[j] < m`` of ``example[j]``.

    Returns:
        One record per position, in the order given.

    Raises:
        OracleError: on a bad strategy, arrays of different lengths, or a position out of
            range.
    """
    drafter, k = _strategy(trace, strategy)
    ex_arr = np.asarray(example)
    t_arr = np.asarray(t)
    if ex_arr.ndim != 1 or t_arr.shape != ex_arr.shape:
        raise OracleError(
            f"example and t must be 1-D arrays of one length, got shapes {ex_arr.shape} and "
            f"{t_arr.shape}"
        )
    if ex_arr.size and (ex_arr.dtype.kind not in "iu" or t_arr.dtype.kind not in "iu"):
        raise OracleError(
            f"example and t must be integers, got dtypes {ex_arr.dtype} and {t_arr.dtype}"
        )
    ex_arr = ex_arr.astype(np.int64)
    t_arr = t_arr.astype(np.int64)
    s = ex_arr.size
    if s and ((ex_arr < 0) | (ex_arr >= trace.num_examples)).any():
        bad = int(ex_arr[(ex_arr < 0) | (ex_arr >= trace.num_examples)][0])
        raise OracleError(
            f"example index {bad} is out of range for a trace of {trace.num_examples} examples"
        )
    lengths = trace.lengths
    if s:
        m = lengths[ex_arr]
        bad = (t_arr < 0) | (t_arr >= m)
        if bad.any():
            j = int(np.argmax(bad))
            raise OracleError(
                f"position t = {int(t_arr[j])} is outside [0, {int(m[j]) - 1}] for example "
                f"{int(ex_arr[j])} (m = {int(m[j])})"
            )
    n = np.zeros(s, dtype=np.int64)
    tokens = np.zeros(s, dtype=np.int64)
    winner = np.zeros(s, dtype=np.int64)
    num_drafts = np.zeros(s, dtype=np.int64)
    nodes = np.zeros(s, dtype=np.int64)
    drafts = np.zeros((s, trace.h), dtype=np.int64)
    current = -1
    steps: TraceSteps | None = None
    for j in np.argsort(ex_arr, kind="stable").tolist():
        e = int(ex_arr[j])
        if e != current or steps is None:
            steps, current = TraceSteps(trace[e], k), e
        pos = int(t_arr[j])
        m = int(lengths[e])
        steps.t = pos  # the step at this position, not along the strategy's own walk
        ex = steps.example
        try:
            done = step(drafter, steps, ex.context(pos), int(ex.prompt_ids.size), m - (pos + 1),
                        int(steps.y[pos]), None, None)
        except VerifyError as err:
            raise OracleError(f"strategy {drafter.name!r} at example {e}, t = {pos}: "
                              f"{err}") from err
        out = done.verdict
        record = DecodeStep(position=pos, tree=done.tree, winner=out.node, n=out.n,
                            source=done.tree.label(out.node), accept_lengths=out.accept_lengths,
                            tokens=())
        n[j], winner[j] = out.n, out.node
        num_drafts[j], nodes[j] = int(done.tree.leaves().size), done.tree.num_nodes
        drafts[j] = _draft_row(record, np.asarray(ex.topk_ids[pos, :, 0], np.int64))
        tokens[j] = call_tokens(out.n, m - (pos + 1))
    return StepRecords(
        example=ex_arr, t=t_arr, n=n, tokens=tokens, winner=winner, drafts=drafts,
        num_drafts=num_drafts, nodes=nodes,
    )
