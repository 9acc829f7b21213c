"""Decode's steps on the device: the one entry point from :func:`~blockdraft.verify.decode` to
the static runtime's device step (issue 41, item 1).

A :class:`~blockdraft.models.runtimes.StaticKVModel` made with ``device_steps=True`` (or whose
``device_steps`` was set) runs :func:`decode` on the device when the drafter's trees have one
topology every step, under the exact criterion, with Medusa heads:

    DraftSpec("heads")                      vanilla heads: the chain of the ``h - 1`` heads'
                                            argmax
    DraftSpec("tree", tree="medusa", budget=N)
                                            Medusa's static tree (its ``N - 1`` rank paths,
                                            ``spec.medusa_choices()``), tokens from the heads'
                                            top-k
    MedusaTreeDrafter(choices, budget), calibrated_tree_drafter(accuracies, budget)
                                            the same with other rank paths (a calibrated tree)

Each step is then one :class:`~blockdraft.models.runtimes.device_step.DeviceDecoder` step (one
CUDA graph on a GPU) and the host reads one small row; the output is the host path's with the
same drafter, token for token (tested), and its records are the host's records' kind
(:class:`~blockdraft.verify.records.DecodeStep`: the tree, its winner, ``n``, the tokens;
``forward_s`` the device step, ``other_s`` the host's own work). Every other drafter, a
criterion other than ``exact``, prefix heads, the old keywords (``rescorer``, ``k``, ``p``,
``iad``, ``tree``) or a tree the model cannot draft (deeper than its heads) take the host
path, unchanged.

Public surface:
    device_tree(verifier, drafter, *, extras) -> StaticTree | None     what runs on the device
    decode_on_device(verifier, tree, inputs, name) -> list[DecodeResult]
"""

from __future__ import annotations

import time
from typing import Any

from blockdraft.drafts.cut import KeepAll
from blockdraft.drafts.pipeline import Pipeline
from blockdraft.drafts.spec import DraftSpec
from blockdraft.drafts.trees import RankPaths
from blockdraft.verify.inputs import DecodeInputs
from blockdraft.verify.records import DecodeResult, DecodeStep
from blockdraft.verify.verifier import Verifier


def device_tree(verifier: Verifier, drafter: Any, *, extras: bool) -> Any:
    """The :class:`~blockdraft.models.runtimes.device_tree.StaticTree` decode's steps run on
    the device with (named as the drafter), or None for the host path (see the module
    docstring; ``extras``: an old keyword was given)."""
    caps = verifier.caps
    if (caps.runtime != "static" or extras or str(verifier.criterion) != "exact"
            or caps.heads != "medusa"):
        return None
    from blockdraft.models.runtimes.device_tree import StaticTree
    from blockdraft.models.runtimes.static import StaticKVModel

    model = verifier.model
    if not isinstance(model, StaticKVModel) or not model.device_steps:
        return None
    heads = model.h - 1
    if isinstance(drafter, DraftSpec) and drafter.strategy == "heads" and drafter.p == 1 and (
            not drafter.rescorer):
        return StaticTree.chain(heads)
    choices = _rank_paths(drafter)
    if choices and max(len(c) for c in choices) <= heads:  # deeper: the host path says so
        name = drafter.label if isinstance(drafter, DraftSpec) else drafter.name
        return StaticTree.from_choices(choices, name=name)
    return None


def _rank_paths(drafter: Any) -> tuple[tuple[int, ...], ...] | None:
    """The rank paths of a static Medusa tree: a ``medusa`` tree spec's, or those of a drafter
    that is Medusa's tree alone (:func:`~blockdraft.drafts.trees.MedusaTreeDrafter`,
    :func:`~blockdraft.drafts.trees.calibrated_tree_drafter`: one :class:`RankPaths` source,
    no rates, every node kept); None for any other."""
    if isinstance(drafter, DraftSpec):
        return drafter.medusa_choices() if drafter.tree == "medusa" else None
    if not (isinstance(drafter, Pipeline) and len(drafter.sources) == 1
            and isinstance(drafter.sources[0], RankPaths) and drafter.rates is None
            and isinstance(drafter.cut, KeepAll)):
        return None
    source = drafter.sources[0]
    return source.choices[: None if source.budget is None else source.budget - 1]


def decode_on_device(verifier: Verifier, tree: Any, inputs: DecodeInputs, name: str
                     ) -> list[DecodeResult]:
    """Decode every prompt of ``inputs`` with ``tree``'s device steps (one decoder per model
    and tree, its graphs kept): a :class:`DecodeResult` per prompt, named ``name``."""
    from blockdraft.models.runtimes.device_step import decoder as decoder_of

    decoder = decoder_of(verifier.model, tree)  # type: ignore[arg-type]
    criterion = str(verifier.criterion)
    results = []
    for prompt in inputs.prompts:
        start = time.perf_counter()
        if inputs.max_new_tokens == 0:
            results.append(DecodeResult(
                tokens=[], calls=0, steps=(), prompt_length=len(prompt), stopped="empty",
                criterion=criterion, drafter=name, prefill_s=0.0,
                wall_s=time.perf_counter() - start))
            continue
        run = decoder.decode(prompt, inputs.max_new_tokens, inputs.eos_id)
        steps, position = [], 0
        for rec in run.steps:
            steps.append(DecodeStep(
                position=position, tree=rec.tree.draft_tree(rec.tokens), winner=rec.winner,
                n=rec.n, source="device", accept_lengths=rec.accept_lengths, tokens=rec.new,
                forward_s=rec.launch_s + rec.wait_s, other_s=rec.host_s))
            position += len(rec.new)
        results.append(DecodeResult(
            tokens=run.tokens, calls=1 + len(steps), steps=tuple(steps),
            prompt_length=len(prompt), stopped=run.stopped, criterion=criterion,
            drafter=name, prefill_s=run.prefill_s, wall_s=time.perf_counter() - start))
    return results
