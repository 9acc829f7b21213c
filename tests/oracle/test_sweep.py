"""Sweeps (blockdraft.oracle.sweep): the grid, the figures against direct simulations, the
engines against each other bit for bit (serial, local processes, Ray), the resume from the
cache, and the retry of a task whose worker died."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sweep_testlib as lib

from blockdraft.drafts import DraftError, HeadDrafter
from blockdraft.oracle import repetition, simulate, synthetic_trace
from blockdraft.oracle.errors import OracleError
from blockdraft.oracle.sweep import (
    Engine,
    Grid,
    Resources,
    ResultCache,
    Setting,
    steps_digest,
    sweep,
    trace_digest,
)
from blockdraft.oracle.sweep.tasks import Task, plan_shards, run_task

V = 40


def _trace(root: Path, seed: int = 1, n: int = 8) -> Path:
    synthetic_trace(root / "trace", num_examples=n, h=4, K=8, V=V, seed=seed,
                    accuracy=[0.7, 0.5, 0.3], length=(15, 40), repeat=0.2)
    return root / "trace"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A trace, an n-gram LM and a RescorerLM over its vocabulary (the LM skips without
    KenLM's lmplz: such settings are then left out)."""
    import torch

    from blockdraft.models import BlockwiseConfig, RescorerLM, save_model
    from blockdraft.rescorers.base import RescorerError
    from blockdraft.training.ngram import find_kenlm_tool, train_ngram

    root = tmp_path_factory.mktemp("sweep")
    w = {"trace": _trace(root)}
    torch.manual_seed(0)
    cfg = BlockwiseConfig.tiny(h=1, vocab_size=V, max_seq_len=160, d_model=16, n_head=2,
                               d_ff=32)
    neural = RescorerLM(cfg).eval()
    with torch.no_grad():
        neural.transformer.wte.weight.normal_(0.0, 0.8)
    w["neural"] = save_model(neural, root / "neural")
    try:
        find_kenlm_tool("lmplz")
    except RescorerError:
        return w
    rng = np.random.default_rng(0)
    nxt = rng.integers(0, V, size=(V, 2))
    seqs = [list(range(V))]
    for _ in range(200):
        seq = [int(rng.integers(0, V))]
        for _ in range(15):
            seq.append(int(nxt[seq[-1], rng.integers(0, 2)]))
        seqs.append(seq)
    w["lm"] = Path(train_ngram(seqs, root / "lm3", order=3, memory="64M").arpa)
    return w


def _settings(w: dict[str, Path], neural: bool = True) -> list[Setting]:
    """Every kind of strategy: a grid over the n-gram LM (when built), then two settings of
    the neural LM (the dearest to simulate)."""
    rescorers = [("", "")] + ([("ngram", str(w["lm"]))] if "lm" in w else [])
    grid = Grid(strategies=("heads", "combined", "tree", "lookup", "oracle"), ks=(1, 4),
                ps=(1, 3), alphas=(0.5, 2.0), rescorers=rescorers,
                trees=("confidence", "medusa", "rescored"), budgets=(6,))
    out = list(grid.expand())
    if neural:
        lm = str(w["neural"])
        out += [Setting("heads", k=4, p=2, rescorer="neural", lm=lm, alpha=0.5),
                Setting("tree", k=4, tree="rescored", budget=5, rescorer="neural", lm=lm)]
    return out


def _same(a: Any, b: Any) -> None:
    """Two sweeps' rows equal in every figure (work time and cache flag aside)."""
    assert len(a.rows) == len(b.rows)
    for x, y in zip(a.rows, b.rows, strict=True):
        dx, dy = x.to_dict(), y.to_dict()
        for d in (dx, dy):
            d.pop("work_s")
            d.pop("cached")
        assert dx == dy, x.label


