"""The sausage lattice as an OpenFst acceptor (pynini), and back.

Public functions:
    lattice_to_fst(lattice) -> pynini.Fst
        the lattice as an arc-sorted tropical acceptor: states ``0..h``, slot ``i`` (0-based)
        from state ``i`` to ``i + 1``, one arc per real token, cost ``-score``.
    lattice_from_fst(fst, *, k=None, fold_final_weight=False) -> SausageLattice
        the inverse, for any acceptor with sausage topology in any state numbering.
    token_to_label(token) -> int       token id ``t`` -> OpenFst label ``t + 1``.
    label_to_token(label) -> int       OpenFst label ``l`` -> token id ``l - 1``.

LABELS ARE TOKEN IDS PLUS ONE (:data:`LABEL_OFFSET`). OpenFst reserves label ``0`` for epsilon,
so token id ``t`` is written as label ``t + 1`` and read back as ``label - 1``. Every FST in
blockdraft over token ids follows this convention (the n-gram WFSTs of
:mod:`blockdraft.rescorers.ngram.wfst` too); always go through :func:`token_to_label` and
:func:`label_to_token` instead of adding ``1`` by hand. OpenFst labels are 32-bit signed ints,
so the largest token id an FST can hold is :data:`MAX_TOKEN` (``2**31 - 2``).

Weights: tropical costs in nats, ``cost = -score`` where ``score`` is the lattice's natural-log
probability (docs/definitions.md sec. 3: converted exactly once, here). OpenFst's tropical weights
are float32, so a round trip rounds every score to the nearest float32 (relative error ``<=
2**-24``); scores that are float32 values already (e.g. from a float32 ``log_softmax``) round-trip
exactly. The final state has weight One (cost 0), so the cost of a path is exactly minus its lattice
score (up to float32 arithmetic), and ``shortestpath`` finds ``lattice.best_paths(1)``.

Sausage topology, as :func:`lattice_from_fst` checks it: a start state; from it a chain of
distinct states in which every arc of a state goes to the same next state; every arc an
acceptor arc (``ilabel == olabel``) with a non-zero label (no epsilons) and a finite cost; the
labels within a state distinct; no state final except the last, which has no arcs; no state off
the chain. The final weight of the last state must be One; with ``fold_final_weight=True`` a
finite final weight is instead added to the cost of every arc of the last slot (the strings and
their total costs are preserved; the last slot's scores then include the final weight).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from blockdraft.core.checks import is_int
from blockdraft.core.extras import import_optional
from blockdraft.lattice.sausage import PAD_TOKEN, LatticeError, SausageLattice

LABEL_OFFSET = 1
"""OpenFst label of token id ``t`` is ``t + LABEL_OFFSET`` (label 0 is epsilon)."""

MAX_TOKEN = 2**31 - 1 - LABEL_OFFSET
"""Largest token id that fits an OpenFst label (labels are 32-bit signed ints)."""

_WEIGHT_TYPES = ("tropical", "log", "log64")
"""Weight types whose value is a cost ``-ln p``; ``lattice_from_fst`` reads any of them."""


def _pynini() -> Any:
    """The pynini module, imported lazily (a heavy optional backend)."""
    return import_optional("pynini", "wfst", "FST conversion", LatticeError)


def _pywrapfst() -> Any:
    """The pywrapfst module (ships with pynini), imported lazily."""
    _pynini()
    return import_optional("pywrapfst", "wfst", "FST conversion", LatticeError)


def token_to_label(token: int) -> int:
    """The OpenFst label of a token id (``token + LABEL_OFFSET``).

    Args:
        token: a token id, ``0 <= token <= MAX_TOKEN``.

    Returns:
        The label, ``>= 1`` (never epsilon).

    Raises:
        LatticeError: if the token id is negative (padding included) or too large for a label.
    """
    t = int(token)
    if t < 0 or t > MAX_TOKEN:
        raise LatticeError(
            f"token id {t} has no OpenFst label: ids must be in [0, {MAX_TOKEN}] "
            f"(label = id + {LABEL_OFFSET}, a 32-bit int; {PAD_TOKEN} is padding, not a token)"
        )
    return t + LABEL_OFFSET


def label_to_token(label: int) -> int:
    """The token id of an OpenFst label (``label - LABEL_OFFSET``).

    Args:
        label: an OpenFst label, ``>= 1``.

    Returns:
        The token id, ``>= 0``.

    Raises:
        LatticeError: if the label is epsilon (0) or negative.
    """
    lab = int(label)
    if lab < LABEL_OFFSET:
        raise LatticeError(
            f"label {lab} is not a token label: labels of token ids are >= {LABEL_OFFSET} "
            "(0 is epsilon)"
        )
    return lab - LABEL_OFFSET


def lattice_to_fst(lattice: SausageLattice) -> Any:
    """The lattice as a tropical acceptor (see the module docstring for the layout).

    Args:
        lattice: the lattice; every real token id must be ``<= MAX_TOKEN``.

    Returns:
        A ``pynini.Fst`` (arc type ``standard``) with states ``0..h``, start state 0, final
        state ``h`` with weight One, slot ``i``'s arcs from state ``i`` to ``i + 1`` with label
        ``token + 1`` and cost ``-score`` (nats, float32), arc-sorted by ilabel. Padding arcs
        are not written.

    Raises:
        LatticeError: if ``lattice`` is not a :class:`SausageLattice` or holds a token id too
            large for an OpenFst label.
    """
    if not isinstance(lattice, SausageLattice):
        raise LatticeError(
            f"lattice_to_fst expects a SausageLattice, got {type(lattice).__name__}"
        )
    pynini = _pynini()
    fst = pynini.Fst()  # arc type "standard": tropical, float32 costs
    states = [fst.add_state() for _ in range(lattice.h + 1)]
    fst.set_start(states[0])
    fst.set_final(states[-1])  # weight One
    for i in range(lattice.h):
        tokens, scores = lattice.slot(i)
        for j in np.argsort(tokens, kind="stable"):
            label = token_to_label(int(tokens[j]))
            cost = -float(scores[j])  # nats; the one ln p -> cost conversion
            fst.add_arc(states[i], pynini.Arc(label, label, cost, states[i + 1]))
    fst.arcsort("ilabel")  # already sorted: this records the property for composition
    return fst


def _cost(weight: Any, weight_type: str) -> float:
    """The value of a weight as a float (nats).

    pywrapfst converts weights through their text form (9 significant digits), which is
    exact for float32 weights once rounded back to float32; ``log64`` weights are read to
    those 9 digits.
    """
    value = float(weight)
    return value if weight_type == "log64" else float(np.float32(value))


def lattice_from_fst(
    fst: Any, *, k: int | None = None, fold_final_weight: bool = False
) -> SausageLattice:
    """The lattice of an acceptor with sausage topology (the inverse of :func:`lattice_to_fst`).

    States may be numbered in any order; the slots follow the chain from the start state.
    Within a slot, arcs are sorted best first (smallest cost), ties by smaller token id;
    slots with fewer arcs than the widest are padded at the end (token ``-1``, score ``-inf``).

    Args:
        fst: a ``pynini.Fst`` or ``pywrapfst`` FST whose weight type is ``tropical``, ``log``
            or ``log64`` (the weight value is read as a cost ``-ln p`` in nats; float32
            weights exactly, ``log64`` weights to 9 significant digits).
        k: the width of the result (padding to it); None takes the most arcs in a slot. An
            FST does not record a lattice's width, so pass ``lattice.k`` to get back the same
            shape when every slot of the lattice was ragged.
        fold_final_weight: if False (default), the last state's final weight must be One; if
            True, a finite final weight is added to the cost of every arc of the last slot.

    Returns:
        A :class:`SausageLattice` with ``h`` = the number of arcs on a path, width ``k`` (or
        the most arcs in a slot), scores ``-cost`` (nats).

    Raises:
        LatticeError: if ``fst`` is not an FST, has an unsupported weight type, no start
            state, a branching state (arcs to different next states), a cycle, an epsilon arc,
            a transducer arc (``ilabel != olabel``), an infinite or NaN cost, a final state
            that has arcs, a dead end, a final weight other than One (unless folded), states
            off the chain, duplicate labels in a slot, or accepts only the empty string; or if
            ``k`` is not a positive integer or a slot has more than ``k`` arcs.
    """
    if k is not None and (not is_int(k) or k < 1):
        raise LatticeError(f"k must be a positive integer or None, got {k!r}")
    pywrapfst = _pywrapfst()
    if not isinstance(fst, pywrapfst.Fst):
        raise LatticeError(
            f"lattice_from_fst expects a pynini/pywrapfst FST, got {type(fst).__name__}"
        )
    weight_type = fst.weight_type()
    if weight_type not in _WEIGHT_TYPES:
        raise LatticeError(
            f"FST weight type {weight_type!r} is not supported; use one of {_WEIGHT_TYPES} "
            "(weights are read as costs -ln p)"
        )
    start = fst.start()
    if start < 0:
        raise LatticeError("the FST has no start state (it is empty); nothing to convert")

    slots: list[tuple[np.ndarray, np.ndarray]] = []
    visited = {start}
    state = start
    while True:
        final_cost = float(fst.final(state))
        if fst.num_arcs(state) == 0:
            if math.isinf(final_cost) and final_cost > 0:
                raise LatticeError(
                    f"state {state} (after slot {len(slots)}) has no arcs and is not final: "
                    "a dead end; trim the FST with fst.connect()"
                )
            break
        if not (math.isinf(final_cost) and final_cost > 0):
            raise LatticeError(
                f"state {state} (before slot {len(slots) + 1}) is final but has arcs: the FST "
                "accepts strings of different lengths, which is not a sausage"
            )
        slot = len(slots) + 1
        labels: list[int] = []
        costs: list[float] = []
        next_state: int | None = None
        for arc in fst.arcs(state):
            if arc.ilabel != arc.olabel:
                raise LatticeError(
                    f"slot {slot} (state {state}): arc with ilabel {arc.ilabel} != olabel "
                    f"{arc.olabel}; a lattice is an acceptor (project the FST first)"
                )
            if arc.ilabel == 0:
                raise LatticeError(
                    f"slot {slot} (state {state}): epsilon arc (label 0); a sausage lattice "
                    "has a token on every arc (remove epsilons with rmepsilon first)"
                )
            if next_state is None:
                next_state = arc.nextstate
            elif arc.nextstate != next_state:
                raise LatticeError(
                    f"slot {slot} (state {state}): arcs go to different states "
                    f"({next_state} and {arc.nextstate}); a sausage has one next state per slot"
                )
            cost = _cost(arc.weight, weight_type)
            if not math.isfinite(cost):
                raise LatticeError(
                    f"slot {slot} (state {state}): arc with label {arc.ilabel} has cost {cost}; "
                    "costs must be finite (drop arcs of zero probability)"
                )
            labels.append(label_to_token(arc.ilabel))
            costs.append(cost)
        assert next_state is not None
        if next_state in visited:
            raise LatticeError(
                f"slot {slot} (state {state}): arcs go back to state {next_state}, a cycle; "
                "a sausage lattice is acyclic"
            )
        visited.add(next_state)
        tokens = np.asarray(labels, dtype=np.int64)
        uniq, cnt = np.unique(tokens, return_counts=True)
        if uniq.size != tokens.size:
            dup = int(uniq[cnt > 1][0])
            raise LatticeError(
                f"slot {slot} (state {state}): token {dup} (label {token_to_label(dup)}) "
                "appears on more than one arc; tokens within a slot must be distinct "
                "(determinize the FST first)"
            )
        slots.append((tokens, -np.asarray(costs, dtype=np.float64)))
        state = next_state

    if not slots:
        raise LatticeError(
            f"the start state {start} is final with no arcs: the FST accepts only the empty "
            "string; a lattice needs at least one slot"
        )
    final_cost = _cost(fst.final(state), weight_type)
    if not math.isfinite(final_cost):
        raise LatticeError(f"the final state {state} has weight {final_cost}; it must be finite")
    if final_cost != 0.0:
        if not fold_final_weight:
            raise LatticeError(
                f"the final state {state} has weight {final_cost} (cost, nats), not One (0); "
                "pass fold_final_weight=True to add it to the last slot's costs"
            )
        tokens, scores = slots[-1]
        slots[-1] = (tokens, scores - final_cost)
    if fst.num_states() != len(visited):
        raise LatticeError(
            f"the FST has {fst.num_states()} states but its chain only {len(visited)}: "
            "remove the unreachable states with fst.connect()"
        )

    h = len(slots)
    widest = max(t.size for t, _ in slots)
    if k is None:
        k = widest
    elif widest > k:
        i = next(i for i, (t, _) in enumerate(slots) if t.size == widest)
        raise LatticeError(f"slot {i + 1} has {widest} arcs, more than k = {k}; pass a larger k")
    out_tokens = np.full((h, k), PAD_TOKEN, dtype=np.int64)
    out_scores = np.full((h, k), -np.inf, dtype=np.float64)
    for i, (tokens, scores) in enumerate(slots):
        order = np.lexsort((tokens, -scores))  # best first, ties by smaller token id
        out_tokens[i, : tokens.size] = tokens[order]
        out_scores[i, : tokens.size] = scores[order]
    return SausageLattice(tokens=out_tokens, scores=out_scores)
