"""Tests of blockdraft.oracle.simulate: the offline BPD walk, the oracle, and their checks."""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle_helpers import TINY, BigramRescorer

from blockdraft.core.batch import DraftBatch
from blockdraft.core.tree import PAD, DraftTree
from blockdraft.drafts.heads import HeadDrafter, vanilla
from blockdraft.drafts.protocol import Feedback, Needs, StepView
from blockdraft.lattice.sausage import SausageLattice
from blockdraft.oracle import (
    Oracle,
    OracleError,
    SimulationResult,
    Trace,
    TraceMismatchWarning,
    accept_lengths,
    oracle_accept_lengths,
    simulate,
    simulate_at_positions,
    synthetic_trace,
)
from blockdraft.rescorers.base import Rescorer


# ---------------------------------------------------------------------------- by hand
def test_vanilla_by_hand(tiny_trace: Trace) -> None:
    # Example 0, y = 1 2 3 4 5 6 (m = 6), vanilla drafts are the top-1 of each head:
    #   prefill: y_1 certain, 1 call.
    #   t=0: draft (1, 2, 7): y_2 = 2 matches, y_3 = 3 != 7 -> n = 1, 2 tokens, t = 2.
    #   t=2: draft (3, 8, 5): y_4 = 4 != 8                 -> n = 0, 1 token,  t = 3.
    #   t=3: draft (4, 5, 6): y_5, y_6 match               -> n = 2, but only y_5, y_6 remain:
    #        2 tokens (the bonus token would be y_7), t = 6: done. 4 calls, B = 6 / 4.
    # Example 1 (m = 1): the prefill alone, 1 call. Example 2, y = 5 5: prefill, then t=0:
    #   draft (5, 5, 3): y_2 = 5 matches, slot 3 has no target -> n = 1, 1 token. 2 calls.
    r = simulate(tiny_trace, vanilla())
    assert r.steps.example.tolist() == [0, 0, 0, 2]
    assert r.steps.t.tolist() == [0, 2, 3, 0]
    assert r.steps.n.tolist() == [1, 0, 2, 1]
    assert r.steps.tokens.tolist() == [2, 1, 2, 1]
    assert r.steps.drafts.tolist() == [[1, 2, 7], [3, 8, 5], [4, 5, 6], [5, 5, 3]]
    # the winner is the accepted NODE of the step's tree (it was the winning row of a batch):
    # on vanilla's chain, the node at depth n (the last step's chain cut to what can count)
    assert r.steps.winner.tolist() == [1, 0, 2, 1]
    assert r.steps.num_drafts.tolist() == [1, 1, 1, 1]
    assert r.steps.nodes.tolist() == [3, 3, 3, 2]  # example 2's chain cut to depth m - 1
    assert r.calls.tolist() == [4, 1, 2] and r.generated.tolist() == [6, 1, 2]
    assert r.block_efficiency == pytest.approx(9 / 7)
    assert r.example_block_efficiency.tolist() == pytest.approx([1.5, 1.0, 1.0])
    assert r.mean_example_block_efficiency == pytest.approx((1.5 + 1 + 1) / 3)
    assert r.num_mismatches == 0
    assert r.accept_histogram().tolist() == [1, 2, 1]
    d = r.to_dict()
    assert d["block_efficiency"] == pytest.approx(9 / 7) and d["calls"] == 7
    assert d["signature"]["data"] == "tiny"


def test_oracle_by_hand(tiny_trace: Trace) -> None:
    # Oracle(2), example 0: t=0: y_2 in top-2 of head 2, y_3 = 3 in top-2 of head 3 -> n = 2,
    # t = 3; t=3: n = 2, done. 3 calls. Example 1: 1 call; example 2: 2 calls. B = 9 / 6.
    r = simulate(tiny_trace, Oracle(2))
    assert r.steps.t.tolist() == [0, 3, 0] and r.steps.n.tolist() == [2, 2, 1]
    assert r.calls.tolist() == [3, 1, 2]
    assert r.block_efficiency == pytest.approx(1.5)
    assert r.steps.drafts[0].tolist() == [1, 2, 3]  # the accepted prefix is y itself
    assert r.strategy == "oracle (k=2)"
    np.testing.assert_array_equal(oracle_accept_lengths(tiny_trace[0], 2), [2, 0, 2, 2, 1, 0])
    np.testing.assert_array_equal(oracle_accept_lengths(tiny_trace[0], 1), [1, 0, 0, 2, 1, 0])


