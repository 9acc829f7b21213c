"""Local neural rescoring of a sausage lattice (Kim et al. 2024, Algorithm 2; docs/definitions.md
sec. 4): the rescorer, its key/value cache and its context window.

Public surface:
    NeuralRescorer(model, alpha=1.0, backend="torch", device=None, onnx_path=None, ...)
        .rescore(lattice, context, p=1) -> DraftBatch        the Rescorer protocol
        .last_stats -> NeuralStats | None                    what the last call fed the LM
        .reset()                                             forget the cached prefix
    NeuralStats                                              positions reused / fed per call

The search itself (Kim's greedy pass for ``p = 1``, a beam for ``p > 1``) is in :mod:`.search`,
the LM behind each backend in :mod:`.backends`; :func:`~.timing.time_step` (re-exported here)
times one decode step.

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
(:class:`~.onnx_runtime.OnnxCache`), so a call that fails midway drops the cache.

The window: the LM sees the last tokens of the context that fit with the ``h - 1`` draft
positions, ``W = max_seq_len - (h - 1)``. When the context is longer, the window starts at the
smallest multiple of ``window_stride`` that leaves at most ``W`` tokens, so it stays put (and
the cache valid) for up to ``window_stride`` steps, then jumps; with ``window_stride = 1`` it
is exactly the last ``W`` tokens. RoPE encodes relative positions, so a window re-based at
position 0 is what the LM saw in training (a text starting mid-stream).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from blockdraft.core.batch import DraftBatch
from blockdraft.core.checks import check_positive_int, is_int
from blockdraft.lattice.sausage import SausageLattice
from blockdraft.models.blockwise import RescorerLM
from blockdraft.models.checkpoint import load_model
from blockdraft.models.errors import ModelError
from blockdraft.rescorers.base import RescorerError, as_context, check_p, check_same_vocab
from blockdraft.rescorers.neural.backends import (
    Backend,
    OnnxBackend,
    TorchBackend,
    output_embedding,
)
from blockdraft.rescorers.neural.onnx_export import (
    ONNX_FILE,
    export_rescorer_bytes,
    export_rescorer_onnx,
)
from blockdraft.rescorers.neural.onnx_runtime import OnnxStepRunner
from blockdraft.rescorers.neural.path_scorer import NeuralPathScorer
from blockdraft.rescorers.neural.search import Prefix, beam, greedy
from blockdraft.rescorers.neural.timing import time_step as time_step  # re-exported

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
            with key/value-cache inputs; see :mod:`blockdraft.rescorers.neural.onnx_graph`).
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
        if bos_id is not None and (not is_int(bos_id) or not 0 <= int(bos_id) < cfg.vocab_size):
            raise RescorerError(
                f"bos_id must be None or a token id in [0, {cfg.vocab_size}), got {bos_id!r}"
            )
        if window_stride is None:
            window_stride = max(1, cfg.max_seq_len // 8)
        window_stride = check_positive_int(window_stride, "window_stride", RescorerError)
        self.model = model.eval()
        self.alpha = alpha
        self.backend = backend
        self.bos_id = None if bos_id is None else int(bos_id)
        self.window_stride = window_stride
        self.vocab_size = cfg.vocab_size
        self.max_seq_len = cfg.max_seq_len
        self.onnx_file: Path | None = None
        self._lm: Backend
        if backend == "torch":
            if device is not None and torch.device(device) != model.device:
                self.model.to(device)
            self._lm = TorchBackend(self.model)
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
                output_embedding(model).detach().to("cpu", torch.float32).numpy())  # (V, d)
            runner = OnnxStepRunner(source, device=str(device or "cpu"),
                                    intra_op_threads=intra_op_threads,
                                    output_embedding=embedding)
            self._lm = OnnxBackend(runner, embedding)
        self.last_stats: NeuralStats | None = None
        self.reset()

    def __repr__(self) -> str:
        return (f"NeuralRescorer(RescorerLM(n_layer={self.model.config.n_layer}, "
                f"d_model={self.model.config.d_model}), alpha={self.alpha}, "
                f"backend={self.backend!r})")

    def path_scorer(self) -> NeuralPathScorer:
        """The rescoring LM as a tree path scorer (the cost-aware tree's LM evidence), on the
        same model (torch) and BOS, for paths of up to 32 tokens (the window shrinks to fit)."""
        return NeuralPathScorer(self.model, max_depth=max(1, min(32, self.max_seq_len - 1)),
                                bos_id=self.bos_id)

    def check_vocab(self, vocab_size: int) -> None:
        """Raise unless the LM's vocabulary is the model's (``V`` equal).

        Raises:
            RescorerError: naming both sizes.
        """
        check_same_vocab(self.vocab_size, vocab_size)

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
    def _prefix(self, window: np.ndarray, first: int | None = None) -> Prefix:
        """The LM after ``window``: its final hidden state (None when the window is empty), the
        normaliser if cached, its batch-1 cache, positions reused and positions fed.

        ``first``: a draft token certain to follow the window (slot 1 with one arc, ``h > 1``):
        when the window needs feeding, it is fed in the same forward, and the hidden state
        after it comes back as ``ahead`` (one LM call fewer).
        """
        n = window.size
        if n == 0:
            return Prefix(None, None, None, 0, 0)
        m = _common_prefix(self._ids, window) if self._state is not None else 0
        j = n - self._dist_start
        if m == n and 0 <= j < len(self._hiddens):
            return Prefix(self._hiddens[j], float(self._norms[j]),
                           self._lm.crop(self._state, n), n, 0)
        m = min(m, n - 1)  # feed at least the last token, for its hidden state
        past = self._lm.crop(self._state, m) if m > 0 else None
        ids = window[m:] if first is None else np.append(window[m:], first)
        hidden, state = self._lm.forward(ids[None], past)  # [1, T, d]
        if first is None:
            return Prefix(hidden[0, -1], None, state, m, n - m)
        return Prefix(hidden[0, -2], None, state, m, n - m, ahead=hidden[0, -1])

    # ------------------------------------------------------------------ the call
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
                found = greedy(self._lm, self.alpha, lattice, prefix)
            else:
                found = beam(self._lm, self.alpha, lattice, prefix, p)
            self._remember(window, found.best, found.preds, found.norms, found.state)
        except BaseException:
            self.reset()  # a backend may have written part of the cached positions over
            raise
        self.last_stats = NeuralStats(window_start=start, reused=prefix.reused,
                                      context_fed=prefix.fed, draft_fed=found.draft_fed,
                                      forwards=int(prefix.fed > 0) + lattice.h - 1
                                      - int(prefix.ahead is not None))
        return DraftBatch(
            tokens=found.tokens, scores=found.head + self.alpha * found.lm,
            head_scores=found.head, lm_scores=found.lm, alpha=self.alpha, requested=p,
            source="neural",
        )

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
