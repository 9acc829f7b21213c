"""Tests of blockdraft.oracle.analysis and .plots on handcrafted inputs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from oracle_helpers import BigramRescorer

from blockdraft.drafts.heads import HeadDrafter, vanilla
from blockdraft.oracle import (
    Oracle,
    OracleError,
    StepRecords,
    Trace,
    compare_steps,
    h_max,
    has_repetition,
    head_entropy,
    max_runs,
    oracle_curve,
    plot_entropy_densities,
    plot_oracle_curve,
    repetition,
    simulate,
    synthetic_trace,
    wins_ties_losses,
)


def strict_json(obj: dict) -> str:
    return json.dumps(obj, allow_nan=False)


# ---------------------------------------------------------------------------- repetition
def test_repetition_by_hand() -> None:
    drafts = np.array([[1, 1, 2, 2], [3, 4, 5, 6], [7, 7, 7, 8]])
    # repeated pairs: (1,1), (2,2) | none | (7,7), (7,7) -> 4 of 3 * 3 = 9 pairs
    # longest runs: 2, 1, 3 -> mean 2; drafts with a repeat: 2 of 3
    s = repetition(drafts)
    assert s.num_steps == 3 and s.h == 4 and s.repeated_pairs == 4
    assert s.pct_consecutive == pytest.approx(400 / 9)
    assert s.mean_max_run == pytest.approx(2.0)
    assert s.pct_with_repetition == pytest.approx(200 / 3)
    assert max_runs(drafts).tolist() == [2, 1, 3]
    assert has_repetition(drafts).tolist() == [True, False, True]
    assert max_runs(np.array([[5, 5, 5, 5]])).tolist() == [4]
    strict_json(s.to_dict())
    empty = repetition(np.zeros((0, 3), dtype=np.int64))
    assert empty.num_steps == 0 and math.isnan(empty.pct_consecutive)
    assert empty.to_dict()["pct_consecutive"] is None
    with pytest.raises(OracleError, match="h >= 2"):
        repetition(np.array([[1], [2]]))
    with pytest.raises(OracleError, match=r"integer \[S, h\] array"):
        repetition(np.array([1, 2, 3]))


def test_repetition_of_a_simulation(tiny_trace: Trace) -> None:
    # the vanilla drafts of the tiny trace: (1,2,7), (3,8,5), (4,5,6), (5,5,3): one repeat
    s = repetition(simulate(tiny_trace, vanilla()))
    assert (s.num_steps, s.repeated_pairs) == (4, 1)
    assert s.pct_consecutive == pytest.approx(100 / 8)
    assert s.mean_max_run == pytest.approx((1 + 1 + 1 + 2) / 4)


# ---------------------------------------------------------------------------- entropy
@pytest.mark.parametrize(
    "mean, want",
    [([1.0, 2.0, 3.0], 3), ([1.0, 3.0, 2.0, 4.0], 2), ([2.0, 1.0, 3.0], 1),
     ([1.0, 1.0, 1.0], 3), ([0.5], 1), ([1.0, 2.0, 2.0, 1.9], 3)],
)
def test_h_max_by_hand(mean: list[float], want: int) -> None:
    assert h_max(mean) == want


def test_h_max_rejects_bad_input() -> None:
    with pytest.raises(OracleError, match="non-empty finite"):
        h_max([])
    with pytest.raises(OracleError, match="non-empty finite"):
        h_max([1.0, float("nan")])


def test_head_entropy_over_visited_positions(tiny_trace: Trace) -> None:
    # tiny entropies are 10 * example + t + 0.25 * (head - 1); vanilla visits
    # (0, 0), (0, 2), (0, 3), (2, 0): head 1 mean = (0 + 2 + 3 + 20) / 4 = 6.25
    van = simulate(tiny_trace, vanilla())
    stats = head_entropy(tiny_trace, van)
    assert stats.entropy.shape == (4, 3)
    assert stats.example.tolist() == [0, 0, 0, 2] and stats.t.tolist() == [0, 2, 3, 0]
    np.testing.assert_allclose(stats.mean, [6.25, 6.5, 6.75])
    assert stats.h_max == 3
    # all positions: example 0 has t = 0..5, 1 has t = 0, 2 has t = 0, 1 (9 rows)
    every = head_entropy(tiny_trace)
    assert every.entropy.shape == (9, 3)
    assert every.mean[0] == pytest.approx((15 + 10 + 20 + 21) / 9)
    d = every.to_dict()
    strict_json(d)
    assert d["h_max"] == 3 and d["unit"] == "nats" and len(d["quantiles"]["p50"]) == 3


def test_head_entropy_rejects_foreign_positions(tiny_trace: Trace) -> None:
    foreign = StepRecords(example=[0], t=[6], n=[0], tokens=[0], winner=[0],
                          drafts=[[1, 2, 3]], num_drafts=[1])
    with pytest.raises(OracleError, match="do not fit this trace"):
        head_entropy(tiny_trace, foreign)


# ---------------------------------------------------------------------------- wins/ties/losses
def records(n: list[int], drafts: list[list[int]]) -> StepRecords:
    s = len(n)
    return StepRecords(example=[0] * s, t=list(range(s)), n=n, tokens=[1] * s,
                       winner=[0] * s, drafts=drafts, num_drafts=[1] * s)


def test_compare_steps_by_hand() -> None:
    base = records([0, 1, 2, 1, 0], [[1, 1, 2], [1, 2, 3], [1, 2, 3], [1, 2, 3], [4, 4, 4]])
    other = records([1, 1, 0, 2, 0], [[1, 2, 3], [1, 2, 3], [1, 3, 3], [1, 2, 2], [4, 4, 4]])
    # position 0: win, base repeats, other does not -> repair among wins
    # position 1: tie; 2: loss, other repeats, base not -> regress among losses
    # position 3: win, other repeats, base not -> regress among wins; 4: tie
    w = compare_steps(base, other, strategy="x")
    assert (w.wins, w.ties, w.losses) == (2, 2, 1)
    assert (w.repair_wins, w.regress_wins) == (1, 1)
    assert (w.repair_losses, w.regress_losses) == (0, 1)
    assert w.pct_repair_among_wins == pytest.approx(50.0)
    assert w.pct_regress_among_wins == pytest.approx(50.0)
    assert w.pct_repair_among_losses == pytest.approx(0.0)
    assert w.pct_regress_among_losses == pytest.approx(100.0)
    d = w.to_dict()
    strict_json(d)
    assert d["pct_wins"] == pytest.approx(40.0) and d["strategy"] == "x"
    tie = compare_steps(base, base)
    assert (tie.wins, tie.ties, tie.losses) == (0, 5, 0)
    assert math.isnan(tie.pct_repair_among_wins) and tie.to_dict()["pct_repair_among_wins"] is None
    with pytest.raises(OracleError, match="same positions"):
        compare_steps(base, records([0, 1], [[1, 2, 3], [1, 2, 3]]))


def test_wins_ties_losses_on_the_tiny_trace(tiny_trace: Trace) -> None:
    # Oracle(2) at the vanilla positions: n = 2, 2, 2, 1 against vanilla's 1, 0, 2, 1
    w = wins_ties_losses(tiny_trace, Oracle(2))
    assert (w.num_positions, w.wins, w.ties, w.losses) == (4, 2, 2, 0)
    # wins at (0, 0): vanilla (1,2,7) vs oracle (1,2,3); (0, 2): (3,8,5) vs (3,4,5): no repeats
    assert (w.repair_wins, w.regress_wins) == (0, 0)
    assert w.baseline == "vanilla" and w.strategy == "oracle (k=2)"
    same = wins_ties_losses(tiny_trace, HeadDrafter(k=2), baseline=simulate(tiny_trace, vanilla()))
    assert (same.wins, same.losses) == (0, 0)


def test_oracle_never_loses_to_vanilla(tmp_path: Path) -> None:
    trace = synthetic_trace(tmp_path / "t", num_examples=4, h=4, K=4, V=12, repeat=0.6, seed=3)
    w = wins_ties_losses(trace, Oracle(4))
    assert w.losses == 0 and w.wins > 0
    lm = wins_ties_losses(trace, HeadDrafter(k=4, rescorer=BigramRescorer(12, 1.0)))
    assert lm.wins + lm.ties + lm.losses == lm.num_positions


# ---------------------------------------------------------------------------- oracle curve
def test_oracle_curve(tiny_trace: Trace, tmp_path: Path) -> None:
    c = oracle_curve(tiny_trace)  # K = 2: widths 1, 2
    assert c.ks.tolist() == [1, 2]
    assert c.b_vanilla == pytest.approx(9 / 7)
    np.testing.assert_allclose(c.b_oracle, [9 / 7, 9 / 6])
    np.testing.assert_allclose(c.ratio, [1.0, 7 / 6])
    strict_json(c.to_dict())
    trace = synthetic_trace(tmp_path / "t", num_examples=4, h=4, K=6, V=12, seed=4)
    c6 = oracle_curve(trace, examples=[0, 2])
    assert c6.ks.tolist() == [1, 2, 4, 6]  # 8 and 16 exceed K = 6; K itself is added
    assert c6.ratio[0] == pytest.approx(1.0)
    assert np.all(np.diff(c6.b_oracle) >= 0)
    van = simulate(trace, vanilla(), examples=[0, 2])
    assert oracle_curve(trace, (3,), examples=[0, 2], vanilla=van).ks.tolist() == [3, 6]
    with pytest.raises(OracleError, match="other examples"):
        oracle_curve(trace, examples=[1], vanilla=van)
    with pytest.raises(OracleError, match="positive integers, got 0"):
        oracle_curve(trace, (0, 1))


# ---------------------------------------------------------------------------- plots
def test_plots_write_png(tiny_trace: Trace, tmp_path: Path) -> None:
    curve = oracle_curve(tiny_trace)
    stats = head_entropy(tiny_trace, simulate(tiny_trace, vanilla()))
    for fn, arg, name in ((plot_oracle_curve, curve, "curve.png"),
                          (plot_entropy_densities, stats, "entropy.png")):
        out = fn(arg, tmp_path / name)
        data = out.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    with pytest.raises(OracleError, match="does not exist"):
        plot_oracle_curve(curve, tmp_path / "no" / "x.png")
