"""The decode loop of blockwise parallel decoding: predict -> verify -> accept.

See docs/definitions.md sec. 2.

Public surface:
    decode(model, prompt_ids, rescorer=None, k=None, p=None, criterion="exact",
           max_new_tokens=64, eos_id=None, drafter=None, device=None, iad=False, tree=None)
        -> DecodeResult (one prompt) | list[DecodeResult] (a list of prompts)
    predict(drafter, head_logits, k, context) -> DraftBatch     step 1, no model call
    accept(outcome, remaining, eos_id) -> tuple[int, ...]        step 3, the tokens a call yields
    DecodeResult, DecodeStep                                     frozen result records

The loop reads as the paper (Stern et al. 2018, sec. 3-4) and as Medusa's ``medusa_generate``::

    head_logits, past = verifier.prefill(prompt)          # call 1: d_1 is certain
    tokens = [argmax head_logits[head 1]]
    while not done:
        tree    = propose(drafter, lattice(head_logits, k))   # p drafts -> their trie, or a tree
        outcome = verifier.run(past, tree)                    # one call with tree attention
        tokens += accept(outcome, remaining, eos_id)          # d_2..d_{1+n}, next certain token
        past, head_logits = outcome.past, outcome.next_logits

Every step verifies a token tree (docs/definitions.md sec. 11): a drafter's ``p`` drafts as their
trie (one draft: a chain, a plain causal forward), a tree builder's tree as it is; the records
keep what was proposed (a batch and its winning row, or the tree and its accepted node).

Counting (docs/definitions.md sec. 2): the prefill yields 1 token (``d_1``), every verification call
``1 + n`` (``d_2 .. d_{1+n}`` and the next certain token), cut after EOS and at
``max_new_tokens``: a step yields ``min(1 + n, remaining)`` tokens, the offline simulator's
rule. ``block_efficiency = len(tokens) / calls``.

``n`` is the offline simulator's too (docs/definitions.md sec. 6): draft tokens after a draft's EOS
are never accepted, and the last step verifies ``remaining + 1`` columns, exactly the draft tokens
that can count. One exception: when the model's context is full (``len(prompt) + max_new_tokens - 1
== max_seq_len``) the last step feeds one column fewer, so its ``n`` may be one less (same tokens,
same ``B``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast, overload

import numpy as np
import torch

from blockdraft.core.batch import DraftBatch
from blockdraft.core.checks import check_int
from blockdraft.core.errors import BlockdraftError
from blockdraft.core.tree import DraftTree
from blockdraft.drafts.iad import CombinedDrafter, InputCopyDrafter, row_source
from blockdraft.drafts.protocol import Drafter, TreeDrafter
from blockdraft.drafts.trees import TrieDrafter
from blockdraft.lattice.sausage import SausageLattice
from blockdraft.models.protocol import HeadsModel
from blockdraft.models.topk import topk_logprobs
from blockdraft.verify.criteria import Criterion
from blockdraft.verify.errors import VerifyError
from blockdraft.verify.inputs import check_decode_inputs
from blockdraft.verify.records import DecodeResult, DecodeStep
from blockdraft.verify.verifier import Verifier, VerifyOutcome, synchronize

Prompt = Sequence[int] | np.ndarray | torch.Tensor
"""One prompt: a 1-D sequence of token ids."""


# ---- the three steps -----------------------------------------------------------------------------


def head_lattice(head_logits: torch.Tensor, k: int) -> SausageLattice:
    """The step's sausage lattice, its top-``k`` taken where the logits are (one ``[h, k]``
    copy off the device instead of ``[h, V]``), ordered and tied exactly as
    :meth:`SausageLattice.from_logits` orders them (scores: ``log_softmax`` in float64).

    Args:
        head_logits: float ``[h, V]`` raw logits (a torch tensor on any device, or numpy).
        k: arcs per slot (slot 1 keeps the certain token alone).
    """
    return step_lattice(head_logits, None, k)


def step_lattice(next_logits: torch.Tensor, next_topk: tuple[np.ndarray, np.ndarray] | None,
                 k: int) -> SausageLattice:
    """The step's lattice from what a verification call (or the prefill) left: the base head's
    logits (row 0 of ``next_logits [n, V]``; slot 1 is its argmax alone) and either the other
    heads' top-k the runtime took (``next_topk``: ids and natural-log probabilities
    ``[n - 1, >= k]``) or their rows of ``next_logits``.

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


