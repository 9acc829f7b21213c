"""The trace format ``blockdraft.trace``: its constants, ``meta.json`` schema and validation.

On-disk format ``blockdraft.trace``, version 2: a directory holding ``meta.json`` and seven
``.npy`` files (little-endian, C order), every per-example array concatenated over examples::

    prompt_ids.npy        int32 [P]          prompts, concatenated
    prompt_offsets.npy    int64 [N + 1]      example e's prompt is prompt_ids[po[e]:po[e+1]]
    greedy_ids.npy        int32 [T]          y_1..y_m of every example, concatenated
    position_offsets.npy  int64 [N + 1]      example e's positions are rows pos[e]:pos[e+1]
    topk_ids.npy          int32 [T, h, K]    row t, head i: the top-K ids, best first
    topk_logprobs.npy     float32 [T, h, K]  their natural-log probabilities (<= 0, sorted)
    entropy.npy           float32 [T, h]     each head's full-vocabulary entropy, nats

``meta.json`` is ``{"format": "blockdraft.trace", "version": 2, "h", "K", "V",
"num_examples" (N), "num_positions" (T), "num_prompt_tokens" (P), "signature": {...},
"arrays": {name: {"dtype": "<i4", "shape": [...]}}, "integrity": {...}}``; it is written last,
so a directory without it is an unfinished trace. ``integrity``
(:func:`blockdraft.core.digest.seal`) holds the SHA-256 of ``meta.json`` itself and of each
``.npy`` file, computed while they were written: :meth:`Trace.open
<blockdraft.oracle.trace.Trace.open>` checks them before it reads a value (the ``.npy`` files'
only when it checks values), so a changed or corrupted file is refused, never read as another
trace. Version 1 is the same without ``integrity``; it still opens, unchecked and without a
warning (its files are validated as before).

Greedy lengths are ``m >= 1``; prompts may be empty. A head whose vocabulary is masked
(``-inf`` logits) may have fewer than ``K`` real entries: the rest are padding, id ``-1`` with
log-prob ``-inf``, at the end of the row (as in a lattice).

Public surface (the last group is shared by the writer and the reader of this package):
    FORMAT_NAME, FORMAT_VERSION, SUPPORTED_VERSIONS, META_FILE, TRACE_FILES
    ARRAY_DTYPES (name -> dtype of every array), STREAMED (the arrays written as they come),
    MAX_ID (the largest storable id), CHUNK_ELEMENTS (values per chunk when scanning)
    check_position_values(topk_ids, topk_logprobs, entropy, V, where, locate, row0=0)
        validate a block of positions, raising :class:`TraceFormatError` at the first bad value
    position_locator(offsets) -> (row -> "example e, position t = ...")
    read_meta(root) -> dict; array_digests(meta) -> {file: hex} | None;
    load_array(root, name, meta) -> memmap;
    check_structure(root, meta, arrays)
        read and validate ``meta.json``, each ``.npy`` header and size, and the offsets
    load_arrays(root, meta) -> {name: memmap}
        every array, its header, size and the offsets checked: the structure a reader opens
        and a writer checks before it swaps a new trace into place
"""

from __future__ import annotations

import json
import tokenize
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from blockdraft.core.checks import check_int, check_positive_int, is_int
from blockdraft.core.digest import INTEGRITY_KEY, unseal
from blockdraft.lattice.sausage import PAD_TOKEN
from blockdraft.oracle.errors import TraceFormatError

FORMAT_NAME = "blockdraft.trace"
"""The ``format`` field of ``meta.json``."""
FORMAT_VERSION = 2
"""The version :class:`~blockdraft.oracle.trace.TraceWriter` writes (2: sealed with digests)."""
SUPPORTED_VERSIONS = (1, 2)
"""Versions :meth:`Trace.open <blockdraft.oracle.trace.Trace.open>` reads (1: no digests)."""
META_FILE = "meta.json"
"""The metadata file, written last."""

ARRAY_DTYPES: dict[str, np.dtype[Any]] = {
    "prompt_ids": np.dtype("<i4"),
    "prompt_offsets": np.dtype("<i8"),
    "greedy_ids": np.dtype("<i4"),
    "position_offsets": np.dtype("<i8"),
    "topk_ids": np.dtype("<i4"),
    "topk_logprobs": np.dtype("<f4"),
    "entropy": np.dtype("<f4"),
}
STREAMED = ("prompt_ids", "greedy_ids", "topk_ids", "topk_logprobs", "entropy")
TRACE_FILES = (META_FILE, *(f"{name}.npy" for name in ARRAY_DTYPES))
"""Every file a complete trace folder holds."""
_META_KEYS = {
    "format", "version", "h", "K", "V", "num_examples", "num_positions", "num_prompt_tokens",
    "signature", "arrays",
}
MAX_ID = np.iinfo(np.int32).max
_LOGPROB_TOL = 1e-4  # nats: float32 rounding may lift a log-prob of ~0 slightly above 0
_ENTROPY_TOL = 1e-3  # nats: float32 rounding of a ~0 entropy
CHUNK_ELEMENTS = 1 << 22  # values per chunk when scanning or converting large arrays


