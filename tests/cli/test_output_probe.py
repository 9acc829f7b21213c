"""The output probe (issue 28): every command that writes an output, driven as a new user's bar
drives it, against the one rule of ``blockdraft.core.outputs``.

For each command: write a new output; run it again without ``--overwrite`` (refused, nothing
changed, sidecars included); put a file of the user's in a folder output and overwrite
(refused, naming it, nothing deleted); overwrite with a limit that stops the run early (the old
output stays, the exit code is not 0); overwrite and interrupt it at every moment an interrupt
can land (every rename into the output's folder: the old output stays byte for byte, exit 130,
no temporary left behind), until an overwrite completes (exit 0, the new output in place); and,
where a limit exists, a new output stopped early (kept, exit 3).

``test_every_writing_command_is_probed`` walks the command line's parser: a command added with
an output option and no probe here fails it, so the next command inherits the rule.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from data_testlib import mini_shared_data

pytest.importorskip("transformers")

from test_cli_hf import TEXT, _folder  # noqa: E402

from blockdraft.cli import main  # noqa: E402
from blockdraft.cli.parser import commands  # noqa: E402
from blockdraft.lattice.io import save_lattice

OUTPUT_OPTIONS = {"-o", "--out", "--output", "--plot", "--folder"}
QUESTIONS = ["What is a list?", "How do dictionaries work?", "Where is Paris?",
             "Why does water boil?", "What is a function?", "How far is the moon?",
             "What is a tuple?", "How do I sort a list?", "What is the Seine?",
             "Who wrote Hamlet?"]

World = dict[str, Path]
Argv = Callable[[World, Path, int], list[str]]


@dataclass(frozen=True)
class Probe:
    """How to drive one writing command.

    Attributes:
        argv: ``(world, output, variant) -> argv`` without ``--overwrite``; variants 0, 1
            and 2 write different content (with other settings).
        kind: ``"folder"``, ``"file"`` or ``"prefix"`` (``ngram train``: PREFIX.*).
        sidecars: suffixes of the files written beside a file output.
        limit: arguments that stop the run before its work is done (a partial output).
        needs: a KenLM tool the command runs (skipped without it).
    """

    argv: Argv
    kind: str = "folder"
    sidecars: tuple[str, ...] = ()
    limit: tuple[str, ...] = ()
    needs: str = ""


def _data_args(w: World) -> list[str]:
    return ["--base", str(w["model"]), "--prompts", str(w["prompts"]), "--heldout-min", "2",
            "--heldout-fraction", "0.2", "--shard-size", "4", "--batch-size", "4",
            "--threads", "1"]


PROBES: dict[str, Probe] = {
    "oracle": Probe(lambda w, o, v: ["oracle", str(w["trace"]), "--k", "1,2" if v else "1",
                                     "--plot", str(o)], kind="file"),
    "entropy": Probe(lambda w, o, v: ["entropy", str(w["trace"]), "--plot", str(o),
                                      *(["--all-positions"] if v else [])], kind="file"),
    "sweep": Probe(lambda w, o, v: ["sweep", str(w["trace"]), "--no-cache", "--p", "1,2",
                                    "--k", "2,3" if v else "2", "--plot", str(o)],
                   kind="file"),
    "lattice draw": Probe(lambda w, o, v: ["lattice", "draw", str(w["lattice"]), "-o", str(o),
                                           *(["--reference", "1,3,5"] if v else [])],
                          kind="file"),
    "ngram train": Probe(lambda w, o, v: ["ngram", "train", "--ids", str(w["ids"]), "--order",
                                          str(2 + v), "-o", str(o)], kind="prefix",
                         needs="lmplz"),
    "ngram interpolate": Probe(lambda w, o, v: [  # of two LMs trained here, orders 2 and 3
        "ngram", "interpolate",
        *[str(w["ids"].with_name(f"lm{n}.arpa")) for n in (2, 3) if main([
            "ngram", "train", "--ids", str(w["ids"]), "--order", str(n), "-o",
            str(w["ids"].with_name(f"lm{n}")), "--overwrite", "--json"]) == 0],
        "--weight", str(0.25 + 0.5 * v), "-o", str(o)], kind="prefix", needs="lmplz"),
    "train": Probe(lambda w, o, v: [
        "train", "--corpus", str(w["corpus"]), "-o", str(o), "--preset", "tiny", "--steps",
        "2", "--batch-size", "2", "--seq-len", "8", "--vocab-size", "300", "--threads", "1",
        "--eval-fraction", "0.3",
        "--checkpoint-interval", "1", "--seed", str(v)]),
    "trace": Probe(lambda w, o, v: [
        "trace", "--model", str(w["model"]), "--heads", str(w["heads"]), "--prompts",
        str(w["lines"]), "-o", str(o), "--max-new-tokens", str(3 + v), "--K", "4",
        "--threads", "1"]),
    "heads prompts": Probe(lambda w, o, v: [
        "heads", "prompts", "--data", str(w["data"]), "-n", "6", "--weights",
        "explain=1,rewrite=1", "--seed", str(v), "-o", str(o)],
        kind="file", sidecars=(".mix.json",)),
    "heads questions": Probe(lambda w, o, v: [
        "heads", "questions", "--data", str(w["data"]), "--base", str(w["model"]), "-n",
        str(2 + v), "-o", str(o)], kind="file", sidecars=(".mix.json",)),
    "heads follow-ups": Probe(lambda w, o, v: [
        "heads", "follow-ups", "--distill", str(w["set"]), "--prompts", str(w["prompts"]),
        "--base", str(w["model"]), "-n", str(2 + v), "-o", str(o)],
        kind="file", sidecars=(".mix.json",)),
    "heads distill": Probe(lambda w, o, v: [
        "heads", "distill", *_data_args(w), "--max-new-tokens", str(8 - 2 * v), "--folder",
        str(o)], limit=("--max-tokens", "1")),
    "heads archive": Probe(lambda w, o, v: [
        "heads", "archive", str(w[("set", "set2", "set")[v]]), "-o", str(o)], kind="file"),
    "heads restore": Probe(lambda w, o, v: [
        "heads", "restore", str(w[("archive", "archive2", "archive")[v]]), "--prompts",
        str(w["prompts"]), "--base", str(w["model"]), "--batch-size", "3", "--threads", "1",
        "--folder", str(o)]),
    "heads label": Probe(lambda w, o, v: [
        "heads", "label", str(w["set"]), "--base", str(w["model"]), "--dtype",
        ("float32", "bfloat16", "float32")[v], "--batch-size", "2", "--threads", "1",
        "--folder", str(o)], limit=("--max-tokens", "1")),
    "heads train": Probe(lambda w, o, v: [
        "heads", "train", *_data_args(w), "--max-new-tokens", "8", "--data", str(w["set"]),
        "-o", str(o), "--heads", "2", "--steps", "4", "--batch", "8", "--eval-every", "2",
        "--eval-positions", "16", "--warmup", "1", "--lr", str(1e-3 * (1 + v))],
        limit=("--minutes", "0")),
    "heads curve": Probe(lambda w, o, v: [
        "heads", "curve", str(w["run"]), *([str(w["run2"])] if v else []), "--data",
        str(w["set"]), "--base", str(w["model"]), "-o", str(o), "--threads", "1"]),
    "heads package": Probe(lambda w, o, v: [
        "heads", "package", str(w["heads"]), "--data", str(w["set"]), "--shortlist",
        str(20 + v), "-o", str(o)]),
    "demo": Probe(lambda w, o, v: [
        "demo", "--model", str(w["model"]), "--heads", str(w["heads"]), "--runtime", "torch",
        "--corpus", str(w["corpus"]), "--prompt", "Where is Paris?", "--max-new-tokens",
        str(3 + v), "--threads", "1", "--out", str(o)], needs="lmplz"),
}




def test_every_writing_command_is_probed() -> None:
    """A command with an output option has --overwrite and a probe here."""
    writing = {}
    for name, parser in commands():
        options = {o for action in parser._actions for o in action.option_strings}
        if options & OUTPUT_OPTIONS:
            writing[name] = "--overwrite" in options
    assert writing == dict.fromkeys(PROBES, True)


# ------------------------------------------------------------------------------ the world


def _shared_data(root: Path) -> Path:
    """A shared-data folder in miniature (corpus passages and distillation prompt files, every
    kind of prompt ``heads prompts`` mixes)."""
    return mini_shared_data(root / "data")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """Everything the commands read, made once: a tiny Llama with heads, prompts, a
    distillation set and heads trained on it, a trace, a lattice, a corpus, token ids."""
    from blockdraft.lattice import SausageLattice
    from blockdraft.oracle import synthetic_trace

    root = tmp_path_factory.mktemp("probe")
    old_cache = os.environ.get("BLOCKDRAFT_CACHE")
    os.environ["BLOCKDRAFT_CACHE"] = str(root / "cache")
    model, heads = _folder(root, chat=True)
    w: World = {"model": model, "heads": heads, "data": _shared_data(root)}
    w["prompts"] = root / "prompts.jsonl"
    w["prompts"].write_text("".join(json.dumps({"source": "test", "prompt": q}) + "\n"
                                    for q in QUESTIONS))
    w["lines"] = root / "prompts.txt"
    w["lines"].write_text("\n".join(QUESTIONS[:2]) + "\n")
    w["corpus"] = root / "corpus.txt"
    w["corpus"].write_text("\n".join(TEXT) + "\n")
    w["ids"] = root / "ids.txt"
    w["ids"].write_text("\n".join(" ".join(str((i * j) % 11) for j in range(8))
                                  for i in range(60)))
    synthetic_trace(root / "trace", num_examples=3, h=3, K=4, V=30, seed=2)
    w["trace"] = root / "trace"
    w["lattice"] = root / "lat.json"
    save_lattice(SausageLattice(tokens=np.array([[1, 2], [3, 4], [5, 6]]),
                                scores=np.log(np.array([[1.0, 0.0], [0.6, 0.4], [0.7, 0.3]])
                                              + 1e-9)), w["lattice"])
    w["set"], w["run"] = root / "set", root / "run"
    assert main(["heads", "distill", *_data_args(w), "--max-new-tokens", "8", "--folder",
                 str(w["set"])]) == 0
    assert main(["heads", "train", *_data_args(w), "--max-new-tokens", "8", "--data",
                 str(w["set"]), "-o", str(w["run"]), "--heads", "2", "--steps", "2",
                 "--batch", "8", "--eval-every", "2", "--eval-positions", "16", "--warmup",
                 "1", "--json"]) == 0
    w["run2"] = Path(shutil.copytree(w["run"], root / "run2"))  # a second run, the same heads
    w["set2"] = root / "set2"  # another set (shorter answers) and both sets' answers archives
    assert main(["heads", "distill", *_data_args(w), "--max-new-tokens", "5", "--folder",
                 str(w["set2"])]) == 0
    for n, name in (("archive", "set"), ("archive2", "set2")):
        w[n] = root / f"{n}.npz"
        assert main(["heads", "archive", str(w[name]), "-o", str(w[n])]) == 0
    yield w
    if old_cache is None:
        os.environ.pop("BLOCKDRAFT_CACHE", None)
    else:
        os.environ["BLOCKDRAFT_CACHE"] = old_cache


@pytest.fixture
def no_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    """``heads questions`` and ``heads follow-ups`` with their content made up (a tiny random
    model asks no usable question and rarely ends an answer): the output rule is the test."""
    import blockdraft.training.heads.followups as followups
    import blockdraft.training.heads.questions as questions

    def made_up(n: int, kind: str) -> tuple[list[dict[str, str]], dict[str, Any]]:
        prompts = [{"source": f"{kind}:test", "prompt": f"{kind} {i}?"} for i in range(n)]
        return prompts, {"format": "blockdraft-prompt-mix", "n": n, "origins": {"test": n}}

    monkeypatch.setattr(questions, "self_instruct",
                        lambda base, data, n, **kw: made_up(n, "question"))
    monkeypatch.setattr(followups, "build_followups",
                        lambda folder, files, tok, n, **kw: made_up(n, "followup"))


# ------------------------------------------------------------------------------ the probe


def _snapshot(probe: Probe, out: Path) -> dict[str, bytes]:
    """What the output holds: a folder's files, a file and its sidecars, PREFIX.*."""
    if probe.kind == "folder":
        return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
                if p.is_file()}
    if probe.kind == "prefix":
        return {p.name: p.read_bytes() for p in sorted(out.parent.glob(out.name + ".*"))}
    files = [out, *(out.with_name(out.name + s) for s in probe.sidecars)]
    return {p.name: p.read_bytes() for p in files if p.exists()}