def test_accept_lengths_stops_at_the_end_of_y() -> None:
    y = np.array([1, 2, 3, 4])
    drafts = np.array([[9, 2, 3, 4], [9, 2, 0, 4], [9, 0, 3, 4]])
    assert accept_lengths(drafts, y, 0).tolist() == [3, 1, 0]
    assert accept_lengths(np.array([[9, 3, 4, 5]]), y, 1).tolist() == [2]  # y_5 is no target
    assert accept_lengths(np.array([[9, 4, 4, 4]]), y, 3).tolist() == [0]


class FixedDrafts:
    """A strategy proposing the same drafts at every step (k = 1): their trie."""

    name = "fixed"
    needs = Needs(k=1)

    def __init__(self, drafts: list[list[int]], h: int | None = None) -> None:
        self.drafts = np.array(drafts)

    def draft(self, view: StepView) -> DraftTree:
        p = len(self.drafts)
        return DraftTree.from_drafts(DraftBatch(self.drafts, -np.arange(p, dtype=float),
                                                np.zeros(p), np.zeros(p)))

    def observe(self, feedback: Feedback) -> None:
        pass


def test_longest_draft_wins_ties_go_to_the_first(tiny_trace: Trace) -> None:
    # at t = 0 of example 0 (y = 1..6): n = 1, 2, 0 -> the second draft wins; the winner is
    # its accepted node (the trie's nodes: 1 2 0 | 3 | 4 3), no longer a row index
    strat = FixedDrafts([[1, 2, 0], [1, 2, 3], [1, 4, 3]])
    rec = simulate_at_positions(tiny_trace, strat, [0], [0])
    assert rec.n.tolist() == [2] and rec.winner.tolist() == [3] and rec.num_drafts.tolist() == [3]
    assert rec.drafts.tolist() == [[1, 2, 3]]
    # n = 1, 1, 0: the drafts that tie share their accepted node (a trie has one accepted
    # path); the row recorded is the first (best) draft through it
    strat = FixedDrafts([[1, 2, 0], [1, 2, 5], [1, 4, 3]])
    rec = simulate_at_positions(tiny_trace, strat, [0], [0])
    assert rec.n.tolist() == [1] and rec.winner.tolist() == [1]
    assert rec.drafts.tolist() == [[1, 2, 0]]


