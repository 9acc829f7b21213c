"""The ONNX Runtime backends of the heads: the sessions of their exported graphs.

:class:`OrtHeads` is what every kind computes the same way on ONNX Runtime: the base head (the
``projection`` graph: the base's greedy tokens, head 1's logits) and the heads' projection
(``projection`` with ``-inf`` outside the shortlist on heads 2.., or the heads' own matrices,
``own``). Each kind adds the sessions of its graphs (:mod:`.onnx_head_graphs`):
:class:`OrtMedusa` (``resblocks``; ``drafts``: ResBlocks, projection onto the shortlist and
top-k in one run) and :class:`OrtPrefix` (``drafts``: the greedy chain in one run;
``expand{j}``: one node of the tree lattice by head ``j``). Their rules
(:mod:`blockdraft.models.heads`) are the PyTorch adapter's; :data:`ORT_BACKENDS` maps a kind to
its backend.

Arrays cross into ONNX Runtime as float32 numpy (a view of a CPU tensor: no copy) and come back
as numpy (ids, scores) or as tensors over the session's output (states, logits). A shortlist
narrower than ``k`` makes the graphs return its size (:meth:`OrtHeads.width`), which the rule
pads.

Public surface:
    Session = (name) -> onnxruntime.InferenceSession       the export's graph ``name.onnx``
    OrtHeads(session, spec, model, finite)     num_heads, by_head, greedy, project, width
    OrtMedusa(...)        + states, topk
    OrtPrefix(...)        + chain_states, chain_topk, node
    ORT_BACKENDS          kind -> its backend
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from blockdraft.models.heads.prefix import Node
from blockdraft.models.runtimes.onnx_graph import GraphSpec
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


ORT_BACKENDS: dict[str, type[OrtHeads]] = {"medusa": OrtMedusa, "prefix": OrtPrefix}
"""Each kind's ONNX Runtime backend."""
