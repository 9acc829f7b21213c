"""Traces: one teacher-forced pass per example, stored for offline simulation (SPEC sec. 6).

With exact verification the committed text is always the greedy reference ``y``, and the head
logits at position ``t`` depend only on ``x, y_<=t``. A trace stores, per example, the prompt
``x``, the greedy ids ``y_1 .. y_m`` and, for every generated position ``t = 0 .. m-1``, each
head's top-``K`` ids and natural-log probabilities and its full-vocabulary entropy. Position
``t = 0`` is the prompt's last token (the last committed token after the prefill); head ``i``
(1-based) at position ``t`` predicts ``y_{t+i}``, so head 1's top-1 at ``t`` is ``y_{t+1}``
(unless the teacher-forced pass and the greedy run disagree on a numerical tie).

Public surface:
    TraceWriter(path, *, h, K, V, signature=None, overwrite=False)
        a context manager writing a trace directory example by example; memory stays bounded
        by one example. ``.add(...)`` stores top-K arrays, ``.add_logits(...)`` full logits.
    Trace.open(path, *, check_values=True) -> Trace
        open and validate a trace directory; arrays are memory-mapped, never loaded whole.
    Trace.from_head_logits(path, examples, *, K, signature=None, overwrite=False) -> Trace
        write a trace from ``(prompt_ids, greedy_ids, head_logits [m, h, V])`` triples.
    len(trace), trace[i] -> TraceExample, iter(trace)
    TraceExample.lattice(t, k, certain_first=True) -> SausageLattice   the step's lattice
    TraceExample.context(t) -> int64 [len(prompt) + t]                 prompt + y_1..y_t
    synthetic_trace(path, *, ...) -> Trace     a random trace with controlled head accuracy
    OracleError, TraceFormatError             this room's errors (also ValueError)

On-disk format ``blockdraft.trace``, version 1: a directory holding ``meta.json`` and seven
``.npy`` files (little-endian, C order), every per-example array concatenated over examples::

    prompt_ids.npy        int32 [P]          prompts, concatenated
    prompt_offsets.npy    int64 [N + 1]      example e's prompt is prompt_ids[po[e]:po[e+1]]
    greedy_ids.npy        int32 [T]          y_1..y_m of every example, concatenated
    position_offsets.npy  int64 [N + 1]      example e's positions are rows pos[e]:pos[e+1]
    topk_ids.npy          int32 [T, h, K]    row t, head i: the top-K ids, best first
    topk_logprobs.npy     float32 [T, h, K]  their natural-log probabilities (<= 0, sorted)
    entropy.npy           float32 [T, h]     each head's full-vocabulary entropy, nats

``meta.json`` is ``{"format": "blockdraft.trace", "version": 1, "h", "K", "V",
"num_examples" (N), "num_positions" (T), "num_prompt_tokens" (P), "signature": {...},
"arrays": {name: {"dtype": "<i4", "shape": [...]}}}``; it is written last, so a directory
without it is an unfinished trace. Greedy lengths are ``m >= 1``; prompts may be empty. A head
whose vocabulary is masked (``-inf`` logits) may have fewer than ``K`` real entries: the rest
are padding, id ``-1`` with log-prob ``-inf``, at the end of the row (as in a lattice).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import IO, Any

import numpy as np

from blockdraft.arrays import as_numpy
from blockdraft.errors import BlockdraftError
from blockdraft.lattice.sausage import PAD_TOKEN, LatticeError, SausageLattice, log_softmax

FORMAT_NAME = "blockdraft.trace"
"""The ``format`` field of ``meta.json``."""
FORMAT_VERSION = 1
"""The version :class:`TraceWriter` writes."""
SUPPORTED_VERSIONS = (1,)
"""Versions :meth:`Trace.open` reads."""
META_FILE = "meta.json"

_ARRAY_DTYPES: dict[str, np.dtype[Any]] = {
    "prompt_ids": np.dtype("<i4"),
    "prompt_offsets": np.dtype("<i8"),
    "greedy_ids": np.dtype("<i4"),
    "position_offsets": np.dtype("<i8"),
    "topk_ids": np.dtype("<i4"),
    "topk_logprobs": np.dtype("<f4"),
    "entropy": np.dtype("<f4"),
}
_STREAMED = ("prompt_ids", "greedy_ids", "topk_ids", "topk_logprobs", "entropy")
_META_KEYS = {
    "format", "version", "h", "K", "V", "num_examples", "num_positions", "num_prompt_tokens",
    "signature", "arrays",
}
_MAX_ID = np.iinfo(np.int32).max
_LOGPROB_TOL = 1e-4  # nats: float32 rounding may lift a log-prob of ~0 slightly above 0
_ENTROPY_TOL = 1e-3  # nats: float32 rounding of a ~0 entropy
_CHUNK_ELEMENTS = 1 << 22  # values per chunk when scanning or converting large arrays


class OracleError(BlockdraftError, ValueError):
    """The oracle room was given invalid input (a trace, a strategy, positions, ...)."""


class TraceFormatError(OracleError):
    """A trace directory is missing, truncated, malformed or holds invalid values."""


# ---------------------------------------------------------------------------- helpers
def _positive_int(value: Any, what: str) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or int(value) < 1:
        raise OracleError(f"{what} must be a positive integer, got {value!r}")
    return int(value)


def _ids_1d(values: Any, what: str, V: int) -> np.ndarray:
    """Validate 1-D token ids in ``[0, V)``; return them as int32."""
    arr = as_numpy(values)
    if arr.ndim != 1:
        raise OracleError(f"{what} must be a 1-D sequence of token ids, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.int32)
    if arr.dtype.kind not in "iu":
        raise OracleError(f"{what} must hold integer token ids, got dtype {arr.dtype}")
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= V:
        bad = lo if lo < 0 else hi
        raise OracleError(f"{what} holds token id {bad}, outside the vocabulary [0, {V})")
    return arr.astype(np.int32)


def _check_signature(signature: Mapping[str, Any] | None) -> dict[str, Any]:
    if signature is None:
        return {}
    if not isinstance(signature, Mapping):
        raise OracleError(
            f"signature must be a mapping of str to JSON scalars, got {type(signature).__name__}"
        )
    out: dict[str, Any] = {}
    for key, value in signature.items():
        if not isinstance(key, str):
            raise OracleError(f"signature keys must be strings, got {key!r}")
        if isinstance(value, (np.integer, np.floating, np.bool_)):
            value = value.item()
        if value is not None and not isinstance(value, (str, int, float, bool)):
            raise OracleError(
                f"signature[{key!r}] = {value!r} is not a JSON scalar (str, int, float, bool, "
                "None); store a string instead"
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise OracleError(f"signature[{key!r}] = {value} is not finite; JSON cannot hold it")
        out[key] = value
    return out


def _position_locator(offsets: np.ndarray) -> Any:
    """A function: global position row -> ``"example e, t = ..."``."""

    def locate(row: int) -> str:
        e = int(np.searchsorted(offsets, row, side="right")) - 1
        return f"example {e}, position t = {row - int(offsets[e])}"

    return locate


def _check_position_values(
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


def head_entropy_from_logits(logits: np.ndarray) -> np.ndarray:
    """Entropy (nats, float64) of ``softmax(logits)`` over the last axis.

    Args:
        logits: float ``[..., V]``; ``-inf`` masks a token (it contributes 0).

    Returns:
        float64 ``[...]``.
    """
    logp = log_softmax(logits)
    p = np.exp(logp)
    with np.errstate(invalid="ignore"):
        terms = np.where(p > 0, p * logp, 0.0)
    return np.asarray(-np.sum(terms, axis=-1))


# ---------------------------------------------------------------------------- writing
class TraceWriter:
    """Write a trace directory example by example (format ``blockdraft.trace`` v1).

    Each :meth:`add` appends to one raw ``<name>.npy.part`` file per array; :meth:`close`
    turns them into ``.npy`` files (header + a streamed copy) and writes ``meta.json`` last.
    Memory holds one example plus two int64 offsets per example.

    Use as a context manager: a normal exit closes (finalises) the trace; an exception inside
    the ``with`` block aborts it (its files are removed, no ``meta.json`` is written), so a
    failed run never leaves a trace that opens. Call :meth:`close` yourself in an ``except``
    to keep what was added so far.

    Args:
        path: the trace directory (created; its parent need not exist).
        h: heads per position, ``>= 1``.
        K: top-K entries stored per head, ``1 <= K <= V``.
        V: vocabulary size, ``<= 2**31 - 1`` (ids are stored as int32).
        signature: what produced the trace (model, data, tokenizer, max_new_tokens, ...):
            a mapping of str to JSON scalars. ``h``, ``K``, ``V``, ``version`` (blockdraft's)
            and ``commit`` are added.
        overwrite: replace an existing trace at ``path``; otherwise a non-empty ``path`` is an
            error.

    Raises:
        OracleError: on invalid sizes, a bad signature, or a non-empty ``path`` without
            ``overwrite``.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        h: int,
        K: int,
        V: int,
        signature: Mapping[str, Any] | None = None,
        overwrite: bool = False,
    ) -> None:
        self.h = _positive_int(h, "h")
        self.K = _positive_int(K, "K")
        self.V = _positive_int(V, "V")
        if self.K > self.V:
            raise OracleError(f"K = {self.K} exceeds the vocabulary size V = {self.V}")
        if self.V > _MAX_ID + 1:
            raise OracleError(f"V = {self.V} does not fit int32 ids (at most {_MAX_ID + 1})")
        sig = _check_signature(signature)
        for key, value in (("h", self.h), ("K", self.K), ("V", self.V)):
            if key in sig and sig[key] != value:
                raise OracleError(
                    f"signature[{key!r}] = {sig[key]!r} contradicts {key} = {value}; drop it "
                    "from the signature (the writer records it)"
                )
            sig[key] = value
        from blockdraft import __version__
        from blockdraft.signature import git_commit

        sig.setdefault("version", __version__)
        sig.setdefault("commit", git_commit())
        self.signature = sig
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise OracleError(f"{self.path} exists and is not a directory; choose another path")
        if self.path.is_dir() and any(self.path.iterdir()):
            if not overwrite:
                raise OracleError(
                    f"{self.path} is not empty; pass overwrite=True to replace the trace there, "
                    "or choose a new path"
                )
            self._remove_own_files()
        self._created = not self.path.exists()
        self.path.mkdir(parents=True, exist_ok=True)
        self._files: dict[str, IO[bytes]] = {
            name: open(self.path / f"{name}.npy.part", "wb")
            for name in _STREAMED
        }
        self._prompt_offsets = [0]
        self._position_offsets = [0]
        self._closed = False

    # ------------------------------------------------------------------ context manager
    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    @property
    def num_examples(self) -> int:
        """Examples added so far."""
        return len(self._position_offsets) - 1

    def _remove_own_files(self) -> None:
        names = [META_FILE] + [f"{n}.npy" for n in _ARRAY_DTYPES]
        names += [f"{n}.npy.part" for n in _STREAMED]
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                (self.path / name).unlink()

    def _check_open(self) -> None:
        if self._closed:
            raise OracleError(f"the TraceWriter for {self.path} is closed; open a new one")

    # ------------------------------------------------------------------ adding
    def add(
        self,
        prompt_ids: Any,
        greedy_ids: Any,
        topk_ids: Any,
        topk_logprobs: Any,
        entropy: Any,
    ) -> int:
        """Append one example.

        Args:
            prompt_ids: int ``[n]``, the prompt ``x`` (may be empty), ids in ``[0, V)``.
            greedy_ids: int ``[m]``, ``m >= 1``: the greedy reference ``y_1 .. y_m``.
            topk_ids: int ``[m, h, K]``: at position ``t``, head ``i``'s top-K ids, best first
                (``-1`` padding only after the real ids).
            topk_logprobs: float ``[m, h, K]``: their natural-log probabilities (<= 0,
                non-increasing; ``-inf`` exactly at padding).
            entropy: float ``[m, h]``: each head's full-vocabulary entropy, nats.

        Returns:
            The new example's index.

        Raises:
            OracleError: on a wrong shape or dtype, ids outside ``[0, V)``, NaN or positive
                log-probs, unsorted or duplicated top-K, or a negative entropy. Nothing is
                written then.
        """
        self._check_open()
        prompt = _ids_1d(prompt_ids, "prompt_ids", self.V)
        greedy = _ids_1d(greedy_ids, "greedy_ids", self.V)
        m = greedy.size
        if m == 0:
            raise OracleError(
                "greedy_ids is empty; an example needs m >= 1 generated tokens (keep the EOS "
                "token in greedy_ids, or drop the example)"
            )
        ids = as_numpy(topk_ids)
        lp = as_numpy(topk_logprobs)
        ent = as_numpy(entropy)
        want = (m, self.h, self.K)
        for name, arr, shape in (
            ("topk_ids", ids, want),
            ("topk_logprobs", lp, want),
            ("entropy", ent, want[:2]),
        ):
            if arr.shape != shape:
                raise OracleError(
                    f"{name} has shape {arr.shape}, expected {shape} (m = len(greedy_ids) = {m}, "
                    f"h = {self.h}, K = {self.K})"
                )
        if ids.dtype.kind not in "iu":
            raise OracleError(f"topk_ids must be integer ids, got dtype {ids.dtype}")
        for name, arr in (("topk_logprobs", lp), ("entropy", ent)):
            if arr.dtype.kind != "f":
                raise OracleError(f"{name} must be floating point, got dtype {arr.dtype}")
        ids = ids.astype(np.int64)
        lp32 = lp.astype(np.float32)
        ent32 = ent.astype(np.float32)
        example = self.num_examples
        _check_position_values(
            ids, lp32, ent32, self.V, f"add(example {example})",
            lambda r: f"position t = {r}",
        )
        for name, arr in (
            ("prompt_ids", prompt),
            ("greedy_ids", greedy),
            ("topk_ids", ids.astype(np.int32)),
            ("topk_logprobs", lp32),
            ("entropy", ent32),
        ):
            np.ascontiguousarray(arr, dtype=_ARRAY_DTYPES[name]).tofile(self._files[name])
        self._prompt_offsets.append(self._prompt_offsets[-1] + prompt.size)
        self._position_offsets.append(self._position_offsets[-1] + m)
        return example

    def add_logits(self, prompt_ids: Any, greedy_ids: Any, head_logits: Any) -> int:
        """Append one example from its full head logits (a teacher-forced forward pass).

        Top-K (by log-prob, ties to the smaller id, as
        :meth:`SausageLattice.from_logits <blockdraft.lattice.sausage.SausageLattice.from_logits>`)
        and entropies are computed in float64 from ``log_softmax``, a block of positions at a
        time, then stored as float32.

        Args:
            prompt_ids: int ``[n]``, the prompt.
            greedy_ids: int ``[m]``, the greedy reference ``y_1 .. y_m``.
            head_logits: float ``[m, h, V]`` (numpy or torch): row ``t`` holds the logits of
                every head at position ``t`` (the prompt's last token is ``t = 0``).

        Returns:
            The new example's index.

        Raises:
            OracleError: on a wrong shape, NaN/+inf logits, or a head whose logits are all
                ``-inf``, and everything :meth:`add` checks.
        """
        self._check_open()
        z = as_numpy(head_logits)
        greedy = _ids_1d(greedy_ids, "greedy_ids", self.V)
        m = greedy.size
        if z.ndim != 3 or z.shape != (m, self.h, self.V):
            raise OracleError(
                f"head_logits has shape {z.shape}, expected (m, h, V) = ({m}, {self.h}, "
                f"{self.V})"
            )
        ids = np.empty((m, self.h, self.K), dtype=np.int64)
        lp = np.empty((m, self.h, self.K), dtype=np.float64)
        ent = np.empty((m, self.h), dtype=np.float64)
        rows = max(1, _CHUNK_ELEMENTS // (self.h * self.V))
        for a in range(0, m, rows):
            chunk = z[a : a + rows]  # (r, h, V)
            try:
                lats = SausageLattice.from_logits_batch(chunk, self.K, certain_first=False)
            except LatticeError as e:
                raise OracleError(f"head_logits rows {a}..{a + len(chunk) - 1}: {e}") from e
            ids[a : a + rows] = np.stack([lat.tokens for lat in lats])
            lp[a : a + rows] = np.stack([lat.scores for lat in lats])
            ent[a : a + rows] = head_entropy_from_logits(chunk)
        return self.add(prompt_ids, greedy, ids, lp, ent)

    # ------------------------------------------------------------------ finishing
    def close(self) -> Path:
        """Finalise the trace: write the ``.npy`` files and ``meta.json``. Idempotent.

        Returns:
            The trace directory (open it with :meth:`Trace.open`).
        """
        if self._closed:
            return self.path
        self._closed = True
        for f in self._files.values():
            f.close()
        n_prompt = self._prompt_offsets[-1]
        n_pos = self._position_offsets[-1]
        shapes: dict[str, tuple[int, ...]] = {
            "prompt_ids": (n_prompt,),
            "prompt_offsets": (self.num_examples + 1,),
            "greedy_ids": (n_pos,),
            "position_offsets": (self.num_examples + 1,),
            "topk_ids": (n_pos, self.h, self.K),
            "topk_logprobs": (n_pos, self.h, self.K),
            "entropy": (n_pos, self.h),
        }
        for name in _STREAMED:
            part = self.path / f"{name}.npy.part"
            with open(self.path / f"{name}.npy", "wb") as out, open(part, "rb") as src:
                header = {
                    "descr": np.lib.format.dtype_to_descr(_ARRAY_DTYPES[name]),
                    "fortran_order": False,
                    "shape": shapes[name],
                }
                np.lib.format.write_array_header_1_0(out, header)
                shutil.copyfileobj(src, out, 1 << 20)
            part.unlink()
        np.save(self.path / "prompt_offsets.npy", np.asarray(self._prompt_offsets, "<i8"))
        np.save(self.path / "position_offsets.npy", np.asarray(self._position_offsets, "<i8"))
        meta = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "h": self.h,
            "K": self.K,
            "V": self.V,
            "num_examples": self.num_examples,
            "num_positions": n_pos,
            "num_prompt_tokens": n_prompt,
            "signature": self.signature,
            "arrays": {
                name: {"dtype": _ARRAY_DTYPES[name].str, "shape": list(shapes[name])}
                for name in _ARRAY_DTYPES
            },
        }
        from blockdraft.lattice.io import atomic_writer

        with atomic_writer(self.path / META_FILE) as f:
            f.write(json.dumps(meta, indent=2, allow_nan=False).encode("utf-8") + b"\n")
        return self.path

    def abort(self) -> None:
        """Discard the trace: close and remove its files (and ``path`` if this writer made it
        and it is now empty). Idempotent."""
        if self._closed:
            return
        self._closed = True
        for f in self._files.values():
            f.close()
        self._remove_own_files()
        if self._created:
            with contextlib.suppress(OSError):
                self.path.rmdir()


