"""ONNX Runtime over an exported step graph (:mod:`.onnx_graph`): the key/value buffers and
the sessions that run one incremental forward at a time.

Public surface:
    OnnxStepRunner(path_or_bytes, device="cpu", intra_op_threads=1, output_embedding=None)
        .new_cache(batch_size=1) -> OnnxCache               an empty cache
        .step(input_ids, cache) -> (hidden, cache)          one incremental forward
        .logits(hidden) -> logits                           the vocabulary projection
    OnnxCache(keys, values, length)    the key/value buffers; .crop(n), .rows(index), .grown(c)

The buffers have a fixed capacity ``P``, not the cache's length: :class:`OnnxStepRunner`
builds the attention bias that masks the buffer's positions ``>= T_past`` (and the new
tokens' future), the positions and the split, and writes the new keys and values into the
buffers in place (``O(T)`` copying per call; the buffers grow, copied once, when a call would
overflow them). onnxruntime imports lazily.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from blockdraft.core.checks import check_int
from blockdraft.models.runtimes.onnx_store import open_session
from blockdraft.rescorers.base import RescorerError
from blockdraft.rescorers.neural.onnx_graph import (
    CONFIG_KEYS,
    GRAPH_FORMAT,
    INSTALL_HINT,
    head_graph,
)

_MIN_CAPACITY = 64  # buffer positions allocated at least, and the granule of growth


@dataclass(frozen=True, eq=False)
class OnnxCache:
    """Key/value buffers of the step graph holding ``length`` positions (of ``capacity``).

    Attributes:
        keys: one array per layer, float32 ``[B, n_head, head_dim, capacity]`` (transposed,
            rotary-embedded).
        values: one array per layer, float32 ``[B, n_head, capacity, head_dim]``.
        length: positions held; the buffers' later positions are scratch space.

    A cache is a view of its buffers: :meth:`OnnxStepRunner.step` writes the new positions into
    them in place, so a cache that holds positions ``>= length`` of the same buffers (the one
    this was cropped from) no longer does after a step on this one.
    """

    keys: tuple[np.ndarray, ...]
    values: tuple[np.ndarray, ...]
    length: int

    @property
    def batch_size(self) -> int:
        """Rows ``B``."""
        return int(self.keys[0].shape[0])

    @property
    def capacity(self) -> int:
        """Positions the buffers can hold."""
        return int(self.keys[0].shape[3])

    def crop(self, length: int) -> OnnxCache:
        """The first ``length`` positions (``0 <= length <= self.length``), same buffers.

        Raises:
            RescorerError: when ``length`` is out of range.
        """
        if not 0 <= length <= self.length:
            raise RescorerError(f"crop length must lie in [0, {self.length}], got {length}")
        return self if length == self.length else OnnxCache(self.keys, self.values, length)

    def rows(self, index: np.ndarray) -> OnnxCache:
        """Rows ``index`` in order (repeats allowed), in new buffers of the same capacity (the
        same cache when it is already exactly those rows)."""
        index = np.asarray(index, dtype=np.int64).reshape(-1)
        if index.size == self.batch_size and np.array_equal(index, np.arange(index.size)):
            return self
        n = self.length

        def gather(buf: np.ndarray, axis: int) -> np.ndarray:
            out = np.zeros((index.size, *buf.shape[1:]), np.float32)
            if axis == 3:
                out[..., :n] = buf[index, :, :, :n]
            else:
                out[:, :, :n] = buf[index, :, :n]
            return out

        return OnnxCache(tuple(gather(k, 3) for k in self.keys),
                         tuple(gather(v, 2) for v in self.values), n)

    def grown(self, capacity: int) -> OnnxCache:
        """The same positions in new buffers of ``capacity >= length`` positions."""
        n = self.length
        keys, values = [], []
        for k, v in zip(self.keys, self.values, strict=True):
            k2 = np.zeros((*k.shape[:3], capacity), np.float32)
            v2 = np.zeros((v.shape[0], v.shape[1], capacity, v.shape[3]), np.float32)
            k2[..., :n] = k[..., :n]
            v2[:, :, :n] = v[:, :, :n]
            keys.append(k2)
            values.append(v2)
        return OnnxCache(tuple(keys), tuple(values), n)


class OnnxStepRunner:
    """ONNX Runtime sessions over an exported step graph (and the vocabulary projection).

    Args:
        model: the exported file (path) or its bytes.
        device: ``"cpu"``, or ``"cuda"``/``"cuda:N"`` for the CUDA execution provider when
            onnxruntime has it (else a RescorerError). Inputs and outputs are numpy arrays on
            the host either way.
        intra_op_threads: ONNX Runtime's intra-op thread count (0: its default, all cores).
            A step is many tiny kernels: 1 (no thread pool) is usually the fastest. The other
            options are every blockdraft session's (sequential, no spinning threads:
            :func:`~blockdraft.models.runtimes.onnx_store.open_session`).
        output_embedding: float32 ``[V, d]``, the LM's output embedding (its tied ``wte`` or
            its ``lm_head``), for :meth:`logits`; None: no projection.

    Raises:
        RescorerError: when onnxruntime is missing, the device is unavailable, the file cannot
            be loaded or is not a step graph of this format.

    Not thread-safe: single-token steps share one I/O binding (use one runner per stream).
    """

    def __init__(
        self,
        model: str | Path | bytes,
        device: str = "cpu",
        intra_op_threads: int = 1,
        output_embedding: np.ndarray | None = None,
    ) -> None:
        try:
            import onnxruntime as ort
        except ImportError as e:
            raise RescorerError(f"the ONNX backend needs onnxruntime: {INSTALL_HINT}") from e
        intra_op_threads = check_int(intra_op_threads, "intra_op_threads", RescorerError,
                                     minimum=0)
        self._providers = self._pick_providers(ort, device)
        self._threads = intra_op_threads
        where = "<bytes>" if isinstance(model, bytes) else str(model)
        self.session = self._open(model if isinstance(model, bytes) else Path(model))
        meta = self.session.get_modelmeta().custom_metadata_map
        if meta.get("graph_format") != GRAPH_FORMAT:
            raise RescorerError(
                f"{where} is not a rescorer step graph of format {GRAPH_FORMAT!r} (found "
                f"{meta.get('graph_format')!r}); re-export it with export_rescorer_onnx"
            )
        self.n_layer, self.n_head, self.head_dim, self.d_model, self.vocab_size, \
            self.max_seq_len = (int(meta[key]) for key in CONFIG_KEYS)
        self._outputs = ["hidden"] + [f"new_{kind}_{i}" for i in range(self.n_layer)
                                      for kind in ("keys", "values")]
        self._head: Any = None
        self._bound: _Binding | None = None
        if output_embedding is not None:
            if tuple(output_embedding.shape) != (self.vocab_size, self.d_model):
                raise RescorerError(
                    f"output_embedding must be [V, d] = [{self.vocab_size}, {self.d_model}], got "
                    f"{tuple(output_embedding.shape)}"
                )
            self._head = self._open(head_graph(output_embedding))

    def _open(self, source: Path | bytes) -> Any:
        """A session over ``source`` with the options every blockdraft session has
        (:func:`~blockdraft.models.runtimes.onnx_store.open_session`)."""
        return open_session(source, self._threads, providers=self._providers,
                            error=RescorerError, advice="re-export it with export_rescorer_onnx")

    @staticmethod
    def _pick_providers(ort: Any, device: str) -> list[Any]:
        dev = torch.device(device)
        if dev.type == "cuda":
            if "CUDAExecutionProvider" not in ort.get_available_providers():
                raise RescorerError(
                    f"device {device!r} asks for ONNX Runtime's CUDAExecutionProvider, but this "
                    f"onnxruntime has only {ort.get_available_providers()}; install "
                    "onnxruntime-gpu or use device='cpu'"
                )
            return [("CUDAExecutionProvider", {"device_id": dev.index or 0}),
                    "CPUExecutionProvider"]
        if dev.type == "cpu":
            return ["CPUExecutionProvider"]
        raise RescorerError(f"the onnx backend runs on 'cpu' or 'cuda', got {device!r}")

    @property
    def providers(self) -> list[str]:
        """The execution providers the step session uses, preferred first."""
        return list(self.session.get_providers())

    def new_cache(self, batch_size: int = 1, capacity: int = 0) -> OnnxCache:
        """An empty cache of ``batch_size`` rows (``capacity``: positions to allocate now;
        :meth:`step` grows the buffers as needed)."""
        nh, hs = self.n_head, self.head_dim
        return OnnxCache(
            tuple(np.zeros((batch_size, nh, hs, capacity), np.float32)
                  for _ in range(self.n_layer)),
            tuple(np.zeros((batch_size, nh, capacity, hs), np.float32)
                  for _ in range(self.n_layer)),
            0,
        )

    def capacity_for(self, length: int) -> int:
        """The buffer size allocated for ``length`` positions: ``length + 32`` rounded up to a
        multiple of 64, at most ``max_seq_len`` (attention runs over the whole buffer, so it
        stays tight; growing copies it once per 32 to 96 positions)."""
        want = length + _MIN_CAPACITY // 2
        return min(self.max_seq_len, -(-want // _MIN_CAPACITY) * _MIN_CAPACITY)

    def step(self, input_ids: np.ndarray, cache: OnnxCache) -> tuple[np.ndarray, OnnxCache]:
        """One incremental forward of ``input_ids`` after ``cache``.

        Args:
            input_ids: int64 ``[B, T]``, ``T >= 1``.
            cache: ``B`` rows (from :meth:`new_cache`, an earlier step, ``crop`` or ``rows``).

        Returns:
            ``hidden`` float32 ``[B, T, d]`` (the final normed hidden states; ``logits`` gives
            the next-token logits) and the cache of ``length + T`` positions: the same buffers
            written in place, or grown ones.

        Raises:
            RescorerError: on a batch mismatch, or when ``length + T`` exceeds ``max_seq_len``.

        A single token on a single row (the greedy search's every call) runs through an
        I/O binding of fixed arrays, updated in place; other calls pass numpy feeds.
        """
        ids = np.ascontiguousarray(input_ids, dtype=np.int64)
        b, t = ids.shape
        past = cache.length
        total = past + t
        if cache.batch_size != b:
            raise RescorerError(f"the cache has {cache.batch_size} rows, input_ids {b}; "
                                "select rows first (cache.rows)")
        if total > self.max_seq_len:
            raise RescorerError(
                f"{past} cached + {t} new positions exceed the model's max_seq_len = "
                f"{self.max_seq_len}"
            )
        if total > cache.capacity:
            cache = cache.grown(self.capacity_for(total))
        if b == 1 and t == 1:
            hidden, new_keys, new_values = self._step_bound(int(ids[0, 0]), cache)
        else:
            hidden, new_keys, new_values = self._step_fed(ids, cache)
        for i in range(self.n_layer):
            cache.keys[i][..., past:total] = new_keys[i][0]  # (B, nh, hs, T)
            cache.values[i][:, :, past:total] = new_values[i][0]  # (B, nh, T, hs)
        return hidden, OnnxCache(cache.keys, cache.values, total)

    def _step_fed(self, ids: np.ndarray, cache: OnnxCache) -> tuple[np.ndarray, list[Any],
                                                                     list[Any]]:
        t, past, cap = ids.shape[1], cache.length, cache.capacity
        bias = np.full((t, cap + t), -np.inf, np.float32)  # (T, P + T)
        bias[:, :past] = 0.0
        bias[:, cap:][np.tri(t, dtype=bool)] = 0.0  # causal among the new tokens
        feeds: dict[str, np.ndarray] = {
            "input_ids": ids,
            "positions": np.arange(past, past + t, dtype=np.int64),
            "attn_bias": bias,
            "split_sizes": np.array([cap, t], np.int64),
        }
        for i in range(self.n_layer):
            feeds[f"past_keys_{i}"] = cache.keys[i]
            feeds[f"past_values_{i}"] = cache.values[i]
        out = self.session.run(self._outputs, feeds)
        return out[0], out[1::2], out[2::2]

    def _step_bound(self, token: int, cache: OnnxCache) -> tuple[np.ndarray, list[Any],
                                                                  list[Any]]:
        bound = self._bound
        if bound is None or bound.keys is not cache.keys:
            bound = self._bound = _Binding(self, cache)
        bound.ids[0, 0] = token
        bound.positions[0] = cache.length
        bound.set_length(cache.length)
        self.session.run_with_iobinding(bound.io)
        return bound.hidden.copy(), bound.new_keys, bound.new_values

    def logits(self, hidden: np.ndarray) -> np.ndarray:
        """float32 ``[N, V]`` raw next-token logits of hidden states ``[N, d]``.

        Raises:
            RescorerError: when the runner was made without ``output_embedding``.
        """
        if self._head is None:
            raise RescorerError("this runner has no output_embedding: pass it to project")
        h = np.ascontiguousarray(hidden, dtype=np.float32).reshape(-1, self.d_model)
        return self._head.run(None, {"hidden": h})[0]  # type: ignore[no-any-return]


class _Binding:
    """The step session's inputs and outputs for one token on one row, bound once to arrays
    that each call updates in place (ids, position, the bias row) or reads (outputs), over the
    buffers of one cache (rebound when they change: a new cache, or grown buffers)."""

    def __init__(self, runner: OnnxStepRunner, cache: OnnxCache) -> None:
        from onnxruntime import OrtValue

        nh, hs, cap = runner.n_head, runner.head_dim, cache.capacity
        self.keys = cache.keys
        self.ids = np.zeros((1, 1), np.int64)
        self.positions = np.zeros(1, np.int64)
        self.bias = np.full((1, cap + 1), -np.inf, np.float32)  # (1, P + 1)
        self.bias[0, cap] = 0.0  # the new token sees itself
        self.length = 0  # bias[0, :length] = 0
        self.hidden = np.zeros((1, 1, runner.d_model), np.float32)
        self.new_keys = [np.zeros((1, 1, nh, hs, 1), np.float32) for _ in range(runner.n_layer)]
        self.new_values = [np.zeros((1, 1, nh, 1, hs), np.float32)
                           for _ in range(runner.n_layer)]
        arrays = {"input_ids": self.ids, "positions": self.positions, "attn_bias": self.bias,
                  "split_sizes": np.array([cap, 1], np.int64)}
        for i in range(runner.n_layer):
            arrays[f"past_keys_{i}"] = cache.keys[i]
            arrays[f"past_values_{i}"] = cache.values[i]
        self._values = {name: OrtValue.ortvalue_from_numpy(arr) for name, arr in arrays.items()}
        outputs = [self.hidden] + [a for i in range(runner.n_layer)
                                   for a in (self.new_keys[i], self.new_values[i])]
        self.io = runner.session.io_binding()
        for name, value in self._values.items():
            self.io.bind_ortvalue_input(name, value)
        for name, arr in zip(runner._outputs, outputs, strict=True):
            value = OrtValue.ortvalue_from_numpy(arr)  # written in place by the session
            self._values[name] = value
            self.io.bind_ortvalue_output(name, value)

    def set_length(self, length: int) -> None:
        """Unmask the buffer's first ``length`` positions, mask the rest."""
        if length > self.length:
            self.bias[0, self.length : length] = 0.0
        elif length < self.length:
            self.bias[0, length : self.length] = -np.inf
        self.length = length
