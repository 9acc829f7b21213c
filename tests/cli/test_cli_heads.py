"""``blockdraft heads distill|train|curve`` (cli/heads.py) and ``train --mode medusa`` through
it: end to end on a tiny Llama folder; nothing a user has is replaced without ``--overwrite``
or ``--resume``; a changed setting is refused by name; user errors are one line with exit 1,
an interrupt one line with exit 130, and an interrupted write leaves the old output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

from test_cli_hf import _folder  # noqa: E402

from blockdraft.cli import main  # noqa: E402

QUESTIONS = ["What is a list?", "How do dictionaries work?", "Where is Paris?",
             "Why does water boil?", "What is a function?", "How far is the moon?",
             "What is a tuple?", "How do I sort a list?", "What is the Seine?",
             "Who wrote Hamlet?"]


def _prompts(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"source": "test", "prompt": t}) + "\n" for t in texts),
                    encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny Llama folder with a chat template and a prompts file of 10 questions."""
    root = tmp_path_factory.mktemp("heads-cli")
    model, _ = _folder(root, chat=True)
    return {"model": model, "prompts": _prompts(root / "prompts.jsonl", QUESTIONS)}


def _data_args(base: dict[str, Path]) -> list[str]:
    return ["--base", str(base["model"]), "--prompts", str(base["prompts"]),
            "--max-new-tokens", "8", "--heldout-min", "2", "--heldout-fraction", "0.2",
            "--shard-size", "4", "--batch-size", "4", "--threads", "1"]


def _train_args(base: dict[str, Path], tmp: Path, out: Path) -> list[str]:
    return ["heads", "train", *_data_args(base), "-o", str(out), "--data", str(tmp / "data"),
            "--work", str(tmp / "work"), "--heads", "2", "--steps", "4", "--batch", "8",
            "--eval-every", "2", "--eval-positions", "16", "--warmup", "1", "--json"]


def _run(capsys: Any, argv: list[str], code: int = 0) -> Any:
    capsys.readouterr()
    got = main(argv)
    out = capsys.readouterr()
    assert got == code, out.err
    if code == 0 and "--json" in argv:
        return json.loads(out.out)
    return out


def _one_line(capsys_out: Any, *parts: str) -> None:
    """The error is one line, the last on stderr (progress and log lines may come before it),
    with no traceback; it holds every one of ``parts``."""
    err = capsys_out.err
    last = err.rstrip("\n").split("\n")[-1]
    assert err.endswith("\n") and last.startswith("blockdraft: "), err
    assert err.count("blockdraft: ") == 1 and "Traceback" not in err, err
    for part in parts:
        assert part in last, err


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_heads_train_distill_and_curve_end_to_end(base: dict[str, Path], tmp_path: Path,
                                                   capsys: Any) -> None:
    from blockdraft.models.hf import read_heads

    out = tmp_path / "heads"
    first = _run(capsys, _train_args(base, tmp_path, out))
    assert first["step"] == 4 and first["finished"] and first["out"] == str(out)
    assert read_heads(out).num_heads == 2
    assert {"config.json", "curve.json", "curve.png", "README.md"} <= set(_tree(out))
    assert "blockdraft heads train" in (out / "README.md").read_text()
    # the same command again: -o holds heads now, so it is refused, and left as it was
    before = _tree(out)
    _one_line(_run(capsys, _train_args(base, tmp_path, out), 1), "--resume", "--overwrite")
    assert _tree(out) == before
    # --resume continues the finished run (its checkpoint) and rewrites the same heads
    again = _run(capsys, [*_train_args(base, tmp_path, out), "--resume"])
    assert again["step"] == 4 and again["best_step"] == first["best_step"]
    # the data step alone, on the same distillation folder: continued with --resume only
    data = tmp_path / "data"
    _one_line(_run(capsys, ["heads", "distill", *_data_args(base), "--folder", str(data)], 1),
              "--resume", "--overwrite")
    res = _run(capsys, ["heads", "distill", *_data_args(base), "--folder", str(data),
                        "--resume", "--json"])
    assert res["folder"] == str(data) and res["shards_done"] == res["shards_planned"] == 3
    assert res["heldout_prompts"] == 2 and res["train_prompts"] == 8
    # a changed setting is refused, naming it with its old and new value
    changed = _run(capsys, ["heads", "distill", *_data_args(base), "--folder", str(data),
                            "--resume", "--max-new-tokens", "6"], 1)
    _one_line(changed, "other settings", "max_new_tokens=8 (now 6)")
    # the data curve of the heads folder and of the training folder
    curve = _run(capsys, ["heads", "curve", str(out), str(tmp_path / "work"), "--data",
                          str(data), "--base", str(base["model"]), "-o",
                          str(tmp_path / "curve"), "--json"])
    assert len(curve["runs"]) == 2 and curve["out"] == str(tmp_path / "curve")
    assert {"data_curve.json", "data_curve.md", "data_curve.png"} == set(
        _tree(tmp_path / "curve"))
    _one_line(_run(capsys, ["heads", "curve", str(out), "--data", str(data), "-o",
                            str(tmp_path / "curve")], 1), "--overwrite")


