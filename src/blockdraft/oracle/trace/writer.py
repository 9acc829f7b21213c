"""Writing a trace: :class:`TraceWriter`, example by example with bounded memory.

Public surface:
    TraceWriter(path, *, h, K, V, signature=None, overwrite=False)
        a context manager writing a trace directory (format in
        :mod:`blockdraft.oracle.trace.format`); memory stays bounded by one example.
        ``.add(...)`` stores top-K arrays, ``.add_logits(...)`` full logits; ``.close()``
        finalises, ``.abort()`` discards.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np

from blockdraft.core.arrays import as_numpy
from blockdraft.core.checks import check_positive_int
from blockdraft.core.digest import HashingWriter, seal
from blockdraft.core.files import atomic_writer, new_temporary_directory, replace_directory
from blockdraft.core.signature import git_commit
from blockdraft.core.version import __version__
from blockdraft.lattice.sausage import LatticeError, SausageLattice
from blockdraft.oracle.errors import OracleError
from blockdraft.oracle.trace.entropy import head_entropy_from_logits
from blockdraft.oracle.trace.format import (
    ARRAY_DTYPES,
    CHUNK_ELEMENTS,
    FORMAT_NAME,
    FORMAT_VERSION,
    MAX_ID,
    META_FILE,
    STREAMED,
    TRACE_FILES,
    check_position_values,
    load_arrays,
    read_meta,
)

# What a trace folder holds (and may hold while being written); anything else in a folder to
# be overwritten is the user's, and refused rather than deleted.
_OWN_FILES = frozenset([*TRACE_FILES, *(f"{n}.npy.part" for n in STREAMED)])


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


class TraceWriter:
    """Write a trace directory example by example (format ``blockdraft.trace`` v2).

    Everything is written into a hidden sibling folder of ``path``
    (``.NAME.<pid>-<hex>.partial``): each :meth:`add` appends to one raw ``<name>.npy.part``
    file per array; :meth:`close` turns them into ``.npy`` files (header + a streamed copy),
    writes ``meta.json`` last (sealed with the SHA-256 of itself and of every ``.npy`` file,
    hashed as they are written), checks that the folder opens as a trace, and only then swaps it
    onto ``path`` (under a lock on the parent folder: of two concurrent writers the last to
    finish wins). An old trace at ``path`` stays whole until then.
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
        overwrite: replace an existing trace at ``path`` (once the new one is complete);
            otherwise a non-empty ``path`` is an error. A folder holding files that are not a
            trace's is never overwritten.

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
        self.h = check_positive_int(h, "h", OracleError)
        self.K = check_positive_int(K, "K", OracleError)
        self.V = check_positive_int(V, "V", OracleError)
        if self.K > self.V:
            raise OracleError(f"K = {self.K} exceeds the vocabulary size V = {self.V}")
        if self.V > MAX_ID + 1:
            raise OracleError(f"V = {self.V} does not fit int32 ids (at most {MAX_ID + 1})")
        sig = _check_signature(signature)
        for key, value in (("h", self.h), ("K", self.K), ("V", self.V)):
            if key in sig and sig[key] != value:
                raise OracleError(
                    f"signature[{key!r}] = {sig[key]!r} contradicts {key} = {value}; drop it "
                    "from the signature (the writer records it)"
                )
            sig[key] = value
        sig.setdefault("version", __version__)
        sig.setdefault("commit", git_commit())
        self.signature = sig
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise OracleError(f"{self.path} exists and is not a directory; choose another path")
        if self.path.is_dir() and any(self.path.iterdir()):
            if not overwrite:
                raise OracleError(
                    f"{self.path} is not empty; pass overwrite=True (--overwrite on the command "
                    "line) to replace the trace there, or choose a new path"
                )
            foreign = sorted(p.name for p in self.path.iterdir() if p.name not in _OWN_FILES)
            if foreign:
                raise OracleError(
                    f"{self.path} holds files that are not a trace's ({', '.join(foreign[:5])}"
                    f"{', ...' if len(foreign) > 5 else ''}); overwriting would delete them: "
                    "move them away or choose a new path"
                )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Everything is written into a hidden sibling folder, checked, and only then swapped
        # onto ``path``: an old trace there stays whole until the new one is complete.
        self._dir = new_temporary_directory(self.path)
        try:
            self._files: dict[str, IO[bytes]] = {}
            for name in STREAMED:
                self._files[name] = open(self._dir / f"{name}.npy.part", "wb")
        except BaseException:
            for f in self._files.values():
                f.close()
            shutil.rmtree(self._dir, ignore_errors=True)
            raise
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
        check_position_values(
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
            np.ascontiguousarray(arr, dtype=ARRAY_DTYPES[name]).tofile(self._files[name])
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
        rows = max(1, CHUNK_ELEMENTS // (self.h * self.V))
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
            The trace directory (open it with
            :meth:`Trace.open <blockdraft.oracle.trace.Trace.open>`).
        """
        if self._closed:
            return self.path
        self._closed = True
        try:
            for f in self._files.values():
                f.close()
            return self._finish()
        except BaseException:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise

    def _finish(self) -> Path:
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
        digests: dict[str, str] = {}  # of every .npy file, hashed as it is written
        for name in STREAMED:
            part = self._dir / f"{name}.npy.part"
            with atomic_writer(self._dir / f"{name}.npy") as f, open(part, "rb") as src:
                out = HashingWriter(f)
                header = {
                    "descr": np.lib.format.dtype_to_descr(ARRAY_DTYPES[name]),
                    "fortran_order": False,
                    "shape": shapes[name],
                }
                np.lib.format.write_array_header_1_0(out, header)
                shutil.copyfileobj(src, out, 1 << 20)
                digests[f"{name}.npy"] = out.hexdigest()
            part.unlink()
        for name, offsets in (
            ("prompt_offsets", self._prompt_offsets),
            ("position_offsets", self._position_offsets),
        ):
            with atomic_writer(self._dir / f"{name}.npy") as f:
                out = HashingWriter(f)
                np.save(out, np.asarray(offsets, ARRAY_DTYPES[name]))
                digests[f"{name}.npy"] = out.hexdigest()
        meta = seal({
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
                name: {"dtype": ARRAY_DTYPES[name].str, "shape": list(shapes[name])}
                for name in ARRAY_DTYPES
            },
        }, digests)
        with atomic_writer(self._dir / META_FILE) as f:
            f.write(json.dumps(meta, indent=2, allow_nan=False).encode("utf-8") + b"\n")
        try:
            # never swap in a trace that does not open: its meta.json and structure are
            # checked as Trace.open(check_values=False) checks them
            load_arrays(self._dir, read_meta(self._dir))
            replace_directory(self._dir, self.path)
        except BaseException:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise
        return self.path

    def abort(self) -> None:
        """Discard the trace: close and remove its temporary folder (an old trace at ``path``
        stays as it was). Idempotent."""
        if self._closed:
            return
        self._closed = True
        for f in self._files.values():
            f.close()
        shutil.rmtree(self._dir, ignore_errors=True)
