"""Without the native library the exact search still runs (in Python), and says so once: the
first rescoring warns in one line (what is missing, how much slower, how to get it); a search
asked to run in Python (``engine="kenlm"``) does not warn."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from blockdraft.cli import main
from blockdraft.core.errors import BlockdraftWarning
from blockdraft.lattice import SausageLattice
from blockdraft.lattice.io import save_lattice
from blockdraft.rescorers.ngram import NgramLM, NgramRescorer, native
from blockdraft.training.ngram import train_ngram


@pytest.fixture()
def no_native(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The library looked for where there is none, and the once-only warning not yet given."""
    missing = tmp_path / "gone" / "libbdkenlm.so"
    monkeypatch.setenv("BLOCKDRAFT_NATIVE_LIB", str(missing))
    monkeypatch.setattr(native, "_warned", False)
    native._load.cache_clear()
    yield missing
    native._load.cache_clear()


@pytest.fixture()
def arpa(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    seqs = [rng.integers(0, 40, size=10) for _ in range(200)]
    return train_ngram(seqs, tmp_path / "lm", order=3, binary=False).arpa


def _lattice(seed: int) -> SausageLattice:
    return SausageLattice.from_logits(np.random.default_rng(seed).standard_normal((4, 40)), k=4)


def test_the_first_python_search_warns_once_in_one_line(no_native, arpa):
    lm = NgramLM(arpa)
    assert lm.engine == "kenlm" and lm.native_missing
    rescorer = NgramRescorer(lm)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for seed in range(3):
            rescorer.rescore(_lattice(seed), [1, 2], p=4)
        NgramRescorer(NgramLM(arpa)).rescore(_lattice(9), [], p=2)  # another LM: still once
    (w,) = [c for c in caught if issubclass(c.category, BlockdraftWarning)]
    text = str(w.message)
    assert "\n" not in text
    assert str(no_native) in text and "Python" in text  # what is missing
    assert native.PYTHON_SLOWDOWN in text  # how much slower
    assert "make setup" in text and "pip install" in text  # how to get it


def test_python_by_request_does_not_warn(no_native, arpa):
    lm = NgramLM(arpa, engine="kenlm")
    assert not lm.native_missing
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        NgramRescorer(lm).rescore(_lattice(0), [], p=4)


def test_the_cli_says_which_engine_searched(no_native, arpa, tmp_path, capsys):
    lattice = tmp_path / "lattice.json"
    save_lattice(_lattice(0), lattice)
    assert main(["rescore", str(lattice), "--lm", str(arpa), "--p", "4", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["engine"] == "kenlm"
    (line,) = err.splitlines()
    assert line.startswith("blockdraft: warning: the native p-best search library is missing")


def test_with_the_library_the_engine_is_native(arpa, tmp_path, capsys):
    if not native.available():
        pytest.skip("the native library is not built (run `make setup`)")
    lattice = tmp_path / "lattice.json"
    save_lattice(_lattice(0), lattice)
    assert main(["rescore", str(lattice), "--lm", str(arpa), "--p", "4", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["engine"] == "native" and "warning" not in err
