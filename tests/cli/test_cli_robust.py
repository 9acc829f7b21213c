"""Nothing lost, nothing silently wrong: outputs survive failed and interrupted runs, errors
are one line with exit code 1 (2 for usage, 130 interrupted), and ``--json`` is strict."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from blockdraft.cli import main
from blockdraft.lattice.io import save_lattice


def _one_line_error(capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    err = capsys.readouterr().err
    assert err.startswith("blockdraft: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    return err


def _strict_json(text: str) -> object:
    def refuse(name: str) -> object:
        raise AssertionError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(f.relative_to(folder)): f.read_bytes() for f in sorted(folder.rglob("*"))
            if f.is_file()}


# ---------------------------------------------------------------------------- a tiny model
@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved tiny BlockwiseLM (max_seq_len = 64) with its tokenizer."""
    import torch

    from blockdraft.models import BlockwiseConfig, BlockwiseLM, Tokenizer, save_model

    root = tmp_path_factory.mktemp("tiny")
    texts = [f"the value of item {i} is {i * 7 % 13} and the next one follows" for i in range(200)]
    tok = Tokenizer.train(texts, vocab_size=280)
    torch.manual_seed(0)
    config = BlockwiseConfig.tiny(vocab_size=tok.vocab_size, h=3)
    model = BlockwiseLM(config)
    save_model(model, root / "m", tokenizer=tok)
    return root / "m"


def _trace_args(model: Path, prompts: Path, out: Path, *extra: str) -> list[str]:
    return ["trace", "--model", str(model), "--prompts", str(prompts), "-o", str(out),
            "--max-new-tokens", "6", "--K", "4", *extra]


# ---------------------------------------------------------------------------- trace
def test_trace_overwrite_that_fails_keeps_the_old_trace(tiny, tmp_path, capsys):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the value of item 3\nthe next one\n")
    out = tmp_path / "trace"
    assert main(_trace_args(tiny, prompts, out)) == 0
    capsys.readouterr()
    before = _tree(out)
    # Without --overwrite: refused, naming the flag (not the library's overwrite=True).
    assert main(_trace_args(tiny, prompts, out)) == 1
    err = _one_line_error(capsys, "--overwrite")
    assert "overwrite=True" not in err
    # A prompt longer than the context: refused with a sensible hint, old trace intact.
    long = tmp_path / "long.txt"
    long.write_text("the value of item 3\n" + " ".join(["item"] * 400) + "\n")
    assert main(_trace_args(tiny, long, out, "--overwrite")) == 1
    err = _one_line_error(capsys, "more than max_seq_len", "shorten the prompt")
    assert "<= -" not in err
    assert _tree(out) == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    # Ctrl-C mid-run (a test double for the model's forward): exit 130, old trace intact.
    import blockdraft.models.generate as generate

    real = generate.greedy_generate
    calls = []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    generate.greedy_generate = interrupted
    try:
        assert main(_trace_args(tiny, prompts, out, "--overwrite")) == 130
    finally:
        generate.greedy_generate = real
    assert capsys.readouterr().err == "blockdraft: interrupted\n"
    assert _tree(out) == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    # A good --overwrite replaces it and reports what loads.
    assert main(_trace_args(tiny, prompts, out, "--overwrite", "--max-new-tokens", "3")) == 0
    assert "2 examples" in capsys.readouterr().out
    assert _tree(out) != before


def test_trace_input_encoding(tiny, tmp_path, capsys):
    from blockdraft.models import load_tokenizer
    from blockdraft.oracle import Trace

    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"the value\nof item \xff 3\n")
    assert main(_trace_args(tiny, bad, tmp_path / "t1")) == 1
    _one_line_error(capsys, f"{bad}:2:", "not UTF-8")
    # A byte-order mark is no token of the first prompt.
    bom = tmp_path / "bom.txt"
    bom.write_bytes("\ufeffthe value of item 3\n".encode())
    assert main(_trace_args(tiny, bom, tmp_path / "t2")) == 0
    tok = load_tokenizer(tiny)
    assert Trace.open(tmp_path / "t2")[0].prompt_ids.tolist() == tok.encode("the value of item 3")