# ---------------------------------------------------------------------------- reading
@dataclass(frozen=True, eq=False)
class TraceExample:
    """One example of a trace: read-only views into the memory-mapped arrays.

    Attributes:
        index: the example's index in the trace.
        prompt_ids: int32 ``[n]``, the prompt ``x``.
        greedy_ids: int32 ``[m]``, ``y_1 .. y_m`` (``greedy_ids[j]`` is ``y_{j+1}``).
        topk_ids: int32 ``[m, h, K]``: ``topk_ids[t, i - 1]`` is head ``i``'s top-K at
            position ``t``, predicting ``y_{t+i}``; ``-1`` is padding.
        topk_logprobs: float32 ``[m, h, K]``, their natural-log probabilities, best first.
        entropy: float32 ``[m, h]``, each head's full-vocabulary entropy at ``t``, nats.
    """

    index: int
    prompt_ids: np.ndarray
    greedy_ids: np.ndarray
    topk_ids: np.ndarray
    topk_logprobs: np.ndarray
    entropy: np.ndarray

    @property
    def m(self) -> int:
        """Generated tokens (and positions) of the example."""
        return int(self.greedy_ids.shape[0])

    @property
    def h(self) -> int:
        """Heads."""
        return int(self.topk_ids.shape[1])

    @property
    def K(self) -> int:
        """Top-K entries stored per head."""
        return int(self.topk_ids.shape[2])

    def _check_t(self, t: int, hi: int) -> int:
        if not isinstance(t, (int, np.integer)) or isinstance(t, bool) or not 0 <= t < hi:
            raise OracleError(
                f"position t = {t!r} is outside [0, {hi - 1}] for example {self.index} "
                f"(m = {self.m})"
            )
        return int(t)

    def lattice(self, t: int, k: int, certain_first: bool = True) -> SausageLattice:
        """The sausage lattice of the step at position ``t`` (SPEC sec. 3).

        Args:
            t: position, ``0 <= t < m`` (the committed prefix is ``x, y_1..y_t``).
            k: arcs per slot, ``1 <= k <= K``.
            certain_first: slot 1 holds head 1's stored top-1 alone (the certain token);
                ``False`` keeps its top ``k`` (analysis only).

        Returns:
            A lattice with ``h`` slots of width ``k``; scores are the stored log-probs (nats)
            as float64.

        Raises:
            OracleError: if ``t`` or ``k`` is out of range.
        """
        t = self._check_t(t, self.m)
        if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or not 1 <= k <= self.K:
            raise OracleError(
                f"k = {k!r} is outside [1, K = {self.K}]; re-trace with a larger K or use "
                f"k <= {self.K}"
            )
        tokens = np.array(self.topk_ids[t, :, :k], dtype=np.int64)  # (h, k)
        scores = np.array(self.topk_logprobs[t, :, :k], dtype=np.float64)  # (h, k)
        if certain_first:
            tokens[0, 1:] = PAD_TOKEN
            scores[0, 1:] = -np.inf
        return SausageLattice(tokens=tokens, scores=scores)

    def context(self, t: int) -> np.ndarray:
        """int64 ``[n + t]``: the committed prefix ``x, y_1 .. y_t`` at position ``t``
        (``0 <= t <= m``)."""
        t = self._check_t(t, self.m + 1)
        return np.concatenate([self.prompt_ids, self.greedy_ids[:t]]).astype(np.int64)

    def head1_mismatches(self) -> np.ndarray:
        """int64 positions ``t`` where head 1's stored top-1 differs from ``y_{t+1}`` (a
        numerical tie between the greedy run and the teacher-forced pass)."""
        return np.flatnonzero(self.topk_ids[:, 0, 0] != self.greedy_ids).astype(np.int64)


