"""blockdraft.core.digest (integrity digests) and blockdraft.core.files (atomic writes)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from blockdraft.core import files
from blockdraft.core.digest import (
    HashingWriter,
    canonical_json,
    check_file,
    seal,
    sha256_arrays,
    sha256_bytes,
    sha256_file,
    sha256_json,
    unseal,
)


class RoomError(ValueError):
    """A stand-in for a room's error class."""


def test_bytes_and_files(tmp_path: Path) -> None:
    data = os.urandom(3 << 20)  # several read chunks
    (tmp_path / "f").write_bytes(data)
    assert sha256_file(tmp_path / "f") == sha256_bytes(data) == hashlib.sha256(data).hexdigest()
    check_file(tmp_path / "f", sha256_bytes(data), RoomError)
    with pytest.raises(RoomError, match=r"f: its SHA-256 .* not the one recorded when it was "
                                        r"written .* changed or corrupted since; do this"):
        check_file(tmp_path / "f", sha256_bytes(b"other"), RoomError, "do this")
    with pytest.raises(RoomError, match="cannot read it"):
        check_file(tmp_path / "missing", sha256_bytes(data), RoomError)


def test_canonical_json_tells_values_apart_not_layout() -> None:
    a = {"b": [1, 2.5, "é"], "a": None}
    assert canonical_json(a) == canonical_json(json.loads(json.dumps(a, indent=4)))
    assert canonical_json(a) == b'{"a":null,"b":[1,2.5,"\\u00e9"]}'
    assert sha256_json({"x": 1}) != sha256_json({"x": 1.0}) != sha256_json({"x": True})
    assert sha256_json({"x": float("nan")})  # non-finite values still have a digest


def test_arrays_digest_covers_names_dtypes_shapes_and_values() -> None:
    x = np.arange(6, dtype="<f4").reshape(2, 3)
    base = sha256_arrays({"x": x, "y": np.zeros(0)})
    assert base == sha256_arrays({"y": np.zeros(0), "x": x})  # order does not matter
    assert base == sha256_arrays({"x": np.asfortranarray(x), "y": np.zeros(0)})  # C order
    variants = [
        {"x": x.reshape(3, 2), "y": np.zeros(0)},
        {"x": x.astype("<f8"), "y": np.zeros(0)},
        {"z": x, "y": np.zeros(0)},
        {"x": x + 1, "y": np.zeros(0)},
        {"x": x, "y": np.zeros(1)},
    ]
    assert len({base, *(sha256_arrays(v) for v in variants)}) == 1 + len(variants)
    # records: dtypes numpy lacks, given by name with the raw bytes
    records = [("x", "float32", (2, 3), x.view(np.uint8)), ("y", "float64", (0,), b"")]
    assert sha256_arrays(records) == sha256_arrays([(n, d, s, bytes(b)) for n, d, s, b in
                                                    records])
    assert sha256_arrays(records) != sha256_arrays([("x", "bfloat16", (2, 3),
                                                     x.view(np.uint8))])


def test_hashing_writer(tmp_path: Path) -> None:
    arr = np.arange(10, dtype="<i8")
    with files.atomic_writer(tmp_path / "a.npy") as f:
        out = HashingWriter(f)
        np.save(out, arr)
        digest = out.hexdigest()
    assert digest == sha256_file(tmp_path / "a.npy")
    assert np.array_equal(np.load(tmp_path / "a.npy"), arr)


def test_seal_and_unseal(tmp_path: Path) -> None:
    doc = seal({"format": "x", "n": 3}, {"data.bin": sha256_bytes(b"d")})
    assert doc["integrity"]["algorithm"] == "sha256"
    read = json.loads(json.dumps(doc, indent=2))
    assert unseal(read, "doc.json", RoomError) == {"data.bin": sha256_bytes(b"d")}
    assert unseal({"format": "x"}, "doc.json", RoomError) is None  # no digest: caller decides
    with pytest.raises(ValueError, match="already"):
        seal(doc)
    bad = [
        ({**read, "n": 4}, r"doc.json: its content does not match the SHA-256 recorded"),
        ({**read, "extra": 1}, "does not match"),
        ({**read, "integrity": "x"}, "malformed 'integrity' member"),
        ({**read, "integrity": {**read["integrity"], "algorithm": "md5"}}, "algorithm 'md5'"),
        ({**read, "integrity": {**read["integrity"], "self": "0" * 63}}, "malformed digests"),
        ({**read, "integrity": {**read["integrity"], "files": {"a": 1}}}, "malformed digests"),
    ]
    for document, match in bad:
        with pytest.raises(RoomError, match=match + ".*changed or corrupted"):
            unseal(document, "doc.json", RoomError)


# ---- atomic writes: the shared rename-or-remove tail ----------------------------------------


class Boom(Exception):
    pass


@pytest.mark.parametrize("kind", ["writer", "path"])
def test_atomic_writes_keep_the_old_file_on_failure(tmp_path: Path, kind: str) -> None:
    dest = tmp_path / "out.bin"
    dest.write_bytes(b"old")
    with pytest.raises(Boom):
        if kind == "writer":
            with files.atomic_writer(dest) as f:
                f.write(b"half")
                raise Boom
        else:
            with files.atomic_path(dest) as tmp:
                tmp.write_bytes(b"half")
                raise Boom
    assert dest.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]  # no temporary left
    if kind == "writer":
        with files.atomic_writer(dest) as f:
            f.write(b"new")
    else:
        with files.atomic_path(dest) as tmp:
            tmp.write_bytes(b"new")
    assert dest.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def test_atomic_path_gives_the_mode_of_any_new_file(tmp_path: Path) -> None:
    """A writer that creates its file 0600 (safetensors does) still leaves a file with the
    mode of ``atomic_writer``'s, 0666 less the umask (0644 under the usual 022)."""
    import os
    import stat

    umask = os.umask(0o022)
    try:
        with files.atomic_path(tmp_path / "w.bin") as tmp:
            os.close(os.open(tmp, os.O_CREAT | os.O_WRONLY, 0o600))
        files.write_text_atomic(tmp_path / "t.txt", "x")
    finally:
        os.umask(umask)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert modes == {"w.bin": 0o644, "t.txt": 0o644}


def test_atomic_path_that_writes_nothing(tmp_path: Path) -> None:
    dest = tmp_path / "out.bin"
    with pytest.raises(FileNotFoundError, match="nothing was written for .*out.bin"), \
            files.atomic_path(dest):
        pass
    assert not list(tmp_path.iterdir())
