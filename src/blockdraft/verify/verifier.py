"""The verifier: one forward pass checks every draft of a step, as a token tree.

See docs/definitions.md sec. 2 (steps 2-3) and 11. Drafts go in as one row after the shared
prefix cache: a token tree's ``N`` nodes, node ``u`` at position ``prefix + depth(u)``,
attending to the prefix and to its ancestors only, so the base head at node ``u`` gives the
greedy token after ``u``'s root path, exactly what a batch of those paths would give. A batch of
``p`` drafts is the trie case (:meth:`DraftTree.from_drafts`: the drafts merged on their common
prefixes, fewer tokens than ``p x w``); one draft is a chain, run as a plain causal forward.
The verdict (:mod:`blockdraft.verify.acceptance`) is the criterion's; only the accepted path's
keys and values are kept (a crop when they already sit in order, else moved into place), and
the next block's head logits are those at the accepted node, from the same call. A factored
model (:class:`~blockdraft.models.FactoredHeadsModel`) projects the base head at every node and
all ``h`` heads only at the accepted one. On a runtime whose tree rows are not bit-identical to
chain rows (``Capabilities.exact_trees`` False: ONNX Runtime int8 and q4) a tree's accepted path
is confirmed, under a lossless criterion, by a second forward that runs it as a chain: the
output is that runtime's greedy, at one more forward a tree step (:meth:`Verifier._confirm`).
Any other model is seen through :func:`~blockdraft.models.protocol.as_factored`. Heads that
keep a state along the text (an EAGLE draft layer: :attr:`Capabilities.stateful_heads
<blockdraft.models.capabilities.Capabilities.stateful_heads>`) are handed the accepted path of
each forward (its rows, the token after each, the first one's position) before the next
step's heads are asked for: they read every accepted position, not only the last.

Public surface:
    Verifier(model, criterion="exact")
        .topologies                                              tree topologies on the device
        .prefill(prompt_ids) -> (next_logits [h, V], past)       the prompt's serial call
        .verify_tree(past, tree, eos_id=None) -> VerifyOutcome    one call for a token tree
        .verify(past, drafts, eos_id=None) -> VerifyOutcome       one call for p drafts (their
                                                                  trie; winner = a row)
    VerifyOutcome   frozen: n, winner, tokens, next_logits, past, accept_lengths, path,
                    accepted, forward_s, accept_s
    model_device(model), synchronize(device)
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch

from blockdraft.core.batch import DraftBatch, DraftError
from blockdraft.core.tree import DraftTree
from blockdraft.models.capabilities import Capabilities, capabilities_of
from blockdraft.models.errors import ModelError
from blockdraft.models.protocol import (
    DecoderCache,
    DraftLayerModel,
    FactoredHeadsModel,
    HeadsModel,
    TreeLatticeModel,
    as_factored,
)
from blockdraft.verify.acceptance import (
    accepted_nodes,
    leaf_lengths,
    row_lengths,
    tree_winner,
)
from blockdraft.verify.criteria import Criterion
from blockdraft.verify.errors import VerifyError
from blockdraft.verify.topology import TreeTopologies


def model_device(model: Any) -> torch.device:
    """The device a model's inputs live on (``model.device``, the protocol's)."""
    return torch.device(model.device)


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work, so wall-clock timings measure it (no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass(frozen=True, eq=False)
class VerifyOutcome:
    """What one verification call decided.

    Attributes:
        n: accepted draft tokens, ``0 <= n <= depth`` (none after an EOS when the call was
            given ``eos_id``).
        winner: :meth:`Verifier.verify`: the row of the winning draft in the
            :class:`DraftBatch` (the first with the largest ``n``: the best-scored);
            :meth:`Verifier.verify_tree`: the accepted node.
        tokens: the committed tokens ``d_1 .. d_{1+n}`` (``1 + n`` ids).
        next_logits: float ``[n, V]``, raw logits of heads ``1 .. n`` at the input position
            of ``d_{1+n}`` (``n = h``, or the heads the call asked for): the next step's
            lattice; ``argmax`` of row 0 is the next certain token. Only row 0 (``[1, V]``)
            when ``next_topk`` holds the other heads.
        past: the cache of the prefix and ``tokens`` (batch 1, ``length = old + 1 + n``).
        accept_lengths: ``n`` of every draft (batch order) or of every root-to-leaf path
            (leaves in node order).
        path: the accepted path's node indices in the tree that was run (root first).
        accepted: bool per node of that tree, which nodes the criterion accepted.
        forward_s: wall seconds in the model (device synchronised): the forward over the
            nodes and the base head's projection at every node.
        accept_s: wall seconds applying the criterion and keeping the accepted path's cache.
        next_topk: ``(ids int64 [n - 1, k], scores float64 [n - 1, k])``: the Medusa heads'
            top ``k`` at that position with their natural-log probabilities (over each head's
            vocabulary: the shortlist, when the heads have one), taken by the model's runtime;
            None when ``next_logits`` holds every head (or the call asked for head 1 alone).
        heads_s: wall seconds in the model for the next step's heads (the Medusa ResBlocks,
            their projection and top-k, at the accepted node).
        next_expand: with prefix-conditioned heads, the next step's tree lattice
            (``expand(prefix) -> (ids, log-probs)``, :mod:`blockdraft.lattice.conditional`);
            None otherwise.
        calls: serial forwards of the model this verification took: 1, or 2 when a tree's
            path was confirmed by a chain forward (:meth:`Verifier._confirm`).
        next_state: the factored state ``[d]`` at the accepted node when the call deferred
            the next step's heads (``run(..., defer_heads=True)``: ``next_logits`` is the base
            head's row alone, :meth:`Verifier.next_heads` computes the rest on demand); None
            otherwise.
    """

    n: int
    winner: int
    tokens: tuple[int, ...]
    next_logits: torch.Tensor
    past: Any
    accept_lengths: tuple[int, ...]
    path: tuple[int, ...]
    accepted: tuple[bool, ...]
    forward_s: float
    accept_s: float
    next_topk: tuple[np.ndarray, np.ndarray] | None = None
    heads_s: float = 0.0
    next_expand: Any = None
    next_state: torch.Tensor | None = None
    calls: int = 1

    @property
    def next_token(self) -> int:
        """The next certain token: ``argmax`` of the base head at ``d_{1+n}``'s position."""
        return int(torch.argmax(self.next_logits[0]))