def test_train_mode_medusa_is_heads_train(base: dict[str, Path], tmp_path: Path,
                                          capsys: Any) -> None:
    """``train --mode medusa`` runs the same code path (and output rule) as ``heads train``:
    a folder of the user's notes given as -o with --resume is refused, not replaced."""
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "notes.txt").write_text("mine\n")
    argv = ["train", "--mode", "medusa", "--base", str(base["model"]), "--prompts",
            str(base["prompts"]), "-o", str(notes), "--h", "3", "--steps", "2",
            "--batch-size", "8", "--threads", "1", "--resume"]
    _one_line(_run(capsys, argv, 1), "holds no heads written by blockdraft heads train")
    assert _tree(notes) == {"notes.txt": b"mine\n"}


@pytest.mark.parametrize("target", ["prompts file", "notes folder", "heads folder"])
def test_heads_train_refuses_what_the_user_has(target: str, base: dict[str, Path],
                                               tmp_path: Path, capsys: Any,
                                               monkeypatch: Any) -> None:
    """Issue 23: -o given a prompts file, a folder holding the user's notes.txt, or trained
    heads: all refused before anything runs, and left untouched."""
    import blockdraft.training.heads as heads

    calls: list[Any] = []
    monkeypatch.setattr(heads, "train_medusa_heads", lambda *a, **k: calls.append(a))
    if target == "prompts file":
        out = _prompts(tmp_path / "mine.jsonl", QUESTIONS[:3])
    else:
        out = tmp_path / "out"
        out.mkdir()
        names = ["notes.txt"] if target == "notes folder" else [
            "config.json", "medusa_lm_head.safetensors", "curve.json"]
        for name in names:
            (out / name).write_text(f"{name}\n")
    before = out.read_bytes() if out.is_file() else _tree(out)
    argv = ["heads", "train", "--prompts", str(base["prompts"]), "-o", str(out)]
    err = _run(capsys, argv, 1)
    _one_line(err, str(out))
    if target != "prompts file":
        _one_line(err, "--overwrite")
        # --resume continues heads of an earlier run only: a folder of notes has none
        if target == "notes folder":
            _one_line(_run(capsys, [*argv, "--resume"], 1), "holds no heads")
    assert calls == []
    assert (out.read_bytes() if out.is_file() else _tree(out)) == before


@pytest.mark.parametrize("command", ["distill", "train"])
@pytest.mark.parametrize("case", ["bad json", "empty", "no prompt field", "missing",
                                  "one prompt"])
def test_prompt_file_errors_are_one_line(command: str, case: str, tmp_path: Path,
                                         capsys: Any) -> None:
    """Issue 23: user errors in the prompts are one line with exit 1 (the line number where
    there is one), found before the base model is loaded (this base does not exist)."""
    path = tmp_path / "p.jsonl"
    expected = {
        "bad json": ('{"prompt": "a"}\n{"prompt": \n', f"{path}:2: not valid JSON"),
        "empty": ("\n", "no prompts in"),
        "no prompt field": ('{"prompt": "a"}\n{"text": "b"}\n',
                            f'{path}:2: expected an object with a string "prompt"'),
        "missing": (None, "does not exist"),
        "one prompt": ('{"prompt": "a"}\n', "1 prompt: a distillation set needs at least 2"),
    }
    text, message = expected[case]
    if text is not None:
        path.write_text(text, encoding="utf-8")
    argv = ["heads", command, "--base", str(tmp_path / "no-model"), "--prompts", str(path)]
    if command == "train":
        argv += ["-o", str(tmp_path / "heads")]
    _one_line(_run(capsys, argv, 1), message)
    assert sorted(p.name for p in tmp_path.iterdir()) == (["p.jsonl"] if text else [])