# ---------------------------------------------------------------------------- values
def position_locator(offsets: np.ndarray) -> Any:
    """A function: global position row -> ``"example e, t = ..."``."""

    def locate(row: int) -> str:
        e = int(np.searchsorted(offsets, row, side="right")) - 1
        return f"example {e}, position t = {row - int(offsets[e])}"

    return locate


def check_position_values(
    topk_ids: np.ndarray,
    topk_logprobs: np.ndarray,
    entropy: np.ndarray,
    V: int,
    where: str,
    locate: Any,
    row0: int = 0,
) -> None:
    """Validate the values of a block of positions; raise naming the first bad entry.

    Args:
        topk_ids: int ``[r, h, K]``; ids in ``[0, V)``, padding ``-1`` only at a row's end.
        topk_logprobs: float ``[r, h, K]``; no NaN or +inf, ``<= 0``, sorted best first,
            ``-inf`` exactly at padding.
        entropy: float ``[r, h]``; finite, ``>= 0`` (nats).
        V: vocabulary size.
        where: prefix of error messages (a file, or "add()").
        locate: maps a global position row to a human location.
        row0: global row of the block's first position.
    """
    fix = "; regenerate the trace with a correct writer (TraceWriter.add_logits)"

    def at(idx: np.ndarray, kind: str) -> str:
        r, i = int(idx[0]), int(idx[1])
        rank = f", rank {int(idx[2]) + 1}" if len(idx) > 2 else ""
        return f"{where}: {kind} at {locate(row0 + r)}, head {i + 1}{rank}"

    lp = topk_logprobs
    nan = np.isnan(lp)
    if nan.any():
        raise TraceFormatError(f"{at(np.argwhere(nan)[0], 'topk_logprobs')} is NaN{fix}")
    bad = lp > _LOGPROB_TOL
    if bad.any():
        idx = np.argwhere(bad)[0]
        raise TraceFormatError(
            f"{at(idx, 'topk_logprobs')} is {float(lp[tuple(idx)])} > 0; log-probs must be "
            f"natural-log probabilities (<= 0), not logits{fix}"
        )
    ids = topk_ids
    bad = (ids < PAD_TOKEN) | (ids >= V)
    if bad.any():
        idx = np.argwhere(bad)[0]
        raise TraceFormatError(
            f"{at(idx, 'topk_ids')} is {int(ids[tuple(idx)])}, outside the vocabulary "
            f"[0, {V}) (and not the padding id {PAD_TOKEN}){fix}"
        )
    pad = ids == PAD_TOKEN
    neginf = np.isneginf(lp)
    bad = pad != neginf
    if bad.any():
        idx = np.argwhere(bad)[0]
        raise TraceFormatError(
            f"{at(idx, 'topk_ids/topk_logprobs')}: id {int(ids[tuple(idx)])} with log-prob "
            f"{float(lp[tuple(idx)])}; padding is id {PAD_TOKEN} with log-prob -inf, "
            f"together{fix}"
        )
    if pad[..., 0].any():
        idx = np.argwhere(pad[..., 0])[0]
        raise TraceFormatError(f"{at(idx, 'topk_ids')}: the head has no real entry{fix}")
    if ids.shape[-1] > 1:
        bad = pad[..., :-1] & ~pad[..., 1:]
        if bad.any():
            idx = np.argwhere(bad)[0]
            raise TraceFormatError(
                f"{at(idx, 'topk_ids')}: padding before a real entry; padding goes last{fix}"
            )
        with np.errstate(invalid="ignore"):
            rises = (lp[..., 1:] > lp[..., :-1]) & ~pad[..., 1:]
        if rises.any():
            idx = np.argwhere(rises)[0]
            row = lp[tuple(idx[:2])]
            raise TraceFormatError(
                f"{at(idx[:2], 'topk_logprobs')}: the top-K is not sorted best first "
                f"({row.tolist()}){fix}"
            )
        srt = np.sort(ids, axis=-1)
        dup = (srt[..., 1:] == srt[..., :-1]) & (srt[..., 1:] != PAD_TOKEN)
        if dup.any():
            idx = np.argwhere(dup)[0]
            raise TraceFormatError(
                f"{at(idx[:2], 'topk_ids')}: token {int(srt[tuple(idx)])} appears twice in "
                f"the top-K{fix}"
            )
    bad = ~np.isfinite(entropy) | (entropy < -_ENTROPY_TOL)
    if bad.any():
        idx = np.argwhere(bad)[0]
        raise TraceFormatError(
            f"{at(idx, 'entropy')} is {float(entropy[tuple(idx)])}; entropies are finite "
            f"and >= 0 nats{fix}"
        )


