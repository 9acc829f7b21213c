"""One output rule in every command (issue 23): what is already at an output path is refused
unless --overwrite (train and trace: also --resume), checked before any work, the old file
left byte for byte; with --overwrite the new output replaces it. Plots and drawings included:
an image the user made by hand with the same name is an output lost all the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from blockdraft.cli import main
from blockdraft.lattice.io import save_lattice


def _refused(capsys: Any, *needles: str) -> None:
    err = capsys.readouterr().err
    assert err.startswith("blockdraft: error: ") and err.count("\n") == 1, err
    for needle in ("--overwrite", *needles):
        assert needle in err, err


@pytest.fixture
def lattice(tmp_path: Path) -> Path:
    from blockdraft.lattice import SausageLattice

    path = tmp_path / "lat.json"
    scores = np.log(np.array([[1.0, 0.0], [0.6, 0.4], [0.7, 0.3]]) + 1e-9)
    save_lattice(SausageLattice(tokens=np.array([[1, 2], [3, 4], [5, 6]]), scores=scores),
                 path)
    return path


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    from blockdraft.oracle import synthetic_trace

    synthetic_trace(tmp_path / "trace", num_examples=4, h=3, K=4, V=30, seed=2)
    return tmp_path / "trace"


def test_lattice_draw(lattice: Path, tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "mine.svg"
    out.write_text("<svg>a figure of my own</svg>")
    assert main(["lattice", "draw", str(lattice), "-o", str(out)]) == 1
    _refused(capsys, f"-o {out} already exists")
    assert out.read_text() == "<svg>a figure of my own</svg>"
    assert main(["lattice", "draw", str(lattice), "-o", str(out), "--overwrite"]) == 0
    assert out.read_text().lstrip().startswith("<?xml")
    assert main(["lattice", "draw", str(lattice), "-o", str(tmp_path / "new.svg")]) == 0


@pytest.mark.parametrize("command", ["oracle", "entropy"])
def test_plots(command: str, trace: Path, tmp_path: Path, capsys: Any,
               monkeypatch: pytest.MonkeyPatch) -> None:
    import blockdraft.cli.analyses as analyses

    plot = tmp_path / "curve.png"
    plot.write_bytes(b"my png")
    opened: list[Path] = []
    monkeypatch.setattr(analyses, "_trace", lambda p: opened.append(p) or pytest.fail("work"))
    assert main([command, str(trace), "--plot", str(plot)]) == 1
    _refused(capsys, f"--plot {plot} already exists")
    assert plot.read_bytes() == b"my png" and not opened  # refused before any work
    monkeypatch.undo()
    assert main([command, str(trace), "--plot", str(plot), "--overwrite"]) == 0
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_ngram_train(tmp_path: Path, capsys: Any) -> None:
    from blockdraft.rescorers.base import RescorerError
    from blockdraft.training.ngram.train import find_kenlm_tool

    try:
        find_kenlm_tool("lmplz")
    except RescorerError as e:
        pytest.skip(f"KenLM's lmplz is not built ({e})")
    ids = tmp_path / "ids.txt"
    ids.write_text("\n".join(" ".join(str((i * j) % 11) for j in range(8)) for i in range(60)))
    prefix = tmp_path / "lm"
    assert main(["ngram", "train", "--ids", str(ids), "--order", "2", "-o", str(prefix)]) == 0
    capsys.readouterr()
    before = {p.name: p.read_bytes() for p in tmp_path.glob("lm.*")}
    assert {"lm.arpa", "lm.bin", "lm.fingerprint.json"} <= set(before)
    assert main(["ngram", "train", "--ids", str(ids), "--order", "3", "-o", str(prefix)]) == 1
    _refused(capsys, f"-o {prefix}: {prefix}.arpa already exists")
    assert {p.name: p.read_bytes() for p in tmp_path.glob("lm.*")} == before
    # any one file of an LM at the prefix is enough to refuse
    (tmp_path / "other.fingerprint.json").write_text("{}")
    assert main(["ngram", "train", "--ids", str(ids), "--order", "2", "-o",
                 str(tmp_path / "other")]) == 1
    _refused(capsys, "other.fingerprint.json already exists")
    assert main(["ngram", "train", "--ids", str(ids), "--order", "3", "-o", str(prefix),
                 "--overwrite"]) == 0
    assert "\\3-grams:" in (tmp_path / "lm.arpa").read_text()


@pytest.mark.parametrize("blockwise", [False, True])
def test_demo_output_folder(blockwise: bool, tmp_path: Path, capsys: Any,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    import blockdraft.demo

    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")

    def ran(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the demo ran")

    monkeypatch.setattr(blockdraft.demo, "run_real_demo", ran)
    monkeypatch.setattr(blockdraft.demo, "run_demo", ran)
    argv = ["demo", "--out", str(out), *(["--blockwise"] if blockwise else [])]
    assert main(argv) == 1
    _refused(capsys, f"--out {out} already holds files")
    assert (out / "notes.txt").read_text() == "mine"
    # issue 28: --overwrite replaces the demo's own files, never the user's: refused by name
    assert main([*argv, "--overwrite"]) == 1
    _refused(capsys, "holds files that are not part of the demo's output (notes.txt)")
    assert (out / "notes.txt").read_text() == "mine"
    (out / "notes.txt").unlink()
    (out / "demo.json").write_text("{}")
    main([*argv, "--overwrite"])  # goes on to the demo (the double stops it there)
    assert "the demo ran" in capsys.readouterr().err