def predict(
    drafter: Drafter, head_logits: torch.Tensor, k: int, context: Sequence[int] | np.ndarray
) -> DraftBatch:
    """Step 1 (no model call): the drafts of one step.

    Args:
        drafter: the draft source.
        head_logits: float ``[h, V]``, raw head logits at the last committed position.
        k: arcs per slot of the sausage lattice (slot 1 holds the certain token alone).
        context: the committed prefix before the certain token (prompt included).

    Returns:
        The drafter's ``[p, h]`` drafts; column 0 is the certain token ``argmax z^1``.
    """
    return drafter.propose(head_lattice(head_logits, k), context)


def accept(outcome: VerifyOutcome, remaining: int, eos_id: int | None) -> tuple[int, ...]:
    """Step 3: the tokens one verification call yields.

    ``d_2 .. d_{1+n}`` of the winner (``d_1`` was yielded by the call before) and the next
    certain token ``argmax z^1`` at ``d_{1+n}``'s position, cut after the first EOS and at
    ``remaining`` tokens.
    """
    new = [*outcome.tokens[1:], outcome.next_token]
    if eos_id is not None and eos_id in new:
        new = new[: new.index(eos_id) + 1]
    return tuple(new[:remaining])


def first_columns(drafts: DraftBatch, width: int) -> DraftBatch:
    """The drafts cut to their first ``width`` tokens (the last step needs no more)."""
    if width >= drafts.h:
        return drafts
    return DraftBatch(
        tokens=drafts.tokens[:, :width],
        scores=drafts.scores,
        head_scores=drafts.head_scores,
        lm_scores=drafts.lm_scores,
        alpha=drafts.alpha,
        requested=drafts.requested,
        source=drafts.source,
    )


# ---- the loop ------------------------------------------------------------------------------------


def _block_width(h: int, remaining: int, cached: int, max_seq_len: int | None) -> int:
    """Columns to verify when ``remaining`` tokens are still wanted after ``d_1``.

    ``remaining + 1`` columns check ``d_2 .. d_{1+remaining}``, every draft token that can
    count, so ``n`` is the offline simulator's. Feeding them needs ``cached + remaining + 1``
    positions, one more than the decode was validated for: when the model's context is full,
    one column fewer is fed (then ``n <= remaining - 1``: the same tokens and ``B``, but the
    last step's ``n`` may be one less than the simulator's).
    """
    width = min(h, remaining + 1)
    if max_seq_len is not None:
        width = min(width, max_seq_len - cached)
    return width


@dataclass(frozen=True, eq=False)
class _Proposal:
    """One step's drafts as the tree the verifier runs: ``drafts`` (a drafter's batch, None
    for a tree builder) and ``tree`` (their trie, or the builder's tree), cut to ``width``."""

    tree: DraftTree
    drafts: DraftBatch | None


def _propose(
    source: Drafter | TreeDrafter, trees: bool, name: str, lattice: SausageLattice,
    context: np.ndarray, vocab_size: int | None, expand: Any = None,
) -> _Proposal:
    """Step 1 (no model call): the drafts of one step, checked where they enter the loop
    (every draft starts with the certain token; every token is in the vocabulary). A drafter
    of the tree lattice (``conditional``: prefix-conditioned heads) is given ``expand``."""
    certain = int(lattice.tokens[0, 0])
    if getattr(source, "conditional", False):
        if expand is None:
            raise VerifyError(f"{name} drafts from the tree lattice of prefix-conditioned "
                              "heads (heads train --arch prefix); this model's heads are "
                              "Medusa heads: use a HeadDrafter")
        out = source.propose_conditional(expand, lattice, context)  # type: ignore[union-attr]
        if isinstance(out, DraftTree) and int(out.tokens[0]) == certain:
            return _Proposal(tree=out, drafts=None)
        if not isinstance(out, DraftBatch) or (out.tokens[:, 0] != certain).any():
            raise VerifyError(f"{name}.propose_conditional must return drafts, or a tree, that "
                              f"start with the certain token d_1 = {certain}")
        proposal = _Proposal(tree=DraftTree.from_drafts(out), drafts=out)
    elif trees:
        tree = cast(TreeDrafter, source).propose_tree(lattice, context)
        if not isinstance(tree, DraftTree):
            raise VerifyError(f"{name}.propose_tree returned {type(tree).__name__}, not a "
                              "DraftTree")
        if int(tree.tokens[0]) != certain:
            raise VerifyError(f"{name} proposed a tree rooted at {int(tree.tokens[0])}; the "
                              f"root must be the certain token d_1 = {certain}")
        proposal = _Proposal(tree=tree, drafts=None)
    else:
        drafts = cast(Drafter, source).propose(lattice, context)
        if not isinstance(drafts, DraftBatch):
            raise VerifyError(f"{name}.propose returned {type(drafts).__name__}, not a "
                              "DraftBatch")
        if (drafts.tokens[:, 0] != certain).any():
            raise VerifyError(
                f"{name} proposed drafts starting with {drafts.tokens[:, 0].tolist()}; every "
                f"draft must start with the certain token d_1 = {certain} (the lattice's slot 1)"
            )
        proposal = _Proposal(tree=DraftTree.from_drafts(drafts), drafts=drafts)
    hi = int(proposal.tree.tokens.max())
    if vocab_size is not None and hi >= vocab_size:
        raise VerifyError(f"{name} proposed token id {hi}, outside the model's vocabulary "
                          f"[0, {vocab_size})")
    return proposal