def test_mismatch_is_reported_not_fatal(write_tiny_trace: Callable[..., Trace]) -> None:
    rows = [list(map(list, r)) for r in TINY]
    ex0 = [[list(slot) for slot in pos] for pos in TINY[0][2]]
    ex0[1][0] = [0, 2]  # t=1: head 1 ranks 0 above y_2 = 2 (not visited by vanilla)
    ex0[2][0] = [0, 3]  # t=2: the same, at a visited position
    rows[0] = (TINY[0][0], TINY[0][1], ex0)
    trace = write_tiny_trace(rows)
    with pytest.warns(TraceMismatchWarning, match=r"at 2 position\(s\)"):
        r = simulate(trace, vanilla())
    assert r.num_mismatches == 2
    assert r.mismatch_example.tolist() == [0, 0] and r.mismatch_t.tolist() == [1, 2]
    assert r.steps.n.tolist() == [1, 0, 2, 1]  # n never looks at d_1
    # the walk follows y: the step's certain token (its draft's root) is y_3 = 3, not the
    # stored top-1 0 (the step engine roots every tree at the certain token, online and off)
    assert r.steps.drafts[1].tolist() == [3, 8, 5]
    assert r.to_dict()["mismatches"] == [[0, 1], [0, 2]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        simulate(trace, vanilla(), examples=[1, 2])  # no mismatch there: no warning


def test_a_mismatch_off_the_walk_is_reported(write_tiny_trace: Callable[..., Trace]) -> None:
    """A mismatch at a position the walk never visits (vanilla skips t = 1): warned, counted,
    and the walk is the unmodified trace's."""
    rows = [list(map(list, r)) for r in TINY]
    ex0 = [[list(slot) for slot in pos] for pos in TINY[0][2]]
    ex0[1][0] = [0, 2]  # t=1: head 1 ranks 0 above y_2 = 2 (not visited by vanilla)
    rows[0] = (TINY[0][0], TINY[0][1], ex0)
    trace = write_tiny_trace(rows)
    with pytest.warns(TraceMismatchWarning, match=r"at 1 position\(s\)"):
        r = simulate(trace, vanilla())
    assert r.num_mismatches == 1 and r.mismatch_t.tolist() == [1]
    assert r.steps.n.tolist() == [1, 0, 2, 1]
    assert r.steps.drafts.tolist() == [[1, 2, 7], [3, 8, 5], [4, 5, 6], [5, 5, 3]]


def test_strategy_and_example_validation(tiny_trace: Trace) -> None:
    with pytest.raises(OracleError, match=r"reads k = 3 .* only K = 2; use k <= 2"):
        simulate(tiny_trace, HeadDrafter(k=3))
    with pytest.raises(OracleError, match=r"reads k = 3 .* only K = 2"):
        simulate(tiny_trace, Oracle(3))
    with pytest.raises(OracleError, match="Oracle.k must be a positive integer, got 0"):
        Oracle(0)
    with pytest.raises(OracleError, match=r"strategy must be a drafter \(draft\(view\), "
                                          r"observe\(feedback\).* got str"):
        simulate(tiny_trace, "vanilla")
    # drafts of any length are trees now (a draft shorter than h is a shorter path); what is
    # refused is a tree not rooted at the certain token (was: drafts of a length other than h)
    with pytest.raises(OracleError, match=r"strategy 'fixed' at example 0: fixed proposed a "
                                          r"tree rooted at 1; the root must be the certain "
                                          r"token d_1 = 3"):
        simulate(tiny_trace, FixedDrafts([[1, 2]]))
    with pytest.raises(OracleError, match=r"strategy 'fixed' at example 0, t = 2: fixed "
                                          r"proposed a tree rooted at 1; the root must be the "
                                          r"certain token d_1 = 3"):
        simulate_at_positions(tiny_trace, FixedDrafts([[1, 2]]), [0], [2])
    short = simulate_at_positions(tiny_trace, FixedDrafts([[1, 2]]), [0], [0])
    assert short.n.tolist() == [1] and short.drafts.tolist() == [[1, 2, 7]]  # then top-1
    with pytest.raises(OracleError, match="example index 3 is out of range for a trace of 3"):
        simulate(tiny_trace, vanilla(), examples=[0, 3])
    with pytest.raises(OracleError, match="no examples to simulate"):
        simulate(tiny_trace, vanilla(), examples=[])
    with pytest.raises(OracleError, match=r"position t = 6 is outside \[0, 5\] for example 0"):
        simulate_at_positions(tiny_trace, vanilla(), [0], [6])
    with pytest.raises(OracleError, match="one length"):
        simulate_at_positions(tiny_trace, vanilla(), [0, 0], [1])


def test_specs_and_what_a_trace_cannot_simulate(tiny_trace: Trace) -> None:
    """A DraftSpec is built here (no model); a drafter of the tree lattice, a spec that needs a
    cost curve, or one that reads more than the trace stores are refused by name."""
    from blockdraft.drafts import ConditionalTreeDrafter, DraftSpec

    by_spec = simulate(tiny_trace, DraftSpec("heads"))
    assert by_spec.steps.n.tolist() == simulate(tiny_trace, vanilla()).steps.n.tolist()
    assert by_spec.strategy == "vanilla"
    with pytest.raises(OracleError, match=r"strategy 'tree-lattice confidence tree \(k=4, "
                                          r"N=16\)' drafts from the tree lattice .* decode it "
                                          r"online"):
        simulate(tiny_trace, ConditionalTreeDrafter(k=4, budget=16))
    with pytest.raises(OracleError, match=r"strategy 'cost-aware k=1 p=1 N<=32': .* cost curve"):
        simulate(tiny_trace, DraftSpec("cost-aware"))
    with pytest.raises(OracleError, match=r"reads k = 4 .* only K = 2"):
        simulate(tiny_trace, DraftSpec("oracle", k=4))


def test_examples_subset_and_positions(tiny_trace: Trace) -> None:
    full = simulate(tiny_trace, vanilla())
    part = simulate(tiny_trace, vanilla(), examples=slice(0, 1))
    assert part.examples.tolist() == [0] and part.calls.tolist() == [4]
    assert part.block_efficiency == pytest.approx(1.5)
    # the vanilla records at the vanilla positions, given in a shuffled order
    order = np.array([3, 0, 2, 1])
    rec = simulate_at_positions(tiny_trace, vanilla(), full.steps.example[order],
                                full.steps.t[order])
    np.testing.assert_array_equal(rec.n, full.steps.n[order])
    np.testing.assert_array_equal(rec.drafts, full.steps.drafts[order])
    np.testing.assert_array_equal(rec.tokens, full.steps.tokens[order])
    orc = simulate_at_positions(tiny_trace, Oracle(2), full.steps.example, full.steps.t)
    assert orc.n.tolist() == [2, 2, 2, 1]


# ---------------------------------------------------------------------------- brute force
def brute_force(trace: Trace, strategy
                ) -> tuple[list[tuple[int, int, int, int]], list[int], list[list[int]]]:
    """Step-by-step BPD with plain Python: ``[(example, t, n, winner)]``, calls and the
    recorded draft rows. The strategy's tree is read as its drafts (root-to-leaf paths, a
    trie's rows in order); the winner is the accepted node of the trie of those drafts cut to
    the depth that can count, nodes numbered by first appearance, row by row."""
    steps, calls, rows_out = [], [], []
    k = strategy.needs.k
    for e in range(len(trace)):
        prompt = [int(v) for v in trace.prompt_ids[trace.prompt_offsets[e]:
                                                   trace.prompt_offsets[e + 1]]]
        a, b = int(trace.position_offsets[e]), int(trace.position_offsets[e + 1])
        y = [int(v) for v in trace.greedy_ids[a:b]]
        m, t, c = len(y), 0, 1
        while t < m - 1:
            ids = np.array(trace.topk_ids[a + t, :, :k], dtype=np.int64)
            lps = np.array(trace.topk_logprobs[a + t, :, :k], dtype=np.float64)
            ids[0, 1:], lps[0, 1:] = -1, -np.inf
            view = StepView(lattice=SausageLattice(ids, lps),
                            context=np.array(prompt + y[:t], dtype=np.int64))
            batch = strategy.draft(view).to_drafts()
            depth = m - 1 - t  # the deepest node that can count
            drafts = [[tok for tok in row if tok != PAD][: depth + 1]
                      for row in batch.tokens.tolist()]
            best_n, best_j = -1, -1
            for j, draft in enumerate(drafts):
                n = 0
                for i in range(1, len(draft)):
                    if t + i < m and draft[i] == y[t + i]:  # d_{1+i} vs y_{t+1+i}
                        n += 1
                    else:
                        break
                if n > best_n:
                    best_n, best_j = n, j
            prefixes: list[tuple[int, ...]] = []
            for draft in drafts:
                for i in range(1, len(draft) + 1):
                    if tuple(draft[:i]) not in prefixes:
                        prefixes.append(tuple(draft[:i]))
            winner = prefixes.index(tuple(drafts[best_j][: best_n + 1]))
            steps.append((e, t, best_n, winner))
            top1 = ids[:, 0].tolist()
            rows_out.append((drafts[best_j] + top1[len(drafts[best_j]):])[: trace.h])
            c += 1
            t += 1 + best_n
        calls.append(c)
    return steps, calls, rows_out


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**16), h=st.integers(2, 4), k=st.integers(1, 3),
       p=st.integers(1, 4), use_lm=st.booleans())
