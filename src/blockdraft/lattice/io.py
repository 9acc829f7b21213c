"""The lattice file format (JSON, one lattice) and its multi-lattice form (JSON Lines).

Public functions:
    save_lattice(lattice, path, *, context=None, reference=None, meta=None) -> None
        write one lattice (and optional context, reference, metadata) atomically.
    load_lattice(path) -> LatticeFile
        read and fully validate a file written by :func:`save_lattice`.
    save_lattices(items, path) -> int
        write many lattices as JSON Lines (one lattice object per line), atomically; returns
        the number written.
    iter_lattices(path) -> Iterator[LatticeFile]
        read a JSON Lines file lazily, validating each line as it is reached.
    lattice_to_dict(lattice, *, context=None, reference=None, meta=None) -> dict
    lattice_from_dict(obj, where="<dict>") -> LatticeFile
        the same object without a file (``where`` prefixes every error message).
    LatticeFile(lattice, context=[], reference=None, meta={})
        frozen record of what a file holds; validates reference length and token ids.
        write to a temporary file beside ``path``, rename over ``path`` on success only.

Format ``blockdraft.lattice``, version 1 (a JSON object; UTF-8)::

    {
      "format": "blockdraft.lattice",     # required, exactly this string
      "version": 1,                        # required, an integer in SUPPORTED_VERSIONS
      "h": 3,                              # required, number of slots, == len(slots)
      "k": 4,                              # required, array width: every slot has 1..k arcs
      "slots": [                           # required, one object per slot, slot 1 first
        {"tokens": [17, 4, 9], "scores": [-0.11, -2.5, -3.0]},
        ...
      ],
      "context": [5, 6, 7],                # optional, token ids of the committed prefix
      "reference": [17, 2, 40],            # optional, the true / greedy path, h token ids
      "meta": {"model": "..."}             # optional, any JSON object (free-form)
    }

- ``tokens``: distinct non-negative JSON integers, best first. ``scores``: finite JSON numbers,
  natural-log probabilities (nats), non-increasing, one per token.
- Ragged slots are shorter lists: padding (token ``-1``, score ``-inf``) is never written,
  and is restored on reading up to width ``k``. ``NaN`` and ``Infinity`` are rejected.
- Floats are written with Python's shortest round-trip ``repr``, so every float64 score reads
  back bit for bit.
- No other keys are allowed (put anything extra under ``meta``), so a typo fails loudly.
- JSON Lines: the same object, one per line, no blank lines in between (trailing blank lines
  are ignored). Error messages name ``path:line``.

Errors are :class:`LatticeError`, prefixed with the file path (and line, and slot); an
unreadable path raises the usual :class:`OSError`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from blockdraft.core.checks import is_int
from blockdraft.core.files import atomic_writer
from blockdraft.lattice.sausage import LatticeError, SausageLattice

FORMAT_NAME = "blockdraft.lattice"
"""Value of the ``"format"`` key of every lattice object."""

FORMAT_VERSION = 1
"""Version written by this module."""

SUPPORTED_VERSIONS = (1,)
"""Versions this module reads."""

_REQUIRED_KEYS = ("format", "version", "h", "k", "slots")
_OPTIONAL_KEYS = ("context", "reference", "meta")
_MAX_ID = 2**63 - 1  # token ids are int64


@dataclass(frozen=True, eq=False)
class LatticeFile:
    """One lattice as read from a file, with what was saved beside it.

    Attributes:
        lattice: the validated lattice.
        context: int64 ``[n]``, token ids of the committed prefix (empty when not saved).
        reference: int64 ``[h]``, the true / greedy path, or None when not saved.
        meta: free-form metadata (an empty dict when not saved).
    """

    lattice: SausageLattice
    context: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    reference: np.ndarray | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.lattice, SausageLattice):
            raise LatticeError(
                f"LatticeFile.lattice must be a SausageLattice, got {type(self.lattice).__name__}"
            )
        context = _readonly_ids(_token_list(self.context, "context"))
        object.__setattr__(self, "context", context)
        if self.reference is not None:
            ref = _token_list(self.reference, "reference")
            if len(ref) != self.lattice.h:
                raise LatticeError(
                    f"reference has {len(ref)} tokens but the lattice has h = "
                    f"{self.lattice.h} slots; give one token per slot"
                )
            object.__setattr__(self, "reference", _readonly_ids(ref))
        if not isinstance(self.meta, Mapping):
            raise LatticeError(
                f"meta must be a mapping (a JSON object), got {type(self.meta).__name__}"
            )
        object.__setattr__(self, "meta", dict(self.meta))


MAX_PADDED_K = 1 << 16
"""The widest lattice read whose every slot is ragged (``k`` above the widest slot)."""


def _readonly_ids(ids: list[int]) -> np.ndarray:
    a = np.asarray(ids, dtype=np.int64).reshape(-1)
    a.setflags(write=False)
    return a


def _token_list(values: Any, what: str) -> list[int]:
    """Validate a 1-D sequence of non-negative integer token ids; return plain ints."""
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise LatticeError(f"{what} must be a 1-D sequence of token ids, got shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        raise LatticeError(f"{what} must hold integer token ids, got dtype {arr.dtype}")
    if arr.size and int(arr.min()) < 0:
        raise LatticeError(f"{what} holds a negative token id {int(arr.min())}; ids are >= 0")
    return [int(t) for t in arr]


# ---------------------------------------------------------------------------- writing
def lattice_to_dict(
    lattice: SausageLattice,
    *,
    context: Any = None,
    reference: Any = None,
    meta: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The version-1 JSON object of a lattice (see the module docstring).

    Args:
        lattice: the lattice.
        context: token ids of the committed prefix, or None.
        reference: ``h`` token ids of the true / greedy path, or None.
        meta: a JSON-serialisable mapping, or None.

    Returns:
        A dict of plain Python ints, floats, lists and the ``meta`` mapping.

    Raises:
        LatticeError: if ``lattice`` is not a lattice, ``context``/``reference`` are not
            non-negative integer ids, ``reference`` does not have ``h`` tokens, or ``meta``
            is not a mapping.
    """
    if not isinstance(lattice, SausageLattice):
        raise LatticeError(f"expected a SausageLattice, got {type(lattice).__name__}")
    obj: dict[str, Any] = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "h": lattice.h,
        "k": lattice.k,
        "slots": [
            {"tokens": [int(t) for t in toks], "scores": [float(s) for s in scs]}
            for toks, scs in (lattice.slot(i) for i in range(lattice.h))
        ],
    }
    if context is not None:
        obj["context"] = _token_list(context, "context")
    if reference is not None:
        ref = _token_list(reference, "reference")
        if len(ref) != lattice.h:
            raise LatticeError(
                f"reference has {len(ref)} tokens but the lattice has h = {lattice.h} slots; "
                "give one token per slot"
            )
        obj["reference"] = ref
    if meta is not None:
        if not isinstance(meta, Mapping):
            raise LatticeError(f"meta must be a mapping (a JSON object), got {type(meta).__name__}")
        obj["meta"] = dict(meta)
    return obj


