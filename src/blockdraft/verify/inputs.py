"""Argument checking for :func:`blockdraft.verify.decode`, apart from the loop itself: what a
decode call names is checked once, here, where it enters.

Public surface:
    DecodeInputs                       the validated prompts and limits of one ``decode`` call
    check_decode_inputs(verifier, prompt_ids, *, max_new_tokens, eos_id, device) -> DecodeInputs
    resolve_drafter(verifier, drafter, *, rescorer, k, p, iad, tree, cost) -> Drafter
        the drafter a call names (a Drafter, a DraftSpec, or the old keywords as a spec; the
        default when told nothing), checked against the model's capabilities
Every failure is a :class:`~blockdraft.verify.errors.VerifyError` naming the offending value
and the valid range.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from blockdraft.core.checks import check_int, is_int
from blockdraft.core.errors import BlockdraftError
from blockdraft.drafts.iad import CombinedDrafter, InputCopyDrafter
from blockdraft.drafts.pipeline import Pipeline
from blockdraft.drafts.protocol import Drafter
from blockdraft.drafts.spec import DraftSpec
from blockdraft.models.cost import CostCurve
from blockdraft.models.inputs import check_prompt
from blockdraft.rescorers.base import Rescorer
from blockdraft.verify.errors import VerifyError
from blockdraft.verify.verifier import Verifier, model_device


@dataclass(frozen=True)
class DecodeInputs:
    """The prompts and limits of one :func:`~blockdraft.verify.decode` call, validated.

    Attributes:
        prompts: the prompts as lists of token ids, each checked against the model.
        batched: whether the caller passed a list of prompts (then a list of results).
        max_new_tokens: ``>= 0``.
        eos_id: a token id of the model, or None.
    """

    prompts: tuple[list[int], ...]
    batched: bool
    max_new_tokens: int
    eos_id: int | None


def check_decode_inputs(verifier: Verifier, prompt_ids: Any, *, max_new_tokens: Any,
                        eos_id: Any, device: str | torch.device | None) -> DecodeInputs:
    """Validate the prompts, limits and device of ``decode`` against the verifier's model (see
    its docstring)."""
    vocab_size = verifier.vocab_size
    _check_device(verifier.model, device)
    max_new_tokens = check_int(max_new_tokens, "max_new_tokens", VerifyError, minimum=0)
    if eos_id is not None and (
        not is_int(eos_id) or eos_id < 0 or (vocab_size is not None and eos_id >= vocab_size)
    ):
        raise VerifyError(f"eos_id must be None or a token id in [0, {vocab_size}), got {eos_id!r}")
    prompts, batched = _split_prompts(prompt_ids)
    checked = tuple(
        check_prompt(x, vocab_size, verifier.max_seq_len, max_new_tokens, VerifyError,
                     f"prompt {i}: " if batched else "")
        for i, x in enumerate(prompts)
    )
    return DecodeInputs(prompts=checked, batched=batched, max_new_tokens=max_new_tokens,
                        eos_id=None if eos_id is None else int(eos_id))


def resolve_drafter(verifier: Verifier, drafter: Any, *, rescorer: Any, k: Any, p: Any,
                    iad: bool, tree: Any, cost: Callable[[], CostCurve]) -> Drafter:
    """The drafter ``decode`` runs, checked against the model (see
    :func:`~blockdraft.verify.decode.decode`).

    ``drafter`` is a :class:`~blockdraft.drafts.protocol.Drafter`, a
    :class:`~blockdraft.drafts.spec.DraftSpec` (built here, on the model's capabilities and, if
    it sizes trees by cost, ``cost()``), or None: then the old keywords (``rescorer``, ``k``,
    ``p``, ``iad``; ``tree``: a tree builder is the drafter, True/False change nothing: every
    step verifies a trie) name a spec, and a call told nothing drafts with ``default``.

    Raises:
        VerifyError: conflicting arguments, a drafter that is neither, one that needs what the
            model does not have (a tree lattice, a reference), a lattice wider than the
            vocabulary, or an LM trained on another tokenizer.
    """
    caps = verifier.caps
    if tree is not None and not isinstance(tree, bool):
        if drafter is not None or rescorer is not None or iad:
            raise VerifyError("a tree builder makes the drafts itself: pass tree=<builder> "
                              "without drafter, rescorer or iad (or drafter=<builder>)")
        if not isinstance(tree, Drafter):
            raise VerifyError(f"tree must be None, True, False or a drafter with draft(view), "
                              f"got {type(tree).__name__}")
        drafter = tree
    if drafter is not None and rescorer is not None:
        raise VerifyError("pass either a drafter or a rescorer, not both (the drafter carries "
                          "its own rescorer: HeadDrafter(k, p, rescorer))")
    if drafter is None:
        drafter = _legacy_spec(rescorer, k, p, iad, verifier.vocab_size)
    elif iad:
        if not isinstance(drafter, Pipeline):
            raise VerifyError("iad=True adds the input copy to a drafter of the pipeline "
                              f"(HeadDrafter, ...), got {type(drafter).__name__}")
        drafter = CombinedDrafter(drafter, InputCopyDrafter())
    if isinstance(drafter, DraftSpec):
        try:
            drafter = drafter.build(caps=caps, cost=cost() if drafter.needs_cost else None,
                                    lossless=verifier.criterion.lossless)
        except BlockdraftError as e:
            raise VerifyError(f"cannot build the drafter: {e}") from e
    if not isinstance(drafter, Drafter):
        raise VerifyError(f"drafter must be a Drafter (draft(view) and observe(feedback)) or "
                          f"a DraftSpec, got {type(drafter).__name__}")
    _check_needs(verifier, drafter)
    return drafter


def _legacy_spec(rescorer: Any, k: Any, p: Any, iad: bool, vocab_size: int | None) -> DraftSpec:
    """The spec ``decode``'s old keywords name (the default when they name nothing)."""
    if rescorer is None and k is None and p is None and not iad:
        return DraftSpec("default")
    k = check_int(16 if k is None else k, "k", VerifyError, minimum=1)
    if vocab_size is not None and k > vocab_size:
        raise VerifyError(f"k = {k} exceeds the model's vocabulary size V = {vocab_size}; "
                          f"use k <= {vocab_size}")
    p = check_int(1 if p is None else p, "p", VerifyError, minimum=1)
    if rescorer is not None and not isinstance(rescorer, Rescorer):
        raise VerifyError(f"rescorer must have rescore(lattice, context, p), path_scorer() and "
                          f"check_vocab(vocab_size), got {type(rescorer).__name__}")
    try:
        return DraftSpec("iad" if iad else "heads", k=k, p=p,
                         rescorer="" if rescorer is None else "given", given=rescorer,
                         alpha=None if rescorer is None else 1.0)
    except BlockdraftError as e:
        raise VerifyError(str(e)) from e


