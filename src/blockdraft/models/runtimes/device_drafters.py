"""What a device step drafts for the next one (issue 41, item 2): the strategies the device step
(:mod:`.device_step`) runs, and the draft state they keep on the device.

A :class:`DeviceStrategy` names one, by kind:

- ``static``: a fixed topology (:class:`~.device_tree.StaticTree`): greedy (the root alone),
  the heads' chain (vanilla BPD), a static Medusa tree; tokens from the heads' argmax or top-k
  (:func:`~.device_drafts.chain_draft`, :func:`~.device_drafts.tree_draft`);
- ``rated``: the cost-aware tree with ``N`` fixed: a static candidate topology's tokens from the
  heads' top-k, each candidate rated by the acceptance tables (its head log-probability, and an
  n-gram LM's log-probability of its token given the text and its root path when the strategy
  has an LM: :mod:`.device_ngram`), the ``N`` best by reach kept
  (:func:`~.device_rates.rated_draft`): the size is static, the topology changes every step;
- ``lookup``: prompt lookup alone over the text on the device (:func:`~.device_drafts.
  lookup_draft`): a chain of ``1 + max(lengths)`` slots, its copy's tokens real and ``-1``
  after (a padding node is never accepted);
- ``chain+lookup``: the heads' chain and the lookup copy merged into one trie
  (:func:`~.device_drafts.merge_copy`): the host's vanilla + prompt lookup.

:class:`NextDraft` holds a strategy's state on the model's device (mutable): the next tree's
tokens ``[T]``, its topology (fixed tensors; for ``rated`` and ``chain+lookup``, buffers that
each draft rewrites and the next step reads), the committed text (for ``lookup`` and an LM:
a buffer of ``C`` rows, the length the decoder's own 0-d tensor) and the tables and LM moved to
the device once. :meth:`NextDraft.draft` writes the next tree with static shapes and no host
synchronisation (what a CUDA graph captures).

Public surface:
    KINDS
    DeviceStrategy       frozen: kind, tree, nodes, tables, lm, origin, min_match, max_match,
                         lengths, name
        .static(tree), .rated(candidates, nodes, tables, lm=None, origin=(), name=""),
        .lookup(min_match=1, max_match=4, lengths=(2, 6, 10), name=""),
        .chain_lookup(depth, min_match=1, max_match=4, lengths=(2, 6, 10), name="")
        .size (T), .max_depth, .is_chain, .dynamic, .heads, .depth (heads read), .text, .key
    NextDraft(strategy, device, rows)      mutable: .tokens [T], .topology, .text
        .draft(certain [1], base [V], heads [D, C] | None, ids, length [])
        .root(certain [1], length [])          a greedy step's: the root alone
        .state                                 the tensors a draft writes
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from blockdraft.models.errors import ModelError
from blockdraft.models.runtimes.device_drafts import (
    chain_draft,
    lookup_draft,
    merge_copy,
    tree_draft,
)
from blockdraft.models.runtimes.device_ngram import HistoryIndex, node_scores
from blockdraft.models.runtimes.device_rates import RateTensors, rated_draft
from blockdraft.models.runtimes.device_tree import StaticTree, TreeTensors, tensors_of

KINDS = ("static", "rated", "lookup", "chain+lookup")
"""The strategies a device step drafts with (see the module docstring)."""


def _digest(tables: Any) -> str:
    """What identifies acceptance tables by their contents ("" for none)."""
    if tables is None:
        return ""
    h = hashlib.sha256()
    for name in ("heads", "marginal", "copy", "head_edges", "lm_edges"):
        h.update(np.asarray(getattr(tables, name), dtype=np.float64).tobytes())
    return h.hexdigest()


@dataclass(frozen=True, eq=False)
class DeviceStrategy:
    """One device drafting strategy (see the module docstring).

    Attributes:
        kind: one of :data:`KINDS`.
        tree: ``static``: the topology; ``rated``: the candidates; ``chain+lookup``: the
            heads' chain; ``lookup``: the chain of its slots.
        nodes: ``rated``: ``N``, the nodes kept (else the tree's size).
        tables: ``rated``: the acceptance tables (any object with ``heads``, ``marginal``,
            ``copy``, ``head_edges``, ``lm_edges``: :class:`~blockdraft.drafts.
            AcceptanceTables`), read once onto the device.
        lm: ``rated``: a zero-argument callable giving the n-gram table (its ``.to(device)``
            a :class:`~.device_ngram.DeviceLM`), called once per decoder; or None.
        origin: host objects the strategy stands for (the LM, ...): kept alive with it, and
            their identities key the decoder of the strategy (the tables: their contents).
        min_match, max_match, lengths: prompt lookup's settings (``lookup``,
            ``chain+lookup``).
        name: a label for records.
    """

    kind: str
    tree: StaticTree
    nodes: int = 0
    tables: Any = None
    lm: Callable[[], Any] | None = None
    origin: tuple[Any, ...] = ()
    min_match: int = 1
    max_match: int = 4
    lengths: tuple[int, ...] = (2, 6, 10)
    name: str = ""
    _key: tuple[Any, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ModelError(f"unknown device strategy {self.kind!r}; one of {', '.join(KINDS)}")
        lengths = tuple(int(x) for x in self.lengths)
        if (not 1 <= self.min_match <= self.max_match or not lengths or min(lengths) < 1):
            raise ModelError(f"prompt lookup needs 1 <= min_match <= max_match and lengths "
                             f">= 1, got {self.min_match}, {self.max_match}, {lengths}")
        if self.kind == "rated":
            if self.tables is None:
                raise ModelError("a rated device tree needs its acceptance tables (tables=...)")
            if not 1 <= self.nodes <= self.tree.size:
                raise ModelError(f"a rated tree keeps 1 to {self.tree.size} of its candidates, "
                                 f"got N = {self.nodes}: a larger candidate tree or a smaller N")
        object.__setattr__(self, "lengths", lengths)
        object.__setattr__(self, "name", self.name or self.tree.name)
        object.__setattr__(self, "_key", (
            self.kind, self.tree.key, self.nodes, _digest(self.tables), self.lm is not None,
            tuple(id(o) for o in self.origin), self.min_match, self.max_match, lengths))

    @classmethod
    def static(cls, tree: StaticTree) -> DeviceStrategy:
        """A fixed topology (greedy, the heads' chain, a static Medusa tree)."""
        return cls("static", tree)

    @classmethod
    def rated(cls, candidates: StaticTree, nodes: int, tables: Any,
              lm: Callable[[], Any] | None = None, origin: Sequence[Any] = (), name: str = ""
              ) -> DeviceStrategy:
        """The cost-aware tree with ``nodes`` fixed over ``candidates``."""
        return cls("rated", candidates, nodes=int(nodes), tables=tables, lm=lm,
                   origin=tuple(origin),
                   name=name or f"rated tree N={nodes} of {candidates.size}")

    @classmethod
    def lookup(cls, min_match: int = 1, max_match: int = 4,
               lengths: Sequence[int] = (2, 6, 10), name: str = "") -> DeviceStrategy:
        """Prompt lookup alone."""
        return cls("lookup", StaticTree.chain(max(lengths)), min_match=min_match,
                   max_match=max_match, lengths=tuple(lengths), name=name or "lookup")

    @classmethod
    def chain_lookup(cls, depth: int, min_match: int = 1, max_match: int = 4,
                     lengths: Sequence[int] = (2, 6, 10), name: str = "") -> DeviceStrategy:
        """The heads' chain of ``depth`` tokens and prompt lookup's copy in one trie."""
        return cls("chain+lookup", StaticTree.chain(depth), min_match=min_match,
                   max_match=max_match, lengths=tuple(lengths),
                   name=name or f"chain D={depth} + lookup")

    @property
    def size(self) -> int:
        """``T``, the nodes a step verifies (padding included)."""
        if self.kind == "rated":
            return self.nodes
        if self.kind == "chain+lookup":
            return self.tree.size + max(self.lengths)
        return self.tree.size

    @property
    def max_depth(self) -> int:
        """The deepest node a step may hold."""
        if self.kind == "chain+lookup":
            return max(self.tree.max_depth, max(self.lengths))
        return self.tree.max_depth

    @property
    def dynamic(self) -> bool:
        """Whether the topology changes from step to step."""
        return self.kind in ("rated", "chain+lookup")

    @property
    def is_chain(self) -> bool:
        """Whether every step's tree is a chain in node order (no row to move)."""
        return not self.dynamic and self.tree.is_chain

    @property
    def heads(self) -> bool:
        """Whether it reads the heads after the base (every kind but greedy and lookup)."""
        return self.kind != "lookup" and self.tree.size > 1

    @property
    def depth(self) -> int:
        """The heads after the base it reads (0: none)."""
        return self.tree.max_depth if self.heads else 0

    @property
    def k(self) -> int:
        """The top-k width its ranks read."""
        return self.tree.k

    @property
    def text(self) -> bool:
        """Whether it reads the committed text (prompt lookup, an LM)."""
        return self.kind in ("lookup", "chain+lookup") or self.lm is not None

    @property
    def key(self) -> tuple[Any, ...]:
        """What identifies it (its decoder's key): kind, topology, settings, its tables'
        contents and its origin objects' identities."""
        return self._key


class NextDraft:
    """A strategy's draft state on one device (see the module docstring); mutable: each
    :meth:`draft` rewrites it.

    Args:
        strategy: the strategy.
        device: the model's device.
        rows: the committed text's room (the model's capacity; the buffer holds a step's
            tokens past it).

    Attributes:
        tokens: int64 ``[T]``, the next tree's tokens (``-1``: padding).
        topology: the next tree's :class:`TreeTensors` (for a dynamic strategy, views of the
            buffers each draft rewrites; ``leaves`` every node).
        text: int64 ``[rows + max_depth + 2]``, the committed text and the certain token, or
            None (a strategy that does not read it).
    """

    def __init__(self, strategy: DeviceStrategy, device: torch.device, rows: int) -> None:
        self.strategy = s = strategy
        t = s.size
        self.tokens = torch.zeros(t, dtype=torch.int64, device=device)
        self.text = (torch.zeros(rows + s.max_depth + 2, dtype=torch.int64, device=device)
                     if s.text else None)
        self._candidates: TreeTensors | None = None
        self._rates: RateTensors | None = None
        self._lm: Any = None
        self._history: HistoryIndex | None = None
        if s.kind == "rated":
            self._candidates = s.tree.on(device)
            self._rates = RateTensors.of(s.tables, device)
            if s.lm is not None:
                self._lm = s.lm().to(device)
                self._history = HistoryIndex.of(s.tree, int(self._lm.order), device)
        if s.dynamic:
            root = torch.arange(t, device=device)
            start = tensors_of(torch.zeros(t, dtype=torch.int64, device=device),
                               (root > 0).to(torch.int64), s.max_depth)  # a star: any shape
            self.topology = TreeTensors(
                depths=start.depths.clone(), mask=start.mask.clone(),
                parents=start.parents.clone(), nonroot=start.nonroot, ranks=start.ranks,
                leaves=start.leaves, levels=start.levels.clone(), k=1)
        else:
            fixed = s.tree.on(device)
            self.topology = TreeTensors(
                depths=fixed.depths, mask=fixed.mask, parents=fixed.parents,
                nonroot=fixed.nonroot, ranks=fixed.ranks,
                leaves=torch.arange(t, device=device), levels=fixed.levels, k=fixed.k)
            self._static = fixed

    @property
    def state(self) -> tuple[torch.Tensor, ...]:
        """The tensors a draft writes (tokens; a dynamic topology's buffers)."""
        if not self.strategy.dynamic:
            return (self.tokens,)
        top = self.topology
        return (self.tokens, top.depths, top.mask, top.parents, top.levels)

    def _put(self, tokens: torch.Tensor, tree: TreeTensors) -> None:
        """Write a dynamic tree's tokens and topology into the buffers."""
        top = self.topology
        self.tokens.copy_(tokens)
        top.depths.copy_(tree.depths)
        top.mask.copy_(tree.mask)
        top.parents.copy_(tree.parents)
        top.levels.copy_(tree.levels)

    def root(self, certain: torch.Tensor, length: torch.Tensor) -> None:
        """The certain token (int64 ``[1]``) as the next tree's root and the text's last token
        (at ``length``): all a greedy step drafts."""
        self.tokens[:1].copy_(certain)
        if self.text is not None:
            self.text.index_copy_(0, length[None], certain)

    def draft(self, certain: torch.Tensor, base: torch.Tensor, heads: torch.Tensor | None,
              ids: torch.Tensor | None, length: torch.Tensor) -> None:
        """The next tree, into :attr:`tokens` and :attr:`topology`.

        Args:
            certain: int64 ``[1]``, the certain token (the base head's argmax).
            base: float ``[V]``, the base head's logits at the accepted node.
            heads: float ``[D, C]``, the heads guessing depths ``1 .. D`` (``D =
                strategy.depth``), or None when the strategy reads no heads.
            ids: int64 ``[C]``, the heads' columns' token ids (a shortlist), or None.
            length: int64 ``[]``, the committed text's length (the certain token's position).
        """
        s = self.strategy
        self.root(certain, length)
        if s.kind == "lookup":
            assert self.text is not None
            self.tokens.copy_(lookup_draft(self.text, length + 1, s.min_match, s.max_match,
                                           s.lengths).tokens)
            return
        if heads is None:  # greedy: the root alone
            return
        if s.kind == "static":
            if s.tree.is_chain:
                self.tokens.copy_(chain_draft(base, heads, ids).tokens)
            else:
                self.tokens.copy_(tree_draft(self._static, certain, heads, ids))
            return
        if s.kind == "chain+lookup":
            assert self.text is not None
            copy = lookup_draft(self.text, length + 1, s.min_match, s.max_match, s.lengths)
            tokens, parents, depths = merge_copy(chain_draft(base, heads, ids).tokens, copy)
            self._put(tokens, tensors_of(parents, depths, s.max_depth))
            return
        assert self._candidates is not None and self._rates is not None
        lm = None
        if self._lm is not None:
            assert self.text is not None and self._history is not None
            text, where, table = self.text, self._history, self._lm

            def lm(tokens: torch.Tensor) -> torch.Tensor:
                return node_scores(table, where, text, length, tokens)

        rated = rated_draft(self._candidates, self._rates, certain, heads, s.nodes, ids, lm)
        self._put(rated.tokens, rated.tree)