def test_an_interrupt_is_one_line_with_exit_130(tmp_path: Path, capsys: Any,
                                                monkeypatch: Any) -> None:
    import blockdraft.training.heads as heads

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(heads, "distill", interrupted)
    monkeypatch.setattr(heads, "train_medusa_heads", interrupted)
    prompts = _prompts(tmp_path / "p.jsonl", QUESTIONS)
    for argv in (["heads", "distill", "--prompts", str(prompts)],
                 ["heads", "train", "--prompts", str(prompts), "-o", str(tmp_path / "h")]):
        _one_line(_run(capsys, argv, 130), "interrupted")
    assert not (tmp_path / "h").exists()


def test_working_folders_of_other_files_are_refused(tmp_path: Path, capsys: Any) -> None:
    """--data and --work hold the run's own files: a folder of the user's is refused up
    front (the run would drop shards or a checkpoint among them)."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    prompts = _prompts(tmp_path / "p.jsonl", QUESTIONS)
    for flag in ("--data", "--work"):
        argv = ["heads", "train", "--prompts", str(prompts), "-o", str(tmp_path / "h"), flag,
                str(mine)]
        _one_line(_run(capsys, argv, 1), str(mine), "not an empty folder")
    err = _run(capsys, ["heads", "distill", "--prompts", str(prompts), "--folder", str(mine),
                        "--resume"], 1)
    _one_line(err, "is not a distillation folder")
    assert _tree(mine) == {"notes.txt": b"mine\n"}


def test_the_prompt_mix_is_recorded_in_the_heads(base: dict[str, Path], tmp_path: Path,
                                                 capsys: Any) -> None:
    """Heads trained on a `heads prompts` file name its declared mix in their README and
    signature (the chat-heads issue: record the mix)."""
    from blockdraft.training.heads.mix import write_mix

    rows = [{"source": "explain:test", "prompt": q} for q in QUESTIONS]
    record = {"format": "blockdraft-prompt-mix", "n": 10, "seed": 7,
              "weights": {"explain": 0.7, "rewrite": 0.3, "t0": 0.0},
              "counts": {"explain": 7, "rewrite": 3}}
    prompts = tmp_path / "mix.jsonl"
    write_mix(prompts, rows, record)
    argv = [a if a != str(base["prompts"]) else str(prompts)
            for a in _train_args(base, tmp_path, tmp_path / "heads")]
    _run(capsys, argv)
    readme = (tmp_path / "heads" / "README.md").read_text()
    assert "Prompt mix of mix.jsonl: explain=0.70,rewrite=0.30 (10 prompts, seed 7" in readme
    signature = json.loads((tmp_path / "heads" / "curve.json").read_text())["signature"]
    assert "mix:explain=0.70,rewrite=0.30" in signature


def test_heads_label_then_train_on_the_labelled_set(base: dict[str, Path], tmp_path: Path,
                                                    capsys: Any) -> None:
    """``heads label`` mirrors a distillation set (the base's own answers: every label equals
    its text), a second run needs --resume and then does nothing, and ``heads train --data
    LABELLED`` needs no --prompts; --train-tokens trains on a prefix of the training shards."""
    from blockdraft.training.heads import open_distill_set
    from blockdraft.training.heads.shards import read_shard

    data, labelled = tmp_path / "data", tmp_path / "labelled"
    _run(capsys, ["heads", "distill", *_data_args(base), "--folder", str(data), "--json"])
    argv = ["heads", "label", str(data), "--base", str(base["model"]), "--folder",
            str(labelled), "--batch-size", "3", "--threads", "1", "--json"]
    got = _run(capsys, argv)
    src = open_distill_set(data)
    assert got["shards_done"] == len(src.done) and got["train_tokens"] == src.summary()[
        "train_tokens"]
    for name in src.done:
        shard = read_shard(labelled / f"{name}.safetensors")
        assert shard.text_ids is not None and (shard.answer_ids == shard.text_ids).all()
    before = _tree(labelled)
    _one_line(_run(capsys, argv, 1), "--resume", "--overwrite")  # the output rule
    again = _run(capsys, [*argv, "--resume"])  # continued: nothing left to do
    assert again["shards_done"] == len(src.done) and _tree(labelled) == before
    out = tmp_path / "heads"
    trained = _run(capsys, ["heads", "train", "--base", str(base["model"]), "--data",
                            str(labelled), "-o", str(out), "--work", str(tmp_path / "w"),
                            "--heads", "2", "--steps", "2", "--batch", "8", "--eval-every",
                            "2", "--eval-positions", "16", "--warmup", "1", "--threads", "1",
                            "--train-tokens", "1", "--json"])
    assert trained["finished"] and "labelled by one forward" in (out / "README.md").read_text()
    first = src.shards("train")[0]
    assert f"prompts:{read_shard(data / f'{first}.safetensors').num_prompts}" in json.loads(
        (out / "curve.json").read_text())["signature"]  # one training shard: the first
    _one_line(_run(capsys, ["heads", "train", "--base", str(base["model"]), "--data", str(data),
                            "-o", str(tmp_path / "h2"), "--json"], 2), "--prompts")


def test_prefix_heads_train_and_score_from_the_command_line(base: dict[str, Path],
                                                            tmp_path: Path, capsys: Any) -> None:
    """heads train --arch prefix writes prefix heads (with their training shortlist) that
    heads curve scores, from the heads folder and from the training folder alike."""
    import torch

    from blockdraft.models.hf.prefix_heads import read_prefix_heads

    out = tmp_path / "heads"
    got = _run(capsys, [*_train_args(base, tmp_path, out), "--arch", "prefix", "--vocab",
                        "shortlist", "--shortlist", "20"])
    assert got["finished"]
    heads = read_prefix_heads(out)
    assert heads.shortlist is not None and heads.shortlist.numel() == 20
    readme = (out / "README.md").read_text(encoding="utf-8")  # says what the folder holds
    assert "prefix-conditioned" in readme and "Medusa version-2 layout" not in readme
    curve = _run(capsys, ["heads", "curve", str(out), str(tmp_path / "work"), "--data",
                          str(tmp_path / "data"), "--base", str(base["model"]), "-o",
                          str(tmp_path / "curve"), "--json"])
    folder, work = curve["runs"]
    assert "arch:prefix" in folder["signature"]
    assert 1.0 <= folder["B_vanilla"] <= folder["B_oracle5"]
    from blockdraft.training.heads import read_run

    assert torch.equal(read_run(tmp_path / "work").heads.shortlist, heads.shortlist)
    # the training folder's best heads are the folder's (bfloat16 there): the same scores
    assert work["B_vanilla"] == pytest.approx(folder["B_vanilla"], abs=0.05)
    assert work["top1"] == pytest.approx(folder["top1"], abs=0.1)


def test_heads_distill_on_ray_writes_the_serial_set(base: dict[str, Path], tmp_path: Path,
                                                    capsys: Any) -> None:
    """heads distill --ray (a local Ray, 2 actors that each load the base once): the same
    shards as the serial data step, tensor for tensor; a limit it cannot keep is refused."""
    pytest.importorskip("ray", reason="the ray extra is not installed")
    import torch
    from safetensors.torch import load_file

    serial, remote = tmp_path / "serial", tmp_path / "ray"
    _run(capsys, ["heads", "distill", *_data_args(base), "--folder", str(serial), "--json"])
    got = _run(capsys, ["heads", "distill", *_data_args(base), "--folder", str(remote),
                        "--ray", "--workers", "2", "--json"])
    assert got["complete"] and got["shards_done"] == 3
    names = sorted(p.name for p in serial.glob("*.safetensors"))
    assert names == sorted(p.name for p in remote.glob("*.safetensors")) and len(names) == 3
    for name in names:
        a, b = load_file(str(serial / name)), load_file(str(remote / name))
        assert a.keys() == b.keys()
        for key in a:
            assert torch.equal(a[key], b[key]), (name, key)
    _one_line(_run(capsys, ["heads", "distill", *_data_args(base), "--folder",
                            str(tmp_path / "x"), "--ray", "--max-tokens", "5"], 2),
              "--max-prompts only")  # issue 42: a conflict, refused before any work: 2


def test_heads_archive_then_restore_rebuilds_the_set(base: dict[str, Path], tmp_path: Path,
                                                    capsys: Any) -> None:
    """``heads archive`` keeps a set's answers in one small file; ``heads restore`` with the
    same prompt files rebuilds the set (answers and prompts identical, states to float
    rounding), refuses other prompts by name, and a damaged archive is one line."""
    import numpy as np
    import torch

    from blockdraft.training.heads import open_distill_set
    from blockdraft.training.heads.shards import read_shard

    data, archive, back = tmp_path / "data", tmp_path / "answers.npz", tmp_path / "back"
    _run(capsys, ["heads", "distill", *_data_args(base), "--folder", str(data), "--json"])
    src = open_distill_set(data)
    got = _run(capsys, ["heads", "archive", str(data), "-o", str(archive), "--json"])
    assert got["shards"] == len(src.done) and got["complete"] is True
    assert got["tokens"] == src.summary()["train_tokens"] + src.summary()["heldout_tokens"]
    assert got["bytes"] == archive.stat().st_size
    restored = _run(capsys, ["heads", "restore", str(archive), "--prompts",
                             str(base["prompts"]), "--base", str(base["model"]), "--folder",
                             str(back), "--threads", "1", "--json"])
    assert restored["shards_done"] == len(src.done) and restored["complete"] is True
    for name in src.done:
        a, b = read_shard(data / f"{name}.safetensors"), read_shard(back / f"{name}.safetensors")
        np.testing.assert_array_equal(a.answer_ids, b.answer_ids)
        np.testing.assert_array_equal(a.prompt_ids, b.prompt_ids)
        # states stored in bfloat16: equal up to one rounding step of the stored dtype
        torch.testing.assert_close(b.hidden.float(), a.hidden.float(), atol=1e-4, rtol=2 ** -7)
    other = _prompts(tmp_path / "other.jsonl", list(reversed(QUESTIONS)))
    _one_line(_run(capsys, ["heads", "restore", str(archive), "--prompts", str(other),
                            "--base", str(base["model"]), "--folder", str(tmp_path / "x")], 1),
              "not the ones the archived set was made from")
    assert not (tmp_path / "x").exists()
    damaged = tmp_path / "damaged.npz"
    damaged.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    _one_line(_run(capsys, ["heads", "restore", str(damaged), "--prompts",
                            str(base["prompts"]), "--folder", str(tmp_path / "y")], 1),
              "damaged.npz", "truncated")


def test_eagle_layer_trains_and_scores_from_the_command_line(base: dict[str, Path],
                                                             tmp_path: Path, capsys: Any) -> None:
    """heads train --arch eagle writes a draft layer (EAGLE-3 fusion: the base runs for its
    features) that heads curve scores along chains of 8; heads and layers in one curve are
    refused, and EAGLE's options elsewhere too."""
    from blockdraft.models.heads.eagle_files import eagle_record, read_eagle

    out = tmp_path / "eagle"
    got = _run(capsys, [*_train_args(base, tmp_path, out), "--arch", "eagle", "--fusion",
                        "layers", "--shortlist", "20"])
    assert got["finished"]
    layer = read_eagle(out)
    assert layer.config.fusion == "layers" and layer.shortlist.numel() == 20
    assert eagle_record(out)["context"] == "prompt" and eagle_record(out)["unroll"] == 3
    readme = (out / "README.md").read_text(encoding="utf-8")
    assert "EAGLE draft layer" in readme and "draft step" in readme
    curve = _run(capsys, ["heads", "curve", str(out), "--data", str(tmp_path / "data"),
                          "--base", str(base["model"]), "-o", str(tmp_path / "curve"), "--json"])
    (row,) = curve["runs"]
    assert len(row["top1"]) == 8 and 1.0 <= row["B_vanilla"] <= row["B_oracle5"]
    table = (tmp_path / "curve" / "data_curve.md").read_text(encoding="utf-8")
    assert "| draft step 1 |" in table and "draft step 8" in table and "head 2" not in table
    medusa = tmp_path / "medusa"
    args = _train_args(base, tmp_path, medusa)
    args[args.index("--work") + 1] = str(tmp_path / "mw")  # the eagle run's is its own
    _run(capsys, args)
    err = _run(capsys, ["heads", "curve", str(out), str(medusa), "--data",
                        str(tmp_path / "data"), "--base", str(base["model"]), "-o",
                        str(tmp_path / "curve2")], code=2)
    assert "not both at once" in err.err
    err = _run(capsys, [*_train_args(base, tmp_path, tmp_path / "x"), "--unroll", "2"], code=2)
    assert "--unroll 2 applies only with --arch eagle" in err.err