def _check_needs(verifier: Verifier, drafter: Drafter) -> None:
    """What the drafter declares it needs, against what the model declares."""
    needs, caps, name = drafter.needs, verifier.caps, drafter.name
    if needs.tree_lattice and not caps.tree_lattice:
        kind = {"none": "no extra heads", "medusa": "Medusa heads (a sausage lattice)"}.get(
            caps.heads, f"{caps.heads} heads")
        raise VerifyError(f"{name} drafts from the tree lattice of prefix-conditioned heads "
                          f"(heads train --arch prefix); this model has {kind}: use a "
                          "HeadDrafter")
    if needs.reference:
        raise VerifyError(f"{name} reads the reference continuation (the oracle): it runs "
                          "offline only, on a trace (blockdraft.oracle.simulate)")
    vocab_size = verifier.vocab_size
    if vocab_size is None:
        return
    if needs.k > vocab_size:
        raise VerifyError(f"k = {needs.k} exceeds the model's vocabulary size V = {vocab_size}; "
                          f"use k <= {vocab_size}")
    for lm in needs.lms:
        try:
            lm.check_vocab(vocab_size)
        except BlockdraftError as e:
            raise VerifyError(f"the rescorer's LM does not fit the model: {e}") from e


def _check_device(model: Any, device: str | torch.device | None) -> None:
    """``device`` (None: the model's own) names where the model is."""
    if device is None:
        return
    try:
        want = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise VerifyError(f"device {device!r} is not a torch device") from e
    have = model_device(model)
    if have.type != want.type or (want.index is not None and have.index != want.index):
        raise VerifyError(
            f"the model is on {have} but device = {str(want)!r}; move it first with "
            f"model.to({str(want)!r})"
        )


def _is_sequence_of_prompts(x: Any) -> bool:
    if not isinstance(x, (list, tuple)) or len(x) == 0:
        return False
    return all(
        isinstance(e, (list, tuple)) or (isinstance(e, (np.ndarray, torch.Tensor)) and e.ndim > 0)
        for e in x
    )


def _split_prompts(prompt_ids: Any) -> tuple[list[Any], bool]:
    """``(prompts, batched)``: a 2-D array / tensor or a list of sequences is a batch."""
    if isinstance(prompt_ids, torch.Tensor):
        prompt_ids = prompt_ids.detach().cpu().numpy()
    if isinstance(prompt_ids, np.ndarray) and prompt_ids.ndim == 2:
        return list(prompt_ids), True
    if _is_sequence_of_prompts(prompt_ids):
        return list(prompt_ids), True
    return [prompt_ids], False