def _done(tokens: list[int], max_new_tokens: int, eos_id: int | None) -> bool:
    return len(tokens) >= max_new_tokens or (eos_id is not None and tokens[-1] == eos_id)


def _decode_prompt(
    verifier: Verifier,
    drafter: Drafter | TreeDrafter,
    k: int,
    prompt: list[int],
    max_new_tokens: int,
    eos_id: int | None,
) -> DecodeResult:
    """BPD on one validated prompt: every step predicts drafts (a batch, or a token tree when
    ``drafter`` is a TreeDrafter), verifies them as one tree, accepts the best path."""
    wall_start = time.perf_counter()
    name = str(getattr(drafter, "name", "") or type(drafter).__name__)
    if max_new_tokens == 0:
        return DecodeResult(tokens=[], calls=0, steps=(), prompt_length=len(prompt),
                            stopped="empty", criterion=str(verifier.criterion), drafter=name,
                            prefill_s=0.0, wall_s=time.perf_counter() - wall_start)
    device = verifier.device
    trees = not callable(getattr(drafter, "propose", None))  # a TreeDrafter
    heads_needed = getattr(drafter, "heads_needed", None)  # None: every head
    start = time.perf_counter()
    head_logits, head_topk, past, expand = verifier.prefill_heads(prompt, heads_needed, k)
    synchronize(device)
    prefill_s = time.perf_counter() - start
    tokens = [int(torch.argmax(head_logits[0]))]  # d_1 is certain
    steps: list[DecodeStep] = []
    while not _done(tokens, max_new_tokens, eos_id):
        step_start = time.perf_counter()
        remaining = max_new_tokens - len(tokens)
        # 1. predict: lattice of the head logits -> drafter (rescorer) -> drafts or a tree
        lattice = step_lattice(head_logits, head_topk, k)
        lattice_s = time.perf_counter() - step_start
        proposal = _propose(drafter, trees, name, lattice, np.asarray(prompt + tokens[:-1]),
                            verifier.vocab_size, expand)
        draft_s = time.perf_counter() - step_start - lattice_s
        # 2. verify: every draft in one serial call, no deeper than can count
        width = _block_width(proposal.tree.max_depth + 1, remaining, past.length,
                             verifier.max_seq_len)
        tree = proposal.tree.truncate(width - 1)
        if proposal.drafts is None:
            outcome = verifier.run(past, tree, eos_id, heads_needed, k)
        else:
            rows = proposal.drafts.tokens[:, :width]
            outcome = verifier.run_rows(past, tree, rows, eos_id, heads_needed, k)
        # 3. accept: commit d_1 .. d_{1+n}; the next certain token comes with the same call
        new = accept(outcome, remaining, eos_id)
        steps.append(DecodeStep(
            position=len(tokens) - 1,
            drafts=proposal.drafts if proposal.drafts is not None else proposal.tree.to_drafts(),
            n=outcome.n,
            winner=outcome.winner,
            source=(proposal.tree.source if proposal.drafts is None
                    else row_source(proposal.drafts, outcome.winner)),
            accept_lengths=outcome.accept_lengths,
            tokens=new,
            forward_s=outcome.forward_s,
            draft_s=draft_s,
            other_s=max(0.0, time.perf_counter() - step_start - lattice_s - draft_s
                        - outcome.forward_s - outcome.heads_s),
            tree=proposal.tree if proposal.drafts is None else None,
            lattice_s=lattice_s,
            heads_s=outcome.heads_s,
        ))
        tokens.extend(new)
        past, head_logits, head_topk = outcome.past, outcome.next_logits, outcome.next_topk
        expand = outcome.next_expand
    stopped = "eos" if eos_id is not None and tokens[-1] == eos_id else "max_new_tokens"
    return DecodeResult(
        tokens=tokens,
        calls=1 + len(steps),
        steps=tuple(steps),
        prompt_length=len(prompt),
        stopped=stopped,
        criterion=str(verifier.criterion),
        drafter=name,
        prefill_s=prefill_s,
        wall_s=time.perf_counter() - wall_start,
    )


