"""The rescoring LM's ONNX export and sessions follow the rules of every ONNX export of
blockdraft (`blockdraft.models.runtimes.onnx_store`): a sealed record beside the file, a damaged
file (same size, same time: bit rot) exported again with one warning naming it, a file without
a record or of other weights exported again silently, and sessions with the options of the base
model's (sequential, no spinning threads, ONNX Runtime's warnings off)."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest
from neural_testlib import peaky_lm

pytest.importorskip("onnxruntime")

from blockdraft.core.errors import BlockdraftWarning  # noqa: E402
from blockdraft.rescorers.neural import export_rescorer_onnx  # noqa: E402
from blockdraft.rescorers.neural.onnx_runtime import OnnxStepRunner  # noqa: E402


def _rot(file: Path) -> None:
    """Flip a stretch of ``file``'s bytes, keeping its size and time."""
    st = file.stat()
    data = bytearray(file.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 64] = bytes(b ^ 0xFF for b in data[middle:middle + 64])
    file.write_bytes(bytes(data))
    os.utime(file, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_the_export_is_sealed_and_a_damaged_one_is_exported_again(tmp_path: Path) -> None:
    lm = peaky_lm(0)
    path = export_rescorer_onnx(lm, tmp_path)
    record = tmp_path / "rescorer.export.json"
    meta = json.loads(record.read_text())
    assert set(meta["files"]) == {"rescorer.onnx"} and "integrity" in meta
    good = path.read_bytes()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a sound export is reused, silently
        assert export_rescorer_onnx(lm, tmp_path) == path
    _rot(path)  # same size and time (bit rot): the blocks a load samples find it
    with pytest.warns(BlockdraftWarning, match=r"rescorer.onnx is not the file the ONNX "
                                               r"export was built with .*exporting"):
        export_rescorer_onnx(lm, tmp_path)
    assert path.read_bytes() == good
    record.write_text(record.read_text().replace('"model": "rescorer"', '"model": "other"'))
    with pytest.warns(BlockdraftWarning, match=r"rescorer.export.json is damaged .*exporting"):
        export_rescorer_onnx(lm, tmp_path)
    assert path.read_bytes() == good and json.loads(record.read_text())["model"] == "rescorer"


def test_a_file_without_a_record_or_of_other_weights_is_exported_again_silently(
        tmp_path: Path) -> None:
    path = export_rescorer_onnx(peaky_lm(0), tmp_path / "lm.onnx")
    assert (tmp_path / "lm.export.json").is_file()
    (tmp_path / "lm.export.json").unlink()  # an export of before the seal
    stamp = path.stat().st_mtime_ns
    os.utime(path, ns=(stamp - 10**9, stamp - 10**9))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        export_rescorer_onnx(peaky_lm(0), path)
        assert path.stat().st_mtime_ns != stamp - 10**9 and (tmp_path / "lm.export.json").is_file()
        os.utime(path, ns=(stamp - 10**9, stamp - 10**9))
        export_rescorer_onnx(peaky_lm(1), path)  # other weights
    assert path.stat().st_mtime_ns != stamp - 10**9


def test_its_sessions_have_every_blockdraft_session_s_options(tmp_path: Path) -> None:
    runner = OnnxStepRunner(export_rescorer_onnx(peaky_lm(0), tmp_path), intra_op_threads=1)
    options = runner.session.get_session_options()
    assert options.inter_op_num_threads == 1 and options.intra_op_num_threads == 1
    assert options.log_severity_level == 3
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    import onnxruntime as ort

    assert options.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
