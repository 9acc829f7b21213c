"""`HeadsRule`: what every kind of heads shares, over a runtime's backend.

A model's heads are one object of their kind (:class:`~.medusa.MedusaRule`,
:class:`~.prefix.PrefixRule`): the kind's rule, written once (which state each head reads, the
greedy chain of prefix heads, the tree lattice's expansion), over a backend that computes what
a runtime computes its own way (PyTorch: the modules, :mod:`.torch_backend`; ONNX Runtime: the
exported graphs' sessions, :mod:`blockdraft.models.runtimes.onnx_heads`; the static runtime:
the PyTorch modules on its device). What every kind shares is here: head 1 is the base LM, its
state the final hidden state ``x`` itself; the heads' projection (a head axis is needed when
the heads project with their own matrices or onto a shortlist); the top-k's padding when a
shortlist is narrower than ``k``.

The heads' count ``n`` a method takes is checked by the model (``heads_kept``): these methods
trust it (``1 <= n <= h``).

Public surface:
    HeadsBackend    what every backend offers: num_heads, by_head, greedy(x), project(states)
    HeadsRule(backend)     kind, conditional, num_heads, h,
        head_states(x, n) -> [..., n, d];  project(states) -> [..., n, V]
        head_topk(x, k, n, first=None) -> (ids [M, n - 1, k], scores);  expander(...) -> None
        feature_layers, saw(x, layer_states), accept_path(...)   a kind with a state along
                                                                  the text (a draft layer)
    padded(ids, scores, k) -> (ids [..., k], scores [..., k])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Protocol

import numpy as np
import torch

from blockdraft.models.errors import ModelError


class HeadsBackend(Protocol):
    """What a runtime computes for every kind of heads (a kind's backend adds its own)."""

    @property
    def num_heads(self) -> int:
        """The heads beside the base LM (``h - 1``)."""
        ...

    @property
    def by_head(self) -> bool:
        """Whether a head's projection depends on which head it is (own projections, or a
        shortlist for heads 2..): ``project`` then needs a head axis."""
        ...

    def greedy(self, x: torch.Tensor) -> Any:
        """The base LM's greedy tokens at ``x [..., d]``: int64 ``[...]`` (the backend's own
        array type, which its methods take back as ``first``)."""
        ...

    def project(self, states: torch.Tensor) -> torch.Tensor:
        """``[..., n, d] -> [..., n, V]`` raw logits (heads 2.. ``-inf`` outside their
        shortlist); without :attr:`by_head` any ``[..., d] -> [..., V]``."""
        ...


def padded(ids: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``[..., k' <= k]`` widened to ``k``: id ``-1``, score ``-inf`` (a shortlist narrower
    than ``k``); as it is when already ``k`` wide."""
    if ids.shape[-1] < k:
        pad = [(0, 0)] * (ids.ndim - 1) + [(0, k - ids.shape[-1])]
        ids = np.pad(ids, pad, constant_values=-1)
        scores = np.pad(scores, pad, constant_values=-np.inf)
    return ids, scores


class HeadsRule:
    """The rule every kind of heads shares (see the module docstring); a kind subclasses it.

    Args:
        backend: the runtime's computation for this kind.
    """

    kind: ClassVar[str] = ""
    """The kind, one of :data:`~blockdraft.models.capabilities.HEAD_KINDS`."""
    conditional: ClassVar[bool] = False
    """Whether the heads read the base's greedy token (a tree lattice): ``head_topk`` and
    ``expander`` then take it as ``first``."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    @property
    def num_heads(self) -> int:
        """The heads beside the base LM."""
        return int(self.backend.num_heads)

    @property
    def h(self) -> int:
        """Every head, the base LM (head 1) included."""
        return 1 + self.num_heads

    def head_states(self, x: torch.Tensor, n: int) -> torch.Tensor:
        """Heads ``1 .. n``'s pre-projection states: ``[..., d] -> [..., n, d]``; head 1's is
        ``x``, the others' the kind's (:meth:`states`)."""
        if n == 1:
            return x.unsqueeze(-2)  # (..., 1, d)
        return torch.cat((x.unsqueeze(-2), self.states(x, n - 1)), dim=-2)  # (..., n, d)

    def states(self, x: torch.Tensor, n: int) -> torch.Tensor:
        """Heads ``2 .. n + 1``'s states at ``x [..., d]``: ``[..., n, d]`` (the kind's)."""
        raise NotImplementedError

    def project(self, states: torch.Tensor) -> torch.Tensor:
        """The vocabulary projection of head states: ``[..., n, d] -> [..., n, V]`` raw logits.

        ``states[..., i - 1, :]`` must be head ``i``'s state (as :meth:`head_states` gives
        them, ``n <= h``): with heads that have their own projections, the position on the
        second-to-last axis says which projection applies, and with a shortlist which rows are
        heads 2.. (``-inf`` outside it). Heads that share the base ``lm_head`` without a
        shortlist take any ``[..., d]``.

        Raises:
            ModelError: a projection by head, and ``states`` without a head axis of at most
                ``h``.
        """
        if self.backend.by_head and (states.dim() < 2 or not 1 <= states.shape[-2] <= self.h):
            raise ModelError(
                f"project needs states [..., n, d] with 1 <= n <= h = {self.h} heads on the "
                f"second-to-last axis (from head_states), got shape {tuple(states.shape)}")
        return self.backend.project(states)  # type: ignore[no-any-return]

    def head_topk(self, x: torch.Tensor, k: int, n: int, first: Any = None
                  ) -> tuple[np.ndarray, np.ndarray]:
        """Heads ``2 .. n``' top-``k`` at ``x [M, d]``: ``(ids int64 [M, n - 1, k], natural-log
        probabilities float64)``, ordered by (logit desc, id asc) over each head's shortlist
        (id ``-1``, score ``-inf`` past it); ``first``: the base's greedy tokens at ``x``
        (int64 ``[M]``), which a conditional kind reads (projected when not given)."""
        raise NotImplementedError

    def expander(self, x: torch.Tensor, k: int, first: int | None = None,
                 chain: tuple[np.ndarray, np.ndarray] | None = None
                 ) -> Callable[[tuple[int, ...]], tuple[np.ndarray, np.ndarray]] | None:
        """The step's tree lattice at ``x [d]`` for a kind whose lattice is a tree; None for
        a sausage (this default)."""
        return None

    @property
    def feature_layers(self) -> tuple[int, ...]:
        """The base's decoder layers whose outputs a forward hands to :meth:`saw` (``()``: the
        final hidden state is all the heads read)."""
        return ()

    def saw(self, x: torch.Tensor, layer_states: Any = ()) -> None:
        """The base's last forward (``x [B, T, d]``, the outputs of :attr:`feature_layers`):
        nothing to keep for heads without a state along the text (this default)."""

    def accept_path(self, rows: Any, tokens: Any, start: int, new_text: bool = False) -> None:
        """The accepted path of the last forward, for a kind that keeps a state along the
        text (:mod:`.eagle`).

        Raises:
            ModelError: always, for heads without such a state (this default).
        """
        raise ModelError(f"heads of kind {self.kind!r} keep no state along the text: "
                         "accept_path is for a draft layer's")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(h={self.h}, {type(self.backend).__name__})"