@overload
def decode(
    model: HeadsModel, prompt_ids: Sequence[int], rescorer: Any = ...,
    k: int | None = ..., p: int | None = ..., criterion: Criterion | str = ...,
    max_new_tokens: int = ..., eos_id: int | None = ..., drafter: Drafter | None = ...,
    device: str | torch.device | None = ..., iad: bool = ..., tree: bool | TreeDrafter | None = ...,
) -> DecodeResult: ...


@overload
def decode(
    model: HeadsModel, prompt_ids: Sequence[Sequence[int]], rescorer: Any = ...,
    k: int | None = ..., p: int | None = ..., criterion: Criterion | str = ...,
    max_new_tokens: int = ..., eos_id: int | None = ..., drafter: Drafter | None = ...,
    device: str | torch.device | None = ..., iad: bool = ..., tree: bool | TreeDrafter | None = ...,
) -> list[DecodeResult]: ...


@overload
def decode(
    model: HeadsModel, prompt_ids: np.ndarray | torch.Tensor | Sequence[Prompt],
    rescorer: Any = ..., k: int | None = ..., p: int | None = ...,
    criterion: Criterion | str = ...,
    max_new_tokens: int = ..., eos_id: int | None = ..., drafter: Drafter | None = ...,
    device: str | torch.device | None = ..., iad: bool = ...,
    tree: bool | TreeDrafter | None = ...,
) -> DecodeResult | list[DecodeResult]: ...