class Trace:
    """A trace directory opened for reading (see the module docstring for the format).

    Build one with :meth:`open`, :meth:`from_head_logits` or :func:`synthetic_trace`; the
    arrays are read-only memory maps over the ``.npy`` files.

    Attributes:
        path: the trace directory.
        version: the format version read.
        h, K, V: heads, stored top-K width, vocabulary size.
        signature: read-only mapping of what produced the trace.
        prompt_ids, prompt_offsets, greedy_ids, position_offsets, topk_ids, topk_logprobs,
            entropy: the concatenated arrays (shapes in the module docstring).
    """

    def __init__(self, path: Path, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]):
        """Internal: use :meth:`open`."""
        self.path = path
        self.version = int(meta["version"])
        self.h = int(meta["h"])
        self.K = int(meta["K"])
        self.V = int(meta["V"])
        self.signature: Mapping[str, Any] = MappingProxyType(dict(meta["signature"]))
        self.prompt_ids = arrays["prompt_ids"]
        self.prompt_offsets = arrays["prompt_offsets"]
        self.greedy_ids = arrays["greedy_ids"]
        self.position_offsets = arrays["position_offsets"]
        self.topk_ids = arrays["topk_ids"]
        self.topk_logprobs = arrays["topk_logprobs"]
        self.entropy = arrays["entropy"]

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, path: str | os.PathLike[str], *, check_values: bool = True) -> Trace:
        """Open and validate a trace directory.

        Args:
            path: the directory written by :class:`TraceWriter`.
            check_values: also scan every value (ids in range, no NaN, sorted top-K, valid
                entropies), a block of positions at a time; ``False`` checks only the
                structure (files, dtypes, shapes, offsets), for very large traces.

        Returns:
            The trace.

        Raises:
            TraceFormatError: naming the file and the offending value, on a missing directory
                or file, malformed ``meta.json``, an unknown format or version, a wrong dtype
                or shape, a truncated array, non-monotone offsets, or an invalid value.
        """
        root = Path(path)
        if not root.is_dir():
            raise TraceFormatError(
                f"{root}: no trace directory there; write one with TraceWriter or "
                "Trace.from_head_logits"
            )
        meta = _read_meta(root)
        arrays = {name: _load_array(root, name, meta) for name in _ARRAY_DTYPES}
        _check_structure(root, meta, arrays)
        trace = cls(root, meta, arrays)
        if check_values:
            trace._check_values()
        return trace

    def _check_values(self) -> None:
        locate = _position_locator(self.position_offsets)
        prompt_offsets = np.asarray(self.prompt_offsets)
        for name, where in (
            ("prompt_ids", lambda j: "example "
             f"{int(np.searchsorted(prompt_offsets, j, side='right')) - 1}"),
            ("greedy_ids", locate),
        ):
            arr = getattr(self, name)
            for a in range(0, arr.shape[0], _CHUNK_ELEMENTS):
                block = np.asarray(arr[a : a + _CHUNK_ELEMENTS])
                bad = (block < 0) | (block >= self.V)
                if bad.any():
                    j = a + int(np.argmax(bad))
                    raise TraceFormatError(
                        f"{self.path / (name + '.npy')}: id {int(arr[j])} at {where(j)} is "
                        f"outside the vocabulary [0, {self.V}); the trace is corrupt, "
                        "regenerate it"
                    )
        rows = max(1, _CHUNK_ELEMENTS // (self.h * self.K))
        n = self.topk_ids.shape[0]
        for a in range(0, n, rows):
            _check_position_values(
                np.asarray(self.topk_ids[a : a + rows]),
                np.asarray(self.topk_logprobs[a : a + rows]),
                np.asarray(self.entropy[a : a + rows]),
                self.V,
                str(self.path),
                locate,
                row0=a,
            )

    @classmethod
    def from_head_logits(
        cls,
        path: str | os.PathLike[str],
        examples: Iterable[tuple[Any, Any, Any]],
        *,
        K: int,
        signature: Mapping[str, Any] | None = None,
        overwrite: bool = False,
    ) -> Trace:
        """Write a trace from full head logits and open it.

        Args:
            path: the trace directory.
            examples: ``(prompt_ids [n], greedy_ids [m], head_logits [m, h, V])`` per example;
                ``h`` and ``V`` are read from the first example's logits.
            K: top-K entries to store per head.
            signature: see :class:`TraceWriter`.
            overwrite: see :class:`TraceWriter`.

        Returns:
            The opened trace.

        Raises:
            OracleError: if ``examples`` is empty or an example is invalid (see
                :meth:`TraceWriter.add_logits`); no trace is left behind then.
        """
        writer: TraceWriter | None = None
        try:
            for prompt, greedy, logits in examples:
                z = as_numpy(logits)
                if writer is None:
                    if z.ndim != 3:
                        raise OracleError(
                            f"head_logits of example 0 has shape {z.shape}, expected [m, h, V]"
                        )
                    writer = TraceWriter(
                        path, h=z.shape[1], K=K, V=z.shape[2], signature=signature,
                        overwrite=overwrite,
                    )
                writer.add_logits(prompt, greedy, z)
        except BaseException:
            if writer is not None:
                writer.abort()
            raise
        if writer is None:
            raise OracleError("from_head_logits got no examples; a trace needs at least one")
        return cls.open(writer.close())

    # ------------------------------------------------------------------ access
    @property
    def num_examples(self) -> int:
        """Examples in the trace (``len(trace)``)."""
        return int(self.position_offsets.shape[0]) - 1

    @property
    def num_positions(self) -> int:
        """Generated positions over all examples (``sum m``)."""
        return int(self.greedy_ids.shape[0])

    @property
    def lengths(self) -> np.ndarray:
        """int64 ``[N]``: ``m`` of every example."""
        return np.diff(np.asarray(self.position_offsets)).astype(np.int64)

    def __len__(self) -> int:
        return self.num_examples

    def __getitem__(self, index: int) -> TraceExample:
        if not isinstance(index, (int, np.integer)) or isinstance(index, bool):
            raise TypeError(f"trace indices are integers, got {type(index).__name__}")
        n = self.num_examples
        i = int(index) + n if index < 0 else int(index)
        if not 0 <= i < n:
            raise IndexError(f"example {index} is out of range for a trace of {n} examples")
        pa, pb = int(self.prompt_offsets[i]), int(self.prompt_offsets[i + 1])
        a, b = int(self.position_offsets[i]), int(self.position_offsets[i + 1])
        return TraceExample(
            index=i,
            prompt_ids=self.prompt_ids[pa:pb],
            greedy_ids=self.greedy_ids[a:b],
            topk_ids=self.topk_ids[a:b],
            topk_logprobs=self.topk_logprobs[a:b],
            entropy=self.entropy[a:b],
        )

    def __iter__(self) -> Iterator[TraceExample]:
        for i in range(self.num_examples):
            yield self[i]

    def head1_mismatches(self) -> tuple[np.ndarray, np.ndarray]:
        """Positions where head 1's stored top-1 differs from ``y_{t+1}``.

        Returns:
            ``(example, t)``, int64 ``[M]`` each, in trace order.
        """
        rows = np.flatnonzero(np.asarray(self.topk_ids[:, 0, 0]) != np.asarray(self.greedy_ids))
        offsets = np.asarray(self.position_offsets)
        example = np.searchsorted(offsets, rows, side="right") - 1
        return example.astype(np.int64), (rows - offsets[example]).astype(np.int64)

    def first_heads(self, h: int) -> Trace:
        """The same trace seen through its first ``h`` heads only (no copy: views).

        Models whose extra heads were trained independently of each other on a frozen base
        (``train(mode="heads")`` or ``"base-then-heads"``) give heads ``1..h`` the same
        parameters and logits as a model trained with ``h`` heads alone, so this is the
        ``h``-head ablation (Kim Table 1/10) from one ``h_max``-head trace. The signature
        gains ``heads_used: h``.

        Raises:
            OracleError: unless ``1 <= h <= self.h``.
        """
        if isinstance(h, bool) or not isinstance(h, (int, np.integer)) or not 1 <= h <= self.h:
            raise OracleError(f"first_heads: h = {h!r} is outside [1, {self.h}]")
        h = int(h)
        meta = {"version": self.version, "h": h, "K": self.K, "V": self.V,
                "signature": {**dict(self.signature), "heads_used": h}}
        arrays = {
            "prompt_ids": self.prompt_ids, "prompt_offsets": self.prompt_offsets,
            "greedy_ids": self.greedy_ids, "position_offsets": self.position_offsets,
            "topk_ids": self.topk_ids[:, :h], "topk_logprobs": self.topk_logprobs[:, :h],
            "entropy": self.entropy[:, :h],
        }
        return Trace(self.path, meta, arrays)

    def signature_string(self) -> str:
        """The signature as ``key:value|...`` (sacrebleu style)."""
        from blockdraft.signature import format_signature

        return format_signature(dict(self.signature))

    def __repr__(self) -> str:
        return (
            f"Trace({str(self.path)!r}, num_examples={self.num_examples}, "
            f"num_positions={self.num_positions}, h={self.h}, K={self.K}, V={self.V})"
        )


def _read_meta(root: Path) -> dict[str, Any]:
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
    if not isinstance(version, int) or isinstance(version, bool):
        raise TraceFormatError(f"{meta_path}: version {version!r} is not an integer")
    if version not in SUPPORTED_VERSIONS:
        raise TraceFormatError(
            f"{meta_path}: format version {version} is not supported (this blockdraft reads "
            f"{list(SUPPORTED_VERSIONS)}); upgrade blockdraft or regenerate the trace"
        )
    missing = sorted(_META_KEYS - meta.keys())
    if missing:
        raise TraceFormatError(f"{meta_path}: missing keys {missing}; regenerate the trace")
    extra = sorted(meta.keys() - _META_KEYS)
    if extra:
        raise TraceFormatError(
            f"{meta_path}: unknown keys {extra}; put extra information under 'signature'"
        )
    for key in ("h", "K", "V"):
        v = meta[key]
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise TraceFormatError(f"{meta_path}: {key} = {v!r} is not a positive integer")
    for key in ("num_examples", "num_positions", "num_prompt_tokens"):
        v = meta[key]
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise TraceFormatError(f"{meta_path}: {key} = {v!r} is not a non-negative integer")
    if meta["K"] > meta["V"]:
        raise TraceFormatError(f"{meta_path}: K = {meta['K']} exceeds V = {meta['V']}")
    if not isinstance(meta["signature"], dict):
        raise TraceFormatError(f"{meta_path}: signature must be a JSON object")
    arrays = meta["arrays"]
    if not isinstance(arrays, dict) or set(arrays) != set(_ARRAY_DTYPES):
        got = sorted(arrays) if isinstance(arrays, dict) else arrays
        raise TraceFormatError(
            f"{meta_path}: 'arrays' must describe exactly {sorted(_ARRAY_DTYPES)}, got {got}"
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
        if spec["dtype"] != _ARRAY_DTYPES[name].str:
            raise TraceFormatError(
                f"{meta_path}: arrays[{name!r}].dtype is {spec['dtype']!r}, format version "
                f"{version} stores {_ARRAY_DTYPES[name].str!r}"
            )
        if spec["shape"] != expected[name]:
            raise TraceFormatError(
                f"{meta_path}: arrays[{name!r}].shape is {spec['shape']}, expected "
                f"{expected[name]} from h, K, num_examples, num_positions, num_prompt_tokens"
            )
    return meta


def _load_array(root: Path, name: str, meta: Mapping[str, Any]) -> np.ndarray:
    file = root / f"{name}.npy"
    if not file.is_file():
        raise TraceFormatError(f"{file}: missing; the trace is incomplete, regenerate it")
    want_dtype = _ARRAY_DTYPES[name]
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
    except (ValueError, OSError, SyntaxError) as e:
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


def _check_structure(root: Path, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
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


# ---------------------------------------------------------------------------- synthetic
def synthetic_trace(
    path: str | os.PathLike[str],
    *,
    num_examples: int = 8,
    h: int = 4,
    K: int = 8,
    V: int = 64,
    prompt_len: tuple[int, int] = (1, 6),
    length: tuple[int, int] = (4, 40),
    accuracy: Sequence[float] | None = None,
    repeat: float = 0.0,
    seed: int = 0,
    signature: Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> Trace:
    """A random trace whose heads find the truth at a controlled rank (tests and the demo).

    Greedy tokens are uniform over ``[0, V)``. At position ``t`` head 1 ranks ``y_{t+1}`` first
    (it is the greedy head); head ``i >= 2`` ranks its target ``y_{t+i}`` at
    ``r = min(G - 1, V - 1)`` with ``G ~ Geometric(accuracy[i-1])``, so it is the top-1 with
    probability ``accuracy[i-1]`` and falls off geometrically below. Targets past ``y_m`` are
    ranked at random. Logits are sorted Gaussians scaled by ``4 / (1 + i/2)`` so later heads
    are flatter (higher entropy), as in Kim et al. Fig. 3.

    Args:
        path: the trace directory.
        num_examples: examples, ``>= 1``.
        h: heads; K: stored top-K; V: vocabulary size.
        prompt_len: inclusive range of prompt lengths.
        length: inclusive range of greedy lengths ``m`` (``>= 1``).
        accuracy: top-1 probability of heads ``2..h`` (``h - 1`` values in ``(0, 1]``);
            default ``0.8 * 0.8 ** (i - 2)`` for head ``i``.
        repeat: when head ``i >= 3`` misses, the probability that its top-1 copies head
            ``i - 1``'s top-1 (the heads' consecutive repetition, Kim Table 3).
        seed: random seed.
        signature: extra signature fields; ``data`` defaults to ``"synthetic(seed=...)"``.
        overwrite: see :class:`TraceWriter`.

    Returns:
        The opened trace.
    """
    num_examples = _positive_int(num_examples, "num_examples")
    if accuracy is None:
        acc = [0.8 * 0.8 ** (i - 2) for i in range(2, h + 1)]
    else:
        acc = [float(a) for a in accuracy]
        if len(acc) != h - 1 or not all(0.0 < a <= 1.0 for a in acc):
            raise OracleError(
                f"accuracy must give h - 1 = {h - 1} probabilities in (0, 1], got {accuracy!r}"
            )
    if not 0.0 <= repeat <= 1.0:
        raise OracleError(f"repeat must be a probability in [0, 1], got {repeat!r}")
    lo, hi = length
    if lo < 1 or hi < lo:
        raise OracleError(f"length must be an inclusive range with 1 <= lo <= hi, got {length}")
    plo, phi = prompt_len
    if plo < 0 or phi < plo:
        raise OracleError(f"prompt_len must be an inclusive range >= 0, got {prompt_len}")
    rng = np.random.default_rng(seed)
    sig = {"model": "synthetic", "data": f"synthetic(seed={seed})", **(signature or {})}
    with TraceWriter(path, h=h, K=K, V=V, signature=sig, overwrite=overwrite) as writer:
        for _ in range(num_examples):
            m = int(rng.integers(lo, hi + 1))
            prompt = rng.integers(0, V, size=int(rng.integers(plo, phi + 1)))
            greedy = rng.integers(0, V, size=m)
            logits = np.empty((m, h, V))  # (m, h, V)
            for t in range(m):
                prev_top: int | None = None
                for i in range(h):  # head i + 1 predicts y_{t+i+1} = greedy[t + i]
                    values = np.sort(rng.standard_normal(V))[::-1] * (4.0 / (1 + 0.5 * i))
                    target = int(greedy[t + i]) if t + i < m else None
                    if target is None:
                        order = rng.permutation(V)
                    else:
                        rank = 0 if i == 0 else min(int(rng.geometric(acc[i - 1])) - 1, V - 1)
                        others = rng.permutation(V)
                        others = others[others != target]
                        if (
                            rank > 0 and i >= 2 and prev_top is not None
                            and prev_top != target and rng.random() < repeat
                        ):
                            others = np.concatenate([[prev_top], others[others != prev_top]])
                        order = np.insert(others, rank, target)
                    logits[t, i, order] = values
                    prev_top = int(order[0])
            writer.add_logits(prompt, greedy, logits)
    return Trace.open(path)
