"""`MedusaRule`: Medusa heads (and Stern's BPD heads), each guessing on its own from one state.

Head ``j + 2`` (Medusa head ``j``) reads the base's final hidden state ``x`` alone: its state
is its ResBlocks on ``x`` (docs/definitions.md sec. 10), its top-``k`` a slot of the step's
sausage lattice. The computation is the backend's (:class:`MedusaBackend`: the modules in
PyTorch, the ``resblocks`` and ``drafts`` graphs on ONNX Runtime).

Public surface:
    MedusaBackend    states(x, n), topk(x, k, n)   (and HeadsBackend's)
    MedusaRule(backend)                            a HeadsRule of kind "medusa"
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

import numpy as np
import torch

from blockdraft.models.heads.rule import HeadsBackend, HeadsRule, padded


class MedusaBackend(HeadsBackend, Protocol):
    """What a runtime computes for Medusa heads."""

    def states(self, x: torch.Tensor, n: int) -> torch.Tensor:
        """Medusa heads ``0 .. n - 1``'s states at ``x [..., d]``: ``[..., n, d]``."""
        ...

    def topk(self, x: torch.Tensor, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Medusa heads ``0 .. n - 1``'s top-``k'`` at ``x [M, d]`` (``k' <= k``: the
        shortlist's size when narrower): ``(ids int64 [M, n, k'], log-probs)``."""
        ...


class MedusaRule(HeadsRule):
    """Medusa heads over a backend (see the module docstring)."""

    kind: ClassVar[str] = "medusa"
    backend: MedusaBackend

    def states(self, x: torch.Tensor, n: int) -> torch.Tensor:
        """Medusa heads ``0 .. n - 1``'s ResBlocks on ``x``: ``[..., d] -> [..., n, d]``."""
        return self.backend.states(x, n)

    def head_topk(self, x: torch.Tensor, k: int, n: int, first: Any = None
                  ) -> tuple[np.ndarray, np.ndarray]:
        """Heads ``2 .. n``' top-``k`` at ``x [M, d]`` (see :meth:`HeadsRule.head_topk`);
        ``first`` is not read: each head guesses on its own."""
        return padded(*self.backend.topk(x, k, n - 1), k)
