"""A step's sausage lattice from what a model call left: the base head's logits and the other
heads' top-k (or their logits), taken where the logits are.

docs/definitions.md sec. 2-3. Slot 1 holds the certain token alone (the base head's argmax);
slots 2..h each head's top ``k`` with natural-log probabilities, ordered and tied exactly as
:meth:`~blockdraft.lattice.sausage.SausageLattice.from_logits` orders them
(:func:`~blockdraft.models.topk.topk_logprobs`: one ``[r, k]`` copy off the device instead of
``[r, V]``).

Public surface:
    step_lattice(next_logits, next_topk, k) -> SausageLattice
    head_lattice(head_logits [h, V], k) -> SausageLattice
"""

from __future__ import annotations

import numpy as np
import torch

from blockdraft.lattice.sausage import SausageLattice
from blockdraft.models.topk import topk_logprobs


def step_lattice(next_logits: torch.Tensor, next_topk: tuple[np.ndarray, np.ndarray] | None,
                 k: int) -> SausageLattice:
    """The step's lattice from the base head's logits (row 0 of ``next_logits [n, V]``; slot 1
    is its argmax alone) and either the other heads' top-k the runtime took (``next_topk``:
    ids and natural-log probabilities ``[n - 1, >= k]``) or their rows of ``next_logits``.

    Logits that are not finite (NaN, ``+inf``, a row all ``-inf``) and ``k >= V`` take
    :meth:`SausageLattice.from_logits`, whose checks name the problem.
    """
    if not isinstance(next_logits, torch.Tensor) or k >= next_logits.shape[-1]:
        return SausageLattice.from_logits(next_logits, k, certain_first=True)  # checks, rare
    rows = next_logits if next_topk is None else next_logits[:1]
    ids, scores = topk_logprobs(rows, k)  # (r, k)
    if np.isnan(scores).any() or np.isposinf(scores).any():
        return SausageLattice.from_logits(next_logits, k, certain_first=True)  # raises
    if next_topk is not None:
        ids = np.concatenate([ids, next_topk[0][:, :k]])
        scores = np.concatenate([scores, next_topk[1][:, :k]])
    return SausageLattice.from_topk(ids, scores, certain_first=True)


def head_lattice(head_logits: torch.Tensor, k: int) -> SausageLattice:
    """The step's lattice from every head's raw logits ``[h, V]`` (a torch tensor on any
    device, or numpy): :func:`step_lattice` without a runtime's top-k."""
    return step_lattice(head_logits, None, k)