def _wait_for(predicate, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 120
    while not predicate():
        assert proc.poll() is None, f"exited early: {proc.stderr.read() if proc.stderr else ''}"
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_trace_killed_mid_run_keeps_the_old_trace(tiny, tmp_path, capsys, sig):
    """A real process, really killed while it writes the new trace beside the old one."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the value of item 3\n")
    out = tmp_path / "trace"
    assert main(_trace_args(tiny, prompts, out)) == 0
    before = _tree(out)
    many = tmp_path / "many.txt"
    many.write_text("".join(f"the value of item {i}\n" for i in range(400)))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "blockdraft.cli",
                             *_trace_args(tiny, many, out, "--overwrite", "--max-new-tokens",
                                          "40")], env=env, stderr=subprocess.PIPE)
    try:
        _wait_for(lambda: any(p.name.endswith(".partial") for p in tmp_path.iterdir()), proc,
                  "the writer never started")
        time.sleep(0.5)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _tree(out) == before
    if sig == signal.SIGTERM:
        assert proc.returncode == 130 and err.decode() == "blockdraft: interrupted\n"
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    else:  # no cleanup ran; the next writer sweeps the dead one's folder
        assert main(_trace_args(tiny, prompts, out, "--overwrite")) == 0
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
        assert _tree(out).keys() == before.keys()


# ---------------------------------------------------------------------------- train
def test_train_refuses_to_replace_a_model_without_overwrite(tmp_path, capsys, monkeypatch):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"the value of item {i} is {i % 7}" for i in range(300)))
    out = tmp_path / "model"
    args = ["train", "--corpus", str(corpus), "-o", str(out), "--preset", "tiny", "--steps",
            "2", "--vocab-size", "270", "--batch-size", "2", "--seq-len", "16", "--json"]
    assert main(args) == 0
    capsys.readouterr()
    before = _tree(out)
    assert main(args) == 1
    _one_line_error(capsys, "--resume", "--overwrite")
    assert _tree(out) == before
    # --resume continues the finished checkpoint: nothing left to train, so the loss is not
    # a number; the JSON still parses strictly (null plus a reason).
    assert main(args + ["--resume"]) == 0
    res = _strict_json(capsys.readouterr().out)
    assert isinstance(res, dict) and res["final_loss"] is None
    assert res["final_loss_reason"].startswith("NaN")
    before = _tree(out)
    # --overwrite that fails mid-training (a test double): the old model stays, byte for byte.
    import blockdraft.training as recipes

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(recipes, "train_and_save", boom)
    assert main(args + ["--overwrite"]) == 130
    assert _tree(out) == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    monkeypatch.undo()
    assert main(args + ["--overwrite", "--seed", "1"]) == 0
    assert _strict_json(capsys.readouterr().out)["out"] == str(out)
    assert _tree(out) != before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


# ---------------------------------------------------------------------------- no tracebacks
@pytest.mark.parametrize("command", ["decode", "trace", "train"])
def test_device_errors_are_one_line(command, tiny, tmp_path, capsys):
    import torch

    base = {"decode": ["decode", "--model", str(tiny), "--prompt", "the value"],
            "trace": _trace_args(tiny, tmp_path / "p.txt", tmp_path / "t"),
            "train": ["train", "--corpus", str(tmp_path / "c.txt"), "-o", str(tmp_path / "o")]
            }[command]
    (tmp_path / "p.txt").write_text("the value\n")
    (tmp_path / "c.txt").write_text("the value of item\n" * 50)
    with pytest.raises(SystemExit) as e:
        main(base + ["--device", "tpu"])
    assert e.value.code == 2
    assert "unknown device 'tpu'" in capsys.readouterr().err
    if torch.cuda.is_available():
        return
    assert main(base + ["--device", "cuda"]) == 1
    _one_line_error(capsys, "--device cuda", "CUDA is not available", "--device cpu")
    assert not (tmp_path / "o").exists() and not (tmp_path / "t").exists()


def test_decode_prompt_that_is_not_utf8(tiny, capsys):
    prompt = b"abc\xff\xfe".decode("utf-8", "surrogateescape")  # what Python makes of argv
    assert main(["decode", "--model", str(tiny), "--prompt", prompt]) == 1
    _one_line_error(capsys, "--prompt", "\\xff", "not UTF-8")


def test_decode_prompt_bytes_from_a_real_argv(tiny):
    proc = subprocess.run([sys.executable, "-m", "blockdraft.cli", "decode", "--model",
                           str(tiny), "--prompt", b"abc\xff\xfe"], capture_output=True,
                          check=False)
    assert proc.returncode == 1
    assert proc.stderr.count(b"\n") == 1 and b"not UTF-8" in proc.stderr


@pytest.mark.parametrize("n", ["0", "-3"])
def test_bench_n_must_be_positive(n, capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", "rescore", "--lm", "x", "--n", n])
    assert e.value.code == 2
    assert "positive integer" in capsys.readouterr().err


def test_rescore_with_a_folder_as_lm(tmp_path, capsys):
    from blockdraft.lattice import SausageLattice

    lat = tmp_path / "lat.json"
    save_lattice(SausageLattice(tokens=np.array([[1]]), scores=np.zeros((1, 1))), lat)
    (tmp_path / "lms").mkdir()
    (tmp_path / "lms" / "lm4.arpa").write_text("")
    assert main(["rescore", str(lat), "--lm", str(tmp_path / "lms")]) == 1
    err = _one_line_error(capsys, "is a folder", "lm4.arpa")
    assert "does not exist" not in err


def test_ngram_train_text_that_is_not_utf8(tmp_path, tiny, capsys):
    text = tmp_path / "corpus.txt"
    text.write_bytes(b"fine line\nanother\nbad \xe9 byte\n")
    assert main(["ngram", "train", "--text", str(text), "--tokenizer", str(tiny), "-o",
                 str(tmp_path / "lm")]) == 1
    _one_line_error(capsys, f"{text}:3:", "not UTF-8", "iconv")
    assert [p.name for p in tmp_path.iterdir()] == ["corpus.txt"]


def test_an_unexpected_exception_is_one_line(monkeypatch, capsys):
    import blockdraft.cli.bench as bench

    def bug(args):
        raise IndexError("list index out of range")

    monkeypatch.setattr(bench, "cmd_bench_rescore", bug)  # bound when main builds the parser
    assert main(["bench", "rescore", "--lm", "x"]) == 1
    _one_line_error(capsys, "IndexError: list index out of range", "report it")


def test_atomic_write_errors_name_the_destination(tmp_path, monkeypatch):
    from blockdraft.core import files

    with pytest.raises(FileNotFoundError, match=r"cannot write .*nowhere/x\.json"):
        files.write_text_atomic(tmp_path / "nowhere" / "x.json", "{}")

    def denied(path, mode="r", *a, **k):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr("builtins.open", denied)
    with pytest.raises(PermissionError) as e:
        files.write_text_atomic(tmp_path / "x.json", "{}")
    msg = str(e.value)
    assert str(tmp_path / "x.json") in msg and ".tmp" not in msg and "writable" in msg
    monkeypatch.undo()
    with pytest.raises(PermissionError) as e:
        with files.atomic_path(tmp_path / "y.bin") as tmp:
            tmp.write_bytes(b"1")
            monkeypatch.setattr(os, "replace", lambda a, b: (_ for _ in ()).throw(
                PermissionError(13, "Permission denied", str(a), str(b))))
    monkeypatch.undo()
    assert str(tmp_path / "y.bin") in str(e.value) and ".tmp'" not in str(e.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into read-only folders")
def test_read_only_folder_is_named(tmp_path, capsys):
    from blockdraft.core import files

    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(PermissionError, match=str(ro / "x.json")):
            files.write_text_atomic(ro / "x.json", "{}")
    finally:
        ro.chmod(0o755)


# ---------------------------------------------------------------------------- output formats
def test_plot_suffix_decides_the_format(tmp_path, capsys):
    from blockdraft.oracle import synthetic_trace

    synthetic_trace(tmp_path / "trace", num_examples=3, h=3, K=4, V=30, seed=1)
    pdf, svg = tmp_path / "c.pdf", tmp_path / "e.svg"
    assert main(["oracle", str(tmp_path / "trace"), "--k", "1,2", "--plot", str(pdf)]) == 0
    assert pdf.read_bytes()[:5] == b"%PDF-"
    assert main(["entropy", str(tmp_path / "trace"), "--plot", str(svg)]) == 0
    assert b"<svg" in svg.read_bytes()[:2000]
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:  # issue 42: an invalid value, at the parser: 2
        main(["oracle", str(tmp_path / "trace"), "--plot", str(tmp_path / "c.jpg")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "argument --plot:" in err and "unsupported suffix .jpg" in err
    assert ".png, .pdf, .svg" in err and "Traceback" not in err
    assert not (tmp_path / "c.jpg").exists()


def test_print_json_is_strict():
    from blockdraft.cli.common import to_json

    text = to_json({"b": float("nan"), "xs": np.array([1.0, np.inf]), "ok": 2.5,
                    "inner": {"v": -np.inf}})
    out = _strict_json(text)
    assert out == {"b": None, "b_reason": "NaN: not a finite number, written as null",
                   "xs": [1.0, None], "xs_reason": "non-finite numbers written as null: [1] "
                   "Infinity", "ok": 2.5,
                   "inner": {"v": None, "v_reason": "-Infinity: not a finite number, written "
                             "as null"}}


# ---------------------------------------------------------------------------- issue 23
def test_an_unexpected_exception_of_a_module_names_its_module(monkeypatch, capsys):
    """struct.error printed as "error: error: ..." (issue 23 item 3)."""
    import struct

    import blockdraft.cli.bench as bench

    def bug(args):
        raise struct.error("unpack_from requires a buffer of at least 2008 bytes")

    monkeypatch.setattr(bench, "cmd_bench_rescore", bug)
    assert main(["bench", "rescore", "--lm", "x"]) == 1
    err = _one_line_error(capsys, "blockdraft: error: struct.error: unpack_from", "report it")
    assert "error: error:" not in err


def test_a_missing_model_path_says_so_even_with_heads(tmp_path, monkeypatch, capsys):
    """Issue 23 item 2: it said "'/nonexistent' is a blockdraft checkpoint with its own
    heads; heads= applies to Hugging Face models only"."""
    heads = tmp_path / "heads"
    heads.mkdir()
    missing = tmp_path / "nonexistent"
    assert main(["decode", "--model", str(missing), "--heads", str(heads), "--prompt",
                 "x"]) == 1
    err = _one_line_error(capsys, f"the model path '{missing}' does not exist")
    assert "checkpoint" not in err
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--model", "./typo_dir", "--heads", str(heads), "--out",
                 str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err  # the demo's progress lines, then the error
    assert err.splitlines()[-1].startswith("blockdraft: error: the model path './typo_dir' "
                                           "does not exist") and "checkpoint" not in err
    assert main(["decode", "--model", "typo", "--prompt", "x"]) == 1
    _one_line_error(capsys, "unknown model 'typo': not a path", "smollm2")


def _lm_over(tok, path: Path, record: bool) -> Path:
    from blockdraft.rescorers.base import RescorerError
    from blockdraft.training.ngram.train import find_kenlm_tool, train_ngram

    try:
        find_kenlm_tool("lmplz")
    except RescorerError as e:
        pytest.skip(f"KenLM's lmplz is not built ({e})")
    texts = [f"the value of item {i} is {i * 7 % 13}" for i in range(100)]
    return train_ngram([tok.encode(t) for t in texts], path, order=3,
                       tokenizer=tok.info("tiny") if record else None).arpa


def test_decode_warns_when_the_lm_tokenizer_cannot_be_checked(tiny, tmp_path, capsys):
    """Issue 23 item 6: an LM without its tokenizer record was accepted silently."""
    from blockdraft.models import load_tokenizer

    tok = load_tokenizer(tiny)
    bare, recorded = _lm_over(tok, tmp_path / "bare", False), _lm_over(tok, tmp_path / "rec", True)
    argv = ["decode", "--model", str(tiny), "--prompt", "the value of item 4",
            "--max-new-tokens", "4", "--json"]
    capsys.readouterr()
    assert main([*argv, "--lm", str(bare)]) == 0
    err = capsys.readouterr().err
    assert err.startswith("blockdraft: warning: the LM bare.arpa has no tokenizer record "
                          "(bare.vocab.json)") and err.count("\n") == 1, err
    assert "cannot be checked" in err and "--tokenizer" in err
    assert main([*argv, "--lm", str(recorded)]) == 0
    assert capsys.readouterr().err == ""


def test_no_new_tokens_has_no_block_efficiency(tiny, capsys):
    """Issue 23 item 6: --max-new-tokens 0 reported B 0.000 (0.0 in --json)."""
    argv = ["decode", "--model", str(tiny), "--prompt", "the value", "--max-new-tokens", "0"]
    assert main([*argv, "--json"]) == 0
    out = _strict_json(capsys.readouterr().out)
    assert isinstance(out, dict) and out["tokens"] == []
    assert out["block_efficiency"] is None
    assert "no token was generated" in out["block_efficiency_reason"]
    assert main([*argv, "--compare-greedy"]) == 0
    text = capsys.readouterr().out
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip()
            for line in text.splitlines() if line.count("│") == 3}
    assert rows["block efficiency B"] == "n/a" and rows["speedup over greedy"] == "n/a"
    assert "0.000" not in rows["block efficiency B"]
    assert main([*argv[:-1], "3", "--json"]) == 0  # with tokens: a number, no reason
    out = _strict_json(capsys.readouterr().out)
    assert isinstance(out, dict) and out["block_efficiency"] >= 1.0
    assert "block_efficiency_reason" not in out


def test_a_criterion_missing_a_parameter_names_all_it_needs(tiny, capsys):
    """Issue 23 item 6: typical with eps alone named only delta."""
    for given in ("eps=0.1", "delta=0.3"):
        with pytest.raises(SystemExit) as e:  # issue 42: an invalid value, at the parser: 2
            main(["decode", "--model", str(tiny), "--prompt", "x", "--criterion",
                  f"typical:{given}"])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert "argument --criterion:" in err and "Traceback" not in err
        assert "typical needs parameter(s) ['eps', 'delta']" in err, err