# ---------------------------------------------------------------------------- files
def read_meta(root: Path) -> dict[str, Any]:
    """Read and validate ``root/meta.json``: format, version, keys, sizes and array specs.

    Raises:
        TraceFormatError: naming ``meta.json`` and what is wrong (an unfinished trace's
            ``.part`` files are named when ``meta.json`` is missing).
    """
    meta_path = root / META_FILE
    if not meta_path.is_file():
        parts = sorted(p.name for p in root.glob("*.part"))
        hint = (
            f" (found unfinished {', '.join(parts)}: the TraceWriter was not closed or failed)"
            if parts
            else ""
        )
        raise TraceFormatError(
            f"{meta_path}: missing{hint}; this is not a finished trace, re-run the tracing"
        )
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TraceFormatError(f"{meta_path}: not valid JSON ({e}); regenerate the trace") from e
    if not isinstance(meta, dict):
        raise TraceFormatError(f"{meta_path}: expected a JSON object, got {type(meta).__name__}")
    if meta.get("format") != FORMAT_NAME:
        raise TraceFormatError(
            f"{meta_path}: format is {meta.get('format')!r}, expected {FORMAT_NAME!r}; this is "
            "not a blockdraft trace"
        )
    version = meta.get("version")
    if not is_int(version):
        raise TraceFormatError(f"{meta_path}: version {version!r} is not an integer")
    if version not in SUPPORTED_VERSIONS:
        raise TraceFormatError(
            f"{meta_path}: format version {version} is not supported (this blockdraft reads "
            f"{list(SUPPORTED_VERSIONS)}); upgrade blockdraft or regenerate the trace"
        )
    # Digests first: a changed file is reported as such, not by whatever value it broke.
    digests = unseal(meta, meta_path, TraceFormatError, "regenerate the trace")
    if version >= 2:
        files = sorted(f"{name}.npy" for name in ARRAY_DTYPES)
        if digests is None:
            raise TraceFormatError(
                f"{meta_path}: version {version} traces carry an {INTEGRITY_KEY!r} member, this "
                "one has none: the file was changed or corrupted since it was written; "
                "regenerate the trace"
            )
        if sorted(digests) != files:
            raise TraceFormatError(
                f"{meta_path}: its {INTEGRITY_KEY!r} member must hold the digests of {files}, "
                f"got {sorted(digests)}: the file was changed or corrupted since it was "
                "written; regenerate the trace"
            )
    keys = _META_KEYS | {INTEGRITY_KEY} if version >= 2 else _META_KEYS
    missing = sorted(keys - meta.keys())
    if missing:
        raise TraceFormatError(f"{meta_path}: missing keys {missing}; regenerate the trace")
    extra = sorted(meta.keys() - keys)
    if extra:
        raise TraceFormatError(
            f"{meta_path}: unknown keys {extra}; put extra information under 'signature'"
        )
    for key in ("h", "K", "V"):
        check_positive_int(meta[key], f"{meta_path}: {key}", TraceFormatError)
    for key in ("num_examples", "num_positions", "num_prompt_tokens"):
        check_int(meta[key], f"{meta_path}: {key}", TraceFormatError, minimum=0)
    if meta["K"] > meta["V"]:
        raise TraceFormatError(f"{meta_path}: K = {meta['K']} exceeds V = {meta['V']}")
    if not isinstance(meta["signature"], dict):
        raise TraceFormatError(f"{meta_path}: signature must be a JSON object")
    arrays = meta["arrays"]
    if not isinstance(arrays, dict) or set(arrays) != set(ARRAY_DTYPES):
        got = sorted(arrays) if isinstance(arrays, dict) else arrays
        raise TraceFormatError(
            f"{meta_path}: 'arrays' must describe exactly {sorted(ARRAY_DTYPES)}, got {got}"
        )
    h, K, N = meta["h"], meta["K"], meta["num_examples"]
    T, P = meta["num_positions"], meta["num_prompt_tokens"]
    expected = {
        "prompt_ids": [P], "prompt_offsets": [N + 1], "greedy_ids": [T],
        "position_offsets": [N + 1], "topk_ids": [T, h, K], "topk_logprobs": [T, h, K],
        "entropy": [T, h],
    }
    for name, spec in arrays.items():
        if not isinstance(spec, dict) or set(spec) != {"dtype", "shape"}:
            raise TraceFormatError(
                f"{meta_path}: arrays[{name!r}] must be {{'dtype': ..., 'shape': [...]}}, "
                f"got {spec!r}"
            )
        if spec["dtype"] != ARRAY_DTYPES[name].str:
            raise TraceFormatError(
                f"{meta_path}: arrays[{name!r}].dtype is {spec['dtype']!r}, format version "
                f"{version} stores {ARRAY_DTYPES[name].str!r}"
            )
        if spec["shape"] != expected[name]:
            raise TraceFormatError(
                f"{meta_path}: arrays[{name!r}].shape is {spec['shape']}, expected "
                f"{expected[name]} from h, K, num_examples, num_positions, num_prompt_tokens"
            )
    return meta


