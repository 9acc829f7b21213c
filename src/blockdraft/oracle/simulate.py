"""The offline BPD simulator: block efficiency of any drafting strategy from a trace.

docs/definitions.md sec. 2 and 6. With exact verification the committed text is the greedy
reference ``y``, so one trace gives every step's lattice, and walking ``t <- t + 1 + n`` from
``t = 0`` gives the accepted lengths ``n`` and the block efficiency ``B`` of any strategy, no
model needed.

Public surface:
    simulate(trace, strategy, *, examples=None, progress=False) -> SimulationResult
        walk every (or the chosen) example's trajectory under ``strategy``.
    simulate_at_positions(trace, strategy, example, t) -> StepRecords
        the step outcome at given positions (e.g. the vanilla trajectory's,
        docs/definitions.md sec. 7).
    TraceMismatchWarning          warned when head 1's stored top-1 differs from ``y``
    tree_accept_length(tree, greedy_ids, t) -> (n, node)   a token tree's verdict
A strategy is an :class:`Oracle`, any :class:`~blockdraft.drafts.protocol.Drafter`
(``HeadDrafter`` is one), or any :class:`~blockdraft.drafts.protocol.TreeDrafter` (token trees,
docs/definitions.md sec. 11: ``n`` is the depth of the deepest node whose root path matches
``y_{t+1..}``; the step's ``winner`` is that node, its ``drafts`` row the node's path followed
by the lattice's top-1 tokens, ``num_drafts`` the tree's leaves).
Re-exported from the modules that define them:
    Oracle(k), accept_lengths, oracle_accept_lengths                   (acceptance)
    StepRecords, SimulationResult                                      (results)

Conventions. A step at position ``t`` (committed prefix ``x, y_1..y_t``; ``y_{t+1}`` is
already certain) asks the strategy for drafts ``d = (d_1 .. d_h)`` from the lattice at ``t``,
verifies them in one call and accepts ``n = #leading i >= 1 with d_{1+i} == y_{t+1+i}``
(a match past ``y_m`` is impossible). The draft with the largest ``n`` wins (ties: the first,
i.e. the best-scored). The call makes ``1 + n`` tokens certain, ``min(1 + n, m - (t + 1))``
of them inside ``y``; then ``t <- t + 1 + n``. The prefill is one call that makes ``y_1``
certain; an example is done when ``y_m`` is certain (``t + 1 >= m``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from blockdraft.core.batch import DraftBatch, DraftError
from blockdraft.core.checks import check_positive_int
from blockdraft.core.efficiency import call_tokens
from blockdraft.core.tree import DraftTree
from blockdraft.drafts.protocol import Drafter, TreeDrafter
from blockdraft.oracle.acceptance import Oracle, accept_lengths, oracle_accept_lengths
from blockdraft.oracle.errors import OracleError
from blockdraft.oracle.results import SimulationResult, StepRecords
from blockdraft.oracle.trace import Trace, TraceExample

__all__ = [
    "Oracle",
    "SimulationResult",
    "StepRecords",
    "TraceMismatchWarning",
    "accept_lengths",
    "oracle_accept_lengths",
    "simulate",
    "simulate_at_positions",
    "tree_accept_length",
]

Strategy = Oracle | Drafter | TreeDrafter
"""What :func:`simulate` walks: the oracle, a drafter or a tree builder."""


class TraceMismatchWarning(UserWarning):
    """Head 1's stored top-1 differs from the greedy token somewhere in a trace."""


# ---------------------------------------------------------------------------- stepping
@dataclass(frozen=True)
class _Outcome:
    n: int
    winner: int
    draft: np.ndarray
    num_drafts: int
    nodes: int = 0


def _strategy_k(trace: Trace, strategy: Strategy) -> int:
    """Validate a strategy against a trace; return its lattice width."""
    if not isinstance(strategy, (Oracle, Drafter, TreeDrafter)):
        raise OracleError(
            f"strategy must be an Oracle or have .k and .propose(lattice, context) (like "
            f"HeadDrafter) or .propose_tree(lattice, context), got {type(strategy).__name__}"
        )
    k = check_positive_int(strategy.k, f"strategy {_name(strategy)!r}: k", OracleError)
    if k > trace.K:
        raise OracleError(
            f"strategy {_name(strategy)!r} reads k = {k} arcs per slot, but the trace stores "
            f"only K = {trace.K}; use k <= {trace.K} or re-trace with K >= {k}"
        )
    return k


def _name(strategy: Any) -> str:
    return str(getattr(strategy, "name", "") or type(strategy).__name__)


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
    y = np.asarray(greedy_ids)
    depths = np.asarray(tree.depths)
    ok = np.zeros(tree.num_nodes, dtype=bool)
    ok[0] = True
    for u in range(1, tree.num_nodes):
        pos = t + int(depths[u])
        ok[u] = ok[tree.parents[u]] and pos < y.size and tree.tokens[u] == y[pos]
    cand = np.flatnonzero(ok)
    node = int(cand[np.argmax(depths[cand])])
    return int(depths[node]), node