def test_simulate_matches_brute_force(seed: int, h: int, k: int, p: int, use_lm: bool) -> None:
    rescorer = BigramRescorer(V=12, alpha=1.5, seed=seed) if use_lm else None
    assert rescorer is None or isinstance(rescorer, Rescorer)
    strategy = HeadDrafter(k=k, p=p, rescorer=rescorer)
    with tempfile.TemporaryDirectory() as d:
        trace = synthetic_trace(Path(d) / "t", num_examples=3, h=h, K=3, V=12,
                                length=(1, 14), accuracy=[0.7] * (h - 1), seed=seed)
        r = simulate(trace, strategy)
        steps, calls, rows = brute_force(trace, strategy)
        assert list(zip(r.steps.example.tolist(), r.steps.t.tolist(), r.steps.n.tolist(),
                        r.steps.winner.tolist(), strict=True)) == steps
        assert r.steps.drafts.tolist() == rows
        assert r.calls.tolist() == calls
        assert r.block_efficiency == pytest.approx(trace.num_positions / sum(calls))
        if rescorer is not None:  # the context of every step is x, y_1..y_t
            for (e, t, _, _), ctx in zip(steps, rescorer.contexts[: len(steps)], strict=True):
                np.testing.assert_array_equal(ctx, trace[e].context(t))
        del trace