# ------------------------------------------------------------------------------ settings
def test_the_grid_folds_axes_that_do_not_apply() -> None:
    grid = Grid(strategies=("heads", "lookup", "oracle", "tree"), ks=(2, 4), ps=(1, 3),
                alphas=(0.5, 1.0), rescorers=(("", ""), ("ngram", "a.bin")),
                trees=("confidence", "rescored"), budgets=(6,))
    labels = [s.label for s in grid.expand()]
    assert labels == [
        "vanilla",  # p = 1, no rescorer: the argmax at any k, alpha dropped
        "heads k=2 p=1 ngram:a a=0.5", "heads k=2 p=1 ngram:a a=1",
        "heads k=2 p=3", "heads k=2 p=3 ngram:a a=0.5", "heads k=2 p=3 ngram:a a=1",
        "heads k=4 p=1 ngram:a a=0.5", "heads k=4 p=1 ngram:a a=1",
        "heads k=4 p=3", "heads k=4 p=3 ngram:a a=0.5", "heads k=4 p=3 ngram:a a=1",
        "lookup",  # no axis applies
        "oracle k=2", "oracle k=4",
        "tree confidence k=2 N=6", "tree confidence k=4 N=6",  # no rescorer, p = 1
        "tree rescored k=2 N=6 ngram:a a=0.5", "tree rescored k=2 N=6 ngram:a a=1",
        "tree rescored k=4 N=6 ngram:a a=0.5", "tree rescored k=4 N=6 ngram:a a=1",
    ]
    medusa = Setting("tree", k=32, tree="medusa", budget=6)
    assert medusa.k == 1 + max(max(c) for c in medusa.medusa_choices())  # its own ranks
    assert Setting.from_dict(medusa.to_dict()) == medusa
    assert Setting("heads", k=7, p=1) == Setting("heads")


def test_a_folded_axis_changes_nothing(tmp_path: Path) -> None:
    """Brute force: vanilla drafts at k = 1 and k = 8 give the same steps."""
    trace = synthetic_trace(tmp_path / "t", num_examples=4, h=4, K=8, V=V, seed=4)
    a, b = simulate(trace, HeadDrafter(k=1)), simulate(trace, HeadDrafter(k=8))
    assert steps_digest(a.steps) == steps_digest(b.steps)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"strategy": "beam"}, "unknown strategy"),
    ({"strategy": "tree", "tree": "bushy", "budget": 4}, "tree 'bushy'"),
    ({"strategy": "tree", "tree": "rescored", "budget": 4}, "needs a rescorer"),
    ({"strategy": "tree", "tree": "confidence", "budget": 1}, "budget"),
    ({"strategy": "heads", "rescorer": "ngram"}, "rescorer 'ngram' needs its file"),
    ({"strategy": "heads", "rescorer": "ngram", "lm": "a", "alpha": math.nan}, "alpha"),
    ({"strategy": "heads", "k": 0, "p": 2}, "k and p"),
    ({"strategy": "heads", "p": True}, "integer"),
])
def test_bad_settings_are_refused(kwargs: dict[str, Any], match: str) -> None:
    # a Setting is the drafts room's DraftSpec now: it refuses with a DraftError (was
    # OracleError); a grid still reports an OracleError (test_a_grid_refuses_bad_values)
    with pytest.raises(DraftError, match=match):
        Setting(**kwargs)


def test_a_grid_refuses_bad_values() -> None:
    with pytest.raises(OracleError, match="alpha must be finite and >= 0, got nan"):
        Grid(strategies=("heads",), ps=(2,), alphas=(math.nan,),
             rescorers=(("ngram", "a.bin"),)).expand()
    with pytest.raises(OracleError, match="'cost-aware' needs a model"):
        Grid(strategies=("cost-aware",)).expand()


def test_inputs_are_checked_before_any_work(world: dict[str, Path], tmp_path: Path) -> None:
    trace = str(world["trace"])
    with pytest.raises(OracleError, match="K = 8"):
        sweep(trace, [Setting("heads", k=9, p=2)])
    with pytest.raises(OracleError, match="depth"):  # h = 4: three heads after the root
        sweep(trace, [Setting("tree", tree="medusa", budget=64)])
    with pytest.raises(OracleError, match="does not exist"):
        sweep(trace, [Setting("heads", p=2, rescorer="ngram", lm=str(tmp_path / "no.bin"))])
    with pytest.raises(OracleError, match="RescorerLM over the trace's vocabulary"):
        other = _trace(tmp_path, n=2)
        synthetic_trace(other, num_examples=2, h=4, K=8, V=V + 5, overwrite=True)
        sweep(other, [Setting("heads", p=2, rescorer="neural", lm=str(world["neural"]))])
    with pytest.raises(OracleError, match="out of range"):
        sweep(trace, [Setting("heads")], examples=[0, 99])


