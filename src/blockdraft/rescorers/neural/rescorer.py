"""Local neural rescoring of a sausage lattice (Kim et al. 2024, Algorithm 2; SPEC sec. 4).

Public surface:
    NeuralRescorer(model, alpha=1.0, backend="torch", device=None, onnx_path=None, ...)
        .rescore(lattice, context, p=1) -> DraftBatch        the Rescorer protocol
        .last_stats -> NeuralStats | None                    what the last call fed the LM
        .reset()                                             forget the cached prefix
    NeuralStats                                              positions reused / fed per call
    log_normaliser(logits) -> float64 [N]                    ln sum exp, the log-softmax shift
    time_step(rescorer, lattice, context, repeats=20, p=1, new_tokens=1) -> float   median ms

The algorithm, ``p = 1`` (exactly Kim's Algorithm 2): left to right over the slots, with
``r_j = log_softmax`` of the rescoring LM at slot ``j`` given the context and the tokens chosen
so far, score each arc of slot ``j`` as ``head_j(token) + alpha * r_j(token)`` (nats) and take
the argmax (ties: the better head arc). Kim adds ``alpha * r_j`` to the head's raw logits
``z^j``; the lattice holds ``log_softmax(z^j) = z^j - logsumexp(z^j)``, which shifts every arc
of a slot by the same constant, so the choice is the same. Slot 1 holding one certain token
(the usual lattice) is fixed; with several arcs (analysis lattices) it is chosen like the
others, with ``r_1`` from the context alone.

The same argument runs the other way for the LM: ``r_j = l_j - ln Z_j`` with raw logits
``l_j`` and one normaliser ``Z_j`` per slot, so the greedy choice needs only the ``k`` arcs'
raw logits (a gather and a ``k x d`` product, not the ``V x d`` projection), and the
normalisers of the ``h`` slots, needed for ``lm_scores`` alone, are computed in one batched
projection at the end. The beam compares paths across LM contexts, so it normalises every
slot as it goes.

``p > 1`` is a beam search of width ``p`` over the slots (the ``p`` best partial paths by
``head + alpha * lm``, each extended by every arc of the next slot, keep the ``p`` best): a
natural generalisation, not an exact p-best (the LM term is not a sum of independent per-slot
scores), except at ``alpha = 0``, where it is the exact p-best of the lattice. Ties keep the
earlier beam entry, then the better head arc.

The key/value cache: the rescorer keeps the LM's cache of the last window it saw plus the
best draft's first ``h - 1`` tokens, keyed by their token ids. A call reuses the longest common
prefix of those ids and the new window and feeds only the rest, then the draft positions: one
token at a time for ``p = 1``, one batched position per slot for the beam (for ``p = 1`` with a
certain slot 1, the uncached context and that token go in one forward). In a decode loop the
new context extends the previous one by the accepted tokens, which are usually a prefix of the
draft already cached, so a step costs ``h - 1`` single-token forwards, not the prefix. The
final hidden states (and their normalisers) along the cached draft are kept too, so a context
that ends inside the cached draft feeds no context position at all. A context that is not an
extension (a new text) shares no prefix and starts afresh. The result never depends on the
history: every position's keys and values are a function of the token ids before it. The onnx
backend keeps the cache in preallocated buffers written in place
(:class:`~.onnx_export.OnnxCache`), so a call that fails midway drops the cache.

The window: the LM sees the last tokens of the context that fit with the ``h - 1`` draft
positions, ``W = max_seq_len - (h - 1)``. When the context is longer, the window starts at the
smallest multiple of ``window_stride`` that leaves at most ``W`` tokens, so it stays put (and
the cache valid) for up to ``window_stride`` steps, then jumps; with ``window_stride = 1`` it
is exactly the last ``W`` tokens. RoPE encodes relative positions, so a window re-based at
position 0 is what the LM saw in training (a text starting mid-stream).
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from blockdraft.drafts.batch import DraftBatch
from blockdraft.lattice.sausage import SausageLattice
from blockdraft.models.blockwise import RescorerLM
from blockdraft.models.cache import KVCache
from blockdraft.models.checkpoint import load_model
from blockdraft.models.errors import ModelError
from blockdraft.rescorers.base import Rescorer, RescorerError, as_context, check_p
from blockdraft.rescorers.neural.onnx_export import (
    ONNX_FILE,
    OnnxCache,
    OnnxStepRunner,
    export_rescorer_bytes,
    export_rescorer_onnx,
)

BACKENDS = ("torch", "onnx")


@dataclass(frozen=True)
class NeuralStats:
    """What one :meth:`NeuralRescorer.rescore` call fed the LM (positions = tokens).

    Attributes:
        window_start: index into the (BOS-prefixed) context where the LM's window starts.
        reused: context positions taken from the cache.
        context_fed: context positions fed to the LM (the window minus ``reused``).
        draft_fed: draft positions fed, summed over the beam's rows (``h - 1`` for ``p = 1``).
        forwards: LM calls made.
    """

    window_start: int
    reused: int
    context_fed: int
    draft_fed: int
    forwards: int


# ---- the LM behind a backend -----------------------------------------------------------------


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


def _output_embedding(model: RescorerLM) -> torch.Tensor:
    """``[V, d]``: the matrix whose rows score the vocabulary (``lm_head`` or the tied ``wte``)."""
    return model.lm_head.weight if model.lm_head is not None else model.transformer.wte.weight


class _Backend:
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


class _TorchBackend(_Backend):
    def __init__(self, model: RescorerLM) -> None:
        self.model = model

    def forward(self, ids: np.ndarray, state: KVCache | None) -> tuple[torch.Tensor, KVCache]:
        with torch.inference_mode():
            ids_t = torch.from_numpy(ids).to(self.model.device)  # (B, T)
            x, cache = self.model.hidden(ids_t, state)  # (B, T, d)
        return x, cache  # (B, T, d)

    def arc_logits(self, hidden: torch.Tensor, tokens: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            emb = _output_embedding(self.model)
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


class _OnnxBackend(_Backend):
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


class _Prefix(NamedTuple):
    """The LM after a call's window (see :meth:`NeuralRescorer._prefix`)."""

    hidden: Any  # final hidden state [d] after the window; None for an empty window
    norm: float | None  # its log-softmax normaliser when cached, else None
    state: Any  # batch-1 cache of the window; None for an empty window
    reused: int  # window positions taken from the cache
    fed: int  # window positions fed
    ahead: Any = None  # hidden state [d] after the window + slot 1's token, when fed with it


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common prefix of two 1-D id arrays."""
    n = min(a.size, b.size)
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n


# ---- the rescorer ----------------------------------------------------------------------------


class NeuralRescorer:
    """Local neural rescoring (Kim Alg. 2): ``rescore(lattice, context, p) -> DraftBatch``.

    Args:
        model: the rescoring LM, a :class:`~blockdraft.models.RescorerLM` (put in eval mode),
            or the path of a model directory saved by :func:`~blockdraft.models.save_model`.
        alpha: LM weight, finite and ``>= 0`` (``0`` returns the vanilla draft, ``p = 1``).
        backend: ``"torch"`` (the model itself) or ``"onnx"`` (ONNX Runtime over an export
            with key/value-cache inputs; see :mod:`blockdraft.rescorers.neural.onnx_export`).
        device: torch backend: where the model runs (the model is moved there; default: where
            it is). onnx backend: ``"cpu"`` (default) or ``"cuda"`` (CUDAExecutionProvider).
        onnx_path: onnx backend: the ``.onnx`` file (or directory) to export to, reused while
            it holds an export of the same weights. Default: ``rescorer.onnx`` in the model
            directory when ``model`` is a path, else an in-memory export (no file).
        intra_op_threads: onnx backend: ONNX Runtime's intra-op threads (0: all cores); the
            default 1 suits a step's tiny single-token kernels. The torch backend follows
            ``torch.set_num_threads``.
        bos_id: a token id put before every context (e.g. the tokenizer's EOS, which doubles
            as BOS, if the LM was trained on EOS-separated texts); ``None``: none. With no
            BOS and an empty context there is nothing to condition slot 1 on: its arcs get no
            LM score (``r_1 = 0``).
        window_stride: how far the LM's window jumps when the context outgrows it (module
            docstring); default ``max(1, max_seq_len // 8)``, at most the window itself.

    Raises:
        RescorerError: on a model that is not a RescorerLM (or an unloadable directory), a bad
            ``alpha``, ``backend``, ``bos_id`` or ``window_stride``, or a failed ONNX export.

    Not thread-safe: the cache is per instance (use one rescorer per decode stream).
    """

    def __init__(
        self,
        model: RescorerLM | str | Path,
        alpha: float = 1.0,
        backend: str = "torch",
        device: str | torch.device | None = None,
        onnx_path: str | Path | None = None,
        *,
        intra_op_threads: int = 1,
        bos_id: int | None = None,
        window_stride: int | None = None,
    ) -> None:
        if backend not in BACKENDS:
            raise RescorerError(f"backend must be one of {BACKENDS}, got {backend!r}")
        model_dir: Path | None = None
        if isinstance(model, (str, Path)):
            model_dir = Path(model)
            load_on = device if backend == "torch" and device is not None else "cpu"
            try:
                model = load_model(model_dir, device=load_on)  # type: ignore[assignment]
            except ModelError as e:
                raise RescorerError(f"cannot load the rescoring LM from {model_dir}: {e}") from e
        if not isinstance(model, RescorerLM):
            raise RescorerError(
                f"model must be a RescorerLM (h = 1) or its directory, got "
                f"{type(model).__name__}; train one with BlockwiseConfig.tiny(h=1) or small(h=1)"
            )
        try:
            alpha = float(alpha)
        except (TypeError, ValueError) as e:
            raise RescorerError(f"alpha must be a finite number >= 0, got {alpha!r}") from e
        if not np.isfinite(alpha) or alpha < 0:
            raise RescorerError(f"alpha must be a finite number >= 0, got {alpha}")
        cfg = model.config
        if bos_id is not None and (
            isinstance(bos_id, bool) or not isinstance(bos_id, (int, np.integer))
            or not 0 <= int(bos_id) < cfg.vocab_size
        ):
            raise RescorerError(
                f"bos_id must be None or a token id in [0, {cfg.vocab_size}), got {bos_id!r}"
            )
        if window_stride is None:
            window_stride = max(1, cfg.max_seq_len // 8)
        if isinstance(window_stride, bool) or not isinstance(window_stride, int) \
                or window_stride < 1:
            raise RescorerError(f"window_stride must be a positive integer, got {window_stride!r}")
        self.model = model.eval()
        self.alpha = alpha
        self.backend = backend
        self.bos_id = None if bos_id is None else int(bos_id)
        self.window_stride = window_stride
        self.vocab_size = cfg.vocab_size
        self.max_seq_len = cfg.max_seq_len
        self.onnx_file: Path | None = None
        self._lm: _Backend
        if backend == "torch":
            if device is not None and torch.device(device) != model.device:
                self.model.to(device)
            self._lm = _TorchBackend(self.model)
        else:
            source: Path | bytes
            if onnx_path is not None:
                source = export_rescorer_onnx(model, onnx_path)
            elif model_dir is not None:
                try:
                    source = export_rescorer_onnx(model, model_dir / ONNX_FILE)
                except RescorerError as e:
                    if not isinstance(e.__cause__, OSError):
                        raise
                    warnings.warn(f"{e}; exporting in memory instead", stacklevel=2)
                    source = export_rescorer_bytes(model)
            else:
                source = export_rescorer_bytes(model)
            self.onnx_file = source if isinstance(source, Path) else None
            embedding = np.ascontiguousarray(
                _output_embedding(model).detach().to("cpu", torch.float32).numpy())  # (V, d)
            runner = OnnxStepRunner(source, device=str(device or "cpu"),
                                    intra_op_threads=intra_op_threads,
                                    output_embedding=embedding)
            self._lm = _OnnxBackend(runner, embedding)
        self.last_stats: NeuralStats | None = None
        self.reset()

    def __repr__(self) -> str:
        return (f"NeuralRescorer(RescorerLM(n_layer={self.model.config.n_layer}, "
                f"d_model={self.model.config.d_model}), alpha={self.alpha}, "
                f"backend={self.backend!r})")

    def reset(self) -> None:
        """Forget the cached prefix (the next call feeds its whole window)."""
        self._ids = np.zeros(0, dtype=np.int64)  # ids whose keys/values `_state` holds
        self._state: Any = None  # batch-1 cache of `_ids`
        self._hiddens: list[Any] = []  # final hidden states after prefixes of `_ids`
        self._norms = np.zeros(0)  # their log-softmax normalisers (nats)
        self._dist_start = 0  # `_hiddens[j]` follows `_ids[:_dist_start + j]`

    # ------------------------------------------------------------------ validation
    def _check(self, lattice: SausageLattice, context: Sequence[int] | np.ndarray) -> np.ndarray:
        if not isinstance(lattice, SausageLattice):
            raise RescorerError(f"expected a SausageLattice, got {type(lattice).__name__}")
        hi = int(lattice.tokens.max())
        if hi >= self.vocab_size:
            slot = int(np.argwhere(lattice.tokens == hi)[0, 0])
            raise RescorerError(
                f"vocabulary mismatch: lattice token id {hi} (slot {slot + 1}) is outside the "
                f"rescoring LM's vocabulary [0, {self.vocab_size}); the heads and the rescoring "
                "LM must share one tokenizer"
            )
        ctx = as_context(context)
        if ctx.size and int(ctx.max()) >= self.vocab_size:
            raise RescorerError(
                f"context token id {int(ctx.max())} is outside the rescoring LM's vocabulary "
                f"[0, {self.vocab_size}); the context must use the LM's tokenizer"
            )
        if lattice.h > self.max_seq_len:
            raise RescorerError(
                f"the lattice has h = {lattice.h} slots but the rescoring LM's max_seq_len is "
                f"{self.max_seq_len}: it cannot hold the draft"
            )
        if self.bos_id is not None:
            ctx = np.concatenate(([self.bos_id], ctx)).astype(np.int64)
        return ctx

    def window_start(self, n: int, h: int) -> int:
        """Where the LM's window starts in a (BOS-prefixed) context of ``n`` tokens, for a
        lattice of ``h`` slots (module docstring): 0 while ``n <= W = max_seq_len - (h-1)``."""
        width = self.max_seq_len - (h - 1)
        if n <= width:
            return 0
        stride = min(self.window_stride, width)
        return -(-(n - width) // stride) * stride

    # ------------------------------------------------------------------ the prefix
    def _prefix(self, window: np.ndarray, first: int | None = None) -> _Prefix:
        """The LM after ``window``: its final hidden state (None when the window is empty), the
        normaliser if cached, its batch-1 cache, positions reused and positions fed.

        ``first``: a draft token certain to follow the window (slot 1 with one arc, ``h > 1``):
        when the window needs feeding, it is fed in the same forward, and the hidden state
        after it comes back as ``ahead`` (one LM call fewer).
        """
        n = window.size
        if n == 0:
            return _Prefix(None, None, None, 0, 0)
        m = _common_prefix(self._ids, window) if self._state is not None else 0
        j = n - self._dist_start
        if m == n and 0 <= j < len(self._hiddens):
            return _Prefix(self._hiddens[j], float(self._norms[j]),
                           self._lm.crop(self._state, n), n, 0)
        m = min(m, n - 1)  # feed at least the last token, for its hidden state
        past = self._lm.crop(self._state, m) if m > 0 else None
        ids = window[m:] if first is None else np.append(window[m:], first)
        hidden, state = self._lm.forward(ids[None], past)  # [1, T, d]
        if first is None:
            return _Prefix(hidden[0, -1], None, state, m, n - m)
        return _Prefix(hidden[0, -2], None, state, m, n - m, ahead=hidden[0, -1])

    # ------------------------------------------------------------------ the search
    def rescore(
        self, lattice: SausageLattice, context: Sequence[int] | np.ndarray = (), p: int = 1
    ) -> DraftBatch:
        """Kim's Algorithm 2 (``p = 1``) or its beam generalisation (``p > 1``).

        Args:
            lattice: the step's sausage lattice (``h`` slots; token ids in the LM's vocabulary).
            context: the committed prefix's token ids, oldest first (may be empty).
            p: drafts wanted, ``>= 1`` (beam width).

        Returns:
            A :class:`DraftBatch` of ``min(p, lattice.num_paths)`` drafts, best first:
            ``tokens`` int64 ``[p, h]``; ``head_scores`` the sum of the chosen arcs' head
            log-probs; ``lm_scores`` the sum of the LM's log-probs of the chosen tokens given
            the context and the tokens before them (slot 1 contributes 0 with an empty
            context and no BOS); ``scores = head_scores + alpha * lm_scores`` (nats);
            ``source = "neural"``.

        Raises:
            RescorerError: on a bad ``p``, a context id that is negative or outside the LM's
                vocabulary, a lattice token outside it (vocabulary mismatch), or ``h`` larger
                than the LM's ``max_seq_len``.
        """
        p = check_p(p)
        seq = self._check(lattice, context)
        start = self.window_start(seq.size, lattice.h)
        window = seq[start:]
        first = int(lattice.tokens[0, 0]) if p == 1 and lattice.h > 1 \
            and int(lattice.counts[0]) == 1 else None
        try:
            prefix = self._prefix(window, first)
            if p == 1:
                tokens, head, lm, draft_fed = self._greedy(lattice, window, prefix)
            else:
                tokens, head, lm, draft_fed = self._beam(lattice, window, prefix, p)
        except BaseException:
            self.reset()  # a backend may have written part of the cached positions over
            raise
        self.last_stats = NeuralStats(window_start=start, reused=prefix.reused,
                                      context_fed=prefix.fed, draft_fed=draft_fed,
                                      forwards=int(prefix.fed > 0) + lattice.h - 1
                                      - int(prefix.ahead is not None))
        return DraftBatch(
            tokens=tokens, scores=head + self.alpha * lm, head_scores=head, lm_scores=lm,
            alpha=self.alpha, requested=p, source="neural",
        )

    def _greedy(
        self, lattice: SausageLattice, window: np.ndarray, prefix: _Prefix
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """Kim's Algorithm 2: per slot, the arc maximising ``head + alpha * lm_logit``.

        The LM's normaliser is the same for every arc of a slot, so the choice needs only the
        arcs' raw logits; the normalisers of all slots are computed in one batch at the end
        (for ``lm_scores``). Returns ``(tokens [1, h], head [1], lm [1], draft positions fed)``.
        """
        h = lattice.h
        hidden, state = prefix.hidden, prefix.state
        tokens = np.empty(h, dtype=np.int64)
        head = 0.0
        picked: list[float] = []  # raw LM logit of the chosen arc, per slot with an LM context
        preds: list[Any] = []  # the hidden state before each of those slots
        for i in range(h):
            toks, scs = lattice.slot(i)  # [n], [n]
            j = 0
            if hidden is not None:
                logits = self._lm.arc_logits(hidden[None], toks)[0]  # [n]
                if toks.size > 1:
                    j = int(np.argmax(scs + self.alpha * logits))  # ties: the better head arc
                picked.append(float(logits[j]))
                preds.append(hidden)
            elif toks.size > 1:
                j = int(np.argmax(scs))
            tokens[i] = toks[j]
            head += float(scs[j])
            if i < h - 1:
                if i == 0 and prefix.ahead is not None:
                    hidden = prefix.ahead  # slot 1's token was fed with the window
                else:
                    hiddens, state = self._lm.forward(tokens[None, i : i + 1], state)
                    hidden = hiddens[0, -1]  # [d]
        norms = np.zeros(len(preds))
        known = 0 if prefix.norm is None else 1  # the cached window's normaliser
        if known:
            norms[0] = prefix.norm
        if len(preds) > known:
            norms[known:] = self._lm.log_norm(self._lm.stack(preds[known:]))
        lm = 0.0
        for logit, norm in zip(picked, norms, strict=True):
            lm += logit - norm
        self._remember(window, tokens, preds, norms, state)
        return tokens[None], np.array([head]), np.array([lm]), h - 1

    def _beam(
        self, lattice: SausageLattice, window: np.ndarray, prefix: _Prefix, p: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """The width-``p`` beam over the slots (module docstring). Returns ``(tokens [p', h],
        head [p'], lm [p'])``, best first, and the draft positions fed."""
        h = lattice.h
        state = prefix.state
        total = np.zeros(1)  # [B] running head + alpha * lm of the beam
        head = np.zeros(1)  # [B]
        lm = np.zeros(1)  # [B]
        paths = np.zeros((1, 0), dtype=np.int64)  # [B, i]
        hidden: Any = None if prefix.hidden is None else self._lm.stack([prefix.hidden])  # [B, d]
        norms: np.ndarray | None = None
        if hidden is not None:
            norms = (np.array([prefix.norm]) if prefix.norm is not None
                     else self._lm.log_norm(hidden))  # [B]
        history: list[tuple[np.ndarray, Any, np.ndarray | None]] = []  # per slot
        draft_fed = 0
        for i in range(h):
            toks, scs = lattice.slot(i)  # [n], [n]
            n = toks.size
            if hidden is None or norms is None:
                r = np.zeros((total.size, n))
            else:
                r = self._lm.arc_logits(hidden, toks) - norms[:, None]  # [B, n] ln P
            cand = total[:, None] + scs[None, :] + self.alpha * r  # [B, n]
            order = np.argsort(-cand.ravel(), kind="stable")[:p]  # ties: beam, then arc order
            parents, arcs = np.divmod(order, n)
            total = cand.ravel()[order]
            head = head[parents] + scs[arcs]
            lm = lm[parents] + r[parents, arcs]
            chosen = toks[arcs]  # [B']
            paths = np.concatenate((paths[parents], chosen[:, None]), axis=1)
            history.append((parents, hidden, norms))
            if i < h - 1:
                past = None if state is None else self._lm.rows(state, parents)
                hiddens, state = self._lm.forward(chosen[:, None], past)  # [B', 1, d]
                hidden = hiddens[:, -1]  # [B', d]
                norms = self._lm.log_norm(hidden)
                draft_fed += chosen.size
        # The best path's hidden states (and its row of the last state fed), last slot first.
        preds: list[Any] = []
        path_norms: list[float] = []
        entry = keep_row = 0
        for i in range(h - 1, -1, -1):
            parents, hid, nrm = history[i]
            prev = int(parents[entry])
            if i == h - 1:
                keep_row = prev
            if hid is not None and nrm is not None:
                preds.append(hid[prev])
                path_norms.append(float(nrm[prev]))
            entry = prev
        if state is not None and h > 1:
            state = self._lm.rows(state, np.array([keep_row]))
        self._remember(window, paths[0], preds[::-1], np.array(path_norms[::-1]), state)
        return paths, head, lm, draft_fed

    def _remember(
        self, window: np.ndarray, best: np.ndarray, preds: list[Any], norms: np.ndarray,
        state: Any,
    ) -> None:
        """Keep the batch-1 cache of ``window`` + the best draft's first ``h - 1`` tokens, and
        the hidden states (with their normalisers) after each of its prefixes from the
        window on."""
        if state is None:  # nothing was fed: empty window and h == 1
            self.reset()
            return
        self._state = state
        self._ids = np.concatenate((window, best[: best.size - 1]))
        # preds[j] follows the prefix of length dist_start + j (none before an empty window)
        self._hiddens = preds
        self._norms = norms
        self._dist_start = window.size if window.size else 1


def time_step(
    rescorer: Rescorer,
    lattice: SausageLattice,
    context: Sequence[int] | np.ndarray,
    repeats: int = 20,
    p: int = 1,
    new_tokens: int = 1,
) -> float:
    """Median wall-clock milliseconds of one decode step's ``rescore`` call.

    Before every timed call, an untimed call on ``context`` without its last ``new_tokens``
    tokens primes a caching rescorer as the previous decode step would, so the timed call
    pays for ``new_tokens`` new context positions plus the draft, not for the whole prefix
    (``new_tokens = 0``: the cache already holds the context). One untimed warm-up call
    precedes everything.

    Args:
        rescorer: any :class:`~blockdraft.rescorers.base.Rescorer`.
        lattice: the step's lattice.
        context: the committed prefix's token ids.
        repeats: timed calls (>= 1).
        p: drafts asked for.
        new_tokens: context tokens that are new to each timed call (>= 0).

    Returns:
        The median over ``repeats`` calls, in milliseconds.
    """
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise RescorerError(f"repeats must be a positive integer, got {repeats!r}")
    if isinstance(new_tokens, bool) or not isinstance(new_tokens, int) or new_tokens < 0:
        raise RescorerError(f"new_tokens must be an integer >= 0, got {new_tokens!r}")
    ctx = as_context(context)
    prime = ctx[: ctx.size - new_tokens] if 0 < new_tokens < ctx.size else None
    rescorer.rescore(lattice, ctx, p)
    times: list[float] = []
    for _ in range(repeats):
        if prime is not None:
            rescorer.rescore(lattice, prime, p)
        t0 = time.perf_counter()
        rescorer.rescore(lattice, ctx, p)
        times.append((time.perf_counter() - t0) * 1e3)
    return float(statistics.median(times))
