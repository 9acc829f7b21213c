"""A whole decode step on the device (issue 41, items 1 and 2): the static runtime's verification
forward, the verdict, the accepted rows' compaction and the next draft, with one small row read
back.

:class:`DeviceDecoder` decodes a prompt on a :class:`~.static.StaticKVModel` with a device
drafting strategy (:class:`~.device_drafters.DeviceStrategy`): a fixed topology
(:class:`~.device_tree.StaticTree`: a chain, a static Medusa tree, or the root alone, greedy),
the cost-aware tree with ``N`` fixed (its topology rewritten every step, its size static),
prompt lookup, or the heads' chain and lookup's copy in one trie. Its state lives in tensors on
the model's device between steps: the committed length ``L`` (0-d), the next tree's tokens
``[T]`` (the root the certain token; ``-1`` a padding node) and topology, the committed text
when the strategy reads it, the EOS id (0-d), beside the runtime's key/value buffer. A step
reads and writes only them::

    positions = L + depths;  bias [1, 1, T, R] from L and the tree's mask   # on the device
    x = forward(tokens, positions, bias, start=L)        # the runtime's static forward
    greedy = argmax(base head at every node)             # [T]
    verdict = tree_verdict(tree, tokens, greedy, eos)    # device_accept: n, winner, path
    move rows L + path -> L + 0..D  (a tree; a chain's rows are already in place)
    text[L + 1 ..] <- the accepted tokens and the next certain one (when it is kept)
    out <- [n, winner, yielded tokens [D + 1], tokens [T], parents [T], n per node [T]]
    L += n + 1
    the next draft at the winner (device_drafters.NextDraft): its Medusa heads (ResBlocks,
        projection onto the shortlist; every head, in the shapes the host path computes
        them) when the strategy reads them, then its tokens (and topology), the root the base
        head's argmax there

Everything in it has a static shape and no host synchronisation and no Python branch on a
tensor's value, for a given strategy and ``R`` (the rows attended, :meth:`StaticKVModel.
attended`, which the host knows: it reads ``n`` every step). On a CUDA device (``graphs``, the
default there) each ``(strategy, R)`` step is captured once as one CUDA graph
(:func:`~.cuda_graphs.capture`; its warm-ups put the state back) and a step is one replay, one
asynchronous copy of the output row into pinned memory and one wait for it; elsewhere the same
step runs eagerly (``graphs=False``: what the CPU tests run). The host's work per step is that
row: the tokens it yields, the stop conditions (EOS, ``max_new_tokens``) and the next ``R``.
When the tree no longer fits (the buffer's capacity, the model's context), the steps left are
greedy (the root alone, ``T = 1``), as exact.

The verdict is the exact criterion's, so the output equals greedy decoding's with head 1 where
the forward is (float32; bfloat16 as lossless as the host's path), and equals decode's host
path with the same drafter token for token (tested on CPU; a padding node is never accepted
and the records drop it). Heads: Medusa heads (the adapter's modules, on the model's device);
prefix-conditioned heads are refused for the strategies that read heads (their chain reads the
shortlist from the host: the host path drafts for them); prompt lookup reads none.

Public surface:
    decoder(model, strategy) -> DeviceDecoder      the model's decoder of a strategy (or a
                                                   StaticTree), made once
    DeviceDecoder(model, strategy, graphs=None)
        .decode(prompt, max_new_tokens, eos_id=None) -> DeviceRun
        .prefill(prompt, eos_id=None) -> certain token;  .step(which) -> output row (host)
        .graphs (whether steps are captured), .captured ((strategy name, rows) pairs)
    DeviceRun           frozen: tokens, steps (DeviceStepRecord), prefill_s, stopped
    DeviceStepRecord    frozen: name, tokens, parents, winner, n, accept_lengths, new,
                        launch_s, wait_s, host_s;  .draft_tree() -> DraftTree
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from blockdraft.core.tree import DraftTree
from blockdraft.models.errors import ModelError
from blockdraft.models.heads.torch_backend import TorchMedusa
from blockdraft.models.runtimes.cuda_graphs import capture
from blockdraft.models.runtimes.device_accept import tree_verdict
from blockdraft.models.runtimes.device_drafters import DeviceStrategy, NextDraft
from blockdraft.models.runtimes.device_tree import StaticTree, TreeTensors

if TYPE_CHECKING:
    from blockdraft.models.runtimes.static import StaticKVModel


@dataclass(frozen=True, eq=False)
class DeviceStepRecord:
    """One device step, as the host read it.

    Attributes:
        name: the strategy's (``"greedy"`` for a greedy step).
        tokens: int64 ``[N]``, the tree's tokens (the root the step's certain token; padding
            dropped).
        parents: int64 ``[N]``, its topology (``-1`` the root's).
        winner: the accepted node; n: accepted draft tokens (its depth).
        accept_lengths: ``n`` of every root-to-leaf path (leaves in node order).
        new: the tokens the step yielded (``d_2 .. d_{1+n}``, the next certain token), cut
            after EOS and at ``max_new_tokens``.
        launch_s: wall seconds launching the step (a graph's replay; eagerly: the step).
        wait_s: wall seconds until its output row was on the host.
        host_s: wall seconds of the host's own work in the step (choosing the topology and
            rows, reading the row, the stop conditions).
    """

    name: str
    tokens: np.ndarray
    parents: np.ndarray
    winner: int
    n: int
    accept_lengths: tuple[int, ...]
    new: tuple[int, ...]
    launch_s: float
    wait_s: float
    host_s: float

    def draft_tree(self) -> DraftTree:
        """The tree verified, as a :class:`DraftTree` (scores zero)."""
        return DraftTree(tokens=self.tokens, parents=self.parents,
                         scores=np.zeros(self.tokens.size))


@dataclass(frozen=True, eq=False)
class DeviceRun:
    """One prompt decoded on the device.

    Attributes:
        tokens: the generated ids (EOS included when it stopped the decode).
        steps: one record per verification step.
        prefill_s: wall seconds of the prompt's forward and the first draft.
        stopped: ``"eos"`` or ``"max_new_tokens"``.
    """

    tokens: list[int]
    steps: tuple[DeviceStepRecord, ...]
    prefill_s: float
    stopped: str


@dataclass(frozen=True, eq=False)
class _Plan:
    """One step kind's topology and its output row (on the device, and its host copy)."""

    name: str
    size: int  # T
    max_depth: int  # D
    is_chain: bool  # no rows to move
    tensors: TreeTensors  # leaves: every node
    offsets: torch.Tensor  # int64 [D + 1]: 1 .. D + 1, the text's rows after L
    out: torch.Tensor  # int64 [W]
    host: torch.Tensor  # int64 [W], pinned on CUDA
    drafts: bool  # whether its steps draft with the strategy (not greedy)


class DeviceDecoder:
    """Decode with ``strategy`` on ``model``, a step at a time on the device (module docstring);
    mutable: the state of the decode in progress and the graphs captured.

    Args:
        model: a :class:`~.static.StaticKVModel` with Medusa heads (any heads for greedy and
            prompt lookup).
        strategy: what every step drafts (:class:`~.device_drafters.DeviceStrategy`), or a
            :class:`StaticTree` (its fixed topology; its depth at most ``h - 1``, its ranks
            below the heads' columns).
        graphs: capture each step as a CUDA graph (default: the model's ``graphs``).

    Raises:
        ModelError: heads the device does not draft with, a tree deeper than the heads or
            wider than their columns, or graphs off a CUDA device.
    """

    def __init__(self, model: StaticKVModel, strategy: DeviceStrategy | StaticTree,
                 graphs: bool | None = None) -> None:
        self.model = model
        self.strategy = s = (strategy if isinstance(strategy, DeviceStrategy)
                             else DeviceStrategy.static(strategy))
        dev = model.device
        self.graphs = model.graphs if graphs is None else bool(graphs)
        if self.graphs and dev.type != "cuda":
            raise ModelError(f"CUDA graphs need a CUDA device; the model is on {dev}: pass "
                             "graphs=False")
        self._ids: torch.Tensor | None = None
        self._projection: tuple[torch.Tensor, torch.Tensor | None] | None = None
        if s.heads:
            self._bind_heads(s)
        self.length = torch.zeros((), dtype=torch.int64, device=dev)  # (): L
        self.eos = torch.full((), -1, dtype=torch.int64, device=dev)  # (): -1, none
        self.next = NextDraft(s, dev, model.capacity)
        self.draft = self.next.tokens  # (T,): the next tree's tokens
        greedy = StaticTree.greedy()
        self._plans = {
            "main": self._plan(s.name, s.size, s.max_depth, s.is_chain, self.next.topology,
                               drafts=True),
            "greedy": self._plan("greedy", 1, 0, True,
                                 NextDraft(DeviceStrategy.static(greedy), dev, 0).topology,
                                 drafts=False)}
        self._rows = 0  # the committed rows (L) as the host knows them (it reads n)
        self._graphs: dict[tuple[str, int], Any] = {}
        self._pool: Any = None
        self._event = torch.cuda.Event() if dev.type == "cuda" else None

    def __repr__(self) -> str:
        return f"DeviceDecoder({self.strategy.name!r}, graphs={self.graphs})"

    @property
    def tree(self) -> StaticTree:
        """The strategy's topology (a static strategy's; a rated one's candidates)."""
        return self.strategy.tree

    @property
    def captured(self) -> tuple[tuple[str, int], ...]:
        """The ``(strategy name, rows attended)`` steps captured so far."""
        return tuple(sorted((self._plans[k].name, r) for k, r in self._graphs))

    def _bind_heads(self, strategy: DeviceStrategy) -> None:
        """Check the heads draft ``strategy`` and keep their projection on the device."""
        rule = self.model.heads_rule
        tree = strategy.tree
        if not isinstance(rule.backend, TorchMedusa):
            raise ModelError(
                f"the device step drafts with Medusa heads; these are {rule.kind!r} heads: "
                "decode them on the host path (StaticKVModel(..., device_steps=False))")
        if strategy.depth > self.model.h - 1:
            raise ModelError(f"{tree.name} reaches depth {strategy.depth}; the model has "
                             f"{self.model.h - 1} heads after the base: a shallower tree")
        heads = rule.backend.heads
        if heads.projections is None:
            weight, bias, ids = rule.backend.shortlist_projection()
            self._projection = (weight, bias)
            self._ids = None if ids is None else ids.to(self.model.device)
        columns = (int(self._projection[0].shape[0]) if self._projection is not None
                   else int(self.model.config.vocab_size))
        if strategy.k > columns:
            raise ModelError(f"{tree.name} reads rank {strategy.k - 1} of heads over {columns} "
                             "columns: fewer ranks, or a wider shortlist")

    def _plan(self, name: str, size: int, depth: int, chain: bool, tensors: TreeTensors,
              drafts: bool) -> _Plan:
        dev = self.model.device
        width = 2 + (depth + 1) + 3 * size
        out = torch.zeros(width, dtype=torch.int64, device=dev)
        host = torch.zeros(width, dtype=torch.int64, pin_memory=dev.type == "cuda")
        return _Plan(name, size, depth, chain, tensors,
                     torch.arange(1, depth + 2, device=dev), out, host, drafts)

    # ---- what runs on the device (captured per topology and rows) ------------------------------

    def _bias(self, tree: TreeTensors, t: int, rows: int) -> torch.Tensor:
        """``[1, 1, T, R]`` in the model's dtype: 0 where node ``i`` reads row ``c`` (the
        committed rows, its ancestors among the new ones, within a sliding window), the
        dtype's minimum elsewhere (:meth:`Step.bias <blockdraft.models.step.Step.bias>`'s
        values)."""
        length = self.length
        col = torch.arange(rows, device=length.device)  # (R,)
        rel = col - length  # (R,): the new node a row holds, when 0 <= rel < T
        inside = (rel >= 0) & (rel < t)
        node = rel.clamp(0, t - 1)  # (R,)
        allowed = (col < length)[None, :] | (inside[None, :] & tree.mask[:, node])  # (T, R)
        window = self.model.window
        if window is not None:
            query = length + tree.depths  # (T,)
            keys = torch.where(inside, length + tree.depths[node], col)  # (R,)
            allowed = allowed & ((query[:, None] - keys[None, :]) < window)
        dtype = self.model.buffer.dtype
        bias = torch.zeros((t, rows), dtype=dtype, device=length.device)
        return bias.masked_fill(~allowed, torch.finfo(dtype).min)[None, None]  # (1, 1, T, R)

    def _base(self, x: torch.Tensor) -> torch.Tensor:
        """The base head's raw logits at ``x [M, d]``: ``[M, V]`` (the verifier's
        projection)."""
        model = self.model
        return model.project(model.head_states(x, heads=1))[:, 0]  # type: ignore[no-any-return]

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        """The logits of the heads guessing depths ``1 .. D`` at ``x [1, d]``: ``[D, C]``."""
        backend = self.model.heads_rule.backend
        states = backend.states(x, self.model.h - 1)  # (1, h - 1, d): every head, as the host
        if self._projection is None:  # the heads' own projections, over V
            logits = backend.heads.logits(states)[0]  # (h - 1, V)
        else:
            logits = nn.functional.linear(states[0], *self._projection)  # (h - 1, C)
        return logits[: self.strategy.depth]  # type: ignore[no-any-return]

    def _draft_at(self, plan: _Plan, x: torch.Tensor, base: torch.Tensor) -> None:
        """The next tree from the state ``x [1, d]`` and the base head's logits ``base [1,
        V]`` at the accepted node (a greedy step's: its root alone)."""
        certain = base.argmax(-1)  # (1,)
        if not plan.drafts:
            self.next.root(certain, self.length)
            return
        heads = self._heads(x) if self.strategy.heads else None
        self.next.draft(certain, base[0], heads, self._ids, self.length)

    def _compact(self, path: torch.Tensor) -> None:
        """Move the accepted path's rows ``L + path`` to ``L + 0 .. D`` in every layer's
        keys and values (rows past ``L + n`` get copies they never use)."""
        store = self.model.buffer.storage  # (layers, 2, 1, n_kv, C, hd)
        offsets = torch.arange(path.numel(), device=path.device)
        rows = store.index_select(4, self.length + path)  # (layers, 2, 1, n_kv, D + 1, hd)
        store.index_copy_(4, self.length + offsets, rows)

    def _run(self, plan: _Plan, rows: int) -> None:
        """One step of ``plan``'s topology attending ``rows`` rows (module docstring)."""
        tree, t = plan.tensors, plan.size
        tokens = self.draft[:t]  # (T,): -1 a padding node
        start = self.length
        bias = self._bias(tree, t, rows)  # (1, 1, T, R)
        x = self.model.static_forward(tokens.clamp(min=0)[None], (start + tree.depths)[None],
                                      bias, start)[0]  # (T, d)
        base = self._base(x)  # (T, V)
        verdict = tree_verdict(tree, tokens, base.argmax(-1), self.eos)
        if not plan.is_chain:
            self._compact(verdict.path)
        if self.next.text is not None:  # the accepted tokens and the next certain one
            self.next.text.index_copy_(0, start + plan.offsets, verdict.tokens)
        plan.out.copy_(torch.cat((verdict.n[None], verdict.winner[None], verdict.tokens,
                                  tokens, tree.parents, verdict.leaf_lengths)))
        self.length.add_(verdict.n + 1)
        at = verdict.winner[None]  # (1,)
        self._draft_at(plan, x.index_select(0, at), base.index_select(0, at))

    # ---- the host's side -------------------------------------------------------------------

    @torch.no_grad()
    def prefill(self, prompt: list[int], eos_id: int | None = None) -> int:
        """The prompt's forward (the runtime's own), the state set for its first step and its
        first draft made; returns the certain token ``d_1``."""
        model = self.model
        ids = torch.tensor([prompt], dtype=torch.int64, device=model.device)  # (1, P)
        x, _ = model.hidden(ids)  # (1, P, d)
        model.buffer.begin_write(len(prompt))  # the decode owns the rows after the prompt
        if self.next.text is not None:
            self.next.text[: len(prompt)].copy_(ids[0])
        self.length.fill_(len(prompt))
        self._rows = len(prompt)
        self.eos.fill_(-1 if eos_id is None else int(eos_id))
        last = x[0, -1:]  # (1, d)
        self._draft_at(self._plans["main"], last, self._base(last))
        return int(self.draft[0])

    @torch.no_grad()
    def step(self, which: str = "main") -> list[int]:
        """One step of the ``"main"`` topology or ``"greedy"`` after :meth:`prefill` or the
        last step: launched, and its output row read back (``[n, winner, yielded [D + 1],
        tokens [T], parents [T], n per node [T]]``)."""
        plan = self._plans[which]
        self._launch(which, self.model.attended(self._rows + plan.size))
        row = self._read(plan)
        self._rows += row[0] + 1
        return row

    def _launch(self, which: str, rows: int) -> None:
        plan = self._plans[which]
        if not self.graphs:
            self._run(plan, rows)
            return
        graph = self._graphs.get((which, rows))
        if graph is None:
            graph = self._capture(which, rows)
        graph.replay()

    def _capture(self, which: str, rows: int) -> Any:
        """Capture ``which``'s step attending ``rows`` (untested without a GPU): its warm-ups
        run real steps, so the length and the draft (tokens, topology) are put back after each
        (the text rows they wrote are written again by the replay, before any is read)."""
        plan = self._plans[which]
        state = (self.length, *self.next.state)
        saved = [t.clone() for t in state]

        def reset() -> None:
            for t, kept in zip(state, saved, strict=True):
                t.copy_(kept)

        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph, _ = capture(lambda: self._run(plan, rows), self._pool, reset)
        self._graphs[(which, rows)] = graph
        return graph

    def _read(self, plan: _Plan) -> list[int]:
        """The output row on the host: copied asynchronously into pinned memory, then waited
        for (CUDA); a copy elsewhere."""
        if self._event is not None:
            plan.host.copy_(plan.out, non_blocking=True)
            self._event.record()
            self._event.synchronize()
        else:
            plan.host.copy_(plan.out)
        return plan.host.tolist()  # type: ignore[no-any-return]

    def _fits(self, plan: _Plan) -> bool:
        """Whether a step of ``plan`` after the committed rows fits the buffer (its nodes, and
        the rows its accepted path may move to) and the model's context."""
        limit = self.model.max_seq_len
        return (self._rows + max(plan.size, plan.max_depth + 1) <= self.model.capacity
                and (limit is None or self._rows + plan.max_depth + 1 <= limit))

    @torch.no_grad()
    def decode(self, prompt: list[int], max_new_tokens: int, eos_id: int | None = None
               ) -> DeviceRun:
        """Decode one checked prompt (``max_new_tokens >= 1``; the prompt and the tokens fit
        the model's context): :class:`DeviceRun`.

        Raises:
            ModelError: a sequence the static cache cannot hold (its ``capacity``).
        """
        start = time.perf_counter()
        tokens = [self.prefill(prompt, eos_id)]
        prefill_s = time.perf_counter() - start
        raw: list[tuple[str, list[int], float, float, float]] = []
        while len(tokens) < max_new_tokens and (eos_id is None or tokens[-1] != eos_id):
            begin = time.perf_counter()
            which = "main" if self._fits(self._plans["main"]) else "greedy"
            if which == "greedy" and not self._fits(self._plans["greedy"]):
                raise ModelError(
                    f"the static cache holds {self.model.capacity} rows; this decode needs "
                    f"{self._rows + 1}: load the model with a larger capacity")
            plan = self._plans[which]
            rows = self.model.attended(self._rows + plan.size)
            launch = time.perf_counter()
            self._launch(which, rows)
            launched = time.perf_counter()
            row = self._read(plan)
            read = time.perf_counter()
            n = row[0]
            self._rows += n + 1
            new = row[2: 3 + n][: max_new_tokens - len(tokens)]
            if eos_id is not None and eos_id in new:
                new = new[: new.index(eos_id) + 1]
            tokens.extend(new)
            raw.append((which, row, launched - launch, read - launched,
                        time.perf_counter() - begin - (read - launch)))
        stopped = "eos" if eos_id is not None and tokens[-1] == eos_id else "max_new_tokens"
        steps, at = [], 1
        for which, row, launch_s, wait_s, host_s in raw:
            steps.append(self._record(self._plans[which], row, tokens[at: at + row[0] + 1],
                                      launch_s, wait_s, host_s))
            at += row[0] + 1
        return DeviceRun(tokens=tokens, steps=tuple(steps), prefill_s=prefill_s,
                         stopped=stopped)

    @staticmethod
    def _record(plan: _Plan, row: list[int], new: list[int], launch_s: float, wait_s: float,
                host_s: float) -> DeviceStepRecord:
        """The step's record from its output row (padding, the last nodes, dropped)."""
        t, at = plan.size, 2 + plan.max_depth + 1
        tokens = np.asarray(row[at: at + t], dtype=np.int64)
        count = int((tokens >= 0).sum())
        parents = np.asarray(row[at + t: at + t + count], dtype=np.int64)
        parents[0] = -1
        tree = DraftTree(tokens=tokens[:count], parents=parents, scores=np.zeros(count))
        lengths = np.asarray(row[at + 2 * t: at + 2 * t + count])[tree.leaves()]
        return DeviceStepRecord(
            name=plan.name, tokens=tree.tokens, parents=tree.parents, winner=row[1], n=row[0],
            accept_lengths=tuple(int(v) for v in lengths), new=tuple(new), launch_s=launch_s,
            wait_s=wait_s, host_s=host_s)


def decoder(model: StaticKVModel, strategy: DeviceStrategy | StaticTree) -> DeviceDecoder:
    """The :class:`DeviceDecoder` of ``strategy`` (or a static tree) on ``model``, made at its
    first use and kept in ``model.decoders`` (its captured graphs with it) until the model's
    ``use_body``."""
    if not isinstance(strategy, DeviceStrategy):
        strategy = DeviceStrategy.static(strategy)
    found = model.decoders.get(strategy.key)
    if found is None:
        found = model.decoders[strategy.key] = DeviceDecoder(model, strategy)
    return found  # type: ignore[no-any-return]
