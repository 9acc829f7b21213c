"""The on-disk cache of compiled LMs: :func:`build_ngram_wfst`, converted once per ARPA file.

Public surface:
    load_ngram_wfst(arpa_path, cache_dir=None) -> NgramWfst
        :func:`~.compiler.build_ngram_wfst` through an on-disk cache keyed by the file's path,
        size, mtime.
    default_cache_dir() -> Path
        ``$BLOCKDRAFT_CACHE/wfst``, else ``~/.cache/blockdraft/wfst``.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

from blockdraft.core.files import atomic_path
from blockdraft.rescorers.base import RescorerError
from blockdraft.rescorers.ngram.arpa import arpa_header
from blockdraft.rescorers.ngram.wfst.compiler import NgramWfst, build_ngram_wfst
from blockdraft.rescorers.ngram.wfst.history import ContextStates
from blockdraft.rescorers.ngram.wfst.openfst import load_pywrapfst

CACHE_FORMAT = 1
"""Bumped when the cached FST or side file layout changes (part of the cache key)."""


def default_cache_dir() -> Path:
    """``$BLOCKDRAFT_CACHE/wfst`` when the variable is set, else ``~/.cache/blockdraft/wfst``."""
    env = os.environ.get("BLOCKDRAFT_CACHE")
    return Path(env) / "wfst" if env else Path.home() / ".cache" / "blockdraft" / "wfst"


def _cache_paths(path: Path, cache_dir: Path) -> tuple[Path, Path]:
    st = path.stat()
    key = f"{CACHE_FORMAT}|{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    digest = hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    stem = f"{path.stem}-{digest}"
    return cache_dir / f"{stem}.fst", cache_dir / f"{stem}.npz"


def load_ngram_wfst(arpa_path: str | Path, cache_dir: str | Path | None = None) -> NgramWfst:
    """:func:`build_ngram_wfst`, cached on disk.

    The binary ``.fst`` and the ``.npz`` history map are stored under ``cache_dir`` (default
    :func:`default_cache_dir`) with a name keyed by the ARPA file's resolved path, size and
    mtime (and the cache format), so an edited file is converted again. Files are written to
    a temporary name and renamed (:func:`~blockdraft.core.files.atomic_path`), so concurrent
    processes never read half a file; an unreadable cache entry is rebuilt.

    Args:
        arpa_path: the ARPA file.
        cache_dir: where to keep converted LMs.

    Returns:
        :class:`NgramWfst` (``from_cache`` says whether the cache was used).

    Raises:
        ArpaFormatError, RescorerError: as :func:`build_ngram_wfst`; an unwritable cache dir.
    """
    path = Path(arpa_path)
    if not path.is_file():
        raise RescorerError(f"ARPA file {path} does not exist")
    cdir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    fst_path, npz_path = _cache_paths(path, cdir)
    if fst_path.is_file() and npz_path.is_file():
        t0 = time.perf_counter()
        try:
            fst = load_pywrapfst().Fst.read(str(fst_path))
            cstates = ContextStates.load(npz_path)
        except Exception:  # a corrupt or foreign cache entry: rebuilt below
            pass
        else:
            return NgramWfst(
                fst=fst, states=cstates, arpa=path, counts=arpa_header(path),
                seconds=time.perf_counter() - t0, from_cache=True,
            )
    built = build_ngram_wfst(path)
    try:
        cdir.mkdir(parents=True, exist_ok=True)
        # Both files are complete before either is renamed into place: the .npz first.
        with atomic_path(fst_path) as fst_tmp, atomic_path(npz_path) as npz_tmp:
            built.states.save(npz_tmp)
            built.fst.write(str(fst_tmp))
    except OSError as e:
        raise RescorerError(
            f"cannot write the WFST cache under {cdir}: {e}; set cache_dir or $BLOCKDRAFT_CACHE"
        ) from e
    return built
