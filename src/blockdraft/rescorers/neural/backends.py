"""The rescoring LM behind a backend: one incremental forward, the scores the search reads off
its hidden states, and the cache operations the search needs.

Public surface:
    Backend                                   the interface the search runs on
    TorchBackend(model)                       the RescorerLM itself (its KVCache)
    OnnxBackend(runner, embedding)            an ONNX export under ONNX Runtime (OnnxCache)
    log_normaliser(logits) -> float64 [N]     ln sum exp, the log-softmax shift
    output_embedding(model) -> [V, d]         the matrix whose rows score the vocabulary
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from blockdraft.models.blockwise import RescorerLM
from blockdraft.models.cache import KVCache
from blockdraft.rescorers.neural.onnx_runtime import OnnxCache, OnnxStepRunner


def log_normaliser(logits: np.ndarray) -> np.ndarray:
    """float64 ``[N]``: ``ln sum_v exp(logits[n, v])`` of raw logits ``[N, V]``, the
    log-softmax normaliser (natural log), so ``ln P(v) = logits[v] - log_normaliser``.

    The row maximum is subtracted first and the exponentials are taken in float32 (the logits'
    own precision), summed in float64: within ~1e-7 of a float64 log-softmax, several times
    cheaper over a 4,096-token vocabulary.
    """
    z = np.asarray(logits, dtype=np.float32)
    top = z.max(axis=-1, keepdims=True)  # (N, 1)
    total = np.exp(z - top).sum(axis=-1, dtype=np.float64)  # (N,)
    return np.log(total) + top[..., 0].astype(np.float64)


def output_embedding(model: RescorerLM) -> torch.Tensor:
    """``[V, d]``: the matrix whose rows score the vocabulary (``lm_head`` or the tied ``wte``)."""
    return model.lm_head.weight if model.lm_head is not None else model.transformer.wte.weight


class Backend:
    """One incremental forward of the rescoring LM, the scores the search reads off its hidden
    states, and the cache operations the search needs.

    A state is an opaque cache of ``T`` positions over ``B`` rows; ``None`` is the empty cache.
    A hidden state is the backend's own array type (``[B, d]``, rows ``[d]``).
    """

    def forward(self, ids: np.ndarray, state: Any) -> tuple[Any, Any]:
        """``ids`` int64 ``[B, T]`` after ``state`` (batch ``B`` or 1) -> (the final hidden
        states after each new position, ``[B, T, d]``; the new state)."""
        raise NotImplementedError

    def arc_logits(self, hidden: Any, tokens: np.ndarray) -> np.ndarray:
        """float64 ``[B, n]``: the raw next-token logits of ``tokens [n]`` after ``hidden``."""
        raise NotImplementedError

    def log_norm(self, hidden: Any) -> np.ndarray:
        """float64 ``[B]``: the log-softmax normaliser of ``hidden [B, d]``'s logits (nats)."""
        raise NotImplementedError

    def stack(self, rows: Sequence[Any]) -> Any:
        """Hidden rows ``[d]`` as one ``[N, d]`` array."""
        raise NotImplementedError

    def rows(self, state: Any, index: np.ndarray) -> Any:
        """Rows ``index`` of ``state``, in order (a batch-1 state may be returned as is: the
        next forward broadcasts it)."""
        raise NotImplementedError

    def crop(self, state: Any, length: int) -> Any:
        """The first ``length >= 1`` positions of ``state``."""
        raise NotImplementedError


class TorchBackend(Backend):
    def __init__(self, model: RescorerLM) -> None:
        self.model = model

    def forward(self, ids: np.ndarray, state: KVCache | None) -> tuple[torch.Tensor, KVCache]:
        with torch.inference_mode():
            ids_t = torch.from_numpy(ids).to(self.model.device)  # (B, T)
            x, cache = self.model.hidden(ids_t, state)  # (B, T, d)
        return x, cache  # (B, T, d)

    def arc_logits(self, hidden: torch.Tensor, tokens: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            emb = output_embedding(self.model)
            rows = emb[torch.tensor(tokens, dtype=torch.long, device=emb.device)]  # (n, d)
            return (hidden @ rows.T).double().cpu().numpy()  # type: ignore[no-any-return]

    def log_norm(self, hidden: torch.Tensor) -> np.ndarray:
        with torch.inference_mode():
            logits = self.model.project(hidden).float().cpu().numpy()  # (B, V)
        return log_normaliser(logits)

    def stack(self, rows: Sequence[torch.Tensor]) -> torch.Tensor:
        return torch.stack(list(rows))

    def rows(self, state: KVCache, index: np.ndarray) -> KVCache:
        if state.batch_size == 1:
            return state  # the model broadcasts a batch-1 cache under a B-row input
        return state.select_rows(torch.from_numpy(index))

    def crop(self, state: KVCache, length: int) -> KVCache:
        return state.crop(length)


class OnnxBackend(Backend):
    def __init__(self, runner: OnnxStepRunner, embedding: np.ndarray) -> None:
        self.runner = runner
        self.embedding = embedding  # float32 (V, d)

    def forward(self, ids: np.ndarray, state: OnnxCache | None) -> tuple[np.ndarray, OnnxCache]:
        b = ids.shape[0]
        if state is None:
            state = self.runner.new_cache(b)
        elif state.batch_size != b:  # a batch-1 cache under B rows
            state = state.rows(np.zeros(b, dtype=np.int64))
        hidden, state = self.runner.step(ids, state)  # (B, T, d)
        return hidden, state  # (B, T, d)

    def arc_logits(self, hidden: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        return (hidden @ self.embedding[tokens].T).astype(np.float64)  # (B, n)

    def log_norm(self, hidden: np.ndarray) -> np.ndarray:
        return log_normaliser(self.runner.logits(hidden))

    def stack(self, rows: Sequence[np.ndarray]) -> np.ndarray:
        return np.stack(rows)

    def rows(self, state: OnnxCache, index: np.ndarray) -> OnnxCache:
        return state if state.batch_size == 1 else state.rows(index)

    def crop(self, state: OnnxCache, length: int) -> OnnxCache:
        return state.crop(length)
