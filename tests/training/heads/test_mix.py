"""The prompt mix: the declared weights, determinism, only pretraining text, the record."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from blockdraft.cli import main
from blockdraft.training.errors import TrainingError
from blockdraft.training.heads.mix import DEFAULT_WEIGHTS, KINDS, build_mix, write_mix
from data_testlib import mini_shared_data


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """A shared-data folder in miniature: each corpus, the distillation prompt files, and an
    evaluation file that must never be read."""
    root = mini_shared_data(tmp_path / "data")
    (root / "wmt14_ende").mkdir()
    (root / "wmt14_ende/newstest2014.en").write_text("EVALUATION TEXT MUST NOT APPEAR\n")
    return root


def test_the_mix_follows_the_weights_and_the_seed(data: Path) -> None:
    prompts, record = build_mix(data, 400, seed=3)
    assert len(prompts) == 400 and sum(record["counts"].values()) == 400
    kinds = Counter(p["source"].split(":")[0] for p in prompts)
    for kind in KINDS:
        assert kinds[kind] == record["counts"][kind]
        assert abs(kinds[kind] - 400 * DEFAULT_WEIGHTS[kind]) <= 1, kind
    assert record["weights"] == pytest.approx(DEFAULT_WEIGHTS)
    assert sum(record["origins"].values()) == 400
    assert not any("EVALUATION" in p["prompt"] for p in prompts)
    assert all(f.startswith(("openstax", "more/", "tinyshakespeare"))
               for f in record["files"]["corpus"])
    again, _ = build_mix(data, 400, seed=3)
    assert again == prompts
    other, _ = build_mix(data, 400, seed=4)
    assert other != prompts
    only, rec = build_mix(data, 50, {"reasoning": 1.0}, seed=0)
    assert rec["counts"]["reasoning"] == 50 and all(
        p["source"] == "reasoning:gsm8k-train" and "apples" in p["prompt"] for p in only)
    assert not any(p["source"].startswith("t0") for p in build_mix(
        data, 200, {**DEFAULT_WEIGHTS, "t0": 0.0}, seed=1)[0])


def test_bad_settings(data: Path, tmp_path: Path) -> None:
    with pytest.raises(TrainingError, match="unknown prompt kind"):
        build_mix(data, 10, {"poetry": 1.0})
    with pytest.raises(TrainingError, match="positive sum"):
        build_mix(data, 10, {"t0": 0.0})
    with pytest.raises(TrainingError, match="point --data"):
        build_mix(tmp_path / "nowhere", 10)
    for f in (data / "corpus/more/python-docs").iterdir():
        f.write_text("short\n")
    with pytest.raises(TrainingError, match="nothing to make these prompts of"):
        build_mix(data, 50, {"howto": 1.0})


def test_the_command_writes_the_prompts_and_their_record(data: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "mix.jsonl"
    assert main(["heads", "prompts", "--data", str(data), "-n", "30", "-o", str(out),
                 "--weights", "explain=1,rewrite=1", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 30 and {x["source"].split(":")[0] for x in lines} == {"explain",
                                                                              "rewrite"}
    record = json.loads(Path(str(out) + ".mix.json").read_text())
    assert record["counts"] == shown["counts"] and "heads prompts" in record["command"]
    before = out.read_text()
    assert main(["heads", "prompts", "--data", str(data), "-n", "5", "-o", str(out)]) == 1
    assert "already" in capsys.readouterr().err and out.read_text() == before
    with pytest.raises(SystemExit) as e:  # issue 42: an invalid value, at the parser: 2
        main(["heads", "prompts", "--data", str(data), "-o", str(tmp_path / "x.jsonl"),
              "--weights", "explain"])
    assert e.value.code == 2 and "KIND=NUMBER" in capsys.readouterr().err
    write_mix(tmp_path / "y.jsonl", lines[:2], {"n": 2})
    assert len((tmp_path / "y.jsonl").read_text().splitlines()) == 2
