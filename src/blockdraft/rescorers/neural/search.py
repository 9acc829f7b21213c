"""The search of local neural rescoring (Kim et al. 2024, Algorithm 2; docs/definitions.md
sec. 4): Kim's greedy pass for ``p = 1`` and its beam for ``p > 1``, over an LM backend.

Public surface:
    Prefix                                           the LM after the call's context window
    greedy(backend, alpha, lattice, prefix) -> Search           ``p = 1``
    beam(backend, alpha, lattice, prefix, p) -> Search          ``p > 1``
    Search                                           the drafts, plus what the cache keeps

The algorithm, ``p = 1`` (exactly Kim's Algorithm 2): left to right over the slots, with
``r_j = log_softmax`` of the rescoring LM at slot ``j`` given the context and the tokens chosen
so far, score each arc of slot ``j`` as ``head_j(token) + alpha * r_j(token)`` (nats) and take
the argmax (ties: the better head arc). Kim adds ``alpha * r_j`` to the head's raw logits
``z^j``; the lattice holds ``log_softmax(z^j) = z^j - logsumexp(z^j)``, which shifts every arc
of a slot by the same constant, so the choice is the same. Slot 1 holding one certain token
(the usual lattice) is fixed; with several arcs (analysis lattices) it is chosen like the
others, with ``r_1`` from the context alone.

The same argument runs the other way for the LM: ``r_j = l_j - ln Z_j`` with raw logits
``l_j`` and one normaliser ``Z_j`` per slot, so the greedy choice needs only the ``k`` arcs'
raw logits (a gather and a ``k x d`` product, not the ``V x d`` projection), and the
normalisers of the ``h`` slots, needed for ``lm_scores`` alone, are computed in one batched
projection at the end. The beam compares paths across LM contexts, so it normalises every
slot as it goes.

``p > 1`` is a beam search of width ``p`` over the slots (the ``p`` best partial paths by
``head + alpha * lm``, each extended by every arc of the next slot, keep the ``p`` best): a
natural generalisation, not an exact p-best (the LM term is not a sum of independent per-slot
scores), except at ``alpha = 0``, where it is the exact p-best of the lattice. Ties keep the
earlier beam entry, then the better head arc.


Both searches feed only the draft positions (the context window is already in ``prefix``) and
return, besides the drafts, the best draft's hidden states, normalisers and LM cache, which
:class:`~.rescorer.NeuralRescorer` keeps for the next call.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from blockdraft.lattice.sausage import SausageLattice
from blockdraft.rescorers.neural.backends import Backend


class Prefix(NamedTuple):
    """The LM after a call's window (see :meth:`~.rescorer.NeuralRescorer._prefix`)."""

    hidden: Any  # final hidden state [d] after the window; None for an empty window
    norm: float | None  # its log-softmax normaliser when cached, else None
    state: Any  # batch-1 cache of the window; None for an empty window
    reused: int  # window positions taken from the cache
    fed: int  # window positions fed
    ahead: Any = None  # hidden state [d] after the window + slot 1's token, when fed with it


class Search(NamedTuple):
    """What a search found: the drafts, best first, and what the rescorer's cache keeps."""

    tokens: np.ndarray  # int64 [p', h]
    head: np.ndarray  # float64 [p'], head scores
    lm: np.ndarray  # float64 [p'], LM scores
    draft_fed: int  # draft positions fed, summed over the beam's rows
    best: np.ndarray  # int64 [h], the best draft
    preds: list[Any]  # hidden states before each of its slots that has an LM context
    norms: np.ndarray  # their log-softmax normalisers
    state: Any  # batch-1 cache of the window + the best draft's first h - 1 tokens


