"""How likely a drafted token is to be accepted: tables measured on held-out training answers.

A tree that pays must know, for each of its nodes, the probability that the verifier accepts
it given that its parent was accepted (``q``), so that a node's chance of being on the accepted
path is the product of ``q`` along its root path and the tree's expected accepted tokens the
sum of those products. Raw head probabilities are badly calibrated (a head's top-1 at 0.6 may
be right 30% of the time), and what a prompt-lookup copy or an LM says is evidence too. These
tables map each kind of evidence to the acceptance rate measured on data the strategy is then
used on (training answers, never evaluation prompts; :func:`~blockdraft.oracle.fit_acceptance`):

- a token of the heads' lattice at depth ``d`` (the slot of head ``d + 1``): by the bin of its
  head log-probability and the bin of its LM log-probability given the context and its root
  path (the interpolated n-gram LM and the context LM of the rescorer):
  ``heads[d - 1, head_bin, lm_bin]``, or without an LM ``marginal[d - 1, head_bin]``;
- a token copied by prompt lookup at offset ``j`` of its copy after a match of ``m`` tokens,
  the copy of rank ``r`` among the text's matches (:func:`~blockdraft.drafts.lookup.lookups`:
  1 for the longest, most recent one): ``copy[min(r, R) - 1, min(m, M) - 1, min(j, J) - 1]``.

A node several sources propose (the lookup copies what a head also guessed) combines them as
independent evidence: ``q = 1 - prod(1 - q_source)``.

Public surface:
    HEAD_EDGES, LM_EDGES                  default bin edges (natural log)
    bin_index(values, edges) -> int64 [...]
    AcceptanceTables(heads, marginal, copy, head_edges=HEAD_EDGES, lm_edges=LM_EDGES,
                     signature="")
        .head_q(depth, head_lp, lm_lp) -> float64 [...]
        .copy_q(match, offset, rank=1) -> float64 [...]
        .to_dict() / AcceptanceTables.from_dict(d); save(path) / load(path)
    AcceptanceTables.uniform(h, head_q=0.5, copy_q=0.6)   an uncalibrated stand-in
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from blockdraft.core.arrays import readonly
from blockdraft.core.batch import DraftError
from blockdraft.core.files import write_text_atomic

HEAD_EDGES = (-8.0, -6.0, -5.0, -4.0, -3.0, -2.5, -2.0, -1.5, -1.0, -0.7, -0.4, -0.2, -0.1)
"""Upper edges of the head log-probability bins (nats): bin ``b`` holds ``edges[b-1] < lp <=
edges[b]``; ``len(edges) + 1`` bins, the last up to 0."""
LM_EDGES = (-10.0, -8.0, -6.0, -5.0, -4.0, -3.0, -2.0, -1.0, -0.5)
"""Upper edges of the LM log-probability bins (nats)."""


def bin_index(values: Any, edges: tuple[float, ...]) -> np.ndarray:
    """Bin index of each value: ``b`` with ``edges[b - 1] < value <= edges[b]`` (``-inf`` and
    NaN: bin 0)."""
    v = np.nan_to_num(np.asarray(values, dtype=np.float64), nan=-np.inf)
    return np.searchsorted(np.asarray(edges), v, side="left")


@dataclass(frozen=True, eq=False)
class AcceptanceTables:
    """Acceptance rates by evidence (see the module docstring).

    Attributes:
        heads: float64 ``[h - 1, len(head_edges) + 1, len(lm_edges) + 1]``, in ``[0, 1]``.
        marginal: float64 ``[h - 1, len(head_edges) + 1]``: the same without the LM's bin.
        copy: float64 ``[R, M, J]``: a lookup copy's token at offset ``j`` after an
            ``m``-token match, in the copy of rank ``r`` (the last entries for larger ones; a
            ``[M, J]`` table is read as ``R = 1``).
        head_edges, lm_edges: the bins' upper edges (natural log).
        signature: what the tables were measured on (model, heads, LM, data), for records.
    """

    heads: np.ndarray
    marginal: np.ndarray
    copy: np.ndarray
    head_edges: tuple[float, ...] = HEAD_EDGES
    lm_edges: tuple[float, ...] = LM_EDGES
    signature: str = ""

    def __post_init__(self) -> None:
        heads = np.asarray(self.heads, dtype=np.float64)
        marginal = np.asarray(self.marginal, dtype=np.float64)
        copy = np.asarray(self.copy, dtype=np.float64)
        edges = tuple(float(e) for e in self.head_edges), tuple(float(e) for e in self.lm_edges)
        for name, e in zip(("head_edges", "lm_edges"), edges, strict=True):
            if bool(np.any(np.diff(e) <= 0)):
                raise DraftError(f"{name} must ascend, got {e}")
        want = (len(edges[0]) + 1, len(edges[1]) + 1)
        if heads.ndim != 3 or heads.shape[1:] != want or heads.shape[0] < 1:
            raise DraftError(f"heads must be [h - 1, {want[0]}, {want[1]}], got {heads.shape}")
        if marginal.shape != heads.shape[:2]:
            raise DraftError(f"marginal must be {heads.shape[:2]}, got {marginal.shape}")
        if copy.ndim == 2:
            copy = copy[None]
        if copy.ndim != 3 or 0 in copy.shape:
            raise DraftError(f"copy must be a non-empty [R, M, J] table, got {copy.shape}")
        for name, t in (("heads", heads), ("marginal", marginal), ("copy", copy)):
            if not np.all((t >= 0) & (t <= 1)):
                raise DraftError(f"{name} rates must lie in [0, 1]")
        object.__setattr__(self, "heads", readonly(heads))
        object.__setattr__(self, "marginal", readonly(marginal))
        object.__setattr__(self, "copy", readonly(copy))
        object.__setattr__(self, "head_edges", edges[0])
        object.__setattr__(self, "lm_edges", edges[1])

    @property
    def depths(self) -> int:
        """Depths the head table covers (``h - 1``); deeper nodes use the last."""
        return int(self.heads.shape[0])

    def head_q(self, depth: Any, head_lp: Any, lm_lp: Any = None) -> np.ndarray:
        """Acceptance rate of lattice tokens (arrays broadcast): ``depth >= 1`` (deeper than
        the table: its last depth); ``head_lp`` ``-inf`` for a token outside its slot's arcs
        gives 0; ``lm_lp`` None reads the table without the LM (:attr:`marginal`)."""
        d = np.clip(np.asarray(depth, dtype=np.int64), 1, self.depths) - 1
        hp = np.asarray(head_lp, dtype=np.float64)
        hb = bin_index(hp, self.head_edges)
        if lm_lp is None:
            q = self.marginal[d, hb]
        else:
            q = self.heads[d, hb, bin_index(lm_lp, self.lm_edges)]
        return np.where(np.isneginf(hp), 0.0, q)

    def copy_q(self, match: Any, offset: Any, rank: Any = 1) -> np.ndarray:
        """Acceptance rate of lookup tokens: ``match >= 1`` tokens matched, ``offset >= 1`` in
        the copy, ``rank >= 1`` of the copy."""
        r = np.clip(np.asarray(rank, dtype=np.int64), 1, self.copy.shape[0]) - 1
        m = np.clip(np.asarray(match, dtype=np.int64), 1, self.copy.shape[1]) - 1
        j = np.clip(np.asarray(offset, dtype=np.int64), 1, self.copy.shape[2]) - 1
        return self.copy[r, m, j]  # type: ignore[no-any-return]

    @classmethod
    def uniform(cls, h: int, head_q: float = 0.5, copy_q: float = 0.6) -> AcceptanceTables:
        """Uncalibrated stand-in tables: a head token's rate grows with its head probability
        (``head_q`` at the top bin, halved per bin below), a copy's is ``copy_q``. For models
        that were never calibrated (tests, new heads); measure real ones with
        :func:`~blockdraft.oracle.fit_acceptance`."""
        nb = len(HEAD_EDGES) + 1
        rates = head_q * 0.5 ** np.arange(nb)[::-1]
        heads = np.broadcast_to(rates[None, :, None], (max(h - 1, 1), nb, len(LM_EDGES) + 1))
        return cls(heads=heads.copy(), marginal=heads[:, :, 0].copy(),
                   copy=np.full((3, 4, 16), copy_q) * (0.5 ** np.arange(3))[:, None, None],
                   signature="uniform")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (:meth:`from_dict` reads it back)."""
        return {"format": "blockdraft-acceptance", "version": 2, "signature": self.signature,
                "head_edges": list(self.head_edges), "lm_edges": list(self.lm_edges),
                "heads": np.round(self.heads, 6).tolist(),
                "marginal": np.round(self.marginal, 6).tolist(),
                "copy": np.round(self.copy, 6).tolist()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AcceptanceTables:
        """The tables :meth:`to_dict` wrote.

        Raises:
            DraftError: not such a dict, or tables :class:`AcceptanceTables` refuses.
        """
        if not isinstance(data, dict) or data.get("format") != "blockdraft-acceptance":
            raise DraftError("not blockdraft acceptance tables (format "
                             "'blockdraft-acceptance' expected)")
        try:
            return cls(heads=np.asarray(data["heads"]), marginal=np.asarray(data["marginal"]),
                       copy=np.asarray(data["copy"]),
                       head_edges=tuple(data["head_edges"]), lm_edges=tuple(data["lm_edges"]),
                       signature=str(data.get("signature", "")))
        except (KeyError, TypeError, ValueError) as e:
            raise DraftError(f"acceptance tables: {e}") from e

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the tables as JSON (atomically)."""
        out = Path(path)
        write_text_atomic(out, json.dumps(self.to_dict()) + "\n")
        return out

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> AcceptanceTables:
        """Read tables :meth:`save` wrote.

        Raises:
            DraftError: a missing or unreadable file, or not such tables (the path named).
        """
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise DraftError(f"cannot read acceptance tables {path}: {e}") from e
        try:
            return cls.from_dict(data)
        except DraftError as e:
            raise DraftError(f"{path}: {e}") from e
