"""A missing optional package is one clear error naming the extra that installs it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from blockdraft.core.errors import BlockdraftError
from blockdraft.core.extras import EXTRAS, import_optional, install_hint

tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11+")
ROOT = Path(__file__).resolve().parents[2]


class RoomError(BlockdraftError):
    pass


def test_every_extra_of_pyproject_is_known_and_complete() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    for extra, modules in EXTRAS.items():
        declared = " ".join(extras[extra])
        for module in modules:  # import names equal the distribution names here
            assert module in declared, (extra, module)
    assert set(EXTRAS) | {"all", "test"} == set(extras)
    assert "blockdraft[hf,onnx,wfst,ray]" in extras["all"]
    core = " ".join(project["dependencies"])
    for modules in EXTRAS.values():
        assert not any(m in core for m in modules)


def test_a_missing_module_names_its_extra(monkeypatch: Any) -> None:
    monkeypatch.setitem(sys.modules, "pynini", None)  # import pynini -> ImportError
    with pytest.raises(RoomError, match=r"FST conversion needs .*'pynini'.*blockdraft\[wfst\]"):
        import_optional("pynini", "wfst", "FST conversion", RoomError)
    assert import_optional("json", "wfst", "x", RoomError) is sys.modules["json"]
    with pytest.raises(ValueError, match="unknown extra 'gpu'"):
        install_hint("gpu")


def test_the_rooms_use_it(monkeypatch: Any) -> None:
    from blockdraft.lattice import SausageLattice
    from blockdraft.lattice.fst import lattice_to_fst
    from blockdraft.lattice.sausage import LatticeError
    from blockdraft.rescorers.base import RescorerError
    from blockdraft.rescorers.ngram.wfst.openfst import load_pywrapfst

    monkeypatch.setitem(sys.modules, "pynini", None)
    monkeypatch.setitem(sys.modules, "pywrapfst", None)
    lat = SausageLattice.from_logits(__import__("numpy").zeros((2, 5)), k=2)
    with pytest.raises(LatticeError, match=r"blockdraft\[wfst\]"):
        lattice_to_fst(lat)
    with pytest.raises(RescorerError, match=r"blockdraft\[wfst\]"):
        load_pywrapfst()
