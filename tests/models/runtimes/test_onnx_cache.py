"""The ONNX export cache verifies what it serves (issue 28, finding 1): content against the
digests recorded at export (a changed file, and damage that kept size and time), one warning
line on a rebuild, a cache that cannot be written refused before the build, and a key that does
not depend on where the model or the cache lies."""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from cache_testlib import unwritable_cache

pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

from test_onnx_runtime import tiny  # noqa: E402

from blockdraft.core.errors import BlockdraftWarning  # noqa: E402
from blockdraft.models import ModelError  # noqa: E402
from blockdraft.models.runtimes import on_runtime, onnx_export  # noqa: E402

IDS = torch.tensor([[3, 4, 5, 6]])


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("BLOCKDRAFT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _zero_stretch(file: Path, keep_time: bool) -> None:
    """Zero a stretch inside ``file``, its size kept (and its time, for bit rot)."""
    st = file.stat()
    data = bytearray(file.read_bytes())
    start = len(data) // 3
    data[start:start + len(data) // 4] = bytes(len(data) // 4)
    file.write_bytes(bytes(data))
    if keep_time:
        os.utime(file, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.parametrize("keep_time", [False, True], ids=["written", "bit rot"])
def test_a_damaged_export_of_the_same_size_is_rebuilt_with_one_warning(
        keep_time: bool, cache: Path) -> None:
    """As filed: zeroing a stretch of body.onnx.data gave other tokens, silently."""
    model = tiny("llama", seed=3)
    first = on_runtime(model, "onnxruntime", "float32")
    data = first.export_folder / "body.onnx.data"
    want = model.heads_logits(IDS)[0]
    del first  # ONNX Runtime maps the weights file: close it before damaging it
    _zero_stretch(data, keep_time)
    lines: list[str] = []
    with pytest.warns(BlockdraftWarning, match=rf"{data} is not the file the ONNX export was "
                                               r"built with .*exporting the model to ONNX "
                                               "again") as caught:
        healed = on_runtime(model, "onnxruntime", "float32", log=lines.append)
    assert len([w for w in caught if issubclass(w.category, BlockdraftWarning)]) == 1
    assert any("exporting" in line for line in lines)
    torch.testing.assert_close(healed.heads_logits(IDS)[0], want, atol=1e-4, rtol=1e-4)
    assert onnx_export.export_problem(healed.export_folder, deep=True) is None


def test_a_sound_export_is_served_without_a_warning_or_a_full_hash(
        cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny("gpt2", seed=4)
    folder = on_runtime(model, "onnxruntime", "int8").export_folder
    from blockdraft.core import digest

    def no_full_hash(path: Any) -> str:
        raise AssertionError(f"hashed all of {path}")

    monkeypatch.setattr(digest, "sha256_file", no_full_hash)
    lines: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = on_runtime(model, "onnxruntime", "int8", log=lines.append)
    assert lines == [] and again.export_folder == folder


def test_the_key_does_not_depend_on_where_the_model_or_the_cache_lies(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As filed: the key held the cached model's path, so a copied cache exported again."""
    from blockdraft.models import load_model
    from blockdraft.models.hf import write_heads

    model = tiny("llama", seed=6)
    here = cache / "hf" / "tiny"
    model.base.save_pretrained(here)
    heads = write_heads(model.heads, tmp_path / "heads")
    loaded = load_model(str(here), heads=str(heads))
    folder = on_runtime(loaded, "onnxruntime", "float32").export_folder
    moved = tmp_path / "elsewhere"
    shutil.copytree(cache, moved)  # the whole cache, as `cp -r` makes it (other times)
    for file in moved.rglob("*"):
        if file.is_file():
            st = file.stat()
            os.utime(file, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    monkeypatch.setenv("BLOCKDRAFT_CACHE", str(moved))
    again = load_model(str(moved / "hf" / "tiny"), heads=str(heads))
    assert onnx_export.export_key(again, "float32") == onnx_export.export_key(loaded, "float32")
    lines: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the copy matches its digests: no rebuild
        served = on_runtime(again, "onnxruntime", "float32", log=lines.append)
    assert lines == [] and served.export_folder == moved / "onnx" / folder.name
    from blockdraft.core import digest

    def no_full_hash(path: Any) -> str:
        raise AssertionError(f"hashed all of {path} again")

    monkeypatch.setattr(digest, "sha256_file", no_full_hash)  # the copy's times were recorded
    assert onnx_export.export_problem(served.export_folder) is None


@pytest.mark.parametrize("damage", ["export.json", "a missing file", "an older export"])
def test_a_damaged_record_is_rebuilt_with_a_warning(damage: str, cache: Path) -> None:
    import json

    model = tiny("gpt2", seed=8)
    folder = on_runtime(model, "onnxruntime", "float32").export_folder
    meta = folder / "export.json"
    if damage == "export.json":
        meta.write_text(meta.read_text().replace('"precision": "float32"',
                                                 '"precision": "int8"'))
        match = "export.json is damaged"
    elif damage == "a missing file":
        (folder / "projection.onnx").unlink()
        match = "projection.onnx is missing from the ONNX export"
    else:  # an export.json of before (sizes only, format 1)
        old = json.loads(meta.read_text())
        del old["integrity"], old["files"], old["format_version"]
        meta.write_text(json.dumps(old))
        match = "export.json is not the record of an ONNX export"
    with pytest.warns(BlockdraftWarning, match=match):
        healed = on_runtime(model, "onnxruntime", "float32")
    assert onnx_export.export_problem(healed.export_folder, deep=True) is None


@pytest.mark.parametrize("where", ["a file", "a read-only folder"])
def test_a_cache_that_cannot_be_written_is_refused_before_the_build(
        where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:

    root = unwritable_cache(tmp_path, monkeypatch, where, inside="onnx")

    def no_build(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("built graphs for a cache that cannot be written")

    monkeypatch.setattr(onnx_export, "build_graphs", no_build)
    with pytest.raises(ModelError, match=rf"cannot write the ONNX export in {root}/onnx "
                                         r".*point BLOCKDRAFT_CACHE at a writable folder"):
        on_runtime(tiny("gpt2", seed=9), "onnxruntime", "float32")


def test_nan_logits_of_a_damaged_export_name_the_runtime_and_the_cache(
        cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As filed: another damage pattern ended in `error: logits contain NaN`, naming neither
    the cache nor a fix, and nothing was rebuilt. Here the load's sample misses the damage
    (bit rot, no sample): the forward's NaN hashes the export, names it and removes it."""
    from blockdraft.verify import decode

    model = tiny("llama", seed=10)
    ort = on_runtime(model, "onnxruntime", "float32")
    folder, data = ort.export_folder, ort.export_folder / "body.onnx.data"
    want = decode(ort, [5, 9, 2, 33], k=2, p=1, max_new_tokens=6).tokens
    del ort
    st = data.stat()
    data.write_bytes(b"\xff" * st.st_size)  # every float NaN, same size
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the same time
    monkeypatch.setattr(onnx_export, "SAMPLE_BYTES", 0)
    damaged = on_runtime(model, "onnxruntime", "float32")  # the cheap checks pass
    with pytest.raises(ModelError, match=r"^ONNX Runtime \(float32\) returned NaN logits: its "
                                         rf"export cache is damaged \({data} is not the file .*"
                                         r"it was removed"):
        decode(damaged, [5, 9, 2, 33], k=2, p=1, max_new_tokens=6)
    del damaged
    assert not folder.exists()
    lines: list[str] = []
    healed = on_runtime(model, "onnxruntime", "float32", log=lines.append)
    assert any("exporting" in line for line in lines)
    assert decode(healed, [5, 9, 2, 33], k=2, p=1, max_new_tokens=6).tokens == want


def test_nan_logits_of_a_sound_export_say_the_weights_give_them(cache: Path) -> None:
    from blockdraft.models import greedy_generate

    model = tiny("gpt2", seed=11)
    with torch.no_grad():
        model.base.transformer.ln_f.weight[0] = float("nan")
    ort = on_runtime(model, "onnxruntime", "float32")
    with pytest.raises(ModelError, match=rf"returned NaN logits, and its export cache "
                                         rf"{ort.export_folder} matches its digests: the "
                                         r"model's own weights give NaN"):
        greedy_generate(ort, [5, 9, 2], 4)  # argmax alone would have hidden it
    assert ort.export_folder.is_dir()
