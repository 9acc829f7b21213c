"""``train_ngram`` / ``blockdraft ngram train --overwrite`` never leave a half-written LM:
failures, Ctrl-C, SIGTERM and SIGKILL (in lmplz, build_binary, the built-in estimator or the
native binary writer) leave an existing ``PREFIX.arpa``/``PREFIX.bin`` byte-identical, kill the
KenLM tool they started and leave no ``.lmplz-*`` folder behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from blockdraft.cli import main
from blockdraft.rescorers.base import RescorerError
from blockdraft.rescorers.ngram import native
from blockdraft.training.ngram import train as train_module
from blockdraft.training.ngram.train import find_kenlm_tool, train_ngram

SEQS = [np.array([i % 7, (i * 3) % 11, (i * 5) % 13, i % 4]) for i in range(200)]


@pytest.fixture()
def trained(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """A good order-2 LM at ``tmp_path/lm`` and its bytes."""
    try:
        find_kenlm_tool("lmplz")
    except RescorerError as e:
        pytest.skip(f"KenLM's lmplz is not built ({e})")
    prefix = tmp_path / "lm"
    train_ngram(SEQS, prefix, order=2)
    return prefix, _files(tmp_path)


def _files(folder: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted(folder.iterdir()) if f.is_file()}


def _ids_file(tmp_path: Path) -> Path:
    ids = tmp_path / "in" / "ids.txt"
    ids.parent.mkdir(exist_ok=True)
    ids.write_text("\n".join(" ".join(map(str, s.tolist())) for s in SEQS[:50]) + "\n")
    return ids


def test_a_failing_run_leaves_the_old_lm_untouched(trained, tmp_path, capsys):
    prefix, before = trained
    ids = _ids_file(tmp_path)
    code = main(["ngram", "train", "--ids", str(ids), "--order", "2", "-o", str(prefix),
                 "--estimator", "lmplz", "--memory", "1K", "--overwrite"])
    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith("blockdraft: error: lmplz failed") and err.count("\n") == 1
    assert "was left as it was" in err
    assert _files(tmp_path) == before  # PREFIX.arpa not truncated to 0 bytes
    assert not list(tmp_path.glob(".lmplz-*"))


@pytest.mark.parametrize("when", ["lmplz", "build_binary", "estimate", "native"])
def test_an_interrupt_mid_run_leaves_the_old_lm_untouched(trained, tmp_path, monkeypatch,
                                                          when):
    """A test double for the step writes half an output, then Ctrl-C arrives."""
    prefix, before = trained
    real_run = train_module._run

    def half_then_interrupt(cmd, stdin_path):
        if Path(cmd[0]).name == when:
            out = Path(cmd[cmd.index("--arpa") + 1]) if when == "lmplz" else Path(cmd[-1])
            out.write_text("\\data\\\nngram 1=")
            raise KeyboardInterrupt
        return real_run(cmd, stdin_path)

    def interrupt(*args, **kwargs):
        if when == "native":
            Path(args[1]).write_bytes(b"mmap lm")
        raise KeyboardInterrupt

    monkeypatch.setattr(train_module, "_run", half_then_interrupt)
    kwargs: dict[str, object] = {}
    if when == "lmplz":
        kwargs["estimator"] = "lmplz"
    elif when == "build_binary":
        kwargs["build_binary"] = find_kenlm_tool("build_binary")
    elif when == "estimate":
        monkeypatch.setattr(train_module, "estimate_kneser_ney", interrupt)
    else:
        if not native.can_write_binary():
            pytest.skip("the native library is not built (run `make setup`)")
        monkeypatch.setattr(native, "write_binary", interrupt)
    with pytest.raises(KeyboardInterrupt):
        train_ngram(SEQS[:50], prefix, order=2, **kwargs)  # type: ignore[arg-type]
    assert _files(tmp_path) == before
    assert not list(tmp_path.glob(".lmplz-*"))


def test_ctrl_c_in_the_cli_is_one_line_and_exit_130(trained, tmp_path, monkeypatch, capsys):
    prefix, before = trained

    def interrupt(cmd, stdin_path):
        raise KeyboardInterrupt

    monkeypatch.setattr(train_module, "_run", interrupt)
    ids = _ids_file(tmp_path)
    assert main(["ngram", "train", "--ids", str(ids), "--order", "2", "-o", str(prefix),
                 "--estimator", "lmplz", "--overwrite"]) == 130
    assert capsys.readouterr().err == "blockdraft: interrupted\n"
    assert _files(tmp_path) == before
    assert not list(tmp_path.glob(".lmplz-*"))


# --------------------------------------------------------------- real signals, real processes
FAKE_LMPLZ = """#!/bin/sh
# A stand-in for lmplz that writes half an ARPA file and then hangs.
echo $$ > "$FAKE_LMPLZ_PID"
while [ $# -gt 0 ]; do
  if [ "$1" = "--arpa" ]; then printf '\\\\data\\\\\\nngram 1=' > "$2"; fi
  shift
done
exec sleep 120
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in state


def _start_hanging_train(tmp_path: Path, prefix: Path) -> tuple[subprocess.Popen[bytes], int]:
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    for name in ("lmplz", "build_binary"):
        (bin_dir / name).write_text(FAKE_LMPLZ)
        (bin_dir / name).chmod(0o755)
    pid_file = tmp_path / "fakebin" / "pid"
    env = {**os.environ, "BLOCKDRAFT_KENLM_BIN": str(bin_dir), "FAKE_LMPLZ_PID": str(pid_file)}
    ids = _ids_file(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "blockdraft.cli", "ngram", "train", "--ids", str(ids),
         "--order", "2", "-o", str(prefix), "--estimator", "lmplz", "--overwrite"], env=env,
        stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not (pid_file.is_file() and pid_file.read_text().strip()):
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() < deadline, "the fake lmplz never started"
        time.sleep(0.05)
    time.sleep(0.2)  # let it write its half file
    return proc, int(pid_file.read_text())


def _wait_dead(pid: int) -> bool:
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc and prctl")
def test_sigterm_kills_lmplz_and_cleans_up(trained, tmp_path):
    prefix, before = trained
    proc, lmplz_pid = _start_hanging_train(tmp_path, prefix)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and err.decode() == "blockdraft: interrupted\n"
    assert _wait_dead(lmplz_pid)
    assert {k: v for k, v in _files(tmp_path).items()} == before
    assert not list(tmp_path.glob(".lmplz-*"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc and prctl")
def test_sigkill_leaves_the_old_lm_and_no_orphan(trained, tmp_path):
    """SIGKILL runs no cleanup: the old LM is still whole, lmplz dies with its parent
    (PR_SET_PDEATHSIG), and the next run of the command removes the dead run's temporary
    folder."""
    prefix, before = trained
    proc, lmplz_pid = _start_hanging_train(tmp_path, prefix)
    proc.kill()
    proc.wait(timeout=30)
    assert _wait_dead(lmplz_pid), "lmplz outlived the Python that started it"
    assert _files(tmp_path) == before
    # the command builds the LM in a hidden folder beside it (core/outputs), where lmplz's
    # temporary lies: the killed run left both ...
    (left,) = tmp_path.glob(".lm.*.partial")
    assert list(left.glob(".lmplz-*"))
    every = tmp_path / "in" / "all.txt"
    every.write_text("\n".join(" ".join(map(str, s.tolist())) for s in SEQS) + "\n")
    assert main(["ngram", "train", "--ids", str(every), "--order", "2", "-o", str(prefix),
                 "--overwrite"]) == 0
    assert not list(tmp_path.glob(".lm.*")) and not list(tmp_path.glob(".lmplz-*"))  # ... swept
    assert _files(tmp_path) == before  # same data, same LM
