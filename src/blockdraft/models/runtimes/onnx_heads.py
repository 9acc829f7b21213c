"""The ONNX Runtime backends of the heads: the sessions of their exported graphs.

:class:`OrtHeads` is what every kind computes the same way on ONNX Runtime: the base head (the
``projection`` graph: the base's greedy tokens, head 1's logits) and the heads' projection
(``projection`` with ``-inf`` outside the shortlist on heads 2.., or the heads' own matrices,
``own``). Each kind adds the sessions of its graphs (:mod:`.onnx_head_graphs`):
:class:`OrtMedusa` (``resblocks``; ``drafts``: ResBlocks, projection onto the shortlist and
top-k in one run) and :class:`OrtPrefix` (``drafts``: the greedy chain in one run;
``expand{j}``: one node of the tree lattice by head ``j``) and :class:`OrtEagle` (an EAGLE
draft layer: ``draft_layer``, one call of the layer with its cache as inputs and outputs,
:mod:`.onnx_eagle_graph`). Their rules (:mod:`blockdraft.models.heads`) are the PyTorch
adapter's; :data:`ORT_BACKENDS` maps a kind to its backend, and :meth:`OrtHeads.check` refuses,
before anything is exported, heads of a kind this runtime cannot run.

Arrays cross into ONNX Runtime as float32 numpy (a view of a CPU tensor: no copy) and come back
as numpy (ids, scores) or as tensors over the session's output (states, logits). A shortlist
narrower than ``k`` makes the graphs return its size (:meth:`OrtHeads.width`), which the rule
pads.

Public surface:
    Session = (name) -> onnxruntime.InferenceSession       the export's graph ``name.onnx``
    OrtHeads(session, spec, model, finite)     num_heads, by_head, greedy, project, width
        OrtHeads.check(model)                  (class method) refuse what cannot run
    OrtMedusa(...)        + states, topk
    OrtPrefix(...)        + chain_states, chain_topk, node
    OrtEagle(...)         + config, context, feature_layers, token_ids, step
    ORT_BACKENDS          kind -> its backend
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from blockdraft.models.errors import ModelError
from blockdraft.models.heads.eagle_config import CAPABILITY_KIND, EagleConfig
from blockdraft.models.heads.eagle_layer import KV, EagleStep
from blockdraft.models.heads.prefix import Node
from blockdraft.models.runtimes.onnx_eagle_graph import GRAPH, OUTPUTS, eagle_refusal
from blockdraft.models.runtimes.onnx_graph import MASKED, GraphSpec
from blockdraft.models.topk import topk_logprobs

Session = Callable[[str], Any]
"""``name -> session`` over the export's ``name.onnx`` (the model opens them, with its threads
and its advice when one cannot be loaded)."""
Finite = Callable[[np.ndarray], np.ndarray]
"""Returns its array, or raises naming the runtime and its export when it holds NaN."""


def _flat(x: torch.Tensor) -> np.ndarray:
    """``x [..., d]`` as float32 numpy ``[M, d]`` (a view when it already is one)."""
    return np.ascontiguousarray(x.detach().reshape(-1, x.shape[-1]).numpy(), dtype=np.float32)


class OrtHeads:
    """The ONNX Runtime computation every kind shares (see the module docstring).

    Args:
        session: opens the export's graphs by name.
        spec: the export's :class:`~.onnx_graph.GraphSpec`.
        model: the :class:`~blockdraft.models.hf.HFBlockwiseModel` that was exported (its
            heads' shortlist and, for prefix heads, its input embeddings are read once).
        finite: the NaN check of every projection's logits.
    """

    def __init__(self, session: Session, spec: GraphSpec, model: Any, finite: Finite) -> None:
        self.spec = spec
        self._finite = finite
        shortlist = model.heads.shortlist
        self.shortlist: np.ndarray | None = (None if shortlist is None
                                             else shortlist.numpy().astype(np.int64))
        self._projection = session("projection")
        self._own = session("own") if spec.own_projection else None

    @classmethod
    def check(cls, model: Any) -> None:
        """Refuse heads of this kind that the runtime cannot run, before anything is exported
        (every Medusa and prefix heads module runs: this default).

        Raises:
            ModelError: naming what cannot run and what to use instead.
        """

    @property
    def num_heads(self) -> int:
        """The heads beside the base LM."""
        return self.spec.h - 1

    @property
    def by_head(self) -> bool:
        """Own projections or a shortlist: a head's projection depends on the head."""
        return self._own is not None or self.shortlist is not None

    def width(self, k: int) -> int:
        """Arcs the graphs can give: ``k``, or the shortlist's size when it is narrower."""
        return min(int(k), self.spec.vocab_size if self.shortlist is None
                   else int(self.shortlist.size))

    def greedy(self, x: torch.Tensor) -> np.ndarray:
        """The base's greedy tokens at ``x [..., d]``: int64 ``[...]``."""
        return self._argmax(_flat(x)).reshape(x.shape[:-1])

    def _argmax(self, flat: np.ndarray) -> np.ndarray:
        """The base's greedy tokens at ``flat [M, d]``: int64 ``[M]``."""
        logits = self._finite(self._projection.run(["logits"], {"states": flat})[0])
        return logits.argmax(-1)  # type: ignore[no-any-return]

    def project(self, states: torch.Tensor) -> torch.Tensor:
        """``[..., n, d] -> [..., n, V]`` (raw): ``projection`` on every row (heads 2..
        ``-inf`` outside the shortlist), or ``projection`` on head 1's and ``own`` on the
        others' with their own matrices."""
        d = states.shape[-1]
        if self._own is None:
            flat = _flat(states)
            logits = self._finite(self._projection.run(["logits"], {"states": flat})[0])
            out = torch.from_numpy(logits).reshape(*states.shape[:-1], -1)
            if self.shortlist is not None and states.dim() >= 2 and states.shape[-2] > 1:
                outside = torch.ones(out.shape[-1], dtype=torch.bool)
                outside[torch.from_numpy(self.shortlist)] = False
                out[..., 1:, :].masked_fill_(outside, float("-inf"))  # heads 2..: shortlist
            return out
        lead, n = states.shape[:-2], states.shape[-2]
        flat = np.ascontiguousarray(states.detach().reshape(-1, n, d).numpy(), np.float32)
        base = self._projection.run(["logits"], {"states": flat[:, 0]})[0][:, None]
        parts = [base]
        if n > 1:
            stacked = np.zeros((flat.shape[0], self.num_heads, d), dtype=np.float32)
            stacked[:, : n - 1] = flat[:, 1:]
            parts.append(self._own.run(["logits"], {"states": stacked})[0][:, : n - 1])
        joined = self._finite(np.concatenate(parts, axis=1))  # (M, n, V)
        return torch.from_numpy(joined).reshape(*lead, n, -1)

    def _states(self, x: torch.Tensor, states: np.ndarray, n: int) -> torch.Tensor:
        """A graph's ``states [M, >= n, d]`` at ``x [..., d]`` as ``[..., n, d]``."""
        return torch.from_numpy(states[:, :n]).reshape(*x.shape[:-1], n, x.shape[-1])


class OrtMedusa(OrtHeads):
    """Medusa heads on ONNX Runtime: ``resblocks`` and ``drafts`` (heads that share
    ``lm_head``)."""

    def __init__(self, session: Session, spec: GraphSpec, model: Any, finite: Finite) -> None:
        super().__init__(session, spec, model, finite)
        self._resblocks = session("resblocks")
        self._drafts = None if spec.own_projection else session("drafts")

    def states(self, x: torch.Tensor, n: int) -> torch.Tensor:
        """Medusa heads ``0 .. n - 1``'s states at ``x [..., d]``: ``[..., n, d]``."""
        return self._states(x, self._resblocks.run(["states"], {"x": _flat(x)})[0], n)

    def topk(self, x: torch.Tensor, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Medusa heads ``0 .. n - 1``'s top-``k'`` at ``x [M, d]`` in one run of ``drafts``
        (scores rounded in float32); with their own matrices, from every head's logits."""
        if self._drafts is None:  # own projections: every head's logits over V
            logits = self.project(torch.cat((x.unsqueeze(-2), self.states(x, n)), dim=-2))
            ids, scores = topk_logprobs(logits[:, 1:].reshape(-1, logits.shape[-1]), k)
            return ids.reshape(x.shape[0], n, k), scores.reshape(x.shape[0], n, k)
        feed = {"x": _flat(x), "k": np.array([self.width(k)], dtype=np.int64)}
        ids, scores = self._drafts.run(["ids", "scores"], feed)
        return ids[:, :n], scores[:, :n].astype(np.float64)


class OrtPrefix(OrtHeads):
    """Prefix-conditioned heads on ONNX Runtime: ``drafts`` (their greedy chain) and one
    ``expand{j}`` graph per head."""

    def __init__(self, session: Session, spec: GraphSpec, model: Any, finite: Finite) -> None:
        super().__init__(session, spec, model, finite)
        self._drafts = session("drafts")
        self._expand = [session(f"expand{j}") for j in range(self.num_heads)]
        # the rows the heads read (a view of the model's embeddings, when float32)
        self._embed = model.base.get_input_embeddings().weight.detach().float().numpy()

    def _chain_inputs(self, flat: np.ndarray, width: int, first: Any) -> dict[str, np.ndarray]:
        """The chain graph's inputs at ``flat [M, d]`` (``first``: the base's greedy tokens
        there, or None to project them)."""
        tokens = self._argmax(flat) if first is None else np.asarray(
            first.numpy() if isinstance(first, torch.Tensor) else first, dtype=np.int64)
        return {"x": flat, "e0": self._embed[tokens.reshape(-1)],
                "k": np.array([width], dtype=np.int64)}

    def chain_states(self, x: torch.Tensor, n: int) -> torch.Tensor:
        """The chain's states from the base's greedy token at ``x [..., d]``: ``[..., n, d]``."""
        feed = self._chain_inputs(_flat(x), 1, None)
        return self._states(x, self._drafts.run(["states"], feed)[0], n)

    def chain_topk(self, x: torch.Tensor, k: int, n: int, first: Any
                   ) -> tuple[np.ndarray, np.ndarray]:
        """The chain's top-``k'`` at ``x [M, d]`` in one run of ``drafts``."""
        feed = self._chain_inputs(_flat(x), self.width(k), first)
        ids, scores = self._drafts.run(["ids", "scores"], feed)
        return ids[:, :n], scores[:, :n].astype(np.float64)

    def node(self, x: torch.Tensor, k: int) -> Node:
        """One node's expansion at ``x [d]``: a run of its head's ``expand{j}`` graph."""
        flat = _flat(x)  # (1, d)
        width = np.array([self.width(k)], dtype=np.int64)
        embed, sessions = self._embed, self._expand

        def node(head: int, token: int) -> tuple[np.ndarray, np.ndarray]:
            ids, scores = sessions[head].run(["ids", "scores"], {
                "x": flat, "e": embed[token][None], "k": width})
            return ids[0], scores[0].astype(np.float64)

        return node


class OrtEagle(OrtHeads):
    """An EAGLE draft layer on ONNX Runtime (the :class:`~blockdraft.models.heads.EagleBackend`
    of its rule): one run of the ``draft_layer`` graph a call, the cache passed in and returned
    as tensors (a view of the session's output: no copy); fusion ``"top"`` only
    (:func:`~.onnx_eagle_graph.eagle_refusal`). Heads 2..'s projection is the base head's onto
    the shortlist (``projection``, ``-inf`` outside it), which is the layer's head without its
    own norm."""

    def __init__(self, session: Session, spec: GraphSpec, model: Any, finite: Finite) -> None:
        self.check(model)
        super().__init__(session, spec, model, finite)
        heads = model.heads
        self._config: EagleConfig = heads.layer.config
        self._context = str(heads.context)
        self._ids = None if self.shortlist is None else torch.from_numpy(self.shortlist)
        self._layer = session(GRAPH)
        c = self._config
        self._empty = np.zeros((1, c.num_kv_heads, 0, c.head_dim), dtype=np.float32)

    @classmethod
    def check(cls, model: Any) -> None:
        """Refuse a draft layer this runtime does not run (fusion ``"layers"``), by name."""
        problem = eagle_refusal(model)
        if problem is not None:
            raise ModelError(problem)

    @property
    def by_head(self) -> bool:
        """The layer's head (the shortlist's rows) projects heads 2..."""
        return True

    @property
    def config(self) -> EagleConfig:
        """The layer's sizes and fusion."""
        return self._config

    @property
    def context(self) -> str:
        """What the layer was trained to read before an answer (``"answer"``, ``"prompt"``)."""
        return self._context

    @property
    def feature_layers(self) -> tuple[int, ...]:
        """None: the layer reads the base's final hidden state (fusion ``"top"``)."""
        return ()

    @property
    def token_ids(self) -> torch.Tensor | None:
        """int64 ``[Vs]``: the base ids of the logits' columns, or None."""
        return self._ids

    def step(self, features: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor,
             kv: KV | None, mask: torch.Tensor | None) -> EagleStep:
        """One call of the layer: ``features [1, T, d]``, ``tokens``/``positions`` int64
        ``[1, T]``, the cache ``kv`` of ``L`` positions or None, ``mask`` bool
        ``[1, T, L + T]`` or None (every cached position and the call's causal ones) ->
        :class:`~blockdraft.models.heads.eagle_layer.EagleStep` (float32 CPU tensors; the
        cache of ``L + T`` positions).

        Raises:
            ModelError: inputs that do not fit (a batch of several rows, another width, token
                ids outside the vocabulary, a cache or mask of another shape), or NaN logits
                (naming the export).
        """
        c = self._config
        if (features.dim() != 3 or features.shape[0] != 1 or features.shape[-1] != c.d_model
                or tokens.shape != features.shape[:2] or positions.shape != tokens.shape):
            raise ModelError(f"the draft layer on ONNX Runtime takes features [1, T, "
                             f"{c.d_model}] with tokens and positions [1, T], got "
                             f"{tuple(features.shape)}, {tuple(tokens.shape)} and "
                             f"{tuple(positions.shape)}")
        ids = tokens.detach().cpu().numpy().astype(np.int64, copy=False)
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= c.vocab_size):
            raise ModelError(f"token ids must lie in [0, {c.vocab_size}), got "
                             f"{int(ids.min())}..{int(ids.max())}")
        past = (self._empty, self._empty) if kv is None else tuple(
            np.ascontiguousarray(t.detach().cpu().numpy(), dtype=np.float32) for t in kv)
        t, length = ids.shape[1], past[0].shape[2]
        if past[0].shape != (1, c.num_kv_heads, length, c.head_dim) or (
                past[1].shape != past[0].shape):
            raise ModelError(f"the cache has shape {tuple(past[0].shape)}; the draft layer "
                             f"needs [1, {c.num_kv_heads}, L, {c.head_dim}]")
        if mask is None:
            allowed = (np.arange(length + t)[None, :] <= np.arange(t)[:, None] + length)[None]
        elif tuple(mask.shape) != (1, t, length + t):
            raise ModelError(f"mask must be bool [1, T, L + T] = [1, {t}, {length + t}], got "
                             f"{tuple(mask.shape)}")
        else:
            allowed = mask.detach().cpu().numpy()
        feed = {"features": np.ascontiguousarray(features.detach().cpu().numpy(),
                                                 dtype=np.float32),
                "tokens": ids, "positions": positions.detach().cpu().numpy().astype(np.int64),
                "past_key": past[0], "past_value": past[1],
                "mask": np.where(allowed, 0.0, MASKED).astype(np.float32)}
        logits, states, keys, values = self._layer.run(list(OUTPUTS), feed)
        self._finite(logits)
        return EagleStep(torch.from_numpy(logits), torch.from_numpy(states),
                         (torch.from_numpy(keys), torch.from_numpy(values)))


ORT_BACKENDS: dict[str, type[OrtHeads]] = {"medusa": OrtMedusa, "prefix": OrtPrefix,
                                           CAPABILITY_KIND: OrtEagle}
"""Each kind's ONNX Runtime backend."""
