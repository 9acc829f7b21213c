"""Nothing silent, fourth pass (issue 42): each row of the issue's table, as filed, one test
each (each failed before its fix), and the two list cases (``--k 4,,8``, ``--k 4,4``).

Rows 8 and 9 (the doctor) are in test_doctor.py, row 4 (a damaged shard) in
tests/training/heads/test_heads_labels.py, the rename-time check of every kind of output in
tests/core/test_outputs.py; the rule for every command's options in test_option_probe.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from blockdraft.cli import main


def _run(capsys: Any, argv: list[str]) -> tuple[int, str]:
    """``main(argv)``: its exit code (argparse's too) and its stderr."""
    code, _, err = _run_out(capsys, argv)
    return code, err


def _run_out(capsys: Any, argv: list[str]) -> tuple[int, str, str]:
    """``main(argv)``: its exit code (argparse's too), its stdout and its stderr."""
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as e:
        code = int(e.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def _last(err: str) -> str:
    return err.rstrip("\n").split("\n")[-1]


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    from blockdraft.oracle import synthetic_trace

    synthetic_trace(tmp_path / "trace", num_examples=4, h=4, K=6, V=30, seed=5,
                    accuracy=[0.6, 0.4, 0.2], length=(10, 30))
    return tmp_path / "trace"


@pytest.fixture(scope="module")
def hf(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny Llama over a byte-level BPE (V = 320) and its Medusa heads, naming it."""
    pytest.importorskip("transformers")
    from test_cli_hf import _folder

    from blockdraft.models.hf.formats import read_heads, write_heads

    root = tmp_path_factory.mktemp("silent")
    model, heads = _folder(root, chat=False)
    named = write_heads(read_heads(heads), root / "named-heads", base_model=str(model))
    return {"model": model, "heads": named, "root": root}


# ------------------------------------------------------------------------------------ row 1


def test_row1_a_plot_that_appeared_meanwhile_is_not_replaced(
        trace: Path, tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """As filed: two ``sweep --plot race.png`` at once, race.png absent at the start; the later
    one replaced the earlier one's plot without --overwrite."""
    import blockdraft.oracle.plots as plots

    race = tmp_path / "race.png"
    real = plots.plot_sweep

    def meanwhile(result: Any, path: Any) -> Any:
        race.write_bytes(b"the other run's plot")  # the other sweep finished first
        return real(result, path)

    monkeypatch.setattr(plots, "plot_sweep", meanwhile)
    code, err = _run(capsys, ["sweep", str(trace), "--no-cache", "--plot", str(race)])
    assert code == 1, err
    assert _last(err).startswith(f"blockdraft: error: --plot {race}: ") and "appeared" in err
    assert "--overwrite" in _last(err)
    assert race.read_bytes() == b"the other run's plot"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    # with --overwrite the user said it may be replaced, whenever it appears
    code, err = _run(capsys, ["sweep", str(trace), "--no-cache", "--plot", str(race),
                              "--overwrite"])
    assert code == 0, err
    assert race.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_row1_a_trace_folder_that_appeared_meanwhile_is_not_replaced(
        tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same for a folder output (every output the rule covers, not only plots)."""
    import torch

    import blockdraft.oracle.record as record
    from blockdraft.models import BlockwiseConfig, BlockwiseLM, Tokenizer, save_model

    texts = [f"the value of item {i} is {i * 7 % 13}" for i in range(100)]
    tok = Tokenizer.train(texts, vocab_size=280)
    torch.manual_seed(0)
    save_model(BlockwiseLM(BlockwiseConfig.tiny(vocab_size=tok.vocab_size, h=3)),
               tmp_path / "m", tokenizer=tok)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the value of item 3\n")
    out = tmp_path / "trace"
    real = record.record_trace

    def meanwhile(*args: Any, **kwargs: Any) -> Any:
        out.mkdir()
        (out / "theirs.txt").write_text("another run's trace\n")
        return real(*args, **kwargs)

    monkeypatch.setattr(record, "record_trace", meanwhile)
    code, err = _run(capsys, ["trace", "--model", str(tmp_path / "m"), "--prompts",
                              str(prompts), "-o", str(out), "--max-new-tokens", "3", "--K", "4"])
    assert code == 1 and "appeared" in _last(err) and "-o" in _last(err), err
    assert sorted(p.name for p in out.iterdir()) == ["theirs.txt"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


# ------------------------------------------------------------------------------- rows 2, 3


def _lm_over(tmp_path: Path, fingerprint: str, vocab: int = 320) -> Path:
    """An n-gram LM over ids < 300 whose record names a tokenizer of V = ``vocab``."""
    from blockdraft.models.tokenizer import TokenizerInfo
    from blockdraft.training.ngram import train_ngram

    rng = np.random.default_rng(0)
    seqs = [rng.integers(2, 300, 20).tolist() for _ in range(40)]
    return train_ngram(seqs, tmp_path / f"lm-{fingerprint}", order=2, binary=False,
                       tokenizer=TokenizerInfo("other", vocab, fingerprint)).arpa


def test_row2_heads_package_checks_the_lms_vocabulary(hf: dict[str, Path], tmp_path: Path,
                                                      capsys: Any) -> None:
    """As filed: an LM over another tokenizer (same V, other tokens) packaged silently."""
    other = _lm_over(tmp_path, "0123456789abcdef")
    out = tmp_path / "pk"
    code, err = _run(capsys, ["heads", "package", str(hf["heads"]), "--ngram", str(other),
                              "-o", str(out)])
    assert code == 1, err
    assert "another tokenizer" in _last(err) and "fingerprint 0123456789abcdef" in err, err
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    # an LM over the base's own tokenizer is packaged, and loads
    from blockdraft.models import load_model, load_tokenizer

    mine = _lm_over(tmp_path, load_tokenizer(hf["model"]).fingerprint())
    code, err = _run(capsys, ["heads", "package", str(hf["heads"]), "--ngram", str(mine),
                              "-o", str(out)])
    assert code == 0, err
    assert load_model(hf["model"], heads=out).drafting.ngram is not None


def test_row2_the_same_check_when_the_model_loads(hf: dict[str, Path], tmp_path: Path,
                                                  capsys: Any) -> None:
    """A heads folder packaged by hand (or by an older blockdraft) with an LM over another
    tokenizer: load_model refuses it, and decode says so in one line."""
    from blockdraft.models import ModelError, load_model

    pk = tmp_path / "pk"
    shutil.copytree(hf["heads"], pk)
    lm = _lm_over(tmp_path, "0123456789abcdef")
    (pk / "ngram").mkdir()
    shutil.copy(lm, pk / "ngram" / lm.name)
    shutil.copy(lm.with_suffix(".vocab.json"), pk / "ngram" / lm.with_suffix(".vocab.json").name)
    config = json.loads((pk / "config.json").read_text())
    config["blockdraft_drafting"] = {"ngram": f"ngram/{lm.name}"}
    (pk / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match="another tokenizer"):
        load_model(hf["model"], heads=pk)
    code, err = _run(capsys, ["decode", "--model", str(hf["model"]), "--heads", str(pk),
                              "--prompt", "hello", "--max-new-tokens", "2"])
    assert code == 1 and "another tokenizer" in _last(err), err
    assert _last(err).startswith("blockdraft: error: the drafting recipe packaged with these "
                                 f"heads names the n-gram LM {pk.resolve() / 'ngram'}"), err
    # another V is refused as well, by V
    (pk / "ngram" / lm.with_suffix(".vocab.json").name).unlink()
    wide = _lm_over(tmp_path, "fedcba9876543210", vocab=999)
    shutil.copy(wide.with_suffix(".vocab.json"),
                pk / "ngram" / lm.with_suffix(".vocab.json").name)
    with pytest.raises(ModelError, match="V = 999"):
        load_model(hf["model"], heads=pk)


def test_row3_package_validates_tables_and_recipe(hf: dict[str, Path], tmp_path: Path,
                                                  capsys: Any) -> None:
    """As filed: a truncated acceptance table was copied and named in the config; the error
    came only at decode time."""
    from blockdraft.drafts import AcceptanceTables

    good = AcceptanceTables.uniform(4).save(tmp_path / "acc.json")
    truncated = tmp_path / "truncated.json"
    truncated.write_bytes(good.read_bytes()[: len(good.read_bytes()) // 2])
    out = tmp_path / "pk"
    code, err = _run(capsys, ["heads", "package", str(hf["heads"]), "--acceptance",
                              str(truncated), "-o", str(out)])
    assert code == 1 and "acceptance tables" in _last(err), err
    assert not out.exists()
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"k": 0, "tuned_on": "test"}))
    code, err = _run(capsys, ["heads", "package", str(hf["heads"]), "--recipe", str(recipe),
                              "-o", str(out)])
    assert code == 1 and "k must be an integer >= 1, got 0" in _last(err), err
    assert str(out) in _last(err) and ".partial" not in err  # the path the user named
    assert not out.exists()
    code, err = _run(capsys, ["heads", "package", str(hf["heads"]), "--acceptance", str(good),
                              "-o", str(out)])
    assert code == 0 and (out / "acceptance.json").is_file(), err


# ------------------------------------------------------------------------------------ row 5


def test_row5_a_p_beyond_the_lattices_paths_is_refused(trace: Path, capsys: Any) -> None:
    """As filed: ``sweep --p 100000`` drew every path under the label p=100000."""
    code, err = _run(capsys, ["sweep", str(trace), "--no-cache", "--k", "2,3", "--p",
                              "2,100"])
    assert code == 2, err  # no lattice of the grid holds 100 paths: refused
    assert _last(err) == ("blockdraft: error: --p 100: a lattice of k = 3 arcs over the "
                          "trace's h - 1 = 3 drafted slots has 27 paths, so it must be in "
                          "[1, 27]")
    # one that some lattices of the grid hold: said where it is lowered, and labelled so
    code, out, err = _run_out(capsys, ["sweep", str(trace), "--no-cache", "--k", "2,4", "--p",
                                       "10", "--json"])
    assert code == 0, err
    assert err.count("\n") == 1 and err.startswith("blockdraft: warning: ") and (
        "--p 10 with --k 2: 8 paths" in err), err
    rows = json.loads(out)["rows"]
    assert [r["label"] for r in rows] == ["heads k=2 p=8", "heads k=4 p=10"]


# ------------------------------------------------------------------------------- rows 6, 7


def test_row6_one_rule_for_the_shortlist(hf: dict[str, Path], tmp_path: Path,
                                         capsys: Any) -> None:
    """As filed: heads train clamped --shortlist 100000 silently while heads package refused
    999999, and --vocab full ignored --shortlist."""
    prompts = tmp_path / "missing.jsonl"  # never read: the command line is refused first
    train = ["heads", "train", "--base", str(hf["model"]), "--prompts", str(prompts), "-o",
             str(tmp_path / "out")]
    code, err = _run(capsys, [*train, "--vocab", "shortlist", "--shortlist", "100000"])
    assert code == 2, err
    expected = (f"--shortlist 100000: the base {hf['model']} has a vocabulary of V = 320 "
                "tokens, so it must be in [1, 320]")
    assert _last(err) == f"blockdraft: error: {expected}"
    code, err = _run(capsys, ["heads", "package", str(hf["heads"]), "--data",
                              str(tmp_path / "set"), "--shortlist", "100000", "-o",
                              str(tmp_path / "pk")])
    assert code == 2 and _last(err) == f"blockdraft: error: {expected}", err
    code, err = _run(capsys, [*train, "--vocab", "full", "--shortlist", "512"])
    assert code == 2 and _last(err).startswith(
        "blockdraft: error: --shortlist 512 applies only with --vocab shortlist"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_row7_distill_workers_without_ray_is_refused(tmp_path: Path, capsys: Any) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"source": "t", "prompt": "hi"}) + "\n")
    code, err = _run(capsys, ["heads", "distill", "--prompts", str(prompts), "--workers", "3",
                              "--base", str(tmp_path / "no-base"), "--folder",
                              str(tmp_path / "set")])
    assert code == 2, err
    assert _last(err).startswith("blockdraft: error: --workers 3 applies only with --ray")
    assert not (tmp_path / "set").exists()


# ----------------------------------------------------------------------------------- row 10


def _arpa_over(trace: Path, tmp_path: Path) -> Path:
    from blockdraft.oracle import Trace
    from blockdraft.training.ngram import train_ngram

    opened = Trace.open(trace)
    seqs = [np.concatenate([opened[i].prompt_ids, opened[i].greedy_ids]).tolist()
            for i in range(opened.num_examples)]
    return train_ngram(seqs, tmp_path / "lm", order=2, binary=False).arpa


def _native_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from blockdraft.rescorers.ngram import native

    monkeypatch.setenv("BLOCKDRAFT_NATIVE_LIB", str(tmp_path / "missing.so"))
    monkeypatch.setattr(native, "_warned", False)
    native._load.cache_clear()
    monkeypatch.setattr(native, "_load", native._load)  # cleared again when the test ends


def _sweep_stderr(capfd: Any, argv: list[str]) -> str:
    capfd.readouterr()
    assert main(argv) == 0
    return capfd.readouterr().err


@pytest.mark.parametrize("engine", [["--workers", "2", "--shards", "2"]])
def test_row10_warnings_look_the_same_from_every_engine(
        engine: list[str], trace: Path, tmp_path: Path, capfd: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """As filed: with the native library missing, local workers showed the slow-path warning
    as a raw ``warnings`` line with the source path, and KenLM's loading lines once per
    worker."""
    from blockdraft.rescorers.ngram import native

    lm = _arpa_over(trace, tmp_path)
    _native_missing(monkeypatch, tmp_path)
    try:
        argv = ["sweep", str(trace), "--no-cache", "--k", "2", "--p", "2", "--lm", str(lm),
                "--json"]
        workers = _sweep_stderr(capfd, [*argv, *engine])
        serial = _sweep_stderr(capfd, argv)
    finally:
        native._load.cache_clear()
    ours = [ln for ln in serial.splitlines() if ln.startswith("blockdraft: ")]
    assert len(ours) == 1 and ours[0].startswith(
        "blockdraft: warning: the native p-best search library is missing"), serial
    assert [ln for ln in workers.splitlines() if ln.startswith("blockdraft: ")] == ours
    assert "Warning:" not in workers and "warnings.warn" not in workers, workers
    assert workers.count("Reading ") <= max(1, serial.count("Reading ")), workers


@pytest.mark.slow
def test_row10_on_ray_too(trace: Path, tmp_path: Path, capfd: Any,
                          monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray")
    test_row10_warnings_look_the_same_from_every_engine(
        ["--ray", "--workers", "2", "--shards", "2"], trace, tmp_path, capfd, monkeypatch)


# ----------------------------------------------------------------------------------- row 11


def test_row11_every_invalid_value_and_conflict_exits_2(trace: Path, tmp_path: Path,
                                                        capsys: Any) -> None:
    """As filed: --alpha nan gave 2 but --alpha -1 gave 1; --budget 0 gave 2 but --budget 1
    gave 1; heads distill --ray --max-tokens 100 gave 1, after formatting the prompts."""
    for extra in (["--alpha", "-1", "--lm", "x.arpa"], ["--alpha", "nan"],
                  ["--strategy", "tree", "--budget", "1"], ["--budget", "0"],
                  ["--strategy", "tree", "--budget", "4,4"]):
        code, err = _run(capsys, ["sweep", str(trace), "--no-cache", *extra])
        assert code == 2, (extra, err)
        assert extra[1] in err
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("not json\n")  # never read: refused before any work
    code, err = _run(capsys, ["heads", "distill", "--prompts", str(prompts), "--ray",
                              "--max-tokens", "100", "--base", str(tmp_path / "no-base"),
                              "--folder", str(tmp_path / "set")])
    assert code == 2 and _last(err).startswith("blockdraft: error: --max-tokens 100 "), err
    assert "not json" not in err and not (tmp_path / "set").exists()


def test_the_list_cases(trace: Path, capsys: Any) -> None:
    """``--k 4,,8`` was accepted (the empty item dropped) and ``--k 4,4`` merged silently."""
    code, err = _run(capsys, ["sweep", str(trace), "--no-cache", "--k", "4,,8"])
    assert code == 2 and "argument --k: item 2 of '4,,8' is empty" in err, err
    code, err = _run(capsys, ["sweep", str(trace), "--no-cache", "--k", "4,4"])
    assert code == 2 and "argument --k: '4' appears twice in '4,4'" in err, err
    code, err = _run(capsys, ["oracle", str(trace), "--k", "2,2"])
    assert code == 2 and "appears twice" in err, err


# ----------------------------------------------------------------------------------- row 12


def test_row12_a_prompts_file_is_named_as_prompts(tmp_path: Path, capsys: Any) -> None:
    """As filed: ``trace --prompts EMPTY.txt`` said "the corpus has no non-empty lines"."""
    import torch

    from blockdraft.models import BlockwiseConfig, BlockwiseLM, Tokenizer, save_model

    tok = Tokenizer.train([f"item {i} is {i % 7}" for i in range(100)], vocab_size=270)
    torch.manual_seed(0)
    save_model(BlockwiseLM(BlockwiseConfig.tiny(vocab_size=tok.vocab_size, h=3)),
               tmp_path / "m", tokenizer=tok)
    empty = tmp_path / "EMPTY.txt"
    empty.write_text("\n  \n")
    code, err = _run(capsys, ["trace", "--model", str(tmp_path / "m"), "--prompts", str(empty),
                              "-o", str(tmp_path / "t")])
    assert code == 1 and _last(err).startswith(f"blockdraft: error: --prompts {empty}: "), err
    assert "corpus" not in err and not (tmp_path / "t").exists()


def test_row12_ray_auto_without_a_cluster_speaks_of_ray(trace: Path, capsys: Any,
                                                       monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    """As filed: Ray's own text said to set "the `--address` flag", which sweep lacks."""
    pytest.importorskip("ray")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    code, err = _run(capsys, ["sweep", str(trace), "--no-cache", "--ray", "auto"])
    assert code == 1 and _last(err).startswith("blockdraft: error: --ray auto: "), err
    assert "--address" not in err and "ray start --head" in err