# ---------------------------------------------------------------------------- invariants
def check_invariants(trace: Trace, r: SimulationResult) -> None:
    assert 1.0 <= r.block_efficiency <= trace.h
    assert np.all(r.example_block_efficiency >= 1.0)
    assert np.all(r.example_block_efficiency <= trace.h)
    for j, e in enumerate(r.examples.tolist()):
        mine = r.steps.example == e
        assert int(r.steps.tokens[mine].sum()) + 1 == trace.lengths[e]  # prefill gives y_1
        assert int(mine.sum()) + 1 == r.calls[j]
        ts = r.steps.t[mine]
        np.testing.assert_array_equal(ts[1:], ts[:-1] + 1 + r.steps.n[mine][:-1])


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**16), h=st.integers(1, 5), K=st.integers(1, 4))
def test_oracle_bounds_every_p1_strategy(seed: int, h: int, K: int) -> None:
    """Per position, n_oracle(t, k) bounds every p = 1 strategy's n and grows with k.

    (Block efficiency itself is not a strict bound: a strategy that accepts fewer tokens can
    land on a luckier position. Random traces show it rarely, so B is not asserted here.)
    """
    with tempfile.TemporaryDirectory() as d:
        trace = synthetic_trace(Path(d) / "t", num_examples=3, h=h, K=K, V=10,
                                length=(1, 16), repeat=0.5, seed=seed)
        van = simulate(trace, vanilla())
        check_invariants(trace, van)
        every_t = [(j, t) for j in range(len(trace)) for t in range(trace[j].m)]
        ex = np.array([j for j, _ in every_t], dtype=np.int64)
        ts = np.array([t for _, t in every_t], dtype=np.int64)
        prev_n = np.zeros(len(every_t), dtype=np.int64)
        for k in range(1, K + 1):
            orc = simulate(trace, Oracle(k))
            check_invariants(trace, orc)
            n_k = simulate_at_positions(trace, Oracle(k), ex, ts).n
            assert np.all(n_k >= prev_n)  # monotone in k at every position
            prev_n = n_k
            if k == 1:  # oracle(1) == vanilla, step for step
                np.testing.assert_array_equal(orc.steps.t, van.steps.t)
                np.testing.assert_array_equal(orc.steps.n, van.steps.n)
                np.testing.assert_array_equal(orc.steps.drafts, van.steps.drafts)
            for strat in (HeadDrafter(k=k), HeadDrafter(k=k, rescorer=BigramRescorer(10, 2.0))):
                r = simulate(trace, strat)
                check_invariants(trace, r)
                # at every position the strategy visits, n <= n_oracle(t, k)
                at = simulate_at_positions(trace, Oracle(k), r.steps.example, r.steps.t)
                assert np.all(r.steps.n <= at.n)
        del trace


def test_progress_bar_runs(tiny_trace: Trace) -> None:
    r = simulate(tiny_trace, vanilla(), progress=True)
    assert r.block_efficiency == pytest.approx(9 / 7)
