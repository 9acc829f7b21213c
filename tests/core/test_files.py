"""blockdraft.core.files: what the atomic writers publish gets the modes of an ordinary new
file or folder (issue 23 item 6: the cached model.safetensors was 0600, as safetensors and
mkstemp create their files, while every other file was 0644)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from blockdraft.core import files


@pytest.fixture(params=[0o022, 0o077, 0o002])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def _private_file(path: Path, data: bytes = b"x", mode: int = 0o600) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    os.write(fd, data)
    os.close(fd)
    os.chmod(path, mode)  # whatever the umask


def test_atomic_path_publishes_a_private_file_with_the_umask(tmp_path: Path, umask: int
                                                            ) -> None:
    dest = tmp_path / "model.safetensors"
    with files.atomic_path(dest) as tmp:
        _private_file(tmp)  # as safetensors' save_file does
    assert _mode(dest) == 0o666 & ~umask
    with files.atomic_writer(tmp_path / "b.bin") as f:
        f.write(b"y")
    assert _mode(tmp_path / "b.bin") == 0o666 & ~umask  # the same as the other writer


def test_safetensors_through_atomic_path(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import save_file

    old = os.umask(0o022)
    try:
        save_file({"a": torch.zeros(2)}, str(tmp_path / "plain.safetensors"))
        with files.atomic_path(tmp_path / "published.safetensors") as tmp:
            save_file({"a": torch.zeros(2)}, str(tmp))
    finally:
        os.umask(old)
    assert _mode(tmp_path / "plain.safetensors") == 0o600  # what the writer does alone
    assert _mode(tmp_path / "published.safetensors") == 0o644


def test_atomic_directory_publishes_everything_inside(tmp_path: Path, umask: int) -> None:
    outside = tmp_path / "outside.txt"
    _private_file(outside)
    dest = tmp_path / "out"
    with files.atomic_directory(dest) as tmp:
        _private_file(tmp / "weights.bin")
        _private_file(tmp / "run.sh", mode=0o700)
        (tmp / "sub").mkdir(mode=0o700)
        os.chmod(tmp / "sub", 0o700)
        _private_file(tmp / "sub" / "shard.npy")
        (tmp / "link").symlink_to(outside)
    assert _mode(dest) == 0o777 & ~umask
    assert _mode(dest / "weights.bin") == _mode(dest / "sub" / "shard.npy") == 0o666 & ~umask
    assert _mode(dest / "run.sh") == 0o777 & ~umask  # an executable stays one
    assert _mode(dest / "sub") == 0o777 & ~umask
    assert _mode(outside) == 0o600  # a link's target is not the folder's to change
