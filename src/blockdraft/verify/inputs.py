"""Argument checking for :func:`blockdraft.verify.decode`, apart from the loop itself.

Public surface:
    DecodeInputs                       the validated arguments of one ``decode`` call
    check_decode_inputs(...) -> DecodeInputs
Every failure is a :class:`~blockdraft.verify.criteria.VerifyError` naming the offending value
and the valid range.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from blockdraft.core.checks import check_int, is_int
from blockdraft.core.errors import BlockdraftError
from blockdraft.drafts.heads import HeadDrafter
from blockdraft.drafts.protocol import Drafter
from blockdraft.models.inputs import check_prompt
from blockdraft.verify.errors import VerifyError
from blockdraft.verify.verifier import Verifier, model_device


@dataclass(frozen=True)
class DecodeInputs:
    """The arguments of one :func:`~blockdraft.verify.decode` call, validated.

    Attributes:
        drafter: the draft source (a :class:`HeadDrafter` built from ``k, p, rescorer`` when
            the caller passed no drafter).
        lattice_k: the lattice width each step builds (the drafter's own ``k``).
        prompts: the prompts as lists of token ids, each checked against the model.
        batched: whether the caller passed a list of prompts (then a list of results).
        max_new_tokens: ``>= 0``.
        eos_id: a token id of the model, or None.
    """

    drafter: Any
    lattice_k: int
    prompts: tuple[list[int], ...]
    batched: bool
    max_new_tokens: int
    eos_id: int | None


def check_decode_inputs(
    verifier: Verifier,
    prompt_ids: Any,
    *,
    rescorer: Any,
    k: Any,
    p: Any,
    max_new_tokens: Any,
    eos_id: Any,
    drafter: Any,
    device: str | torch.device | None,
) -> DecodeInputs:
    """Validate the arguments of ``decode`` against the verifier's model (see its docstring)."""
    vocab_size = verifier.vocab_size
    _check_device(verifier.model, device)
    k = check_int(k, "k", VerifyError, minimum=1)
    p = check_int(p, "p", VerifyError, minimum=1)
    max_new_tokens = check_int(max_new_tokens, "max_new_tokens", VerifyError, minimum=0)
    if eos_id is not None and (
        not is_int(eos_id) or eos_id < 0 or (vocab_size is not None and eos_id >= vocab_size)
    ):
        raise VerifyError(f"eos_id must be None or a token id in [0, {vocab_size}), got {eos_id!r}")
    if drafter is None:
        if rescorer is not None and not callable(getattr(rescorer, "rescore", None)):
            raise VerifyError(
                f"rescorer must have rescore(lattice, context, p), got {type(rescorer).__name__}"
            )
        base: Drafter = HeadDrafter(k=k, p=p, rescorer=rescorer)
    else:
        if rescorer is not None:
            raise VerifyError(
                "pass either a drafter or a rescorer, not both (the drafter carries its own "
                "rescorer: HeadDrafter(k, p, rescorer))"
            )
        if not callable(getattr(drafter, "propose", None)):
            raise VerifyError(
                f"drafter must have propose(lattice, context), got {type(drafter).__name__}"
            )
        base = drafter
    lattice_k = check_int(getattr(base, "k", k), "the drafter's k", VerifyError, minimum=1)
    if vocab_size is not None and lattice_k > vocab_size:
        raise VerifyError(
            f"k = {lattice_k} exceeds the model's vocabulary size V = {vocab_size}; "
            f"use k <= {vocab_size}"
        )
    _check_rescorer_vocab(base, rescorer, vocab_size)
    prompts, batched = _split_prompts(prompt_ids)
    checked = tuple(
        check_prompt(x, vocab_size, verifier.max_seq_len, max_new_tokens, VerifyError,
                     f"prompt {i}: " if batched else "")
        for i, x in enumerate(prompts)
    )
    return DecodeInputs(
        drafter=base, lattice_k=lattice_k, prompts=checked, batched=batched,
        max_new_tokens=max_new_tokens, eos_id=None if eos_id is None else int(eos_id),
    )



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


def _check_rescorer_vocab(drafter: Any, rescorer: Any, vocab_size: int | None) -> None:
    """An n-gram or neural LM trained on another tokenizer scores silently wrong: refuse it
    (n-gram: the LM's own vocabulary check; neural: its ``V`` must equal the model's)."""
    if vocab_size is None:
        return
    candidates = [rescorer, getattr(drafter, "rescorer", None),
                  getattr(getattr(drafter, "heads", None), "rescorer", None)]
    for r in candidates:
        check = getattr(getattr(r, "lm", None), "check_vocab", None)
        if callable(check):
            try:
                check(vocab_size)
            except BlockdraftError as e:
                raise VerifyError(f"the rescorer's LM does not fit the model: {e}") from e
        neural_v = getattr(r, "vocab_size", None) if hasattr(r, "model") else None
        if neural_v is not None and int(neural_v) != vocab_size:
            raise VerifyError(
                f"the neural rescorer's LM has a vocabulary of V = {neural_v} but the model has "
                f"V = {vocab_size}: it was trained on another tokenizer; train a rescorer on "
                "this model's tokenizer (blockdraft train --rescorer --tokenizer MODEL)"
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
