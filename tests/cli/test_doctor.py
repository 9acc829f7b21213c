"""``blockdraft doctor`` reports what is here, truthfully: the native library removed is
reported missing (with what that costs and how to get it), a module that fails to import is
absent with its reason; ``--version`` prints the version."""

from __future__ import annotations

import json
import sys

import pytest

from blockdraft.cli import main
from blockdraft.cli.doctor import probe_parts
from blockdraft.core.version import __version__
from blockdraft.rescorers.ngram import native


def _parts(capsys) -> dict[str, dict]:
    assert main(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["version"] == __version__
    return {p["name"]: p for p in report["parts"]}


def test_every_part_is_listed(capsys):
    parts = _parts(capsys)
    assert list(parts) == ["native search", "lmplz, build_binary", "kenlm", "pynini",
                           "onnxruntime", "transformers", "torch", "GPU"]
    assert parts["torch"]["present"] and parts["torch"]["version"]
    assert parts["native search"]["present"] == native.available()


def test_the_native_library_removed_is_reported_missing(tmp_path, monkeypatch, capsys):
    gone = tmp_path / "libbdkenlm.so"
    monkeypatch.setenv("BLOCKDRAFT_NATIVE_LIB", str(gone))
    native._load.cache_clear()
    try:
        part = _parts(capsys)["native search"]
        assert not part["present"] and str(gone) in part["detail"]
        assert native.PYTHON_SLOWDOWN in part["detail"] and "make setup" in part["get"]
        assert main(["doctor"]) == 0
        line = next(ln for ln in capsys.readouterr().out.splitlines() if "native search" in ln)
        assert " no " in line and str(gone) in line
    finally:
        native._load.cache_clear()


def test_a_module_that_fails_to_import_is_absent_with_its_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynini", None)  # import raises ImportError
    part = next(p for p in probe_parts() if p.name == "pynini")
    assert not part.present and "blockdraft[wfst]" in part.get
    if part.version:  # installed: the reason is given
        assert "fails to import" in part.detail


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.startswith(f"blockdraft {__version__} (Python ")
