"""The result cache of sweeps: one sealed JSON file per configuration key, so a sweep that was
interrupted (or a later sweep that shares configurations) reads what is done and simulates only
the rest.

A key is the SHA-256 of what decides a configuration's result and nothing else: the trace's
digest (its ``meta.json`` integrity record: the digests of every array), the setting in
canonical form without the rescorer's path, the digest of the rescorer's file(s), the examples
simulated, and :data:`CACHE_VERSION`. A moved file keeps its results; an edited one does not.

The cache lives in ``$BLOCKDRAFT_CACHE/sweep`` (default ``~/.cache/blockdraft/sweep``) or a
folder the caller names. Each entry is written atomically and sealed
(:func:`blockdraft.core.digest.seal`); an entry that does not check out (changed, truncated,
another key's) is ignored with a warning and computed again.

Public surface:
    CACHE_VERSION
    default_cache_dir() -> Path
    trace_digest(path) -> hex          the identity of a trace folder
    file_digest(path) -> hex           a rescorer's file, or a RescorerLM folder
    config_key(trace_digest, setting, lm_digest, examples) -> hex
    ResultCache(folder).get(key) -> dict | None, .put(key, entry)
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from blockdraft.core.digest import seal, sha256_file, sha256_json, unseal
from blockdraft.core.errors import BlockdraftWarning
from blockdraft.core.files import cache_dir, write_text_atomic
from blockdraft.oracle.errors import OracleError
from blockdraft.oracle.sweep.settings import Setting
from blockdraft.oracle.trace.format import ARRAY_DTYPES, META_FILE, read_meta

CACHE_VERSION = 1
"""Bumped when a cached figure would change meaning; older entries are then simply unused."""
ENTRY_FORMAT = "blockdraft-sweep-entry"


def default_cache_dir() -> Path:
    """``$BLOCKDRAFT_CACHE/sweep`` when the variable is set, else ``~/.cache/blockdraft/sweep``."""
    return cache_dir("sweep")


def trace_digest(path: str | os.PathLike[str]) -> str:
    """The identity of a trace folder: the SHA-256 of its ``meta.json`` integrity record
    (version 2: the document's own digest and every array's), or of ``meta.json`` and every
    array file (version 1, which records none).

    Raises:
        TraceFormatError: a folder that is not a trace.
    """
    root = Path(path)
    meta = read_meta(root)
    record = meta.get("integrity")
    if isinstance(record, Mapping):
        return sha256_json(dict(record))
    files = [META_FILE, *(f"{name}.npy" for name in ARRAY_DTYPES)]
    return sha256_json({f: sha256_file(root / f) for f in files})


def file_digest(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a rescorer's file, or of a RescorerLM folder's ``config.json`` and
    ``model.safetensors`` (the folder's other files, such as an ONNX export, do not count).

    Raises:
        OracleError: a path that does not exist, or a folder without those files.
    """
    p = Path(path)
    if p.is_file():
        return sha256_file(p)
    if p.is_dir():
        names = ("config.json", "model.safetensors")
        missing = [n for n in names if not (p / n).is_file()]
        if missing:
            raise OracleError(f"{p} is not a RescorerLM folder: {', '.join(missing)} missing")
        return sha256_json({n: sha256_file(p / n) for n in names})
    raise OracleError(f"{p} does not exist")


def config_key(trace: str, setting: Setting, lm_digest: str | None,
               examples: Sequence[int]) -> str:
    """The cache key of one configuration (see the module docstring).

    Args:
        trace: :func:`trace_digest` of the trace.
        setting: the configuration.
        lm_digest: :func:`file_digest` of its rescorer, or None without one.
        examples: the trace indices simulated, in order.
    """
    described = {**setting.to_dict(), "lm": lm_digest}
    return sha256_json({"version": CACHE_VERSION, "trace": trace, "setting": described,
                        "examples": [int(e) for e in examples]})


class ResultCache:
    """Sealed JSON entries ``<folder>/<key>.json``.

    Args:
        folder: where the entries live (made on the first write).
    """

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)
        if self.folder.exists() and not self.folder.is_dir():
            raise OracleError(f"the sweep cache {self.folder} is not a folder; give a folder "
                              "(--cache) or set $BLOCKDRAFT_CACHE")

    def path(self, key: str) -> Path:
        """Where the entry of ``key`` lives."""
        return self.folder / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The entry of ``key`` (what :meth:`put` stored), or None when there is none or it
        does not check out (then a :class:`~blockdraft.core.errors.BlockdraftWarning` says
        why, and the configuration is computed again)."""
        path = self.path(key)
        if not path.is_file():
            return None
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(doc, dict):
                raise OracleError("not a JSON object")
            unseal(doc, path, OracleError)
            if doc.get("format") != ENTRY_FORMAT or doc.get("key") != key or "integrity" not in doc:
                raise OracleError(f"not the {ENTRY_FORMAT} of key {key}")
        except (OSError, ValueError) as e:
            warnings.warn(f"sweep cache entry {path} is unusable ({' '.join(str(e).split())}); "
                          "computing that configuration again", BlockdraftWarning, stacklevel=2)
            return None
        return {k: v for k, v in doc.items() if k not in ("format", "key", "integrity")}

    def put(self, key: str, entry: Mapping[str, Any]) -> None:
        """Store ``entry`` (JSON-ready) under ``key``, sealed, atomically.

        Raises:
            OracleError: the folder cannot be written.
        """
        doc = seal({"format": ENTRY_FORMAT, "key": key, **entry})
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_text_atomic(self.path(key), json.dumps(doc, indent=1, allow_nan=False) + "\n")
        except OSError as e:
            raise OracleError(f"cannot write the sweep cache under {self.folder}: {e}; pass "
                              "another folder (--cache) or set $BLOCKDRAFT_CACHE") from e