def greedy(backend: Backend, alpha: float, lattice: SausageLattice, prefix: Prefix) -> Search:
    """Kim's Algorithm 2: per slot, the arc maximising ``head + alpha * lm_logit``.

    The LM's normaliser is the same for every arc of a slot, so the choice needs only the
    arcs' raw logits; the normalisers of all slots are computed in one batch at the end
    (for ``lm_scores``). One draft: ``tokens [1, h]``, ``head [1]``, ``lm [1]``; ``h - 1``
    draft positions fed.
    """
    h = lattice.h
    hidden, state = prefix.hidden, prefix.state
    tokens = np.empty(h, dtype=np.int64)
    head = 0.0
    picked: list[float] = []  # raw LM logit of the chosen arc, per slot with an LM context
    preds: list[Any] = []  # the hidden state before each of those slots
    for i in range(h):
        toks, scs = lattice.slot(i)  # [n], [n]
        j = 0
        if hidden is not None:
            logits = backend.arc_logits(hidden[None], toks)[0]  # [n]
            if toks.size > 1:
                j = int(np.argmax(scs + alpha * logits))  # ties: the better head arc
            picked.append(float(logits[j]))
            preds.append(hidden)
        elif toks.size > 1:
            j = int(np.argmax(scs))
        tokens[i] = toks[j]
        head += float(scs[j])
        if i < h - 1:
            if i == 0 and prefix.ahead is not None:
                hidden = prefix.ahead  # slot 1's token was fed with the window
            else:
                hiddens, state = backend.forward(tokens[None, i : i + 1], state)
                hidden = hiddens[0, -1]  # [d]
    norms = np.zeros(len(preds))
    known = 0 if prefix.norm is None else 1  # the cached window's normaliser
    if known:
        norms[0] = prefix.norm
    if len(preds) > known:
        norms[known:] = backend.log_norm(backend.stack(preds[known:]))
    lm = 0.0
    for logit, norm in zip(picked, norms, strict=True):
        lm += logit - norm
    return Search(tokens=tokens[None], head=np.array([head]), lm=np.array([lm]),
                  draft_fed=h - 1, best=tokens, preds=preds, norms=norms, state=state)


def beam(
    backend: Backend, alpha: float, lattice: SausageLattice, prefix: Prefix, p: int
) -> Search:
    """The width-``p`` beam over the slots (module docstring): ``tokens [p', h]``,
    ``head [p']``, ``lm [p']``, best first, and the draft positions fed."""
    h = lattice.h
    state = prefix.state
    total = np.zeros(1)  # [B] running head + alpha * lm of the beam
    head = np.zeros(1)  # [B]
    lm = np.zeros(1)  # [B]
    paths = np.zeros((1, 0), dtype=np.int64)  # [B, i]
    hidden: Any = None if prefix.hidden is None else backend.stack([prefix.hidden])  # [B, d]
    norms: np.ndarray | None = None
    if hidden is not None:
        norms = (np.array([prefix.norm]) if prefix.norm is not None
                 else backend.log_norm(hidden))  # [B]
    history: list[tuple[np.ndarray, Any, np.ndarray | None]] = []  # per slot
    draft_fed = 0
    for i in range(h):
        toks, scs = lattice.slot(i)  # [n], [n]
        n = toks.size
        if hidden is None or norms is None:
            r = np.zeros((total.size, n))
        else:
            r = backend.arc_logits(hidden, toks) - norms[:, None]  # [B, n] ln P
        cand = total[:, None] + scs[None, :] + alpha * r  # [B, n]
        order = np.argsort(-cand.ravel(), kind="stable")[:p]  # ties: beam, then arc order
        parents, arcs = np.divmod(order, n)
        total = cand.ravel()[order]
        head = head[parents] + scs[arcs]
        lm = lm[parents] + r[parents, arcs]
        chosen = toks[arcs]  # [B']
        paths = np.concatenate((paths[parents], chosen[:, None]), axis=1)
        history.append((parents, hidden, norms))
        if i < h - 1:
            past = None if state is None else backend.rows(state, parents)
            hiddens, state = backend.forward(chosen[:, None], past)  # [B', 1, d]
            hidden = hiddens[:, -1]  # [B', d]
            norms = backend.log_norm(hidden)
            draft_fed += chosen.size
    # The best path's hidden states (and its row of the last state fed), last slot first.
    preds: list[Any] = []
    path_norms: list[float] = []
    entry = keep_row = 0
    for i in range(h - 1, -1, -1):
        parents, hid, nrm = history[i]
        prev = int(parents[entry])
        if i == h - 1:
            keep_row = prev
        if hid is not None and nrm is not None:
            preds.append(hid[prev])
            path_norms.append(float(nrm[prev]))
        entry = prev
    if state is not None and h > 1:
        state = backend.rows(state, np.array([keep_row]))
    return Search(tokens=paths, head=head, lm=lm, draft_fed=draft_fed, best=paths[0],
                  preds=preds[::-1], norms=np.array(path_norms[::-1]), state=state)
