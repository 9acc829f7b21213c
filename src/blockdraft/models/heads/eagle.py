"""`EagleRule`: an EAGLE-style draft layer as a model's heads, its state following the text.

The draft layer (:class:`~blockdraft.models.heads.eagle_layer.EagleLayer`) drafts
autoregressively with its own KV cache over the committed text: at each committed position
``p`` it has read the base's feature ``f_p`` (``"top"``: the final hidden state; ``"layers"``:
the outputs of the base's layers ``fuse_layers``) and the token after ``p``. The rule, for
every runtime:

- **its state** (:class:`DraftLayerState`, mutable, one per model, reset by a prefill): the
  layer's cache of the committed positions, nothing else; the base's forward hands the rule
  its features (:meth:`EagleRule.saw`), and after each verdict the verifier hands it the
  accepted path (:meth:`EagleRule.accept_path`: the forward's rows that were kept, the token
  after each, the first one's position), which the layer reads in one call at those positions
  (every accepted position, not only the last: the next drafts attend to them all). With the
  training context ``"answer"`` a prefill feeds the prompt's last position only (the layer
  was trained on answers from there); with ``"prompt"`` every prompt position;
- **the step's tree lattice** (:class:`~blockdraft.models.heads.eagle_tree.EagleTree`, made by
  each :meth:`~EagleRule.accept_path` on the grown cache): the certain token's children are the
  layer's logits at the last accepted position; a deeper node is one more position of the
  layer on a tree mask over its draft rows, each depth's frontier computed in one forward;
- **the greedy chain** (:meth:`~EagleRule.head_topk`, the step's sausage lattice): the tree's
  path along each node's best arc, its top-k per draft step (:meth:`EagleTree.chain
  <blockdraft.models.heads.eagle_tree.EagleTree.chain>`), the chain's states its nodes'
  output features (:meth:`~EagleRule.states`; projected by the layer's head over its
  shortlist).

The state a step drafts from is the state the verifier's last accepted node left: ``x`` (the
base's final hidden state there, what ``head_topk`` and ``expander`` are called with) is
compared with the one the accepted path ended on. Any other ``x`` (a cost curve's timing, a
direct call) drafts from ``x`` alone: the layer reads it at position 0 with no context (with
``"layers"``, ``x`` stands in for every fused layer's state), a stand-in of the right cost,
not a draft of any text; several positions at once (a trace's heads) are refused.

What a runtime computes its own way is its backend's (:class:`EagleBackend`): one call of the
layer, with its cache as inputs and outputs.

Public surface:
    EagleBackend         config, context, feature_layers, token_ids, step(...) (+ HeadsBackend)
    DraftLayerState      mutable: kv, position, anchor, tree, forward; reset()
    EagleRule(backend, width=None)     a HeadsRule of kind "draft-layer"
        saw(x, layer_states), accept_path(rows, tokens, start, new_text=False)
        states(x, n), head_topk(x, k, n, first), expander(x, k, first, chain)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Protocol

import numpy as np
import torch

from blockdraft.models.errors import ModelError
from blockdraft.models.heads.eagle_config import CAPABILITY_KIND, EagleConfig
from blockdraft.models.heads.eagle_layer import KV, EagleStep
from blockdraft.models.heads.eagle_tree import EagleTree
from blockdraft.models.heads.rule import HeadsBackend, HeadsRule, padded


class EagleBackend(HeadsBackend, Protocol):
    """What a runtime computes for a draft layer."""

    @property
    def config(self) -> EagleConfig:
        """The layer's sizes and fusion."""
        ...

    @property
    def context(self) -> str:
        """What the layer was trained to read before an answer: ``"answer"`` (the prompt's
        last position) or ``"prompt"`` (every prompt position)."""
        ...

    @property
    def feature_layers(self) -> tuple[int, ...]:
        """The base's decoder layers whose outputs the layer fuses (``()`` with ``"top"``)."""
        ...

    @property
    def token_ids(self) -> torch.Tensor | None:
        """int64 ``[Vs]``: the base ids of the logits' columns (ascending), or None."""
        ...

    def step(self, features: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor,
             kv: KV | None, mask: torch.Tensor | None) -> EagleStep:
        """One call of the layer (:meth:`EagleLayer.forward
        <blockdraft.models.heads.eagle_layer.EagleLayer.forward>`), without gradients."""
        ...