@torch.no_grad()
def decode(
    model: HeadsModel,
    prompt_ids: Prompt | Sequence[Prompt],
    rescorer: Any = None,
    k: int | None = None,
    p: int | None = None,
    criterion: Criterion | str = "exact",
    max_new_tokens: int = 64,
    eos_id: int | None = None,
    drafter: Drafter | None = None,
    device: str | torch.device | None = None,
    iad: bool = False,
    tree: bool | TreeDrafter | None = None,
) -> DecodeResult | list[DecodeResult]:
    """Blockwise parallel decoding with draft refinement (docs/definitions.md sec. 2).

    Told nothing about drafting (no ``rescorer``, ``k``, ``p``, ``drafter``, ``iad`` or
    ``tree``), it drafts the best way measured: :func:`~blockdraft.drafts.default_drafter`, a
    cost-aware tree of the heads' chain, rescored p-best paths and prompt lookup, sized on the
    model's own cost curve (measured at the first call, about a second), with the drafting
    recipe packaged beside the model's heads when there is one. With ``rescorer=None, p=1``
    it is vanilla BPD (the argmax of every head); with a rescorer (p-best) rescored BPD;
    ``p > 1`` without a rescorer p-best 0-gram BPD.
    With ``criterion="exact"`` (the default) the output equals greedy decoding with head 1
    (:func:`~blockdraft.models.greedy_generate`) token for token; every other criterion may
    change the output.

    Several prompts (a list of sequences, or a 2-D array / tensor of rows) are decoded one at
    a time: drafts of different prompts accept different lengths, so a batch of prompts would
    need ragged caches (each row cropped to its own length every step), which is out of scope.

    Args:
        model: a blockwise LM (``heads_logits(input_ids [B, T], past) -> ([B, T, h, V],
            cache)``) on ``device``; it is put in eval mode for the call.
        prompt_ids: one prompt (1-D token ids, non-empty) or a list of prompts. An EOS id
            inside a prompt is ordinary context (e.g. a beginning-of-text or document
            separator token); only a generated EOS stops decoding.
        rescorer: a :class:`~blockdraft.rescorers.Rescorer` ranking the lattice's paths, or
            None (head scores alone). An n-gram rescorer's LM must fit the model's vocabulary.
        k: arcs per lattice slot, ``1 <= k <= V`` (default 16 when ``p`` or a rescorer is
            given).
        p: drafts verified per call, ``>= 1`` (default 1 when ``k`` or a rescorer is given).
        criterion: a :class:`Criterion` or its string (``"exact"``, ``"topk:k=4"``, ...).
        max_new_tokens: at most this many tokens are generated (``>= 0``).
        eos_id: stop after generating this id (it is included); None never stops early.
        drafter: a draft source (a :class:`~blockdraft.drafts.heads.HeadDrafter` or anything
            with ``propose(lattice, context)``); it overrides ``k`` (its own ``.k``, when it
            has one, is the lattice width), ``p`` and ``rescorer`` (passing both a drafter and
            a rescorer is an error).
        device: where the model lives (``"cpu"``, ``"cuda"``, ``"cuda:1"``...); checked, never
            changed: move the model there first. None (default): wherever its parameters are.
        iad: add an input-guided draft (copy of the prompt after a unique match,
            docs/definitions.md sec. 9) as one more path beside the heads' drafts.
        tree: verify token trees, one forward per step with tree attention
            (docs/definitions.md sec. 11). ``None`` or ``False`` (default): the drafts as a
            batch. ``True``: the same drafts (from ``drafter``, or ``k, p, rescorer``, with
            ``iad``) merged into a trie (:class:`~blockdraft.drafts.TrieDrafter`): the same
            output and ``n`` as the batch, fewer tokens per forward. A tree builder (anything
            with ``k``, ``name`` and ``propose_tree(lattice, context) -> DraftTree``, e.g.
            :class:`~blockdraft.drafts.ConfidenceTreeDrafter`,
            :class:`~blockdraft.drafts.MedusaTreeDrafter`,
            :class:`~blockdraft.drafts.RescoredTreeDrafter`): its trees, on lattices of its
            ``k``; then ``drafter``, ``rescorer`` and ``iad`` must not be given. Then each
            :class:`DecodeStep` records the ``tree``, and its ``winner`` is the accepted node.

    Returns:
        A :class:`DecodeResult` per prompt (a list for a list of prompts).

    Raises:
        VerifyError: on an empty prompt, a token outside the vocabulary, a prompt longer than
            ``max_seq_len`` or one that leaves no room for ``max_new_tokens`` (``len(prompt) +
            max_new_tokens - 1`` positions are read), a bad ``k``, ``p``, ``max_new_tokens``,
            ``eos_id`` or criterion, a rescorer LM trained on another vocabulary, a model on
            another device, a drafter whose drafts do not start with the certain token, or a
            ``tree`` that is neither a bool nor a tree builder (or one given with a drafter).
    """
    verifier = Verifier(model, criterion)
    told_nothing = (rescorer is None and k is None and p is None and drafter is None
                    and not iad and tree is None)
    builder = _tree_builder(tree, drafter, rescorer, iad)
    args = check_decode_inputs(
        verifier, prompt_ids, rescorer=rescorer, k=16 if k is None else k,
        p=1 if p is None else p, max_new_tokens=max_new_tokens, eos_id=eos_id,
        drafter=drafter, device=device,
    )
    if told_nothing:
        from blockdraft.drafts.default import default_drafter

        builder = default_drafter(model)
    lattice_k = args.lattice_k
    if builder is not None:
        lattice_k = check_int(getattr(builder, "k", None), "the tree builder's k", VerifyError,
                              minimum=1, maximum=verifier.vocab_size)
        check_vocab = getattr(getattr(builder, "lm", None), "check_vocab", None)
        if callable(check_vocab) and verifier.vocab_size is not None:
            try:
                check_vocab(verifier.vocab_size)
            except BlockdraftError as e:
                raise VerifyError(f"the tree builder's LM does not fit the model: {e}") from e
    was_training = bool(getattr(model, "training", False))
    if isinstance(model, torch.nn.Module):
        model.eval()
    try:
        results = []
        for prompt in args.prompts:
            drafts: Drafter = (
                CombinedDrafter(args.drafter, InputCopyDrafter(prompt)) if iad else args.drafter
            )
            source: Drafter | TreeDrafter = drafts
            if builder is not None:
                source = builder
            elif tree is True:
                source = TrieDrafter(drafts)
            results.append(_decode_prompt(verifier, source, lattice_k, prompt,
                                          args.max_new_tokens, args.eos_id))
    finally:
        if was_training and isinstance(model, torch.nn.Module):
            model.train()
    return results if args.batched else results[0]


def _tree_builder(tree: Any, drafter: Any, rescorer: Any, iad: bool) -> TreeDrafter | None:
    """The tree builder ``decode(tree=...)`` names, or None (a batch, or ``tree=True``)."""
    if tree is None or isinstance(tree, bool):
        return None
    if not callable(getattr(tree, "propose_tree", None)):
        raise VerifyError(
            "tree must be None, True, False or a tree builder with propose_tree(lattice, "
            f"context), got {type(tree).__name__}"
        )
    if drafter is not None or rescorer is not None or iad:
        raise VerifyError(
            "a tree builder makes the drafts itself: pass tree=<builder> without drafter, "
            "rescorer or iad (or tree=True to merge a drafter's drafts into a trie)"
        )
    return tree  # type: ignore[no-any-return]