def _dumps(obj: dict[str, Any]) -> str:
    try:
        return json.dumps(obj, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as e:
        raise LatticeError(f"cannot write the lattice as JSON ({e}); meta must be JSON data") from e


def save_lattice(
    lattice: SausageLattice,
    path: str | os.PathLike[str],
    *,
    context: Any = None,
    reference: Any = None,
    meta: Mapping[str, Any] | None = None,
) -> None:
    """Write one lattice file (format version 1), atomically.

    Args:
        lattice: the lattice.
        path: the destination (conventionally ``*.json``); its folder must exist.
        context: token ids of the committed prefix, or None.
        reference: ``h`` token ids of the true / greedy path, or None.
        meta: free-form JSON-serialisable metadata, or None.

    Raises:
        LatticeError: on invalid ``context``, ``reference`` or ``meta`` (the file is then not
            touched).
        OSError: if the file cannot be written.
    """
    text = _dumps(lattice_to_dict(lattice, context=context, reference=reference, meta=meta))
    with atomic_writer(path) as f:
        f.write(text.encode("utf-8"))
        f.write(b"\n")


def save_lattices(
    items: Iterable[SausageLattice | LatticeFile], path: str | os.PathLike[str]
) -> int:
    """Write many lattices as JSON Lines (one version-1 object per line), atomically.

    Args:
        items: lattices, or :class:`LatticeFile` records (their context, reference and meta
            are written too; an empty context is not written).
        path: the destination (conventionally ``*.jsonl``); its folder must exist.

    Returns:
        The number of lattices written.

    Raises:
        LatticeError: if an item is neither a lattice nor a LatticeFile, or is invalid; the
            message names the item's index and ``path`` is left untouched.
        OSError: if the file cannot be written.
    """
    n = 0
    with atomic_writer(path) as f:
        for item in items:
            try:
                if isinstance(item, LatticeFile):
                    obj = lattice_to_dict(
                        item.lattice,
                        context=item.context if item.context.size else None,
                        reference=item.reference,
                        meta=item.meta or None,
                    )
                else:
                    obj = lattice_to_dict(item)
                line = _dumps(obj)
            except LatticeError as e:
                raise LatticeError(f"{path}: item {n}: {e}") from e
            f.write(line.encode("utf-8"))
            f.write(b"\n")
            n += 1
    return n


# ---------------------------------------------------------------------------- reading
def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _ids(value: Any, what: str, where: str) -> np.ndarray:
    if not isinstance(value, list):
        raise LatticeError(f"{where}: {what} must be a list of token ids, got {value!r:.80}")
    for j, t in enumerate(value):
        if not is_int(t):
            raise LatticeError(
                f"{where}: {what}[{j}] = {t!r} is not an integer token id"
            )
        if t < 0 or t > _MAX_ID:
            raise LatticeError(
                f"{where}: {what}[{j}] = {t} is out of range; token ids are in [0, {_MAX_ID}]"
            )
    return np.asarray(value, dtype=np.int64).reshape(-1)


def lattice_from_dict(obj: Any, where: str = "<dict>") -> LatticeFile:
    """Validate a version-1 lattice object and build its :class:`LatticeFile`.

    Args:
        obj: the decoded JSON value.
        where: a location for error messages (a path, ``path:line``).

    Returns:
        The lattice file record.

    Raises:
        LatticeError: on any deviation from the format, prefixed with ``where`` (and the slot
            when the fault is in one); SausageLattice's own checks (sorted scores, distinct
            tokens) speak through the same prefix.
    """
    if not isinstance(obj, dict):
        raise LatticeError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    fmt = obj.get("format")
    if fmt != FORMAT_NAME:
        raise LatticeError(
            f"{where}: format is {fmt!r}, expected {FORMAT_NAME!r}; this is not a blockdraft "
            "lattice file"
        )
    version = obj.get("version")
    if not is_int(version) or version not in SUPPORTED_VERSIONS:
        supported = ", ".join(str(v) for v in SUPPORTED_VERSIONS)
        raise LatticeError(
            f"{where}: unsupported {FORMAT_NAME} version {version!r}; this blockdraft reads "
            f"version(s) {supported} (a newer file needs a newer blockdraft)"
        )
    missing = [key for key in _REQUIRED_KEYS if key not in obj]
    if missing:
        raise LatticeError(f"{where}: missing required field(s) {missing}")
    unknown = sorted(set(obj) - set(_REQUIRED_KEYS) - set(_OPTIONAL_KEYS))
    if unknown:
        raise LatticeError(
            f"{where}: unknown field(s) {unknown}; version {version} has "
            f"{list(_REQUIRED_KEYS + _OPTIONAL_KEYS)} (put extra data under 'meta')"
        )
    h, k, slots = obj["h"], obj["k"], obj["slots"]
    if not is_int(h) or h < 1:
        raise LatticeError(f"{where}: h must be a positive integer, got {h!r}")
    if not is_int(k) or k < 1:
        raise LatticeError(f"{where}: k must be a positive integer, got {k!r}")
    if not isinstance(slots, list):
        raise LatticeError(f"{where}: slots must be a list, got {type(slots).__name__}")
    if len(slots) != h:
        raise LatticeError(f"{where}: h = {h} but the file has {len(slots)} slots")
    widest = max((len(s["tokens"]) for s in slots
                  if isinstance(s, dict) and isinstance(s.get("tokens"), list)), default=0)
    if k > max(widest, MAX_PADDED_K):
        # checked before the [h, k] arrays are allocated: a corrupt k must not cost memory
        raise LatticeError(
            f"{where}: k = {k} but the widest slot has {widest} arcs; k may exceed the widest "
            f"slot (padding) only up to {MAX_PADDED_K}"
        )

    tokens = np.full((h, k), -1, dtype=np.int64)
    scores = np.full((h, k), -np.inf, dtype=np.float64)
    for i, slot in enumerate(slots):
        at = f"{where}: slot {i + 1}"
        if not isinstance(slot, dict) or set(slot) != {"tokens", "scores"}:
            got = sorted(slot) if isinstance(slot, dict) else type(slot).__name__
            raise LatticeError(
                f"{at}: a slot is an object with exactly 'tokens' and 'scores', got {got}"
            )
        toks, scs = slot["tokens"], slot["scores"]
        if not isinstance(scs, list):
            raise LatticeError(f"{at}: scores must be a list of numbers, got {scs!r:.80}")
        ids = _ids(toks, "tokens", at)
        if len(scs) != ids.size:
            raise LatticeError(
                f"{at}: {ids.size} tokens but {len(scs)} scores; give one score per token"
            )
        if ids.size == 0:
            raise LatticeError(f"{at}: no arcs; every slot needs at least one token")
        if ids.size > k:
            raise LatticeError(f"{at}: {ids.size} arcs but k = {k}; k is the most arcs in a slot")
        for j, s in enumerate(scs):
            if not _is_number(s):
                raise LatticeError(f"{at}: scores[{j}] = {s!r} is not a number")
            if not math.isfinite(s):
                raise LatticeError(
                    f"{at}: scores[{j}] = {s!r}; scores must be finite natural-log "
                    "probabilities (a ragged slot is a shorter list, not -Infinity padding)"
                )
        tokens[i, : ids.size] = ids
        scores[i, : ids.size] = np.asarray(scs, dtype=np.float64)
    try:
        lattice = SausageLattice(tokens=tokens, scores=scores)
    except LatticeError as e:  # its message names the slot
        raise LatticeError(f"{where}: {e}") from e

    context = np.zeros(0, dtype=np.int64)
    if "context" in obj:
        context = _ids(obj["context"], "context", where)
    reference = None
    if "reference" in obj:
        reference = _ids(obj["reference"], "reference", where)
        if reference.size != h:
            raise LatticeError(
                f"{where}: reference has {reference.size} tokens but h = {h}; the reference "
                "path has one token per slot"
            )
    meta: dict[str, Any] = {}
    if "meta" in obj:
        if not isinstance(obj["meta"], dict):
            raise LatticeError(
                f"{where}: meta must be a JSON object, got {type(obj['meta']).__name__}"
            )
        meta = obj["meta"]
    return LatticeFile(lattice=lattice, context=context, reference=reference, meta=meta)


def _decode(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        hint = " (the file looks truncated)" if e.pos >= len(text.rstrip()) else ""
        raise LatticeError(
            f"{where}: not valid JSON{hint}: {e.msg} at line {e.lineno} column {e.colno}"
        ) from e


def _read_text(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise LatticeError(f"{path}: not UTF-8 text ({e}); is this a lattice file?") from e


def load_lattice(path: str | os.PathLike[str]) -> LatticeFile:
    """Read one lattice file written by :func:`save_lattice`.

    Args:
        path: the file.

    Returns:
        The lattice with its context (possibly empty), reference (or None) and meta.

    Raises:
        LatticeError: if the file is not UTF-8 JSON, is truncated, or deviates from the
            format in any way (message prefixed with the path, and the slot where relevant).
        OSError: if the file cannot be read.
    """
    p = Path(path)
    return lattice_from_dict(_decode(_read_text(p), str(p)), str(p))


def iter_lattices(path: str | os.PathLike[str]) -> Iterator[LatticeFile]:
    """Read a JSON Lines file of lattices lazily, one :class:`LatticeFile` per line.

    Args:
        path: the file written by :func:`save_lattices`.

    Yields:
        One record per line, in file order. Errors surface when their line is reached.

    Raises:
        LatticeError: on a line that is not a valid lattice object, a blank line followed by
            more data, or bytes that are not UTF-8 (message ``path:line: ...``).
        OSError: if the file cannot be read.
    """
    p = Path(path)
    with p.open("rb") as f:
        blank_at = 0
        for lineno, raw in enumerate(f, start=1):
            where = f"{p}:{lineno}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise LatticeError(f"{where}: not UTF-8 text ({e})") from e
            if not line.strip():
                blank_at = blank_at or lineno
                continue
            if blank_at:
                raise LatticeError(
                    f"{p}:{blank_at}: blank line inside a JSON Lines file; one lattice per line"
                )
            yield lattice_from_dict(_decode(line, where), where)
