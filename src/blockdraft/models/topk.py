"""Top-k of head logits where the logits are: the one rule every lattice is built with.

A step's sausage lattice (docs/definitions.md sec. 3) needs, per head, the ``k`` best tokens
ordered by (logit descending, token id ascending) and their natural-log probabilities. This
module takes them from raw logits on the model's device, copying ``[R, k]`` off it instead of
``[R, V]``, with exactly the order and tie rule of
:meth:`~blockdraft.lattice.SausageLattice.from_logits`: among logits tied at the ``k``-th place
the smaller ids are kept (``torch.topk`` does not promise that; a tie across the boundary is
resolved by an exact sort, rare).

Columns may stand for other ids than their index (a shortlist: the heads project onto a subset
of the vocabulary, :meth:`~blockdraft.models.hf.MedusaHeads.set_shortlist`); the ids must then
ascend with the column, so that the column order is the id order. Normalisers are taken over
the row, i.e. over the shortlist.

Public surface:
    topk_logprobs(logits [R, C], k, ids=None) -> (ids int64 [R, k], log-probs float64 [R, k])
"""

from __future__ import annotations

import numpy as np
import torch


def _exact(z: np.ndarray, k: int) -> np.ndarray:
    """Columns ``[R, k]`` of each row's ``k`` largest entries by (value desc, column asc)."""
    cols = np.arange(z.shape[1])
    return np.stack([np.lexsort((cols, -row))[:k] for row in z])


def topk_logprobs(logits: torch.Tensor, k: int, ids: torch.Tensor | np.ndarray | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Each row's ``k`` best tokens and their log-probabilities over the row.

    Args:
        logits: float ``[R, C]`` raw logits (any device, any float dtype); ``-inf`` masks a
            column.
        k: tokens per row, ``1 <= k``; with ``k > C`` the rest is padding.
        ids: int ``[C]``, the token id of each column, ascending (a shortlist); None: the
            column is the id.

    Returns:
        ``(token_ids, scores)``: int64 ``[R, k]`` ordered by (logit desc, id asc), and their
        ``log_softmax`` over the row in float64 (nats). A masked column or a missing one
        (``k > C``) is id ``-1`` with score ``-inf``.
    """
    z = logits.detach().float()
    r, c = z.shape
    take = min(k + 1, c)
    vals, cols = torch.topk(z, take, dim=-1)  # (R, take): one extra, to see boundary ties
    log_z = torch.logsumexp(z.double(), dim=-1, keepdim=True).cpu().numpy()  # (R, 1)
    v, col = vals.cpu().numpy(), cols.cpu().numpy()
    kk = min(k, c)
    if take > kk and (v[:, kk - 1] == v[:, kk]).any():  # a tie across the k-th place
        col = _exact(z.cpu().numpy(), kk)
        v = np.take_along_axis(z.cpu().numpy(), col, axis=-1)
    else:
        col, v = col[:, :kk], v[:, :kk]
    order = np.lexsort((col, -v), axis=-1)  # (logit desc, column asc)
    col = np.take_along_axis(col, order, axis=-1)
    scores = np.take_along_axis(v, order, axis=-1).astype(np.float64) - log_z
    out = col.astype(np.int64) if ids is None else np.asarray(
        ids.cpu() if isinstance(ids, torch.Tensor) else ids, dtype=np.int64)[col]
    masked = np.isneginf(scores)
    if kk < k:
        out = np.concatenate([out, np.full((r, k - kk), -1, np.int64)], axis=1)
        scores = np.concatenate([scores, np.full((r, k - kk), -np.inf)], axis=1)
        masked = np.isneginf(scores)
    out[masked] = -1
    return out, scores
