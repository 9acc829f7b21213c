"""Prefix-conditioned (Hydra-style) heads: each head also sees the token drafted before it.

Medusa heads guess independently: head ``j`` sees only the base's state ``h_t``. Hydra
(Ankner et al. 2024, arXiv 2402.05109) makes the heads sequentially dependent. Here head
``j`` (Medusa numbering: it predicts ``y_{t+j+2}``) adds the embedding of the token just before
its target, ``y_{t+j+1}`` (for ``j = 0`` the base's own next token), through a ``[d, d]``
projection, then runs its ResBlocks and the base's ``lm_head``:

    state_j = ResBlocks_j(h_t + P_j e(y_{t+j+1}))

``P_j`` starts at zero, so new heads are Medusa heads; its cost is one ``d x d`` product a
head, the cost of one more ResBlock. In a lattice such a head is a conditional arc score: each
kept prefix is expanded by the head conditioned on its last token (a tree lattice, not a
sausage). Along the base's greedy answer, teacher-forced scores (the previous token the true
one) are exactly what a chain of 1-best drafts, or a tree's oracle path, sees wherever the
earlier heads were right.

Public surface:
    PrefixHeads(d_model, num_heads, num_layers=1)
        heads(h [..., d], previous=e [..., n, d]) -> [..., n, d]   pre-projection states
        heads.node(h [d], lm_head, embed, k) -> node(head, token)   one node's top-k
        heads.expander(h [d], certain, lm_head, embed, k) -> expand   one step's tree lattice
    tree_expander(certain, n, node) -> expand      the same rule over any runtime's heads (its
                                                   home: :mod:`blockdraft.models.heads.prefix`)
    (everything else as :class:`~blockdraft.models.hf.medusa.MedusaHeads`: logits, the
    shortlist; they share the base's ``lm_head``)
    LAYOUT                                       the ``layout`` of their folder's config
    write_prefix_heads(heads, folder, base_model) / read_prefix_heads(folder)

Files. A folder of prefix heads holds ``config.json`` (``layout``, sizes, the base, the
shortlist entry of :mod:`.shortlist`), ``prefix_heads.safetensors`` (the state dict, sealed by
its digest) and, with a shortlist, ``shortlist.safetensors``. ``load_model(heads=FOLDER)``
takes them; PyTorch and ONNX Runtime decode with them through their rule,
:class:`~blockdraft.models.heads.prefix.PrefixRule` (:mod:`blockdraft.models.runtimes.
onnx_head_graphs` builds their greedy chain and the expansion of one node as graphs).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from blockdraft.models.errors import ModelError
from blockdraft.models.heads.prefix import tree_expander
from blockdraft.models.hf.medusa import MedusaHeads

__all__ = ["LAYOUT", "PrefixHeads", "is_prefix_folder", "read_prefix_heads", "tree_expander",
           "write_prefix_heads"]


class PrefixHeads(MedusaHeads):
    """Medusa heads (version 2: the base's ``lm_head``) whose head ``j`` also reads the
    embedding of the token before its target (see the module docstring).

    Args:
        d_model: the base's hidden size ``d`` (its input embeddings have the same size).
        num_heads: heads ``n >= 1``.
        num_layers: ResBlocks per head ``L >= 1``.
    """

    kind: ClassVar[str] = "prefix"

    def __init__(self, d_model: int, num_heads: int, num_layers: int = 1) -> None:
        super().__init__(d_model, None, num_heads, num_layers)
        self.prefix = nn.ModuleList(nn.Linear(d_model, d_model, bias=False)
                                    for _ in range(num_heads))
        for layer in self.prefix:
            assert isinstance(layer, nn.Linear)
            nn.init.zeros_(layer.weight)

    def forward(self, hidden: torch.Tensor, heads: int | None = None,
                previous: torch.Tensor | None = None) -> torch.Tensor:
        """``hidden [..., d]`` and ``previous [..., n, d]`` (the embedding of the token before
        each head's target) -> ``[..., n, d]``, the states of heads ``0 .. n-1``.

        Raises:
            ModelError: no ``previous``, or one of another shape.
        """
        n = self.num_heads if heads is None else heads
        if not 0 <= n <= self.num_heads:
            raise ModelError(f"heads must lie in [0, {self.num_heads}], got {n}")
        want = (*hidden.shape[:-1], n, hidden.shape[-1])
        if previous is None or tuple(previous.shape) != want:
            got = None if previous is None else tuple(previous.shape)
            raise ModelError(f"prefix heads need previous of shape {want} (the embedding of "
                             f"the token before each head's target), got {got}")
        if n == 0:
            return hidden.new_zeros(want)
        return torch.stack([self.head_state(j, hidden, previous[..., j, :])
                            for j in range(n)], dim=-2)  # (..., n, d)

    def head_state(self, j: int, hidden: torch.Tensor, previous: torch.Tensor) -> torch.Tensor:
        """Head ``j``'s state: ``ResBlocks_j(hidden + P_j previous)``, ``[..., d]`` each
        (``previous``: the embedding of the token before its target)."""
        return self.blocks[j](hidden + self.prefix[j](previous))  # type: ignore[no-any-return]

    @torch.no_grad()
    def expander(self, hidden: torch.Tensor, certain: int, lm_head: torch.Tensor,
                 embed: torch.Tensor, k: int, rows: torch.Tensor | None = None,
                 chain: tuple[np.ndarray, np.ndarray] | None = None
                 ) -> Callable[[tuple[int, ...]], tuple[np.ndarray, np.ndarray]]:
        """The conditional lattice of one step (:mod:`blockdraft.lattice.conditional`), for
        :func:`~blockdraft.lattice.conditional.conditional_pbest`: :func:`tree_expander` over
        :meth:`node`.

        Depth 1 is the base's own next token ``certain`` (log-prob 0); a node of depth
        ``i >= 1`` is expanded by head ``i - 1`` reading the node's last token: its top ``k``
        over the shortlist (the whole vocabulary without one) as natural-log probabilities.

        Args:
            hidden: ``[d]``, the base's final hidden state at the accepted position.
            certain: the base's greedy token from it.
            lm_head, embed, k, rows: as :meth:`node` takes them.
            chain: the greedy chain's top ``k`` when the caller has it (:func:`tree_expander`).

        Returns:
            ``expand(prefix) -> (ids int64 [k'], log-probs float64 [k'])``; a prefix deeper
            than the heads, or not starting with ``certain``, has no children.
        """
        return tree_expander(certain, self.num_heads, self.node(hidden, lm_head, embed, k, rows),
                             chain)

    def node(self, hidden: torch.Tensor, lm_head: torch.Tensor, embed: torch.Tensor, k: int,
             rows: torch.Tensor | None = None) -> Callable[[int, int],
                                                           tuple[np.ndarray, np.ndarray]]:
        """One step's node expansion at ``hidden [d]``: ``(head, token) -> (ids int64 [k'],
        log-probs float64 [k'])``, head ``head``'s top ``k`` (over the shortlist, the whole
        vocabulary without one) when it reads ``token``.

        Args:
            hidden: ``[d]``, the base's final hidden state at the accepted position.
            lm_head: ``[V, d]`` the base's output projection; embed: ``[V, d]`` its input
                embeddings (the same tensor when they are tied).
            k: arcs per node.
            rows: the shortlist's rows of ``lm_head`` (``[Vs, d]``), when the caller keeps
                them; else taken from ``lm_head`` at the first expansion (building a node
                evaluation that is never used costs nothing).
        """
        ids = self.shortlist
        kept: list[torch.Tensor] = [] if rows is None else [rows.float()]

        def weight() -> torch.Tensor:  # (V or Vs, d)
            if not kept:
                kept.append((lm_head if ids is None else lm_head[ids]).float())
            return kept[0]

        def node(head: int, token: int) -> tuple[np.ndarray, np.ndarray]:
            with torch.no_grad():
                # the head in its own dtype, its projection and softmax in float32
                state = self.head_state(head, hidden, embed[token]).float()  # (d,)
                logp = torch.log_softmax(state @ weight().T, dim=-1)  # (V or Vs,)
                top = logp.topk(min(k, logp.numel()))
            best = top.indices if ids is None else ids[top.indices.cpu()]
            return best.cpu().numpy().astype(np.int64), top.values.double().cpu().numpy()

        return node

    def extra_repr(self) -> str:
        return "prefix-conditioned, " + super().extra_repr()


LAYOUT = "blockdraft-prefix"
WEIGHTS_FILE = "prefix_heads.safetensors"


def write_prefix_heads(heads: PrefixHeads, folder: str | os.PathLike[str],
                       base_model: str | None = None) -> Path:
    """Write ``heads`` (their stored dtype) and their shortlist into ``folder`` (created;
    callers make it atomic)."""
    from blockdraft.models.hf.formats import CONFIG_FILE
    from blockdraft.models.hf.shortlist import CONFIG_KEY, shortlist_files
    from blockdraft.models.hf.tensor_digest import save_sealed

    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous().clone() for k, v in heads.state_dict().items()}
    save_sealed(state, root / WEIGHTS_FILE)
    config: dict[str, Any] = {"layout": LAYOUT, "num_heads": heads.num_heads,
                              "num_layers": heads.num_layers, "d_model": heads.d_model,
                              "base_model_name_or_path": base_model or ""}
    if heads.shortlist is not None:
        tensors, entry = shortlist_files(heads.shortlist, heads.shortlist_info)
        save_sealed(tensors, root / entry["file"])
        config[CONFIG_KEY] = entry
    (root / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n",
                                    encoding="utf-8")
    return root


def is_prefix_folder(folder: str | os.PathLike[str]) -> bool:
    """Whether ``folder``'s config names the prefix-heads layout."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get("layout") == LAYOUT


def read_prefix_heads(folder: str | os.PathLike[str]) -> PrefixHeads:
    """The prefix heads of a folder written by :func:`write_prefix_heads`.

    Raises:
        ModelError: not such a folder, or a damaged file (its digest).
    """
    from blockdraft.models.hf.drafting import read_drafting
    from blockdraft.models.hf.shortlist import read_shortlist
    from blockdraft.models.hf.tensor_digest import read_sealed

    root = Path(folder)
    if not is_prefix_folder(root):
        raise ModelError(f"{root} holds no prefix heads (config.json layout {LAYOUT!r})")
    config = json.loads((root / "config.json").read_text(encoding="utf-8"))
    state = read_sealed(root / WEIGHTS_FILE)
    heads = PrefixHeads(int(config["d_model"]), int(config["num_heads"]),
                        int(config["num_layers"]))
    heads.load_state_dict({k: v.float() for k, v in state.items()})
    found = read_shortlist(root)
    if found is not None:
        heads.set_shortlist(found[0], info=found[1])
    heads.use_recipe(read_drafting(root))  # the folder's recipe, if it packages one
    return heads
