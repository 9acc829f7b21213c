"""`OrtBlockwiseModel`: a Hugging Face model with Medusa heads, run by ONNX Runtime.

The same model protocol as :class:`~blockdraft.models.hf.HFBlockwiseModel`
(:class:`~blockdraft.models.FactoredHeadsModel`: ``hidden``, ``head_states``, ``project``, and
``heads_logits`` composed from them), so the verifier, the decode loop, tree verification,
``greedy_generate``, traces and every criterion run on it unchanged. Behind it:

- the graphs of :mod:`.onnx_graph`, exported once (:mod:`.onnx_export`) and run by ONNX
  Runtime sessions (the decoder, the Medusa ResBlocks, the vocabulary projection, and the
  next step's lattice slots: ResBlocks, the projection onto the heads' shortlist and the top-k
  in one graph, :meth:`head_topk`), whose constant weights ORT pre-packs when the session
  starts;
- the key/value cache in pre-allocated buffers (:mod:`.kv_buffer`) that the decoder session
  reads and writes in place through IO binding: a forward copies no cache, and a verification
  keeps its accepted path by moving ``1 + n`` rows.

**Chunk invariance.** ONNX Runtime's ``GroupQueryAttention`` takes a separate code path for a
single new token; every other kernel here gives a row the same bits whatever the other rows of
its call. A one-token forward is therefore run as two rows (the token and a copy of it one
position later, whose cache row lies past the cache's length and is overwritten by the next
forward). With that, a token's logits are bit-identical whether it is decoded alone (the greedy
reference) or inside a chunk of draft tokens, in float32 and int8 alike
(``chunk_invariant = True``; tested). A token tree whose nodes are not one chain reads its
ancestors' keys at other rows than a chain would, which can change the last bits of a sum
(like any runtime's batched or tree forward: lossless up to float rounding; measured, see the
README).

Public surface:
    OrtBlockwiseModel(model, precision="float32", threads=None, log=None)
        the same attributes and methods as HFBlockwiseModel (h, device, max_seq_len, config,
        tokenizer, hidden, head_states, project, heads_logits), plus runtime, precision,
        threads, chunk_invariant, export_folder; with prefix-conditioned heads
        conditional_heads, head_topk(x, k, heads, first) and expander(x, k, first) as the
        PyTorch adapter's
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from blockdraft.models.capabilities import Capabilities
from blockdraft.models.errors import ModelError
from blockdraft.models.factored import FactoredHeadsLM
from blockdraft.models.runtimes.kv_buffer import BufferCache, KVBuffer, attention_bias, check_step
from blockdraft.models.runtimes.onnx_export import ensure_export, nan_error
from blockdraft.models.runtimes.onnx_graph import EXTRA_ROWS, MASKED


def _session(path: Path, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # warnings about unused initializers are not the user's
    # ORT's worker threads must not spin after a run: the step's own work between runs (the
    # lattice's top-k, acceptance) runs on torch's threads, which a spinning pool starves
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own exception types
        raise ModelError(f"ONNX Runtime cannot load {path} ({e}); delete {path.parent} to "
                         "export the model again") from e


class OrtBlockwiseModel(FactoredHeadsLM):
    """A Hugging Face causal LM with Medusa heads on ONNX Runtime (see the module docstring).

    Args:
        model: an :class:`~blockdraft.models.hf.HFBlockwiseModel` (its weights are exported
            once; it is not kept).
        precision: ``"float32"`` or ``"int8"`` (per-row int8 activations, per-channel int8
            weights, float32 vocabulary projections: :mod:`.onnx_graph`).
        threads: ONNX Runtime's intra-op threads (default: torch's current thread count).
        log: called with a line per stage of a first export (None: silent).
        pad_single: run a one-token forward as two rows (default), so that every forward is
            bit-identical per token whatever its length (``chunk_invariant``); False runs it
            alone through the single-token kernel: about 10% faster greedy steps, but a
            decode is then lossless only up to float rounding (for speed comparisons).

    Raises:
        ModelError: an architecture or precision the runtime does not build, or an export
            ONNX Runtime cannot load.
    """

    kind: ClassVar[str] = "hf-medusa-onnxruntime"
    runtime: ClassVar[str] = "onnxruntime"

    def __init__(self, model: Any, precision: str = "float32", threads: int | None = None,
                 log: Callable[[str], None] | None = None, pad_single: bool = True) -> None:
        self.precision = precision
        self.pad_single = bool(pad_single)
        self.threads = int(threads) if threads else max(torch.get_num_threads(), 1)
        self.export_folder, self.spec = ensure_export(model, precision, log)
        try:
            self._open_sessions()
        except ModelError:  # a cached export ONNX Runtime cannot read: export it again, once
            self.export_folder, self.spec = ensure_export(model, precision, log, rebuild=True)
            self._open_sessions()
        self.config = dataclasses.replace(model.config, dtype=precision)
        self._capabilities = model.capabilities.with_(
            runtime=self.runtime, precision=precision, exact_trees=precision == "float32",
            device="cpu")
        self.tokenizer = model.tokenizer
        self.drafting = getattr(model.heads, "drafting", None)  # the packaged recipe, if any
        self.heads_digest: str = model.heads_digest
        shortlist = model.heads.shortlist
        self.shortlist: np.ndarray | None = (None if shortlist is None
                                             else shortlist.numpy().astype(np.int64))
        self._buffer = KVBuffer(self.spec.n_layer, self.spec.n_kv_head, self.spec.head_dim,
                                capacity=256)
        self._binding = self._body.io_binding()
        self._bound_storage: Any = None
        self._embed: np.ndarray | None = None
        if self.spec.prefix_heads:  # the rows prefix heads read (a view, when float32)
            self._embed = model.base.get_input_embeddings().weight.detach().float().numpy()

    def _open_sessions(self) -> None:
        folder = self.export_folder
        prefix = self.spec.prefix_heads
        self._body = _session(folder / "body.onnx", self.threads)
        self._resblocks = None if prefix else _session(folder / "resblocks.onnx", self.threads)
        self._expand = ([_session(folder / f"expand{j}.onnx", self.threads)
                         for j in range(self.spec.h - 1)] if prefix else None)
        self._projection = _session(folder / "projection.onnx", self.threads)
        self._own = (_session(folder / "own.onnx", self.threads)
                     if self.spec.own_projection else None)
        self._drafts = (None if self.spec.own_projection
                        else _session(folder / "drafts.onnx", self.threads))

    @property
    def chunk_invariant(self) -> bool:
        """Whether a token's logits are bit-identical in a forward of any length (one-token
        forwards run as two rows)."""
        return self.pad_single

    @property
    def capabilities(self) -> Capabilities:
        """The wrapped model's record on this runtime: ONNX Runtime on the CPU in
        :attr:`precision`; token trees exact in float32 only (:attr:`exact_trees`)."""
        return self._capabilities

    @property
    def exact_trees(self) -> bool:
        """Whether a token tree (not a chain) verifies losslessly: in float32 up to float
        rounding, as on any runtime; not in int8, whose per-row rounding to integers turns the
        last-bit differences of a tree's attention sums into different tokens (measured: 3 of
        12 benchmark answers equal to int8 greedy's with two drafts a step, 12 of 12 with one),
        so the verifier refuses a tree with the exact criterion there."""
        return self.precision == "float32"

    # ---- what the rest of blockdraft reads --------------------------------------------------

    @property
    def h(self) -> int:
        """Prediction heads, the base LM (head 1) included."""
        return self.config.h

    @property
    def device(self) -> torch.device:
        """Where inputs and outputs live (ONNX Runtime's CPU provider)."""
        return torch.device("cpu")

    @property
    def max_seq_len(self) -> int | None:
        """The longest sequence the model reads (positions)."""
        return self.config.max_seq_len

    @property
    def training(self) -> bool:
        """Never: an exported model has no training mode."""
        return False

    def eval(self) -> OrtBlockwiseModel:
        """No-op (an exported model is always in inference mode)."""
        return self

    def __repr__(self) -> str:
        return (f"OrtBlockwiseModel({self.config.name!r}, precision={self.precision!r}, "
                f"h={self.h}, threads={self.threads})")

    # ---- the decoder ------------------------------------------------------------------------

    def _bind_buffers(self) -> None:
        """Bind every layer's key and value buffer as both past and present (by address)."""
        buf, io = self._buffer, self._binding
        if self._bound_storage is None:
            io.bind_output("hidden", "cpu")  # first: get_outputs()[0] is the hidden state
        shape = [1, self.spec.n_kv_head, buf.capacity, self.spec.head_dim]
        for i in range(self.spec.n_layer):
            for kind, tensor in (("key", buf.keys(i)), ("value", buf.values(i))):
                for direction in ("past", "present"):
                    bind = io.bind_input if direction == "past" else io.bind_output
                    bind(f"{direction}_{kind}.{i}", "cpu", 0, np.float32, shape,
                         tensor.data_ptr())
        self._bound_storage = buf.storage

    def hidden(
        self,
        input_ids: torch.Tensor,
        past: BufferCache | None = None,
        position_ids: Any = None,
        tree_mask: Any = None,
    ) -> tuple[torch.Tensor, BufferCache]:
        """The final hidden states of ``T`` new tokens (after the final norm).

        Args:
            input_ids: int ``[1, T]`` token ids after the ``past`` positions.
            past: the cache of the preceding positions (from this model), or None.
            position_ids: ``[T]`` or ``[1, T]`` positions (default ``past.length + arange(T)``;
                a token tree passes ``past.length + depths``).
            tree_mask: bool ``[T, T]``, which new tokens each new token attends to (a token
                tree's ancestor mask, parents before children); default causal.

        Returns:
            ``x`` float32 ``[1, T, d]`` and the cache of ``past.length + T`` positions.

        Raises:
            ModelError: bad ids, more than one row, a cache from elsewhere or overwritten
                since it was made, a sequence longer than the model's context.
        """
        ids, t_past, positions, mask = check_step(
            input_ids, past, position_ids, tree_mask, vocab_size=self.config.vocab_size,
            device=self.device, max_seq_len=self.max_seq_len, who="the ONNX Runtime model")
        t = int(ids.shape[1])
        tokens = ids[0].numpy()
        if t == 1 and self.pad_single:  # two rows: the one-token kernel is not chunk-invariant
            tokens = np.repeat(tokens, 2)
            last = self.spec.max_positions - 1
            positions = np.array([positions[0], min(int(positions[0]) + 1, last)])
            mask = None
        x = self._run_body(tokens, positions, t_past, mask, past)[:t]  # (T, d)
        return torch.from_numpy(x)[None], BufferCache(self._buffer, t_past + t,
                                                       self._buffer.epoch)

    def _run_body(self, tokens: np.ndarray, positions: np.ndarray, t_past: int,
                  mask: np.ndarray | None, past: BufferCache | None) -> np.ndarray:
        """One decoder forward of ``tokens`` at rows ``t_past ..`` of the buffers -> [T, d]."""
        buf, io = self._buffer, self._binding
        if past is not None:
            buf.check(past)
        t = tokens.size
        if t_past + t > self.spec.max_positions + EXTRA_ROWS:
            raise ModelError(f"a forward of {t} tokens after {t_past} cached ones needs "
                             f"{t_past + t} rows; this model holds at most "
                             f"{self.spec.max_positions + EXTRA_ROWS}")
        buf.reserve(t_past + t, keep=t_past)
        if buf.storage is not self._bound_storage:
            self._bind_buffers()
        buf.begin_write(t_past)
        total = t_past + t
        io.bind_cpu_input("input_ids", np.ascontiguousarray(tokens, dtype=np.int64))
        io.bind_cpu_input("position_ids", np.ascontiguousarray(positions[None], dtype=np.int64))
        io.bind_cpu_input("attention_bias", attention_bias(
            positions, t_past, mask, self.spec.sliding_window, t_past + t, MASKED))
        io.bind_cpu_input("seqlens_k", np.array([total - 1], dtype=np.int32))
        io.bind_cpu_input("total_sequence_length", np.array(total, dtype=np.int32))
        io.bind_output("hidden", "cpu")
        self._body.run_with_iobinding(io)
        out: np.ndarray = io.get_outputs()[0].numpy()
        return self._finite(out)

    def _finite(self, out: np.ndarray) -> np.ndarray:
        """``out``, unless it holds NaN (a damaged export, or weights that give NaN): then a
        ModelError naming this runtime and its cache (``nan_error``). One sum: microseconds."""
        if np.isnan(out.sum()):
            raise nan_error(f"ONNX Runtime ({self.precision})", self.export_folder)
        return out

    # ---- the heads --------------------------------------------------------------------------

    @property
    def conditional_heads(self) -> bool:
        """Whether the heads read the token before their target (prefix heads): their
        ``head_topk`` and ``expander`` then take the base's greedy token as ``first``."""
        return self.spec.prefix_heads

    def head_states(self, x: torch.Tensor, heads: int | None = None) -> torch.Tensor:
        """Each head's pre-projection state: ``[..., d] -> [..., n, d]`` (head 1's is ``x``;
        prefix heads' along their greedy chain from the base's argmax at ``x``).

        Raises:
            ModelError: when ``heads`` is outside ``[1, h]``.
        """
        n = self.heads_kept(heads)
        if n == 1:
            return x.unsqueeze(-2)  # (..., 1, d)
        flat = np.ascontiguousarray(x.detach().reshape(-1, x.shape[-1]).numpy(),
                                    dtype=np.float32)
        if self._resblocks is None:  # prefix heads: the chain graph's states
            assert self._drafts is not None
            states = self._drafts.run(["states"], self._chain_inputs(flat, 1, None))[0]
        else:
            states = self._resblocks.run(["states"], {"x": flat})[0]
        medusa = torch.from_numpy(states[:, : n - 1]).reshape(*x.shape[:-1], n - 1,
                                                              x.shape[-1])
        return torch.cat((x.unsqueeze(-2), medusa), dim=-2)  # (..., n, d)

    def _greedy(self, flat: np.ndarray) -> np.ndarray:
        """The base's greedy tokens at ``flat [M, d]`` (int64 ``[M]``)."""
        logits = self._finite(self._projection.run(["logits"], {"states": flat})[0])
        return logits.argmax(-1)  # type: ignore[no-any-return]

    def _chain_inputs(self, flat: np.ndarray, width: int, first: Any) -> dict[str, np.ndarray]:
        """The prefix chain graph's inputs at ``flat [M, d]`` (``first``: the base's greedy
        tokens there, or None to project them)."""
        assert self._embed is not None
        tokens = self._greedy(flat) if first is None else np.asarray(
            first.numpy() if isinstance(first, torch.Tensor) else first, dtype=np.int64)
        return {"x": flat, "e0": self._embed[tokens.reshape(-1)],
                "k": np.array([width], dtype=np.int64)}

    def project(self, states: torch.Tensor) -> torch.Tensor:
        """The vocabulary projection of head states: ``[..., n, d] -> [..., n, V]`` (raw).

        ``states[..., i - 1, :]`` is head ``i``'s state (as :meth:`head_states` gives them);
        with heads that share the base ``lm_head``, any ``[..., d]`` is accepted, and with a
        shortlist the rows after the first of a head axis (``[..., n > 1, d]``) are Medusa
        heads: ``-inf`` outside the shortlist.
        """
        d = states.shape[-1]
        if self._own is None:
            flat = np.ascontiguousarray(states.detach().reshape(-1, d).numpy(), np.float32)
            logits = self._finite(self._projection.run(["logits"], {"states": flat})[0])
            out = torch.from_numpy(logits).reshape(*states.shape[:-1], -1)
            if self.shortlist is not None and states.dim() >= 2 and states.shape[-2] > 1:
                outside = torch.ones(out.shape[-1], dtype=torch.bool)
                outside[torch.from_numpy(self.shortlist)] = False
                out[..., 1:, :].masked_fill_(outside, float("-inf"))  # Medusa rows: shortlist
            return out
        if states.dim() < 2 or not 1 <= states.shape[-2] <= self.h:
            raise ModelError(
                f"project needs states [..., n, d] with 1 <= n <= h = {self.h} heads on the "
                f"second-to-last axis (from head_states), got shape {tuple(states.shape)}")
        lead, n = states.shape[:-2], states.shape[-2]
        flat = np.ascontiguousarray(states.detach().reshape(-1, n, d).numpy(), np.float32)
        base = self._projection.run(["logits"], {"states": flat[:, 0]})[0][:, None]
        parts = [base]
        if n > 1:
            padded = np.zeros((flat.shape[0], self.h - 1, d), dtype=np.float32)
            padded[:, : n - 1] = flat[:, 1:]
            parts.append(self._own.run(["logits"], {"states": padded})[0][:, : n - 1])
        joined = self._finite(np.concatenate(parts, axis=1))  # (M, n, V)
        return torch.from_numpy(joined).reshape(*lead, n, -1)

    def head_topk(self, x: torch.Tensor, k: int, heads: int | None = None,
                  first: torch.Tensor | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Heads 2..``heads``' top-``k`` at ``x [M, d]`` in one run of the ``drafts`` graph
        (ResBlocks, projection onto the shortlist, TopK, log-normaliser): ``(ids [M, n-1, k]
        int64, scores float64)``, as :meth:`FactoredHeadsLM.head_topk` (scores rounded in
        float32). ``first`` (int64 ``[M]``): the base's greedy tokens at ``x``, which prefix
        heads read (projected here when not given)."""
        if self._drafts is None:
            return super().head_topk(x, k, heads)
        n = self.heads_kept(heads)
        flat = np.ascontiguousarray(x.detach().reshape(-1, x.shape[-1]).numpy(), np.float32)
        width = self._width(k)
        feed = (self._chain_inputs(flat, width, first) if self.spec.prefix_heads
                else {"x": flat, "k": np.array([width], dtype=np.int64)})
        ids, scores = self._drafts.run(["ids", "scores"], feed)
        return self._padded(ids[:, : n - 1], scores[:, : n - 1].astype(np.float64), k)

    def _width(self, k: int) -> int:
        """Arcs the graphs can give: ``k``, or the shortlist's size when it is narrower."""
        return min(int(k), self.spec.vocab_size if self.shortlist is None
                   else int(self.shortlist.size))

    @staticmethod
    def _padded(ids: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``[..., k' <= k]`` widened to ``k`` (id -1, score -inf: a shortlist narrower than
        ``k``)."""
        if ids.shape[-1] < k:
            pad = [(0, 0)] * (ids.ndim - 1) + [(0, k - ids.shape[-1])]
            ids = np.pad(ids, pad, constant_values=-1)
            scores = np.pad(scores, pad, constant_values=-np.inf)
        return ids, scores

    def expander(self, x: torch.Tensor, k: int, first: int | None = None,
                 chain: tuple[np.ndarray, np.ndarray] | None = None) -> Any:
        """The tree lattice of prefix heads at ``x [d]`` (see
        :meth:`~blockdraft.models.hf.HFBlockwiseModel.expander`): each node expanded by one
        run of its head's ``expand{j}`` graph, the greedy ``chain``'s nodes taken from
        :meth:`head_topk` when given; None for Medusa heads, whose lattice is a sausage.
        Building it with ``first`` runs nothing."""
        if self._expand is None:
            return None
        from blockdraft.models.hf.prefix_heads import tree_expander

        assert self._embed is not None
        embed, sessions = self._embed, self._expand
        flat = np.ascontiguousarray(x.detach().reshape(1, -1).numpy(), np.float32)
        width = np.array([self._width(k)], dtype=np.int64)
        certain = int(self._greedy(flat)[0]) if first is None else int(first)

        def node(head: int, token: int) -> tuple[np.ndarray, np.ndarray]:
            ids, scores = sessions[head].run(["ids", "scores"], {
                "x": flat, "e": embed[token][None], "k": width})
            return ids[0], scores[0].astype(np.float64)

        return tree_expander(certain, self.spec.h - 1, node, chain)