def is_chain(tree: DraftTree) -> bool:
    """Whether every node's parent is the node before it (one draft: a causal forward)."""
    return bool(np.array_equal(tree.parents, np.arange(-1, tree.num_nodes - 1)))


class Verifier:
    """Verify the drafts of a step in one forward pass and keep the best (definitions sec. 2).

    Args:
        model: a blockwise LM (see :class:`HeadsModel`; trees need ``position_ids`` and
            ``tree_mask`` in its ``hidden`` or ``heads_logits``); in eval mode.
        criterion: a :class:`Criterion` or its string form (``"exact"``, ``"topk:k=4"``, ...).
            Only ``exact`` guarantees the greedy output.

    Raises:
        VerifyError: on a model without ``heads_logits``, an invalid criterion, or one the
            model cannot satisfy (:meth:`Criterion.check_model`: ``topk`` k > V, ``min_block``
            l > h).
    """

    def __init__(self, model: HeadsModel, criterion: Criterion | str = "exact") -> None:
        try:
            self.caps: Capabilities = capabilities_of(model)
        except ModelError as e:
            raise VerifyError(str(e)) from e
        self.model = model
        self.criterion = Criterion.parse(criterion)
        self.vocab_size: int | None = self.caps.vocab_size
        self.max_seq_len: int | None = self.caps.max_seq_len
        self.h: int | None = self.caps.h
        self.criterion.check_model(self.vocab_size, self.h)
        self._heads: FactoredHeadsModel = (cast(FactoredHeadsModel, model) if self.caps.factored
                                           else as_factored(model))
        # a runtime whose tree rows are not chain rows bit for bit (ONNX Runtime int8, q4):
        # a tree's accepted path is confirmed by a chain forward (lossless criteria only)
        self._trees_ok = self.caps.exact_trees or not self.criterion.lossless
        self._topologies: TreeTopologies | None = None

    @property
    def device(self) -> torch.device:
        """The model's device; drafts are moved there."""
        return model_device(self.model)

    @property
    def topologies(self) -> TreeTopologies:
        """The tree topologies met, compiled on the model's device (:mod:`~.topology`; made
        at the first tree)."""
        if self._topologies is None:
            self._topologies = TreeTopologies(self.device)
        return self._topologies

    def __repr__(self) -> str:
        return f"Verifier({type(self.model).__name__}, criterion={str(self.criterion)!r})"

    # ---- the prompt --------------------------------------------------------------------------

    @torch.no_grad()
    def prefill(self, prompt_ids: Sequence[int] | np.ndarray) -> tuple[torch.Tensor, Any]:
        """The prompt's serial call: ``(next_logits [h, V], past)``.

        ``next_logits`` are the raw head logits at the prompt's last position (their
        ``argmax z^1`` is the first certain token ``d_1``); ``past`` is the batch-1 cache of
        the prompt. The prompt is validated by the model.
        """
        logits, _, past, _ = self.prefill_heads(prompt_ids)
        return logits, past

    @torch.no_grad()
    def prefill_heads(self, prompt_ids: Sequence[int] | np.ndarray, heads: int | None = None,
                      k: int | None = None
                      ) -> tuple[torch.Tensor, tuple[np.ndarray, np.ndarray] | None, Any, Any]:
        """The prompt's serial call, with the heads as a verification call gives them:
        ``(next_logits, next_topk, past, next_expand)`` (see :class:`VerifyOutcome`;
        ``heads`` and ``k`` as in :meth:`run`)."""
        ids = torch.as_tensor(np.asarray(prompt_ids, dtype=np.int64),
                              device=self.device).reshape(1, -1)  # (1, T)
        model = self._heads
        if self.caps.factored:
            x, past = model.hidden(ids, None)  # (1, T, d)
            base = None
            if self.caps.stateful_heads:  # a draft layer reads the prompt's positions first
                base = model.project(model.head_states(x[0, -1:], heads=1))[0, 0]  # (V,)
                self._accept_path(np.arange(ids.shape[1]), np.append(
                    np.asarray(prompt_ids, dtype=np.int64)[1:], int(base.argmax())), 0, True)
            logits, topk = self.next_heads(x[0, -1], base, heads, k)
            return logits.clone(), topk, past, self._expander(x[0, -1], k, logits[0], topk)
        kwargs = {"last_only": True} if self.caps.last_only else {}
        logits, past = self.model.heads_logits(ids, None, **kwargs)  # (1, T or 1, h, V)
        return logits[0, -1].clone(), None, past, None  # (h, V)

    def _accept_path(self, rows: np.ndarray, tokens: np.ndarray, start: int,
                     new_text: bool = False) -> None:
        """Hand heads with a state along the text (``caps.stateful_heads``) the rows of the
        last forward that were committed, the token after each and the first one's position
        (:class:`~blockdraft.models.protocol.DraftLayerModel`)."""
        model: DraftLayerModel = self._heads  # type: ignore[assignment]
        model.accept_path(rows, tokens, start, new_text)

    def _expander(self, state: torch.Tensor, k: int | None, base: torch.Tensor,
                  chain: tuple[np.ndarray, np.ndarray] | None) -> Any:
        """The next step's tree lattice at ``state [d]`` (``base [V]``: the base head's logits
        there, whose argmax is its root; ``chain``: the heads' top-k there, which prefix heads
        take along their greedy chain) when the model's heads give a tree lattice
        (``caps.tree_lattice``: ``model.expander``), else None."""
        if k is None or not self.caps.tree_lattice:
            return None
        model: TreeLatticeModel = self._heads  # type: ignore[assignment]
        return model.expander(state, k, int(base.argmax()), chain=chain)

    # ---- one verification call ---------------------------------------------------------------

    @torch.no_grad()
    def verify_tree(self, past: Any, tree: DraftTree, eos_id: int | None = None
                    ) -> VerifyOutcome:
        """Feed the tree's ``N`` nodes in one call on ``past``; accept the best path.

        Args:
            past: the batch-1 cache of the committed prefix (every token before the root).
            tree: the tree; its root is the certain token ``d_1``.
            eos_id: when given, nothing after an EOS (among ``d_2 ..``) is accepted: decoding
                ends there, so it cannot count (docs/definitions.md sec. 6). The EOS itself is
                accepted like any token.

        Returns:
            A :class:`VerifyOutcome` whose ``winner`` is the accepted node.

        Raises:
            VerifyError: on a tree that is not a :class:`DraftTree`, a token outside the
                vocabulary, a tree deeper than the model's context allows, a missing or
                multi-row ``past``.
        """
        if not isinstance(tree, DraftTree):
            raise VerifyError(f"tree must be a DraftTree, got {type(tree).__name__}")
        # the deepest node sits at position past.length + max_depth: max_depth + 1 positions
        self._check_past(
            past, call="verify_tree", tokens=tree.tokens, what="tree",
            positions=tree.max_depth + 1,
            shorten=lambda room: f"truncate it (tree.truncate({room - 1}))",
        )
        return self.run(past, tree, eos_id)

    @torch.no_grad()
    def verify(self, past: Any, drafts: DraftBatch, eos_id: int | None = None
               ) -> VerifyOutcome:
        """Feed ``p`` drafts in one call on ``past`` (as their trie); accept the best one.

        Args:
            past: the batch-1 cache of the committed prefix (every token before ``d_1``).
            drafts: ``p`` drafts ``[p, w]`` (``w`` is usually ``h``; fewer columns verify a
                shorter block) sharing the certain token ``d_1`` in column 0.
            eos_id: as in :meth:`verify_tree`.

        Returns:
            A :class:`VerifyOutcome` whose ``winner`` is the row of the winning draft and
            ``accept_lengths`` the ``n`` of every row.

        Raises:
            VerifyError: when ``drafts`` is not a :class:`DraftBatch`, the drafts disagree on
                ``d_1``, a token is outside the vocabulary, the block would run past the
                model's ``max_seq_len``, or ``past`` is missing or has more than one row.
        """
        if not isinstance(drafts, DraftBatch):
            raise VerifyError(f"drafts must be a DraftBatch, got {type(drafts).__name__}")
        first = drafts.tokens[:, 0]
        if (first != first[0]).any():
            raise VerifyError(
                f"all drafts must start with the same certain token d_1, got {first.tolist()}"
            )
        lengths = drafts.lengths
        pad = drafts.tokens < 0
        if (lengths == 0).any() or (pad != (np.arange(drafts.h) >= lengths[:, None])).any():
            raise VerifyError(
                "a draft's padding (-1) may only end it, after its certain token; got "
                f"{drafts.tokens.tolist()}")
        self._check_past(
            past, call="verify", tokens=drafts.tokens[~pad], what="draft",
            positions=int(lengths.max()),
            shorten=lambda room: f"verify at most {room} columns (drafts.tokens[:, :w])",
        )
        try:
            tree, nodes = DraftTree.trie_of(drafts)
        except DraftError as e:  # pragma: no cover - the checks above cover from_drafts'
            raise VerifyError(str(e)) from e
        out = self.run(past, tree, eos_id)
        per_row = row_lengths(tree, np.asarray(out.accepted), nodes)
        return dataclasses.replace(out, winner=per_row.index(max(per_row)),
                                   accept_lengths=per_row)

    # ---- the trusted path (the decode loop checked its values where they entered) ------------

    def run(self, past: Any, tree: DraftTree, eos_id: int | None, heads: int | None = None,
            k: int | None = None, defer_heads: bool = False) -> VerifyOutcome:
        """:meth:`verify_tree` without its checks: ``past`` is a batch-1 cache the tree fits
        after, and every token is in the vocabulary.

        Args:
            heads: how many heads the next step reads (default all ``h``; a drafter that reads
                only the certain token asks for 1 and no Medusa head is projected).
            k: the next step's lattice width, when known: a model with ``head_topk`` then
                gives the Medusa heads' top ``k`` at the accepted node (``next_topk``, taken in
                its runtime, over its heads' shortlist) instead of their logits over ``V``.
            defer_heads: leave the next step's Medusa heads to :meth:`next_heads` (the
                outcome's ``next_state``): a drafter that may not read them on the next step
                (heads on demand). Heads with a tree lattice or a state along the text are
                computed as always.
        """
        n_heads = heads
        model = self._heads
        dev = self.device
        tokens = torch.tensor(tree.tokens, device=dev)[None]  # (1, N)
        start = time.perf_counter()
        if is_chain(tree):  # one draft: a causal forward at the next positions
            x, cache = model.hidden(tokens, past)
        else:  # the topology's depths and mask, compiled once on the device
            shape = self.topologies.of(tree)
            x, cache = model.hidden(tokens, past, position_ids=shape.depths + past.length,
                                    tree_mask=shape.mask)
        states = x[0]  # (N, d): the factored state at every node
        # the base head at every node in one projection: the verdict reads it at the nodes with
        # children, the next certain token at the accepted node (a small projection reads the
        # [V, d] matrix once, whatever the rows: a second one for the accepted node alone would
        # read it again)
        base = model.project(model.head_states(states, heads=1))[:, 0]  # (N, V)
        synchronize(dev)
        forward_s = time.perf_counter() - start

        start = time.perf_counter()
        if tree.num_nodes > 1:
            accepted = accepted_nodes(tree, base, tree.parents[1:], self.criterion, eos_id)
        else:
            accepted = np.ones(1, dtype=bool)  # a lone root: nothing to check
        node = tree_winner(tree, accepted)
        path = tree.path(node)
        in_order = np.array_equal(path, np.arange(path.size))  # on the tree's first slots
        # a tree's path off its first slots, on a runtime whose tree rows are not chain rows
        # bit for bit: a chain forward of it decides (_confirm)
        confirm = not self._trees_ok and not in_order
        confirm_s = 0.0
        rows = path  # the path's rows in the last forward
        if confirm:
            confirm_start = time.perf_counter()
            path, accepted, state, base_row, new_past, rows = self._confirm(
                tree, path, accepted, cache, past.length)
            node = int(path[-1])
            confirm_s = time.perf_counter() - confirm_start
            forward_s += confirm_s  # a forward: the model's time, not the verdict's
        else:
            state, base_row = states[node], base[node]
            if in_order:  # already in order: a view
                new_past = cache.crop(past.length + path.size)
            else:
                keep = np.concatenate([np.arange(past.length), past.length + path])
                new_past = cache.gather(torch.tensor(keep, device=dev))
        synchronize(dev)
        accept_s = time.perf_counter() - start - confirm_s

        start = time.perf_counter()
        if self.caps.stateful_heads:  # every accepted position, then the next certain token
            self._accept_path(rows, np.append(tree.tokens[path[1:]], int(base_row.argmax())),
                              past.length)
        deferred = defer_heads and not (self.caps.tree_lattice or self.caps.stateful_heads)
        if deferred:  # the base head's row only: the drafter may do without the other heads
            next_logits, next_topk = base_row[None], None
        else:
            next_logits, next_topk = self.next_heads(state, base_row, n_heads, k)
        synchronize(dev)
        heads_s = time.perf_counter() - start
        return VerifyOutcome(
            n=int(path.size - 1),
            winner=node,
            tokens=tuple(int(t) for t in tree.tokens[path]),
            next_logits=next_logits,
            past=new_past,
            accept_lengths=leaf_lengths(tree, accepted),
            path=tuple(int(u) for u in path),
            accepted=tuple(bool(a) for a in accepted),
            forward_s=forward_s,
            accept_s=accept_s,
            next_topk=next_topk,
            heads_s=heads_s,
            next_expand=self._expander(state, k, next_logits[0], next_topk),
            next_state=state if deferred else None,
            calls=2 if confirm else 1,
        )

    def _confirm(self, tree: DraftTree, path: np.ndarray, accepted: np.ndarray, cache: Any,
                 length: int) -> tuple[np.ndarray, np.ndarray, torch.Tensor, torch.Tensor, Any,
                                       np.ndarray]:
        """The tree's accepted path checked by a chain forward (a runtime whose tree rows are
        not bit-identical to chain rows: ``exact_trees`` False, ONNX Runtime int8 and q4).

        A tree row whose root path sits at the tree's first slots (``0, 1, .., d``) attends to
        the same keys at the same places as a chain row, and is one bit for bit (measured on
        q4: 113 of 113 such rows equal, 184 of 185 others not). From the path's first node
        elsewhere on, its tokens are run again as one chain after the rows before it (``cache``
        cropped there; chain rows are chunk-invariant: greedy's numbers), which writes their
        cache rows in order and gives the base head's exact logits at each. The path is kept up
        to its first token the chain's argmax does not confirm (the criterion applied to the
        chain's logits, as on a chain draft); the next certain token is the chain's argmax
        there. So the output is the runtime's greedy, at one more forward of the path's
        unconfirmed tail a step (none when it lies on the first slots). Heads with a state along
        the text run the whole path again (they read one forward's rows).

        Args:
            cache: the tree forward's cache (``length`` committed rows, then the tree's).
            length: the committed rows before the tree.

        Returns:
            ``(path, accepted, state [d], base [V], cache, rows)``: the confirmed path (a
            prefix of ``path``), ``accepted`` with the unconfirmed part of the path and what
            hangs below it cleared, the state and base logits at its last node, the cache of
            the prefix and the path, and the path's rows in the last forward.
        """
        model = self._heads
        first = int(np.argmin(path == np.arange(path.size)))  # the first node off the slots
        if self.caps.stateful_heads:
            first = 0
        tokens = torch.tensor(tree.tokens[path[first:]], device=self.device)[None]
        x, tail = model.hidden(tokens, cache.crop(length + first))
        base = model.project(model.head_states(x[0], heads=1))[:, 0]  # (tail, V)
        chain = DraftTree.chain(tree.tokens[path[first:]])
        confirmed = int(accepted_nodes(chain, base, chain.parents[1:], self.criterion,
                                       None).sum())  # the chain's root and what it confirms
        keep = first + confirmed
        if keep < path.size:  # the tree's last bits accepted what greedy would not
            accepted = accepted.copy()
            cut = set(path[keep:].tolist())
            parents = tree.parents.tolist()
            for u in range(1, tree.num_nodes):
                if parents[u] in cut:
                    cut.add(u)
            accepted[sorted(cut)] = False
        return (path[:keep], accepted, x[0, confirmed - 1], base[confirmed - 1],
                tail.crop(length + keep), np.arange(keep - first))

    @torch.no_grad()
    def next_heads(self, state: torch.Tensor, base: torch.Tensor | None, heads: int | None,
                   k: int | None) -> tuple[torch.Tensor, tuple[np.ndarray, np.ndarray] | None]:
        """The heads at one position (``state [d]``; ``base [V]``: head 1's logits there, when
        already projected): ``(next_logits, next_topk)`` as :class:`VerifyOutcome` holds
        them (a deferred call's heads: ``next_heads(outcome.next_state,
        outcome.next_logits[0], heads, k)``)."""
        model = self._heads
        topk = self.caps.head_topk
        only_base = heads == 1 or self.h == 1
        if not only_base and (k is None or not topk):
            return model.project(model.head_states(state, heads=heads)), None  # (n, V)
        if base is None:
            base = model.project(model.head_states(state[None], heads=1))[0, 0]  # (V,)
        if only_base:
            return base[None], None  # (1, V)
        assert k is not None
        if self.caps.tree_lattice:  # their chain reads the base's greedy token
            tree_model: TreeLatticeModel = model  # type: ignore[assignment]
            ids, scores = tree_model.head_topk(state[None], k, heads, first=base.argmax(-1)[None])
        else:
            ids, scores = model.head_topk(state[None], k, heads)  # (1, n - 1, k)
        return base[None], (ids[0], scores[0])

    # ---- checks ------------------------------------------------------------------------------

    def _check_past(
        self,
        past: Any,
        *,
        call: str,
        tokens: np.ndarray,
        what: str,
        positions: int,
        shorten: Callable[[int], str],
    ) -> None:
        """The checks a public verification call makes of its cache and its new tokens.

        Args:
            past: the prefix cache; must be present and hold one row.
            call: the method's name, for the messages (``"verify"``, ``"verify_tree"``).
            tokens: int array of the new token ids (any shape); each in ``[0, V)``.
            what: what the tokens are, for the messages (``"draft"``, ``"tree"``).
            positions: positions the call adds after the cache; ``past.length + positions``
                must not exceed the model's ``max_seq_len``.
            shorten: ``room -> advice`` for a call that does not fit: ``room >= 1`` is the
                number of positions still free in the context.

        Raises:
            VerifyError: naming the first check that fails.
        """
        if not isinstance(past, DecoderCache):
            raise VerifyError(
                f"{call} needs the prefix cache as past (a KVCache, from prefill or the previous "
                f"call), got {type(past).__name__}"
            )
        if past.batch_size != 1:
            raise VerifyError(
                f"past must hold one row (the shared prefix), got {past.batch_size}; keep "
                "the winner's row with select_row(j)"
            )
        lo, hi = int(tokens.min()), int(tokens.max())
        if lo < 0 or (self.vocab_size is not None and hi >= self.vocab_size):
            raise VerifyError(
                f"{what} token id {lo if lo < 0 else hi} is outside the model's vocabulary "
                f"[0, {self.vocab_size})"
            )
        if self.max_seq_len is not None and past.length + positions > self.max_seq_len:
            room = self.max_seq_len - past.length
            advice = shorten(room) if room > 0 else "the context is full, nothing fits"
            raise VerifyError(
                f"{call}: {positions} new positions after {past.length} cached ones need "
                f"{past.length + positions} > max_seq_len = {self.max_seq_len}; {advice}"
            )
