"""Reading a trace: :class:`Trace` (a validated, memory-mapped trace directory) and
:class:`TraceExample` (one example's views, its step lattices and contexts).

Public surface:
    Trace.open(path, *, check_values=True) -> Trace
        open and validate a trace directory; arrays are memory-mapped, never loaded whole.
    Trace.from_head_logits(path, examples, *, K, signature=None, overwrite=False) -> Trace
        write a trace from ``(prompt_ids, greedy_ids, head_logits [m, h, V])`` triples.
    len(trace), trace[i] -> TraceExample, iter(trace), trace.first_heads(h) -> Trace
    TraceExample.lattice(t, k, certain_first=True) -> SausageLattice   the step's lattice
    TraceExample.context(t) -> int64 [len(prompt) + t]                 prompt + y_1..y_t
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from blockdraft.core.arrays import as_numpy
from blockdraft.core.checks import check_int, is_int
from blockdraft.core.digest import check_file
from blockdraft.core.signature import format_signature
from blockdraft.lattice.sausage import PAD_TOKEN, SausageLattice
from blockdraft.oracle.errors import OracleError, TraceFormatError
from blockdraft.oracle.trace.format import (
    CHUNK_ELEMENTS,
    array_digests,
    check_position_values,
    load_arrays,
    position_locator,
    read_meta,
)
from blockdraft.oracle.trace.writer import TraceWriter


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
        if not is_int(t) or not 0 <= t < hi:
            raise OracleError(
                f"position t = {t!r} is outside [0, {hi - 1}] for example {self.index} "
                f"(m = {self.m})"
            )
        return int(t)

    def lattice(self, t: int, k: int, certain_first: bool = True) -> SausageLattice:
        """The sausage lattice of the step at position ``t`` (docs/definitions.md sec. 3).

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
        if not is_int(k) or not 1 <= k <= self.K:
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
    """A trace directory opened for reading (format: :mod:`blockdraft.oracle.trace.format`).

    Build one with :meth:`open`, :meth:`from_head_logits` or
    :func:`~blockdraft.oracle.trace.synthetic_trace`; the arrays are read-only memory maps over
    the ``.npy`` files.

    Attributes:
        path: the trace directory.
        version: the format version read.
        h, K, V: heads, stored top-K width, vocabulary size.
        signature: read-only mapping of what produced the trace.
        prompt_ids, prompt_offsets, greedy_ids, position_offsets, topk_ids, topk_logprobs,
            entropy: the concatenated arrays (shapes in :mod:`~blockdraft.oracle.trace.format`).
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
            check_values: also check every ``.npy`` file against the SHA-256 that
                ``meta.json`` recorded when it was written (version 2) and scan every value
                (ids in range, no NaN, sorted top-K, valid entropies), a block of positions at
                a time; ``False`` checks only ``meta.json`` (its own digest included) and the
                structure (files, dtypes, shapes, offsets), for very large traces.

        Returns:
            The trace.

        Raises:
            TraceFormatError: naming the file and the offending value, on a missing directory
                or file, malformed ``meta.json``, an unknown format or version, a file whose
                digest differs from the recorded one (changed or corrupted since it was
                written), a wrong dtype or shape, a truncated array, non-monotone offsets, or
                an invalid value.
        """
        root = Path(path)
        if not root.is_dir():
            raise TraceFormatError(
                f"{root}: no trace directory there; write one with TraceWriter or "
                "Trace.from_head_logits"
            )
        meta = read_meta(root)
        digests = array_digests(meta)
        if check_values and digests is not None:
            for file, digest in digests.items():
                if (root / file).is_file():  # a missing one: load_array says so
                    check_file(root / file, digest, TraceFormatError, "regenerate the trace")
        trace = cls(root, meta, load_arrays(root, meta))
        if check_values:
            trace._check_values()
        return trace

    def _check_values(self) -> None:
        locate = position_locator(self.position_offsets)
        prompt_offsets = np.asarray(self.prompt_offsets)
        for name, where in (
            ("prompt_ids", lambda j: "example "
             f"{int(np.searchsorted(prompt_offsets, j, side='right')) - 1}"),
            ("greedy_ids", locate),
        ):
            arr = getattr(self, name)
            for a in range(0, arr.shape[0], CHUNK_ELEMENTS):
                block = np.asarray(arr[a : a + CHUNK_ELEMENTS])
                bad = (block < 0) | (block >= self.V)
                if bad.any():
                    j = a + int(np.argmax(bad))
                    raise TraceFormatError(
                        f"{self.path / (name + '.npy')}: id {int(arr[j])} at {where(j)} is "
                        f"outside the vocabulary [0, {self.V}); the trace is corrupt, "
                        "regenerate it"
                    )
        rows = max(1, CHUNK_ELEMENTS // (self.h * self.K))
        n = self.topk_ids.shape[0]
        for a in range(0, n, rows):
            check_position_values(
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
        if not is_int(index):
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
        h = check_int(h, "first_heads: h", OracleError, minimum=1, maximum=self.h)
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
        return format_signature(dict(self.signature))

    def __repr__(self) -> str:
        return (
            f"Trace({str(self.path)!r}, num_examples={self.num_examples}, "
            f"num_positions={self.num_positions}, h={self.h}, K={self.K}, V={self.V})"
        )