# ------------------------------------------------------------------------------ the figures
def test_rows_equal_direct_simulations(world: dict[str, Path]) -> None:
    """Every row against simulate() over the whole trace, and its figures recomputed by hand
    from that simulation's steps."""
    settings = _settings(world)
    res = sweep(world["trace"], settings, shards=3)
    from blockdraft.oracle import Trace

    trace = Trace.open(world["trace"])
    resources = Resources()
    kinds = {s.strategy for s in settings} | {s.tree for s in settings if s.tree}
    assert kinds == {"heads", "combined", "tree", "lookup", "oracle", "confidence", "medusa",
                     "rescored"}
    for s, row in zip(settings, res.rows, strict=True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            direct = simulate(trace, s.build(resources))
        steps = direct.steps
        assert row.setting == s and not row.cached
        assert row.block_efficiency == direct.block_efficiency, s.label
        assert row.steps_sha256 == steps_digest(steps), s.label
        assert (row.tokens, row.calls, row.steps) == (
            int(direct.generated.sum()), int(direct.calls.sum()), len(steps))
        want = [float(np.mean(steps.n >= i)) for i in range(1, 4)]
        assert list(row.head_acceptance) == pytest.approx(want, abs=0, rel=1e-15)
        assert row.pct_consecutive == repetition(direct).pct_consecutive
        assert row.mean_drafts == pytest.approx(float(steps.num_drafts.mean()))
        assert row.mean_nodes == pytest.approx(float(steps.nodes.mean()))
        assert sum(c for _, c in row.nodes_histogram) == len(steps)


def test_the_cost_curve_prices_the_steps(world: dict[str, Path]) -> None:
    from blockdraft.models.cost import CostCurve

    cost = CostCurve(nodes=(1, 2, 4, 8, 16), step_ms=(30.0, 31.0, 34.0, 40.0, 60.0),
                     heads_ms=2.0, greedy_ms=30.0)
    from blockdraft.oracle import Trace

    trace = Trace.open(world["trace"])
    settings = [Setting("heads"), Setting("heads", k=4, p=3), Setting("lookup"),
                Setting("tree", k=4, tree="confidence", budget=6)]
    res = sweep(world["trace"], settings)
    for s, row in zip(settings, res.rows, strict=True):
        direct = simulate(trace, s.build(Resources()))
        heads = s.strategy != "lookup"
        assert row.speedup(cost) == pytest.approx(direct.simulated_speedup(cost, heads))
        assert row.relative_time(cost) == pytest.approx(direct.relative_time(cost, heads))
    doc = res.to_dict(cost)
    assert doc["rows"][2]["speedup"] == pytest.approx(res.rows[2].speedup(cost))
    assert doc["cost_curve"]["greedy_ms"] == 30.0


def test_shards_change_nothing(world: dict[str, Path]) -> None:
    settings = _settings(world, neural=False)[:12]
    one = sweep(world["trace"], settings, shards=1)
    for shards in (2, 7, 50):
        _same(one, sweep(world["trace"], settings, shards=shards))
    lengths = np.array([5, 1, 1, 1, 9, 2])
    pieces = plan_shards(lengths, np.arange(6), 3)
    assert np.concatenate(pieces).tolist() == list(range(6)) and all(p.size for p in pieces)
    assert len(pieces) == 3


def test_a_sweep_over_some_examples(world: dict[str, Path]) -> None:
    from blockdraft.oracle import Trace

    res = sweep(world["trace"], [Setting("heads", k=4, p=2)], examples=[3, 1])
    direct = simulate(Trace.open(world["trace"]), HeadDrafter(k=4, p=2), examples=[1, 3])
    assert res.rows[0].steps_sha256 == steps_digest(direct.steps)
    assert res.rows[0].examples == 2


# ------------------------------------------------------------------------------ the cache
def test_an_interrupted_sweep_goes_on_where_it_stopped(world: dict[str, Path],
                                                       tmp_path: Path) -> None:
    settings = _settings(world, neural=False)[:8]
    fresh = sweep(world["trace"], settings)
    cache = ResultCache(tmp_path / "cache")
    # the engine runs the dearest first: the 3-best drafts, then the vanilla ones
    broken = [lib.as_kind(lib.InterruptedSetting, s) if s.label == "vanilla" else s
              for s in settings]
    with pytest.raises(lib.Interrupt):
        sweep(world["trace"], broken, cache=cache)
    kept = len(list(cache.folder.glob("*.json")))
    assert 0 < kept < len(settings)
    lib.BUILT.clear()
    counted = [lib.as_kind(lib.CountedSetting, s) for s in settings]
    again = sweep(world["trace"], counted, cache=cache, shards=1)
    assert again.computed == len(settings) - kept == len(lib.BUILT)  # the rest only
    assert sum(r.cached for r in again.rows) == kept
    _same(fresh, again)
    third = sweep(world["trace"], settings, cache=cache)
    assert third.computed == 0
    _same(fresh, third)


def test_a_damaged_cache_entry_is_computed_again(world: dict[str, Path],
                                                 tmp_path: Path) -> None:
    cache = ResultCache(tmp_path / "cache")
    settings = [Setting("heads", k=4, p=2), Setting("oracle", k=4)]
    first = sweep(world["trace"], settings, cache=cache)
    entry = cache.path(first.rows[0].key)
    doc = json.loads(entry.read_text())
    doc["row"]["block_efficiency"] = 9.0  # edited: its seal no longer matches
    entry.write_text(json.dumps(doc))
    with pytest.warns(UserWarning, match="unusable"):
        again = sweep(world["trace"], settings, cache=cache)
    assert again.computed == 1 and again.rows[0].block_efficiency == first.rows[0].block_efficiency
    assert json.loads(entry.read_text())["row"]["block_efficiency"] != 9.0  # rewritten


def test_the_key_follows_the_contents_not_the_paths(world: dict[str, Path],
                                                    tmp_path: Path) -> None:
    if "lm" not in world:
        pytest.skip("KenLM's lmplz is not built; run `make setup`")
    import shutil

    moved = tmp_path / "moved.arpa"
    shutil.copy(world["lm"], moved)
    s = Setting("heads", k=4, p=2, rescorer="ngram", lm=str(world["lm"]))
    t = Setting("heads", k=4, p=2, rescorer="ngram", lm=str(moved))
    a, b = sweep(world["trace"], [s]), sweep(world["trace"], [t])
    assert a.rows[0].key == b.rows[0].key
    c = sweep(world["trace"], [Setting("heads", k=4, p=2, rescorer="ngram", lm=str(moved),
                                       alpha=0.5)])
    assert c.rows[0].key != a.rows[0].key


def test_a_worker_refuses_another_trace(world: dict[str, Path], tmp_path: Path) -> None:
    other = _trace(tmp_path, seed=9, n=3)
    task = Task(index=0, config=0, setting=Setting("heads"), trace=str(other),
                trace_digest=trace_digest(world["trace"]), examples=(0,))
    with pytest.raises(OracleError, match="not the one this sweep started with"):
        run_task(task)


# ------------------------------------------------------------------------------ engines
def test_a_worker_simulates_without_importing_torch(world: dict[str, Path]) -> None:
    """A sweep worker's fixed cost is its imports: a fresh interpreter runs a task of every
    strategy without the n-gram LM (and the n-gram heads when built) and never imports torch
    (about a second of start-up per worker); a neural rescorer needs it and imports it."""
    import subprocess
    import sys

    settings = [s for s in _settings(world, neural=False)
                if not s.rescorer or s.rescorer == "ngram"][::3]
    from blockdraft.oracle.sweep.cache import file_digest

    lms = {s.lm: file_digest(s.lm) for s in settings if s.rescorer}
    code = f"""
import sys
from blockdraft.oracle.sweep import Setting
from blockdraft.oracle.sweep.cache import trace_digest
from blockdraft.oracle.sweep.tasks import Task, run_task
trace = {str(world["trace"])!r}
digest = trace_digest(trace)
lms = {lms!r}
for i, d in enumerate({[s.to_dict() for s in settings]!r}):
    s = Setting.from_dict(d)
    run_task(Task(index=i, config=i, setting=s, trace=trace, trace_digest=digest,
                  examples=(0, 1), lm_digest=lms.get(s.lm)))
print("torch" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False", out.stderr[-2000:]
    assert len(settings) >= 5


def test_local_processes_equal_the_serial_run(world: dict[str, Path]) -> None:
    settings = _settings(world)[::5]
    serial = sweep(world["trace"], settings)
    parallel = sweep(world["trace"], settings, engine=Engine("processes", workers=2), shards=2)
    assert parallel.engine == "processes:2"
    _same(serial, parallel)


def _a_dead_worker_loses_only_its_task(trace: Path, marks: Path, kind: str) -> None:
    """A worker that dies once while running a configuration: the sweep retries that task and
    equals the serial run; a configuration whose worker always dies stops the sweep after the
    retries, saying so."""
    marks.mkdir()
    settings = [Setting("heads", k=4, p=3), Setting("oracle", k=4), Setting("lookup")]
    serial = sweep(trace, settings)
    dying = [settings[0], lib.as_kind(lib.DyingSetting, settings[1], marks=str(marks)),
             settings[2]]
    _same(serial, sweep(trace, dying, engine=Engine(kind, workers=2), shards=1))
    assert len(list(marks.glob("death-*"))) == 1 and len(list(marks.glob("built-*"))) == 1
    always = [lib.as_kind(lib.DyingSetting, settings[1], marks=str(marks), times=-1)]
    with pytest.raises(OracleError, match="died 2 times"):
        sweep(trace, always, engine=Engine(kind, workers=2, retries=1), shards=1)


def test_a_dead_local_worker_loses_only_its_task(world: dict[str, Path],
                                                 tmp_path: Path) -> None:
    _a_dead_worker_loses_only_its_task(world["trace"], tmp_path / "marks", "processes")


@pytest.fixture(scope="module")
def ray_cluster() -> Any:
    """One local Ray of 2 CPUs for the module (skips without the blockdraft[ray] extra)."""
    ray = pytest.importorskip("ray", reason="Ray is the blockdraft[ray] extra; not installed")
    pickle = pytest.importorskip("ray.cloudpickle")

    pickle.register_pickle_by_value(lib)  # the misbehaving settings, by value
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_ray_equals_the_serial_run_bit_for_bit(world: dict[str, Path], ray_cluster: Any) -> None:
    settings = _settings(world)[1::5]
    serial = sweep(world["trace"], settings)
    res = sweep(world["trace"], settings, engine=Engine("ray", workers=2), shards=2)
    assert res.engine == "ray:local:2" and ray_cluster.is_initialized()  # left running
    _same(serial, res)


def test_a_dead_ray_worker_loses_only_its_task(world: dict[str, Path], ray_cluster: Any,
                                               tmp_path: Path) -> None:
    _a_dead_worker_loses_only_its_task(world["trace"], tmp_path / "marks", "ray")


def test_engines_refuse_bad_settings() -> None:
    with pytest.raises(OracleError, match="unknown engine"):
        Engine("dask")
    with pytest.raises(OracleError, match="workers"):
        Engine("processes", workers=0)
    with pytest.raises(OracleError, match="Ray cluster"):
        Engine("processes", address="auto")
    assert Engine("ray", address="auto").name == "ray:auto"


def test_the_cache_lives_in_blockdraft_cache(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from blockdraft.oracle.sweep import default_cache_dir

    monkeypatch.setenv("BLOCKDRAFT_CACHE", str(tmp_path))
    assert default_cache_dir() == tmp_path / "sweep"
    (tmp_path / "file").write_text("")
    with pytest.raises(OracleError, match="not a folder"):
        ResultCache(tmp_path / "file")
