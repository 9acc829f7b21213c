"""``blockdraft sweep``: the table, --json with a cost curve, --plot, the cache across runs,
local workers, and the arguments it refuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from blockdraft.cli import main
from blockdraft.oracle import Trace, simulate, synthetic_trace
from blockdraft.oracle.sweep import Resources, Setting, steps_digest, sweep

ROOT = Path(__file__).resolve().parents[2]
CURVE = ROOT / "benchmarks" / "results" / "costs" / "curve-ort32.json"


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    synthetic_trace(tmp_path / "trace", num_examples=5, h=4, K=6, V=30, seed=5,
                    accuracy=[0.6, 0.4, 0.2], length=(10, 30))
    return tmp_path / "trace"


def _run(capsys: Any, argv: list[str], code: int = 0) -> tuple[str, str]:
    capsys.readouterr()
    assert main(argv) == code
    out = capsys.readouterr()
    return out.out, out.err


def test_json_rows_equal_the_simulator(trace: Path, tmp_path: Path, capsys: Any) -> None:
    argv = ["sweep", str(trace), "--k", "2,4", "--p", "1,3", "--strategy",
            "heads,lookup,oracle", "--cache", str(tmp_path / "cache"), "--json"]
    if CURVE.is_file():
        argv += ["--cost", str(CURVE)]
    out, _ = _run(capsys, argv)
    doc = json.loads(out)
    labels = [r["label"] for r in doc["rows"]]
    assert labels == ["vanilla", "heads k=2 p=3", "heads k=4 p=3", "lookup", "oracle k=2",
                      "oracle k=4"]
    assert doc["computed"] == 6 and doc["engine"] == "serial"
    assert doc["command"].startswith("blockdraft sweep ")
    opened = Trace.open(trace)
    for row in doc["rows"]:
        setting = Setting.from_dict(row["setting"])
        direct = simulate(opened, setting.build(Resources()))
        assert row["block_efficiency"] == direct.block_efficiency
        assert row["steps_sha256"] == steps_digest(direct.steps)
        if CURVE.is_file():
            from blockdraft.models.cost import read_cost_curve

            heads = setting.strategy != "lookup"
            assert row["speedup"] == pytest.approx(
                direct.simulated_speedup(read_cost_curve(CURVE), heads))
    again, _ = _run(capsys, argv)  # the same command again: everything from the cache
    doc2 = json.loads(again)
    assert doc2["computed"] == 0 and all(r["cached"] for r in doc2["rows"])
    assert [r["block_efficiency"] for r in doc2["rows"]] == [
        r["block_efficiency"] for r in doc["rows"]]


def test_the_table_and_the_plot(trace: Path, tmp_path: Path, capsys: Any) -> None:
    plot = tmp_path / "sweep.png"
    out, _ = _run(capsys, ["sweep", str(trace), "--k", "2,4", "--p", "1,2", "--strategy",
                           "heads,tree", "--budget", "4,6", "--no-cache", "--plot", str(plot)])
    assert "(7 configurations, 5 examples)" in out and "7 computed, 0 from the cache" in out
    assert f"plot: {plot}" in out and "vanilla" in out
    b = sweep(trace, [Setting("tree", k=4, tree="confidence", budget=6)]).rows[0]
    assert f"{b.block_efficiency:.3f}" in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    _, err = _run(capsys, ["sweep", str(trace), "--no-cache", "--plot", str(plot)], 1)
    assert "--overwrite" in err  # the output rule: an existing plot is refused


def test_workers_equal_the_serial_run(trace: Path, capsys: Any) -> None:
    base = ["sweep", str(trace), "--k", "2,4", "--p", "1,3", "--strategy", "heads,combined",
            "--no-cache", "--json"]
    serial = json.loads(_run(capsys, base)[0])
    parallel = json.loads(_run(capsys, [*base, "--workers", "2", "--shards", "2"])[0])
    assert parallel["engine"] == "processes:2"
    for a, b in zip(serial["rows"], parallel["rows"], strict=True):
        assert a["steps_sha256"] == b["steps_sha256"] and a["head_acceptance"] == b[
            "head_acceptance"] and a["block_efficiency"] == b["block_efficiency"]


def test_an_unreachable_ray_cluster_is_one_error(trace: Path, capsys: Any) -> None:
    pytest.importorskip("ray", reason="Ray is the blockdraft[ray] extra; not installed")
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _, err = _run(capsys, ["sweep", str(trace), "--no-cache", "--ray", f"127.0.0.1:{port}"], 1)
    assert "no Ray cluster answers there" in err


@pytest.mark.parametrize(("extra", "message", "code"), [
    (["--k", "7"], "K = 6", 2),  # issue 42: every invalid value and every conflict exits 2
    (["--lm", "missing.bin"], "missing.bin does not exist", 1),  # a missing file: an error
    (["--cost-variant", "onnxruntime:float32"], "--cost-variant", 2),
    (["--cache", "c", "--no-cache"], "pass one of them", 2),
    (["--ray", "auto", "--workers", "2"], "--workers", 2),
    (["--plot", "x.gif"], "unsupported suffix", 2),
])
def test_refusals(trace: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                  extra: list[str], message: str, code: int) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["sweep", str(trace), "--no-cache" if "--cache" not in extra else "--json", *extra]
    capsys.readouterr()
    try:
        got = main(argv)
    except SystemExit as e:  # refused by the parser itself: usage on stderr, then the error
        got = int(e.code or 0)
    err = capsys.readouterr().err
    assert got == code, err
    assert message in err and err.rstrip("\n").split("\n")[-1].startswith(
        ("blockdraft: error:", "usage: ", "blockdraft sweep: error:")), err
    assert [p.name for p in tmp_path.iterdir()] == ["trace"]  # nothing made