def array_digests(meta: Mapping[str, Any]) -> dict[str, str] | None:
    """The SHA-256 of every ``.npy`` file (``{"topk_ids.npy": hex, ...}``) recorded in a
    ``meta`` checked by :func:`read_meta`; None for a version 1 trace (none recorded)."""
    record = meta.get(INTEGRITY_KEY)
    return None if record is None else dict(record["files"])


def load_array(root: Path, name: str, meta: Mapping[str, Any]) -> np.ndarray:
    """Memory-map ``root/<name>.npy`` (read-only) after checking its header and size against
    ``meta`` (as returned by :func:`read_meta`).

    Raises:
        TraceFormatError: a missing or unreadable file, a wrong dtype, order or shape, or a
            truncated file or trailing bytes.
    """
    file = root / f"{name}.npy"
    if not file.is_file():
        raise TraceFormatError(f"{file}: missing; the trace is incomplete, regenerate it")
    want_dtype = ARRAY_DTYPES[name]
    want_shape = tuple(meta["arrays"][name]["shape"])
    try:
        with open(file, "rb") as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                raise ValueError(f"unsupported .npy version {version}")
            data_start = f.tell()
    except (ValueError, OSError, SyntaxError, TypeError, KeyError, IndexError, AttributeError,
            tokenize.TokenError) as e:
        # numpy parses the header with ast/tokenize: a corrupt header can raise any of these
        raise TraceFormatError(
            f"{file}: not a readable .npy file ({e}); regenerate the trace"
        ) from e
    if dtype != want_dtype:
        raise TraceFormatError(
            f"{file}: dtype is {dtype.str!r}, expected {want_dtype.str!r}; regenerate the trace"
        )
    if fortran:
        raise TraceFormatError(f"{file}: Fortran-ordered array; the format stores C order")
    if tuple(shape) != want_shape:
        raise TraceFormatError(
            f"{file}: shape is {tuple(shape)}, but meta.json says {want_shape}; the file does "
            "not belong to this trace, regenerate it"
        )
    need = data_start + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    size = file.stat().st_size
    if size < need:
        raise TraceFormatError(
            f"{file}: truncated: {size} bytes, but shape {tuple(shape)} needs {need}; the "
            "trace was cut short (disk full, interrupted copy?), regenerate it"
        )
    if size > need:
        raise TraceFormatError(
            f"{file}: {size - need} bytes of trailing data after shape {tuple(shape)}; the "
            "file is corrupt, regenerate the trace"
        )
    arr = np.load(file, mmap_mode="r", allow_pickle=False)
    return arr


def check_structure(root: Path, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
    """Check both offset arrays: they start at 0, never decrease (position offsets strictly
    increase: every example has ``m >= 1``) and end at their array's length.

    Raises:
        TraceFormatError: naming the offsets file and the first offending example.
    """
    for name, total_name in (("prompt_offsets", "prompt_ids"), ("position_offsets", "greedy_ids")):
        off = np.asarray(arrays[name])
        file = root / f"{name}.npy"
        total = arrays[total_name].shape[0]
        if off[0] != 0:
            raise TraceFormatError(f"{file}: first offset is {int(off[0])}, must be 0")
        steps = np.diff(off)
        strict = name == "position_offsets"
        bad = steps <= 0 if strict else steps < 0
        if bad.any():
            e = int(np.argmax(bad))
            rule = "strictly increasing (every example has m >= 1)" if strict else "non-decreasing"
            raise TraceFormatError(
                f"{file}: offsets must be {rule}, but example {e} spans "
                f"[{int(off[e])}, {int(off[e + 1])}); regenerate the trace"
            )
        if off[-1] != total:
            raise TraceFormatError(
                f"{file}: last offset is {int(off[-1])}, but {total_name}.npy holds {total} "
                "entries; regenerate the trace"
            )


def load_arrays(root: Path, meta: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Every array of the trace at ``root``, memory-mapped read-only (:func:`load_array`), and
    their offsets checked (:func:`check_structure`); ``meta`` as :func:`read_meta` returns it.

    Raises:
        TraceFormatError: see :func:`load_array` and :func:`check_structure`.
    """
    arrays = {name: load_array(root, name, meta) for name in ARRAY_DTYPES}
    check_structure(root, meta, arrays)
    return arrays