class DraftLayerState:
    """What the draft layer keeps between a model's calls (mutable; :meth:`reset` by a
    prefill).

    Attributes:
        kv: the layer's cache of the committed positions ``(k, v)``, each
            ``[1, kv_heads, L, head_dim]``, or None before a prefill.
        position: the last committed position the layer read (``-1`` before).
        anchor: ``[d]`` the base's final hidden state at the last accepted node (the state the
            next step's heads are asked at), or None.
        tree: the step's :class:`~blockdraft.models.heads.eagle_tree.EagleTree`, or None.
        forward: ``(x [B, T, d], features [B, T, F])`` of the base's last forward, until a
            verdict reads its accepted rows, or None.
    """

    def __init__(self) -> None:
        self.forward: tuple[torch.Tensor, torch.Tensor] | None = None
        self.kv: KV | None = None
        self.position = -1
        self.anchor: torch.Tensor | None = None
        self.tree: EagleTree | None = None

    def reset(self) -> None:
        """Forget the text (the base's last forward is kept)."""
        self.kv, self.position, self.anchor, self.tree = None, -1, None, None

    @property
    def length(self) -> int:
        """``L``: the committed positions the cache holds."""
        return 0 if self.kv is None else int(self.kv[0].shape[2])


class EagleRule(HeadsRule):
    """A draft layer over a backend (see the module docstring).

    Args:
        backend: the runtime's computation of the layer.
        width: nodes a tree depth's forward computes at most; None: the lattice width ``k``
            (EAGLE-2's top-k).
    """

    kind: ClassVar[str] = CAPABILITY_KIND
    conditional: ClassVar[bool] = True
    backend: EagleBackend

    def __init__(self, backend: Any, width: int | None = None) -> None:
        super().__init__(backend)
        self.width = width
        self.state = DraftLayerState()

    @property
    def feature_layers(self) -> tuple[int, ...]:
        """The base's decoder layers whose outputs a forward must hand over (:meth:`saw`)."""
        return tuple(self.backend.feature_layers)

    def saw(self, x: torch.Tensor, layer_states: Sequence[torch.Tensor] = ()) -> None:
        """The base's last forward: ``x [B, T, d]`` its final hidden states, ``layer_states``
        the outputs of :attr:`feature_layers` (each ``[B, T, d]``); kept until a verdict reads
        the accepted rows (:meth:`accept_path`)."""
        fused = x if not layer_states else torch.cat(tuple(layer_states), dim=-1)
        self.state.forward = (x, fused)

    @torch.no_grad()
    def accept_path(self, rows: Sequence[int] | np.ndarray, tokens: Sequence[int] | np.ndarray,
                    start: int, new_text: bool = False) -> None:
        """The layer reads the accepted positions of the base's last forward.

        Args:
            rows: the forward's rows that were kept, in text order (a verification: the
                accepted path's nodes; a prefill: every prompt position).
            tokens: the token after each (the path's next node, the next certain token last).
            start: the text position of the first row.
            new_text: a prefill: the state starts over (with context ``"answer"``, only the
                last row is read).

        Raises:
            ModelError: no forward to read, rows and tokens of different lengths, or a path
                that does not continue the text read so far.
        """
        state = self.state
        if state.forward is None:
            raise ModelError("accept_path reads the rows of the base's last forward: call the "
                             "model's hidden() first")
        x, features = state.forward
        picked = np.asarray(rows, dtype=np.int64).reshape(-1)
        follow = np.asarray(tokens, dtype=np.int64).reshape(-1)
        if picked.size == 0 or picked.size != follow.size:
            raise ModelError(f"accept_path needs one token per row, got {picked.size} rows and "
                             f"{follow.size} tokens")
        positions = int(start) + np.arange(picked.size)
        if new_text:
            state.reset()
            if self.backend.context == "answer":
                picked, follow, positions = picked[-1:], follow[-1:], positions[-1:]
        elif int(start) != state.position + 1:
            raise ModelError(f"the accepted path starts at position {start}, but the draft "
                             f"layer has read the text up to position {state.position}: hand "
                             "it every accepted path (new_text=True at a prefill)")
        dev = x.device
        index = torch.as_tensor(picked, device=dev)
        out = self.backend.step(features[0, index][None],
                                torch.as_tensor(follow, device=dev)[None],
                                torch.as_tensor(positions, device=dev)[None], state.kv, None)
        state.kv = out.kv
        state.position = int(positions[-1])
        state.anchor = x[0, int(picked[-1])]
        state.forward = None
        state.tree = self._tree(out, state.kv, state.position, int(follow[-1]))

    def _tree(self, out: EagleStep, kv: KV | None, position: int, certain: int) -> EagleTree:
        """The step's tree after a call whose last position is ``position``."""
        return EagleTree(self.backend.step, self.backend.token_ids, kv, out.features[0, -1],
                         out.logits[0, -1], position, certain, self.num_heads, self.width)

    def _tree_at(self, x: torch.Tensor, first: Any = None) -> EagleTree:
        """The tree at the state ``x [1, d]``: the state's own when ``x`` is the state the last
        accepted path ended on, else a tree from ``x`` alone (the module docstring);
        ``first``: the base's greedy token at ``x`` (projected when not given).

        Raises:
            ModelError: several states (a draft layer drafts at the end of the text alone:
                every position's heads, as a trace records them, are not defined for it).
        """
        state = self.state
        if (state.tree is not None and state.anchor is not None and x.shape[0] == 1
                and x.device == state.anchor.device and torch.equal(x[0], state.anchor)):
            return state.tree
        if x.shape[0] != 1:
            raise ModelError(f"an EAGLE draft layer drafts after the committed text only; its "
                             f"heads at {x.shape[0]} positions at once are not defined (decode "
                             "online, or measure it offline with score_eagle)")
        token = int((self.backend.greedy(x) if first is None
                     else torch.as_tensor(first)).reshape(-1)[0])
        config = self.backend.config
        feature = x if config.fusion == "top" else x.repeat(1, len(config.fuse_layers))
        zero = torch.zeros(1, 1, dtype=torch.int64, device=x.device)
        out = self.backend.step(feature[None], zero + token, zero, None, None)
        return self._tree(out, out.kv, 0, token)

    @torch.no_grad()
    def states(self, x: torch.Tensor, n: int) -> torch.Tensor:
        """The greedy chain's first ``n`` states at ``x [..., d]`` (one state): ``[..., n, d]``
        (the layer's output features, each projected by its head)."""
        out = self._tree_at(x.reshape(-1, x.shape[-1])).states(n)  # (n, d)
        return out.reshape(*x.shape[:-1], n, out.shape[-1])

    @torch.no_grad()
    def head_topk(self, x: torch.Tensor, k: int, n: int, first: Any = None
                  ) -> tuple[np.ndarray, np.ndarray]:
        """The greedy chain's top-``k`` at ``x [1, d]`` (draft steps ``1 .. n - 1``):
        ``(ids int64 [1, n - 1, k], log-probs float64)`` over the layer's shortlist."""
        ids, scores = self._tree_at(x, first).chain(k, n - 1)
        return padded(ids[None], scores[None], k)

    def expander(self, x: torch.Tensor, k: int, first: int | None = None,
                 chain: tuple[np.ndarray, np.ndarray] | None = None
                 ) -> Callable[[tuple[int, ...]], tuple[np.ndarray, np.ndarray]]:
        """The step's tree lattice at ``x [d]``, ``k`` arcs a node (``chain`` is not needed:
        the tree keeps the chain's nodes it computed)."""
        tree = self._tree_at(x.reshape(1, -1), first)

        def expand(prefix: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
            with torch.no_grad():
                return tree.expand(prefix, k)

        return expand