def _stepper(
    example: TraceExample, strategy: Strategy, k: int
) -> Callable[[int], _Outcome]:
    """A function: position ``t`` -> the step's outcome under ``strategy``."""
    y = np.asarray(example.greedy_ids, dtype=np.int64)
    if isinstance(strategy, Oracle):
        n_all = oracle_accept_lengths(example, k)
        top1 = np.asarray(example.topk_ids[:, :, 0], dtype=np.int64)  # (m, h)

        def oracle_step(t: int) -> _Outcome:
            n = int(n_all[t])
            draft = top1[t].copy()  # slots past the accepted prefix: the vanilla token
            draft[1 : 1 + n] = y[t + 1 : t + 1 + n]
            return _Outcome(n=n, winner=0, draft=draft, num_drafts=1, nodes=draft.size)

        return oracle_step

    if not isinstance(strategy, Drafter):
        vanilla = np.asarray(example.topk_ids[:, :, 0], dtype=np.int64)  # (m, h)

        def tree_step(t: int) -> _Outcome:
            tree = strategy.propose_tree(example.lattice(t, k), example.context(t))
            if not isinstance(tree, DraftTree):
                raise OracleError(f"strategy {_name(strategy)!r} returned "
                                  f"{type(tree).__name__}, not a DraftTree")
            n, node = tree_accept_length(tree, y, t)
            draft = vanilla[t].copy()
            path = tree.path_tokens(node)[: draft.size]
            draft[: path.size] = path
            return _Outcome(n=n, winner=node, draft=draft, num_drafts=int(tree.leaves().size),
                            nodes=tree.num_nodes)

        return tree_step

    def step(t: int) -> _Outcome:
        batch = strategy.propose(example.lattice(t, k), example.context(t))
        if not isinstance(batch, DraftBatch):
            raise OracleError(
                f"strategy {_name(strategy)!r} returned {type(batch).__name__}, not a DraftBatch"
            )
        if batch.h != example.h:
            raise OracleError(
                f"strategy {_name(strategy)!r} proposed drafts of {batch.h} tokens at example "
                f"{example.index}, t = {t}; the trace has h = {example.h} heads"
            )
        n = accept_lengths(batch.tokens, y, t)
        w = int(np.argmax(n))  # the first maximum: the best-scored among the longest
        return _Outcome(n=int(n[w]), winner=w, draft=batch.tokens[w], num_drafts=batch.p,
                        nodes=_batch_nodes(batch))

    return step


def _batch_nodes(batch: DraftBatch) -> int:
    """Tokens a verifier's forward holds for a batch: its drafts' trie (their summed lengths
    when they do not share ``d_1``: a toy drafter's)."""
    if batch.p == 1:
        return int(batch.lengths[0])
    try:
        return DraftTree.from_drafts(batch).num_nodes
    except DraftError:
        return int(batch.lengths.sum())


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
        strategy: an :class:`Oracle`, or any :class:`Drafter` such as
            :class:`~blockdraft.drafts.heads.HeadDrafter` (vanilla, p-best 0-gram, rescored),
            or a tree builder (:class:`TreeDrafter`, docs/definitions.md sec. 11).
            Each step gives it the lattice at ``t`` of width ``strategy.k`` (slot 1 = the
            stored top-1 of head 1 alone) and the context ``x, y_1..y_t`` (int64).
        examples: trace indices (or a slice) to simulate; all by default.
        progress: show a progress bar over examples (rich) on stderr.

    Returns:
        The per-step records, per-example calls and ``B``.

    Raises:
        OracleError: if the strategy is not one, reads ``k > K``, proposes drafts of the wrong
            length, or ``examples`` is empty or out of range.

    Warns:
        TraceMismatchWarning: when head 1's stored top-1 differs from ``y_{t+1}`` somewhere in
            the simulated examples (counted and located in the result).
    """
    k = _strategy_k(trace, strategy)
    idx = _example_indices(trace, examples)
    rows: dict[str, list[Any]] = {key: [] for key in StepRecords.__dataclass_fields__}
    calls = np.empty(idx.size, dtype=np.int64)
    generated = np.empty(idx.size, dtype=np.int64)
    mis_e: list[np.ndarray] = []
    mis_t: list[np.ndarray] = []
    order: Iterable[tuple[int, int]] = enumerate(idx.tolist())
    if progress:
        from rich.progress import track

        order = track(list(order), description=f"simulating {_name(strategy)}")
    for j, e in order:
        ex = trace[e]
        step = _stepper(ex, strategy, k)
        m = ex.m
        t, n_calls = 0, 1  # the prefill: one call, y_1 certain
        while t + 1 < m:
            out = step(t)
            rows["example"].append(e)
            rows["t"].append(t)
            rows["n"].append(out.n)
            rows["tokens"].append(call_tokens(out.n, m - (t + 1)))
            rows["winner"].append(out.winner)
            rows["drafts"].append(out.draft)
            rows["num_drafts"].append(out.num_drafts)
            rows["nodes"].append(out.nodes)
            n_calls += 1
            t += 1 + out.n
        calls[j] = n_calls
        generated[j] = m
        mt = ex.head1_mismatches()
        mis_e.append(np.full(mt.size, e, dtype=np.int64))
        mis_t.append(mt)
    steps = StepRecords(
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
        strategy=_name(strategy),
        k=k,
        h=trace.h,
        examples=idx,
        generated=generated,
        calls=calls,
        steps=steps,
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
    k = _strategy_k(trace, strategy)
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
    step: Callable[[int], _Outcome] | None = None
    for j in np.argsort(ex_arr, kind="stable").tolist():
        e = int(ex_arr[j])
        if e != current or step is None:
            step, current = _stepper(trace[e], strategy, k), e
        out = step(int(t_arr[j]))
        n[j], winner[j], num_drafts[j], nodes[j] = out.n, out.winner, out.num_drafts, out.nodes
        drafts[j] = out.draft
        tokens[j] = call_tokens(out.n, int(lengths[e]) - (int(t_arr[j]) + 1))
    return StepRecords(
        example=ex_arr, t=t_arr, n=n, tokens=tokens, winner=winner, drafts=drafts,
        num_drafts=num_drafts, nodes=nodes,
    )
