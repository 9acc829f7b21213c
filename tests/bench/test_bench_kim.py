"""benchmarks/bench_kim.py's tables on a tiny synthetic trace (no real model): every figure of
Tables 3, 4, 5 and Fig. 6, per kind and overall, equals the library's analysis run directly on
that kind's examples; the p-best trie has the batch's B; the page (JSON, Markdown, PNG) is
written with its signature and the paper's missing figures said to be missing; the latency
table runs; traces are recorded once and then read from the cache."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchmarks import bench_kim
from benchmarks.common import kim_report

KINDS = ("a", "a", "b", "b", "b", "c")
K_LAT, PS, OKS = 4, (2, 4), (1, 2, 4, 8)


def _tiny_lm(trace: Any, tmp: Path) -> Any:
    from blockdraft.rescorers.base import RescorerError
    from blockdraft.rescorers.ngram import NgramLM
    from blockdraft.training.ngram import train_ngram

    seqs = [np.concatenate([ex.prompt_ids, ex.greedy_ids]) for ex in trace]
    try:
        r = train_ngram(seqs, tmp / "lm2", order=2)
    except RescorerError:
        return None  # lmplz not built: the n-gram rows are left out
    return NgramLM(r.binary)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    import torch

    from blockdraft.models import BlockwiseConfig, RescorerLM, save_model
    from blockdraft.oracle import synthetic_trace
    from blockdraft.rescorers.ngram import NgramRescorer

    bench = bench_kim
    tmp = tmp_path_factory.mktemp("bench-kim")
    trace = synthetic_trace(tmp / "trace", num_examples=len(KINDS), h=4, K=8, V=64,
                            length=(12, 40), repeat=0.6, seed=3)
    pset = bench.PromptSet("syn", tuple(tuple(int(t) for t in ex.prompt_ids) for ex in trace),
                           KINDS, tuple(f"s{i}" for i in range(len(KINDS))), "synthetic")
    lm = _tiny_lm(trace, tmp)
    ctx, why = bench.context_kwargs(NgramRescorer, 3, 0.3)
    lms = [] if lm is None else [("syn", lm, {"name": "syn", "order": lm.order, "sha256": "x"})]
    neural = tmp / "rescorer"
    torch.manual_seed(0)
    save_model(RescorerLM(BlockwiseConfig.tiny(vocab_size=64, h=1, max_seq_len=64)).eval(),
               neural)
    refiners = bench.build_refiners(lms, 0.5, ctx, ("tiny", neural, {"name": "tiny"}))
    res = bench.analyse_set(trace, pset.groups(), refiners, k=K_LAT, ps=PS, oracle_ks=OKS)
    return {"bench": bench, "trace": trace, "pset": pset, "lm": lm, "refiners": refiners,
            "res": res, "tmp": tmp, "ctx": ctx, "why": why}


def _drafter(run: dict[str, Any], label: str) -> Any:
    """The strategy behind a row, built directly (not through the harness)."""
    from blockdraft.drafts import HeadDrafter

    if label == "vanilla":
        return HeadDrafter(k=1, p=1)
    for p in PS:
        if label == f"{p}-best 0-gram":
            return HeadDrafter(k=K_LAT, p=p)  # a batch: the trie's B must be the same
    for r in run["refiners"]:
        if label == r.label:
            return HeadDrafter(k=K_LAT, p=1, rescorer=r.make())
        for p in PS:
            if label == f"{p}-best {r.label}":
                return HeadDrafter(k=K_LAT, p=p, rescorer=r.make())
    raise AssertionError(f"unknown row {label}")


def test_groups_are_the_kinds_then_all(run: dict[str, Any]) -> None:
    assert run["pset"].groups() == {"a": [0, 1], "b": [2, 3, 4], "c": [5],
                                    "all": list(range(len(KINDS)))}


def test_rows_present(run: dict[str, Any]) -> None:
    B = run["res"]["B"]
    want = {"vanilla", *(f"{p}-best 0-gram" for p in PS), f"oracle k={K_LAT}"}
    labels = [r.label for r in run["refiners"]]
    assert labels[-1] == "neural tiny"  # p = 1 only (Kim's local neural rescoring)
    want.add("neural tiny")
    if run["lm"] is not None:
        assert labels[0] == "2-gram syn"
        if run["ctx"]:  # NgramRescorer takes the context LM: a second, labelled row
            assert run["why"] is None and labels[1] == "2-gram syn + context(n=3, w=0.3)"
        want |= {*labels[:-1], *(f"{p}-best {lab}" for p in PS for lab in labels[:-1])}
    assert set(B) == want
    assert set(run["res"]["repetition"]) == {"vanilla", *(r.label for r in run["refiners"])}
    assert set(run["res"]["wtl"]) == {r.label for r in run["refiners"]}


def test_table4_is_b_simulated_per_kind(run: dict[str, Any]) -> None:
    """Each cell is simulate(strategy, examples=the kind's).block_efficiency; p-best rows (a
    trie in the harness) equal the batch of p drafts; every B is in [1, h]."""
    from blockdraft.oracle import simulate

    trace, groups = run["trace"], run["pset"].groups()
    for label, by in run["res"]["B"].items():
        if label.startswith("oracle"):
            continue
        for g, idx in groups.items():
            direct = simulate(trace, _drafter(run, label), examples=idx).block_efficiency
            assert by[g] == pytest.approx(direct, abs=1e-12), (label, g)
            assert 1.0 <= by[g] <= trace.h


def test_table3_is_repetition_of_the_visited_drafts(run: dict[str, Any]) -> None:
    from blockdraft.oracle import repetition, simulate

    trace, groups = run["trace"], run["pset"].groups()
    for label, by in run["res"]["repetition"].items():
        for g, idx in groups.items():
            direct = repetition(simulate(trace, _drafter(run, label), examples=idx)).to_dict()
            assert by[g] == direct, (label, g)
    v = run["res"]["repetition"]["vanilla"]["all"]
    assert v["pct_consecutive"] > 0  # the synthetic heads repeat (repeat=0.6)


def test_table5_is_wins_ties_losses_at_vanillas_positions(run: dict[str, Any]) -> None:
    from blockdraft.oracle import compare_steps, simulate, simulate_at_positions

    trace, groups = run["trace"], run["pset"].groups()
    for label, by in run["res"]["wtl"].items():
        for g, idx in groups.items():
            van = simulate(trace, _drafter(run, "vanilla"), examples=idx)
            other = simulate_at_positions(trace, _drafter(run, label), van.steps.example,
                                          van.steps.t)
            direct = compare_steps(van.steps, other, strategy=label).to_dict()
            assert by[g] == direct, (label, g)
            assert by[g]["wins"] + by[g]["ties"] + by[g]["losses"] == by[g]["num_positions"]


def test_fig6_is_the_oracle_curve_per_kind(run: dict[str, Any]) -> None:
    from blockdraft.oracle import oracle_curve

    trace, groups, res = run["trace"], run["pset"].groups(), run["res"]
    for g, idx in groups.items():
        curve = oracle_curve(trace, OKS, examples=idx)
        got = res["oracle"][g]
        assert got["ks"] == curve.ks.tolist() == [1, 2, 4, 8]  # K = 8 kept, none above
        assert got["b_oracle"] == pytest.approx(curve.b_oracle.tolist())
        assert got["ratio"] == pytest.approx(curve.ratio.tolist())
        assert got["b_vanilla"] == pytest.approx(res["B"]["vanilla"][g])
        assert res["B"][f"oracle k={K_LAT}"][g] == pytest.approx(got["b_oracle"][2])


def test_context_kwargs_follow_the_signature(run: dict[str, Any]) -> None:
    bench = run["bench"]

    class Old:
        def __init__(self, lm: Any, alpha: float = 1.0) -> None: ...

    class New:
        def __init__(self, lm: Any, *, context_order: int = 4, context_weight: float = 0.0
                     ) -> None: ...

    assert bench.context_kwargs(Old, None, None) == ({}, None)
    kw, why = bench.context_kwargs(Old, 4, 0.3)
    assert kw == {} and "context_order" in why and "missing" in why
    assert bench.context_kwargs(New, 4, 0.3) == ({"context_order": 4, "context_weight": 0.3},
                                                 None)
    assert bench.context_label({"context_order": 4, "context_weight": 0.3}) == \
        " + context(n=4, w=0.3)"
    assert bench.context_label({"context_order": 4, "context_weight": 0.0}) == ""


def test_latency_rows(run: dict[str, Any]) -> None:
    lat = run["bench"].measure_latency([run["trace"]], run["refiners"], k=K_LAT, ps=PS, n=4)
    rows = {(r["strategy"], r["p"]): r for r in lat["rows"]}
    assert rows[("vanilla (argmax)", 1)]["shape"] == "4x1"
    assert {p for s, p in rows if s == "0-gram (head scores)"} == {1, *PS}
    for r in run["refiners"]:
        assert {p for s, p in rows if s == r.label} == ({1, *PS} if r.pbest else {1})
    assert all(r["median_ms"] >= 0 for r in lat["rows"])
    assert {r["n"] for r in lat["rows"] if r["family"] != "neural"} == {4}
    assert rows[("neural tiny", 1)]["n"] == 3  # time_step on n // 10 positions, at least 3
    assert {"load1", "cores", "busy"} <= set(lat["load_before"])


def test_page_is_written(run: dict[str, Any]) -> None:
    bench, report_mod = run["bench"], kim_report
    res, trace, pset = run["res"], run["trace"], run["pset"]
    sets = {"syn": {"source": "synthetic", "kinds": ["a", "b", "c"],
                    "sizes": bench.describe_set(trace, pset),
                    "trace": {"path": str(trace.path), "key": "k", "from_cache": True,
                              "record_s": 0.0}, **res}}
    latency = bench.measure_latency([trace], run["refiners"], k=K_LAT, ps=PS, n=3)
    fields = {"model": "synthetic", "heads": "random", "precision": "float32", "threads": 1,
              "h": trace.h, "K": trace.K, "k": K_LAT, "max_new_tokens": 40}
    rep = bench.make_report("python -m benchmarks.bench_kim --test", fields,
                            {"k": K_LAT, "alpha": 0.5}, ["neural rows: none (test)"], sets,
                            latency, 1.0)
    out = run["tmp"] / "page"
    paths = report_mod.write_page(rep, out)
    assert [p.name for p in paths] == ["kim.json", "kim.md", "kim_oracle.png"]

    def no_constants(name: str) -> None:
        raise AssertionError(f"non-finite number {name} in the JSON")

    data = json.loads(paths[0].read_text(), parse_constant=no_constants)
    assert data["signature"].startswith("model:synthetic|heads:random|precision:float32")
    assert data["sets"]["syn"]["B"]["vanilla"]["all"] == pytest.approx(res["B"]["vanilla"]["all"])
    md = paths[1].read_text()
    for needle in ("Command: `python -m benchmarks.bench_kim --test`",
                   "Signature: `model:synthetic", "## Table 3", "## Table 4", "## Table 5",
                   "## Fig. 6", "## App. H",
                   "not found", "NewsRoom", "3.12", "neural rows: none (test)",
                   "![oracle](kim_oracle.png)"):
        assert needle in md, needle
    assert md.count("Verdict: Kim") == 5
    assert f"{res['B']['vanilla']['all']:.3f}" in md
    assert paths[2].stat().st_size > 10_000
    # the page redraws from its own JSON
    again = report_mod.markdown(data)
    assert again == md


def test_every_quoted_paper_figure_names_its_table() -> None:
    paper = kim_report.PAPER
    assert set(paper) == {"abstract", "table3", "table4", "table5", "fig6", "appH"}
    for key, entry in paper.items():
        assert entry["title"]
        for what, value, where in entry["figures"]:
            assert what and where and value not in (None, "")
        assert entry["figures"] or entry.get("missing"), key  # a figure, or why not
    t4 = {what: value for what, value, _ in paper["table4"]["figures"]}
    assert t4["NewsRoom, vanilla B"] == 1.08 and t4["LAMBADA, vanilla B"] == 3.12


def test_traces_are_recorded_once_then_cached(tmp_path: Path) -> None:
    from test_bench_real import EOS, _tiny

    bench = bench_kim
    pset = bench.PromptSet("mini", ((5, 6, 7, 8), (9, 10, 11)), ("x", "y"), ("m0", "m1"), "test")
    fields = {"model": "tiny", "heads": "random", "K": 4, "max_new_tokens": 6}
    calls: list[int] = []

    def load() -> Any:
        calls.append(1)
        return _tiny()

    trace, info = bench.ensure_trace(pset, fields, tmp_path, load, EOS)
    assert calls == [1] and not info["from_cache"] and trace.num_examples == 2
    assert trace.signature["set"] == "mini" and trace.signature["max_new_tokens"] == 6
    again, info2 = bench.ensure_trace(pset, fields, tmp_path, load, EOS)
    assert calls == [1] and info2["from_cache"] and info2["key"] == info["key"]
    assert np.array_equal(again.greedy_ids, trace.greedy_ids)
    other = bench.trace_key({**fields, "K": 8})
    assert other != info["key"]
    changed = bench.PromptSet("mini", ((5, 6, 7, 9), (9, 10, 11)), ("x", "y"), ("m0", "m1"), "t")
    assert bench.prompts_digest(changed) != bench.prompts_digest(pset)