def _hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


class _Interrupt:
    """``os.replace`` that raises KeyboardInterrupt at its ``at``-th call into ``folder`` at a
    moment an interrupt can land (SIGINT not held back); counts those calls."""

    def __init__(self, folder: Path, at: int | None) -> None:
        self.folder, self.at, self.calls, self.fired = folder.resolve(), at, 0, False
        self.real = os.replace

    def __call__(self, src: Any, dst: Any, **kw: Any) -> None:
        inside = Path(os.fspath(dst)).resolve().is_relative_to(self.folder)
        held = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
        if inside and not held and not self.fired:
            self.calls += 1
            if self.calls == self.at:
                self.fired = True
                raise KeyboardInterrupt
        self.real(src, dst, **kw)


def _run(capsys: Any, argv: list[str], code: int, *needles: str) -> str:
    capsys.readouterr()
    got = main(argv)
    err = capsys.readouterr().err
    assert got == code, (argv, err)
    if code in (1, 3):
        last = err.rstrip("\n").split("\n")[-1]
        assert last.startswith("blockdraft: ") and "Traceback" not in err, err
        for needle in needles:
            assert needle in last, err
    return err


@pytest.mark.parametrize("name", sorted(PROBES))
def test_the_output_rule(name: str, world: World, tmp_path: Path, capsys: Any,
                         monkeypatch: pytest.MonkeyPatch, no_generation: None) -> None:
    probe = PROBES[name]
    if probe.needs:
        from blockdraft.rescorers.base import RescorerError
        from blockdraft.training.ngram.train import find_kenlm_tool

        try:
            find_kenlm_tool(probe.needs)
        except RescorerError as e:
            pytest.skip(f"KenLM's {probe.needs} is not built ({e})")
    work = tmp_path / "work"
    work.mkdir()
    suffix = {"oracle": ".png", "entropy": ".png", "sweep": ".png",
              "lattice draw": ".svg"}.get(name, "")
    out = work / f"out{suffix}"
    first, second = probe.argv(world, out, 0), probe.argv(world, out, 1)

    # 1. a new output
    _run(capsys, first, 0)
    old = _snapshot(probe, out)
    assert old

    # 2. again without --overwrite: refused before any work, nothing changed (sidecars too)
    _run(capsys, second, 1, "--overwrite")
    assert _snapshot(probe, out) == old
    if probe.sidecars:  # a sidecar alone is an output too
        aside = work / "aside"
        out.rename(aside)
        _run(capsys, second, 1, "--overwrite")
        aside.rename(out)
        assert _snapshot(probe, out) == old

    # 3. a file of the user's in a folder output: refused by name, never deleted
    if probe.kind == "folder":
        (out / "notes.txt").write_text("mine\n")
        _run(capsys, [*second, "--overwrite"], 1, "notes.txt")
        assert (out / "notes.txt").read_text() == "mine\n"
        (out / "notes.txt").unlink()
        assert _snapshot(probe, out) == old

    # 4. a limit stops the overwrite early: the old output stays, not exit 0
    if probe.limit:
        _run(capsys, [*second, *probe.limit, "--overwrite"], 1, "left as it was")
        assert _snapshot(probe, out) == old and _hidden(work) == []

    # 5. interrupted at every rename into the output's folder: the old output stays; the
    # first run that no interrupt reaches is complete and replaces it
    at = 1
    while True:
        interrupt = _Interrupt(work, at)
        monkeypatch.setattr(os, "replace", interrupt)
        try:
            code = main([*second, "--overwrite"])
        finally:
            monkeypatch.setattr(os, "replace", interrupt.real)
        capsys.readouterr()
        if not interrupt.fired:
            assert code == 0
            break
        assert code == 130, at
        assert _snapshot(probe, out) == old, f"interrupted at rename {at}"
        assert _hidden(work) == [], f"interrupted at rename {at}"
        at += 1
    new = _snapshot(probe, out)
    assert new and new != old and _hidden(work) == []
    # (a file and its sidecars are renamed with SIGINT held back: no moment to interrupt)
    assert at > 1 or probe.sidecars

    # 6. a new output stopped early by a limit: kept, sound, exit 3
    if probe.limit:
        fresh = work / "fresh"
        err = _run(capsys, [*probe.argv(world, fresh, 2), *probe.limit], 3, "stopped early",
                   "partial", "--resume")
        assert _snapshot(probe, fresh), err
        shutil.rmtree(fresh)
