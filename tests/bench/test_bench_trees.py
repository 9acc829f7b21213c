"""benchmarks/bench_trees.py on a tiny random Hugging Face Llama with random Medusa heads:
every builder simulated at every budget, offline B equal to the online decode's, every online
output equal to greedy's, the costs measured without touching the cache, and the report's
figures consistent with each other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("transformers")

from test_bench_real import EOS, _cases, _lm, _tiny  # noqa: E402  (beside this test)

from benchmarks import bench_real, bench_trees  # noqa: E402
from benchmarks.common import tree_report  # noqa: E402

BUDGETS = (4, 8)
MAX_NEW = 12


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    import torch

    from blockdraft.models import BlockwiseConfig, RescorerLM
    from blockdraft.oracle import rank_accuracies
    from blockdraft.oracle.record import record_trace
    from blockdraft.rescorers.neural import NeuralPathScorer

    bench = bench_trees
    tmp = tmp_path_factory.mktemp("bench-trees")
    model = _tiny()
    cases = _cases(bench_real)
    lm = _lm(model, cases, tmp)
    trace = record_trace(model, [c.ids for c in cases], tmp / "trace", max_new_tokens=MAX_NEW,
                         eos_id=EOS, K=10)
    keys = [b for b in bench.BUILDERS if b != "trie-neural"  # needs a RescorerLM folder
            and b not in bench.DECODED  # needs prefix heads: test_the_tree_lattice_...
            and (lm is not None or "gram" not in b or b == "trie-0gram")]
    torch.manual_seed(0)
    rescorer = RescorerLM(BlockwiseConfig.tiny(vocab_size=256, h=1, max_seq_len=64)).eval()
    make = {"k": 10, "lm": lm, "alpha": 0.5, "accuracies": rank_accuracies(trace, 10),
            "neural": NeuralPathScorer(rescorer, max_depth=4)}
    rows = bench.simulate_builders(trace, cases, BUDGETS, keys, **make)
    costs = bench.measure_costs(model, cases[0].ids, sorted({*BUDGETS, model.h}), 10, 2)
    online = bench.run_online(model, [(1, cases[1]), (2, cases[2])], rows, BUDGETS, keys,
                              MAX_NEW, EOS, **make)
    return {"bench": bench, "model": model, "cases": cases, "trace": trace, "rows": rows,
            "costs": costs, "online": online, "keys": keys, "make": make, "tmp": tmp}


def test_every_builder_at_every_budget(run: dict[str, Any]) -> None:
    rows, tasks = run["rows"], {c.task for c in run["cases"]}
    for key in run["keys"]:
        mine = [r for r in rows if r["builder"] == key]
        want = [] if key == "mc_sim_7b_63" else list(BUDGETS)  # Medusa's tree is N = 64 only
        assert sorted(r["N"] for r in mine) == want, key
        for r in mine:
            assert set(r["B"]) == tasks
            assert 1.0 <= r["B_mean"] <= run["model"].h
            assert 1 <= r["nodes"] <= r["N"] and r["build_ms"] >= 0
    chain = {r["N"]: r for r in rows if r["builder"] == "chain"}
    assert chain[4]["nodes"] == 4 and chain[8]["nodes"] == run["model"].h  # at most h nodes


def test_offline_b_is_the_online_decodes(run: dict[str, Any]) -> None:
    """Per task and builder the simulated B (pooled over the task's prompts) is what the online
    decode made on the same prompts, and every online output is greedy's."""
    from blockdraft.oracle import simulate

    bench, trace, cases = run["bench"], run["trace"], run["cases"]
    online = run["online"]
    assert all(r["identical"] for r in online)
    for r in online:
        if r["builder"] == "greedy":
            continue
        i = r["case"]
        assert cases[i].task == r["task"]
        builder = bench.make_builder(r["builder"], r["N"], **run["make"])
        sim = simulate(trace, builder, examples=[i])
        assert (int(sim.generated.sum()), int(sim.calls.sum())) == (r["tokens"], r["calls"]), (
            r["builder"], r["N"], r["task"])


def test_costs(run: dict[str, Any]) -> None:
    costs = run["costs"]
    assert set(costs["verify_ms"]) == {str(n) for n in sorted({*BUDGETS, run["model"].h})}
    assert all(v > 0 for v in costs["verify_ms"].values())
    assert costs["greedy_ms"] > 0 and costs["lattice_ms"] > 0
    assert costs["prefix"] == len(run["cases"][0].ids)


def test_report(run: dict[str, Any]) -> None:
    report_mod = tree_report
    rows = [dict(r) for r in run["rows"]]
    rep = report_mod.make_report(
        rows=rows, costs=run["costs"], online=run["online"],
        fields={"model": "tiny", "heads": "random", "k": 10, "alpha": 0.5,
                "calibration": "the benchmark trace (test)"}, tasks=["task-a", "task-b"],
        command="python -m benchmarks.bench_trees --test", accuracies=run["make"]["accuracies"],
        alpha_b={"rescored-4gram": {"0.5": 1.2}, "rescored-neural": {}},
        lm={"name": "lm3", "order": 3, "ngrams": 10}, wall_s=1.0)
    costs = run["costs"]
    for r in rep["rows"]:
        size = min(int(n) for n in costs["verify_ms"] if int(n) >= r["nodes"] - 1e-9)
        step = costs["verify_ms"][str(size)] + costs["lattice_ms"] + r["build_ms"]
        assert r["est_speedup"] == pytest.approx(r["B_mean"] * costs["greedy_ms"] / step)
    for o in rep["online"]:
        runs = [r for r in run["online"] if r["builder"] == o["builder"] and r["N"] == o["N"]]
        assert o["B"] == pytest.approx(sum(r["tokens"] for r in runs)
                                       / sum(r["calls"] for r in runs))
        assert o["identical"] == len(runs)
    assert {t["target"].split(":")[0] for t in rep["targets"]} >= {
        "the best lossless tree strategy", "tree building within the drafting budget (<= 10% "
        "of a forward)"}
    paths = report_mod.write_report(rep, Path(run["tmp"]) / "out")
    assert [p.name for p in paths] == ["trees.json", "trees.md", "trees.png"]
    text = paths[1].read_text()
    assert "python -m benchmarks.bench_trees --test" in text and "N = 8" in text
    assert np.isfinite(rep["costs"]["greedy_ms"])


def test_decoded_b_is_pooled_as_the_simulator_pools_it(run: dict[str, Any]) -> None:
    """``decode_builder`` (the B of builders the trace cannot replay) gives, for a builder the
    simulator can replay, the simulator's B per task and its nodes per step."""
    bench = run["bench"]
    builder = bench.make_builder("chain", 8, **run["make"])
    per_task, nodes, build_ms = bench.decode_builder(run["model"], run["trace"], run["cases"],
                                                     builder, EOS)
    row = next(r for r in run["rows"] if r["builder"] == "chain" and r["N"] == 8)
    assert per_task == pytest.approx(row["B"]) and nodes == pytest.approx(row["nodes"])
    assert build_ms >= 0 and not row["decoded"]
    assert bench.make_builder("tree-lattice", 8, **run["make"]) is None  # Medusa heads


def test_the_tree_lattice_row_with_prefix_heads(tmp_path: Path) -> None:
    """With prefix heads the tree-lattice builder gets a (decoded) row at every budget; with one
    arc a node its tree is the chain, so its decoded B equals the chain's simulated B; a trace
    of other heads' model is refused rather than scored."""
    import torch

    from blockdraft.models.hf import HFBlockwiseModel
    from blockdraft.models.hf.prefix_heads import PrefixHeads
    from blockdraft.oracle import rank_accuracies
    from blockdraft.oracle.record import record_trace
    from hf_testlib import V, randomize, tiny_hf_base

    bench, real = bench_trees, bench_real

    def tiny_prefix(seed: int) -> Any:
        heads = randomize(PrefixHeads(64, 3, 1), seed + 1, scale=0.3)
        return HFBlockwiseModel(tiny_hf_base("llama", seed, init=0.3), heads)

    model = tiny_prefix(0)
    rng = np.random.default_rng(1)
    cases = [real.PromptCase("task-a" if i < 2 else "task-b", f"r{i}",
                             tuple(int(t) for t in rng.integers(2, V, size=8 + 2 * i)))
             for i in range(4)]
    with torch.no_grad():
        trace = record_trace(model, [c.ids for c in cases], tmp_path / "trace",
                             max_new_tokens=MAX_NEW, eos_id=EOS, K=4)
        make = {"k": 4, "lm": None, "alpha": 0.5, "accuracies": rank_accuracies(trace, 4),
                "conditional": True}
        rows = bench.simulate_builders(trace, cases, BUDGETS, ["chain", "tree-lattice"],
                                       model=model, eos=EOS, **make)
        lattice = [r for r in rows if r["builder"] == "tree-lattice"]
        assert [r["N"] for r in lattice] == list(BUDGETS)
        for r in lattice:
            assert r["decoded"] and set(r["B"]) == {"task-a", "task-b"}
            assert 1.0 <= r["B_mean"] <= model.h and 1 <= r["nodes"] <= r["N"]
        one = bench.decode_builder(model, trace, cases,
                                   bench.make_builder("tree-lattice", 8, **{**make, "k": 1}),
                                   EOS)
        chain = next(r for r in rows if r["builder"] == "chain" and r["N"] == 8)
        assert one[0] == pytest.approx(chain["B"]) and one[1] == pytest.approx(chain["nodes"])
        other = record_trace(tiny_prefix(7), [c.ids for c in cases], tmp_path / "other",
                             max_new_tokens=MAX_NEW, eos_id=EOS, K=4)
        with pytest.raises(SystemExit, match="re-record the trace"):
            bench.decode_builder(model, other, cases,
                                 bench.make_builder("tree-lattice", 8, **make), EOS)
