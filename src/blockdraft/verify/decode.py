"""The decode loop of blockwise parallel decoding: predict -> verify -> accept.

See docs/definitions.md sec. 2 and 11. :func:`decode` runs the step engine
(:mod:`~blockdraft.verify.engine`) against the model: every step the drafter proposes one token
tree from the lattice of the last call's heads (no model call), one forward verifies every node
(:class:`~blockdraft.verify.verifier.Verifier`), the accepted path and the next certain token
are committed, and the drafter hears the outcome. The loop reads as the paper (Stern et al.
2018, sec. 3-4) and as Medusa's ``medusa_generate``::

    d_1  = steps.prefill(prompt)                    # call 1: d_1 is certain
    while not done:
        tree    = drafter.draft(steps.view(...))    # 1. predict: a tree (p drafts: a trie)
        verdict = steps.verify(tree, eos_id)        # 2. verify: one call, tree attention
        tokens += accept(verdict, remaining, eos)   # 3. accept: d_2..d_{1+n}, next certain
        drafter.observe(feedback)

The offline simulator runs the same engine on a trace (:func:`~blockdraft.oracle.simulate`).

Counting (docs/definitions.md sec. 2): the prefill yields 1 token (``d_1``), every verification
call ``1 + n`` (``d_2 .. d_{1+n}`` and the next certain token), cut after EOS and at
``max_new_tokens``: a step yields ``min(1 + n, remaining)`` tokens, the offline simulator's
rule. ``block_efficiency = len(tokens) / calls``.

Public surface:
    decode(model, prompt_ids, drafter=None, criterion="exact", max_new_tokens=64, eos_id=None,
           *, rescorer=None, k=None, p=None, iad=False, tree=None, device=None)
        -> DecodeResult (one prompt) | list[DecodeResult] (a list of prompts)
    accept(verdict, tree, remaining, eos_id) -> tuple[int, ...]    step 3
    DecodeResult, DecodeStep                                       frozen result records
    head_lattice, step_lattice       (the step's lattice; they live in blockdraft.lattice.step)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from blockdraft.drafts.protocol import Drafter
from blockdraft.drafts.spec import DraftSpec
from blockdraft.models.cost import cost_curve_of
from blockdraft.verify.engine import accept, run
from blockdraft.verify.records import DecodeResult, DecodeStep

if TYPE_CHECKING:  # the loop's model side imports torch when a decode runs, not before
    import torch

    from blockdraft.models.protocol import HeadsModel
    from blockdraft.verify.criteria import Criterion
    from blockdraft.verify.verifier import Verifier

__all__ = ["DecodeResult", "DecodeStep", "accept", "decode"]

if TYPE_CHECKING:
    Prompt = Sequence[int] | np.ndarray | torch.Tensor
    """One prompt: a 1-D sequence of token ids."""


def __getattr__(name: str) -> Any:  # the step's lattice: kept here, computed in lattice.step
    if name in ("head_lattice", "step_lattice"):
        from blockdraft.lattice import step

        return getattr(step, name)
    raise AttributeError(f"module 'blockdraft.verify.decode' has no attribute {name!r}")


@overload
def decode(model: HeadsModel, prompt_ids: Sequence[int], drafter: Drafter | DraftSpec | None = ...,
           criterion: Criterion | str = ..., max_new_tokens: int = ...,
           eos_id: int | None = ..., *, rescorer: Any = ..., k: int | None = ...,
           p: int | None = ..., iad: bool = ..., tree: Any = ...,
           device: str | torch.device | None = ...) -> DecodeResult: ...


@overload
def decode(model: HeadsModel, prompt_ids: Sequence[Sequence[int]],
           drafter: Drafter | DraftSpec | None = ..., criterion: Criterion | str = ...,
           max_new_tokens: int = ..., eos_id: int | None = ..., *, rescorer: Any = ...,
           k: int | None = ..., p: int | None = ..., iad: bool = ..., tree: Any = ...,
           device: str | torch.device | None = ...) -> list[DecodeResult]: ...


@overload
def decode(model: HeadsModel, prompt_ids: np.ndarray | torch.Tensor | Sequence[Prompt],
           drafter: Drafter | DraftSpec | None = ..., criterion: Criterion | str = ...,
           max_new_tokens: int = ..., eos_id: int | None = ..., *, rescorer: Any = ...,
           k: int | None = ..., p: int | None = ..., iad: bool = ..., tree: Any = ...,
           device: str | torch.device | None = ...) -> DecodeResult | list[DecodeResult]: ...


def decode(
    model: HeadsModel,
    prompt_ids: Prompt | Sequence[Prompt],
    drafter: Drafter | DraftSpec | None = None,
    criterion: Criterion | str = "exact",
    max_new_tokens: int = 64,
    eos_id: int | None = None,
    *,
    rescorer: Any = None,
    k: int | None = None,
    p: int | None = None,
    iad: bool = False,
    tree: Any = None,
    device: str | torch.device | None = None,
) -> DecodeResult | list[DecodeResult]:
    """Blockwise parallel decoding with draft refinement (docs/definitions.md sec. 2).

    Told nothing about drafting, it drafts the best way measured: the model's default strategy
    (:func:`~blockdraft.drafts.default_spec`: for Medusa heads a cost-aware tree of the heads'
    chain, rescored p-best paths and prompt lookup; for prefix heads EAGLE-2's tree over their
    tree lattice with lookup copies; both sized on the model's own cost curve, measured at the
    first call, about a second, with the drafting recipe packaged beside the heads when there
    is one). With ``criterion="exact"`` (the default) the output equals greedy decoding with
    head 1 (:func:`~blockdraft.models.greedy_generate`) token for token; every other criterion
    may change the output.

    On the static runtime with ``device_steps`` (:mod:`~blockdraft.verify.device_decode`), a
    drafter the device drafts (vanilla heads, a static Medusa tree, the rated tree with N
    fixed, prompt lookup, vanilla + lookup) runs every step on the device, with the same
    output.

    Several prompts (a list of sequences, or a 2-D array / tensor of rows) are decoded one at
    a time: drafts of different prompts accept different lengths, so a batch of prompts would
    need ragged caches (each row cropped to its own length every step), which is out of scope.

    Args:
        model: a blockwise LM (``heads_logits(input_ids [B, T], past) -> ([B, T, h, V],
            cache)``; blockdraft's models declare their capabilities); it is put in eval mode
            for the call.
        prompt_ids: one prompt (1-D token ids, non-empty) or a list of prompts. An EOS id
            inside a prompt is ordinary context; only a generated EOS stops decoding.
        drafter: a drafter (:class:`~blockdraft.drafts.Drafter`: ``HeadDrafter(k, p,
            rescorer)``, ``LookupDrafter()``, ``CostAwareTreeDrafter(...)``, ...), a
            :class:`~blockdraft.drafts.DraftSpec` (built here on the model's capabilities),
            or None: the old keywords below name one, and nothing at all the default.
        criterion: a :class:`Criterion` or its string (``"exact"``, ``"topk:k=4"``, ...).
        max_new_tokens: at most this many tokens are generated (``>= 0``).
        eos_id: stop after generating this id (it is included); None never stops early.
        rescorer: (old keyword) a :class:`~blockdraft.rescorers.Rescorer` ranking the lattice's
            paths: with ``k`` (default 16) and ``p`` (default 1) it names the spec
            ``DraftSpec("heads", k, p, rescorer="given", given=rescorer)``; not with a drafter.
        k, p: (old keywords) the lattice width and drafts per step of that spec.
        iad: add an input-guided draft (a copy of the prompt after a unique match,
            docs/definitions.md sec. 9) beside the drafter's or the spec's drafts.
        tree: (old keyword) a drafter (it is the ``drafter``; not with ``drafter``,
            ``rescorer`` or ``iad``); True or False change nothing: every step verifies a token
            tree (a batch of drafts as its trie).
        device: where the model lives (checked, never changed: move the model there first).
            None (default): wherever it is.

    Returns:
        A :class:`DecodeResult` per prompt (a list for a list of prompts).

    Raises:
        VerifyError: on an empty prompt, a token outside the vocabulary, a prompt longer than
            ``max_seq_len`` or one that leaves no room for ``max_new_tokens``, a bad ``k``,
            ``p``, ``max_new_tokens``, ``eos_id`` or criterion, a rescorer LM trained on another
            vocabulary, a model on another device, a drafter that needs what the model lacks
            (a tree lattice, a reference), or one whose trees do not start with the certain
            token.
    """
    import torch

    from blockdraft.verify.inputs import check_decode_inputs, resolve_drafter
    from blockdraft.verify.verifier import Verifier

    verifier = Verifier(model, criterion)
    args = check_decode_inputs(verifier, prompt_ids, max_new_tokens=max_new_tokens,
                               eos_id=eos_id, device=device)
    from blockdraft.verify.device_decode import decode_on_device, device_tree

    extras = rescorer is not None or k is not None or p is not None or iad or tree is not None
    on_device = device_tree(verifier, drafter, extras=extras)
    if on_device is not None:  # a static runtime's device steps (verify.device_decode)
        results = decode_on_device(verifier, on_device, args, f"{on_device.name} (device)")
        return results if args.batched else results[0]
    source = resolve_drafter(verifier, drafter, rescorer=rescorer, k=k, p=p, iad=iad,
                             tree=tree, cost=lambda: cost_curve_of(model))
    was_training = isinstance(model, torch.nn.Module) and model.training
    if isinstance(model, torch.nn.Module):
        model.eval()
    try:
        with torch.no_grad():
            results = [_decode_prompt(verifier, source, prompt, args.max_new_tokens,
                                      args.eos_id) for prompt in args.prompts]
    finally:
        if was_training and isinstance(model, torch.nn.Module):
            model.train()
    return results if args.batched else results[0]


def _decode_prompt(verifier: Verifier, drafter: Drafter, prompt: list[int],
                   max_new_tokens: int, eos_id: int | None) -> DecodeResult:
    """BPD on one validated prompt: the engine against the model."""
    wall_start = time.perf_counter()
    name = drafter.name
    criterion = str(verifier.criterion)
    if max_new_tokens == 0:
        return DecodeResult(tokens=[], calls=0, steps=(), prompt_length=len(prompt),
                            stopped="empty", criterion=criterion, drafter=name,
                            prefill_s=0.0, wall_s=time.perf_counter() - wall_start)
    from blockdraft.verify.model_steps import ModelSteps

    out = run(drafter, ModelSteps(verifier, drafter.needs), prompt, max_new_tokens, eos_id,
              verifier.vocab_size)
    return DecodeResult(tokens=out.tokens, calls=1 + sum(s.calls for s in out.steps),
                        steps=out.steps,
                        prompt_length=len(prompt), stopped=out.stopped, criterion=criterion,
                        drafter=name, prefill_s=out.prefill_s,
                        wall_s=time.perf_counter() - wall_start)
