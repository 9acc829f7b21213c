"""A ``BLOCKDRAFT_CACHE`` that cannot be written, for the caches' refusal tests (imported by
module name, like ``ngram_testlib``)."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest


def unwritable_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str,
                     inside: str = "") -> Path:
    """Point ``BLOCKDRAFT_CACHE`` at ``tmp_path/cache``, made ``"a file"`` or (any other
    ``where``) a folder (with ``inside`` made in it) in which creating a file fails with
    EROFS, as on a read-only file system. Returns the cache root."""
    root = tmp_path / "cache"
    if where == "a file":
        root.write_text("not a folder")
    else:
        (root / inside).mkdir(parents=True, exist_ok=True)
        real_open = open

        def read_only(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            if "x" in mode and str(file).startswith(str(root)):
                raise OSError(errno.EROFS, "Read-only file system", str(file))
            return real_open(file, mode, *args, **kwargs)

        monkeypatch.setattr("builtins.open", read_only)
    monkeypatch.setenv("BLOCKDRAFT_CACHE", str(root))
    return root
