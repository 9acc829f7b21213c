"""`HeadsLM`: a model whose heads are one heads object (``self.heads_rule``), whatever their kind.

The model classes of the Hugging Face adapter and its runtimes (eager PyTorch, ONNX Runtime,
the static cache) compute their forward their own way and hand everything about the heads to
their :class:`~blockdraft.models.heads.rule.HeadsRule`: they never branch on the heads' kind. A
new kind is a new rule and a backend per runtime (:mod:`blockdraft.models.heads`), not a
branch here.

Public surface:
    HeadsLM     mixin (over FactoredHeadsLM): head_states, project, head_topk, expander,
                accept_path, conditional_heads from ``self.heads_rule``
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from blockdraft.models.factored import FactoredHeadsLM
from blockdraft.models.heads.rule import HeadsRule


class HeadsLM(FactoredHeadsLM):
    """Mixin: the factored model protocol's heads, from ``self.heads_rule`` (a
    :class:`~blockdraft.models.heads.rule.HeadsRule` the subclass sets). ``heads`` is checked
    here, once (``heads_kept``), and trusted by the rule."""

    heads_rule: HeadsRule

    @property
    def conditional_heads(self) -> bool:
        """Whether the heads read the token before their target (prefix heads): their
        ``head_topk`` and ``expander`` then take the base's greedy token as ``first``."""
        return self.heads_rule.conditional

    def head_states(self, x: torch.Tensor, heads: int | None = None) -> torch.Tensor:
        """Each head's pre-projection state: ``[..., d] -> [..., n, d]`` (head 1's is ``x``;
        ``heads``, default ``h``, keeps heads ``1 .. heads``).

        Raises:
            ModelError: when ``heads`` is outside ``[1, h]``.
        """
        return self.heads_rule.head_states(x, self.heads_kept(heads))

    def project(self, states: torch.Tensor) -> torch.Tensor:
        """The vocabulary projection of head states: ``[..., n, d] -> [..., n, V]`` raw logits
        (:meth:`HeadsRule.project <blockdraft.models.heads.rule.HeadsRule.project>`).

        Raises:
            ModelError: own projections or a shortlist, and ``states`` without a head axis of
                at most ``h``.
        """
        return self.heads_rule.project(states)

    def head_topk(self, x: torch.Tensor, k: int, heads: int | None = None,
                  first: torch.Tensor | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Heads 2..``heads``' top-``k`` at ``x [M, d]``: ``(ids int64 [M, n - 1, k], scores
        float64)``, over the heads' shortlist, taken where the runtime computes them.
        ``first`` (int64 ``[M]``): the base's greedy tokens at ``x``, which conditional heads
        read (:attr:`conditional_heads`; projected when not given).

        Raises:
            ModelError: when ``heads`` is outside ``[1, h]``.
        """
        return self.heads_rule.head_topk(x, k, self.heads_kept(heads), first)

    def expander(self, x: torch.Tensor, k: int, first: int | None = None,
                 chain: tuple[np.ndarray, np.ndarray] | None = None) -> Any:
        """The step's tree lattice at ``x [d]`` when the heads give one (prefix heads: depth 1
        the base's greedy token ``first``, projected when not given; each node expanded by the
        head reading its last token, ``k`` arcs; ``chain``: the greedy chain's top ``k`` from
        :meth:`head_topk` at ``x``, which spares their evaluation); None for a sausage
        lattice (Medusa heads)."""
        return self.heads_rule.expander(x, k, first, chain)

    def accept_path(self, rows: Any, tokens: Any, start: int, new_text: bool = False) -> None:
        """A draft layer reads the accepted rows of the last forward (``hidden``): ``rows`` in
        text order, the token after each, the first one's position ``start``; ``new_text``: a
        prefill (:meth:`EagleRule.accept_path
        <blockdraft.models.heads.eagle.EagleRule.accept_path>`).

        Raises:
            ModelError: heads that keep no state along the text (Medusa, prefix heads).
        """
        self.heads_rule.accept_path(rows, tokens, start, new_text)
