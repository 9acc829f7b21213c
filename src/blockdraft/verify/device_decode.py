"""Decode's steps on the device: the one entry point from :func:`~blockdraft.verify.decode` to
the static runtime's device step (issue 41, items 1 and 2).

A :class:`~blockdraft.models.runtimes.StaticKVModel` made with ``device_steps=True`` (or whose
``device_steps`` was set) runs :func:`decode` on the device under the exact criterion when its
drafter is one the device drafts (:class:`~blockdraft.models.runtimes.device_drafters.
DeviceStrategy`), named as a spec or as the drafter object the spec builds:

    DraftSpec("heads")                      vanilla heads: the chain of the ``h - 1`` heads'
                                            argmax (Medusa heads)
    DraftSpec("tree", tree="medusa", budget=N)
                                            Medusa's static tree (its ``N - 1`` rank paths,
                                            ``spec.medusa_choices()``), tokens from the heads'
                                            top-k; MedusaTreeDrafter(choices, budget) and
                                            calibrated_tree_drafter(accuracies, budget) the
                                            same with other rank paths (Medusa heads)
    DraftSpec("tree", tree="rated", budget=N, tables=..., [rescorer="ngram", lm=...])
                                            the cost-aware tree with N fixed: Medusa's
                                            candidates rated by the acceptance tables (with an
                                            n-gram LM's evidence: its table moved to the device
                                            once), the N best by reach; any
                                            Pipeline([RankPaths(choices)], TableRates(tables,
                                            lm), CostCut(None, N)) the same (Medusa heads)
    DraftSpec("lookup")                     prompt lookup alone, LookupDrafter(...) with its
                                            settings (any heads)
    DraftSpec("combined")                   vanilla heads and prompt lookup in one trie,
                                            CombinedDrafter(vanilla(), LookupDrafter(...))
                                            (Medusa heads)

Each step is then one :class:`~blockdraft.models.runtimes.device_step.DeviceDecoder` step (one
CUDA graph on a GPU) and the host reads one small row; the output is the host path's with the
same drafter, token for token (tested), and its records are the host's records' kind
(:class:`~blockdraft.verify.records.DecodeStep`: the tree, its winner, ``n``, the tokens;
``forward_s`` the device step, ``other_s`` the host's own work). Every other drafter (the
default cost-aware tree, whose N follows the cost curve and whose p-best search runs on the
host; an LM other than an n-gram, with a context LM, or a KenLM binary without its ARPA file
beside it, which the device's table reads), a criterion other than ``exact``,
prefix heads with a drafter that reads heads, the old keywords (``rescorer``, ``k``, ``p``,
``iad``, ``tree``) or a tree the model cannot draft (deeper than its heads) take the host path,
unchanged.

Public surface:
    device_tree(verifier, drafter, *, extras) -> DeviceStrategy | None    what runs on the
                                                                           device
    decode_on_device(verifier, strategy, inputs, name) -> list[DecodeResult]
"""

from __future__ import annotations

import time
from typing import Any

from blockdraft.drafts.cut import CostCut, KeepAll
from blockdraft.drafts.heads import HeadPaths
from blockdraft.drafts.lookup import Copies
from blockdraft.drafts.pipeline import Pipeline
from blockdraft.drafts.rates import TableRates
from blockdraft.drafts.spec import SHARED, DraftSpec
from blockdraft.drafts.trees import RankPaths
from blockdraft.verify.inputs import DecodeInputs
from blockdraft.verify.records import DecodeResult, DecodeStep
from blockdraft.verify.verifier import Verifier


def device_tree(verifier: Verifier, drafter: Any, *, extras: bool) -> Any:
    """The :class:`~blockdraft.models.runtimes.device_drafters.DeviceStrategy` decode's steps
    run on the device with (named as the drafter), or None for the host path (see the module
    docstring; ``extras``: an old keyword was given)."""
    caps = verifier.caps
    if caps.runtime != "static" or extras or str(verifier.criterion) != "exact":
        return None
    from blockdraft.models.runtimes.static import StaticKVModel

    model = verifier.model
    if not isinstance(model, StaticKVModel) or not model.device_steps:
        return None
    medusa = caps.heads == "medusa"
    if isinstance(drafter, DraftSpec):
        if drafter.strategy not in ("lookup", "combined") and drafter.tree not in (
                "medusa", "rated"):
            return _from_spec(drafter, model.h - 1, medusa)
        # the same drafter as the host path builds, named as the spec
        return _from_pipeline(drafter.build(SHARED, caps), model.h - 1, medusa, drafter.label)
    if isinstance(drafter, Pipeline):
        return _from_pipeline(drafter, model.h - 1, medusa, drafter.name)
    return None


def _from_spec(spec: DraftSpec, heads: int, medusa: bool) -> Any:
    """Vanilla heads as a spec (its chain: no drafter object needed), else None."""
    from blockdraft.models.runtimes.device_drafters import DeviceStrategy
    from blockdraft.models.runtimes.device_tree import StaticTree

    if medusa and spec.strategy == "heads" and spec.p == 1 and not spec.rescorer:
        return DeviceStrategy.static(StaticTree.chain(heads))
    return None


def _from_pipeline(drafter: Pipeline, heads: int, medusa: bool, name: str) -> Any:
    """The strategy of a drafter the device drafts exactly (module docstring), else None."""
    from blockdraft.models.runtimes.device_drafters import DeviceStrategy
    from blockdraft.models.runtimes.device_tree import StaticTree

    sources, rates, cut = drafter.sources, drafter.rates, drafter.cut
    copy = sources[-1] if isinstance(sources[-1], Copies) and sources[-1].copies == 1 else None
    lookup: dict[str, Any] = {} if copy is None else {
        "min_match": copy.min_match, "max_match": copy.max_match, "lengths": copy.lengths,
        "name": name}
    plain = rates is None and isinstance(cut, KeepAll)
    if plain and copy is not None and len(sources) == 1:
        return DeviceStrategy.lookup(**lookup)
    if not medusa:
        return None
    if (plain and len(sources) == 1 and isinstance(sources[0], HeadPaths)
            and sources[0].p == 1 and sources[0].rescorer is None):  # vanilla()
        return DeviceStrategy.static(StaticTree.chain(heads))
    if (plain and copy is not None and len(sources) == 2 and isinstance(sources[0], HeadPaths)
            and sources[0].p == 1 and sources[0].rescorer is None):
        return DeviceStrategy.chain_lookup(heads, **lookup)
    if len(sources) != 1 or not isinstance(sources[0], RankPaths):
        return None
    source = sources[0]
    choices = source.choices[: None if source.budget is None else source.budget - 1]
    if not choices or max(len(c) for c in choices) > heads:  # deeper: the host path says so
        return None
    tree = StaticTree.from_choices(choices, name=name)
    if plain:
        return DeviceStrategy.static(tree)
    if not (isinstance(rates, TableRates) and isinstance(cut, CostCut) and cut.cost is None):
        return None
    lm = _ngram_of(rates.lm)
    if lm is False:
        return None
    return DeviceStrategy.rated(
        tree, min(cut.max_nodes, tree.size), rates.tables, name=name,
        lm=None if lm is None else _table_maker(lm), origin=() if lm is None else (lm,))


def _ngram_of(scorer: Any) -> Any:
    """The n-gram LM (an :class:`~blockdraft.rescorers.ngram.NgramLM`) whose scores a path
    scorer gives (its own, or an n-gram rescorer's without a context LM) when its table can be
    built (:class:`~blockdraft.rescorers.ngram.table.NgramTable`: its ARPA file at hand, its
    keys in 63 bits); None for no scorer, False for another (the host path)."""
    if scorer is None:
        return None
    from blockdraft.rescorers.ngram.path_scorer import NgramPathScorer
    from blockdraft.rescorers.ngram.rescorer import RescorerPathScorer

    if isinstance(scorer, NgramPathScorer):
        lm = scorer.lm
    elif isinstance(scorer, RescorerPathScorer) and not scorer.rescorer.uses_context:
        lm = scorer.rescorer.lm
    else:
        return False
    fits = lm.arpa_path() is not None and len(lm.words) ** int(lm.order) < 2 ** 63
    return lm if fits else False


def _table_maker(lm: Any) -> Any:
    """What builds the n-gram table of ``lm`` (its ARPA file read; once per decoder)."""
    from blockdraft.rescorers.ngram.table import NgramTable

    return lambda: NgramTable.from_lm(lm)


def decode_on_device(verifier: Verifier, strategy: Any, inputs: DecodeInputs, name: str
                     ) -> list[DecodeResult]:
    """Decode every prompt of ``inputs`` with ``strategy``'s device steps (one decoder per
    model and strategy, its graphs kept): a :class:`DecodeResult` per prompt, named
    ``name``."""
    from blockdraft.models.runtimes.device_step import decoder as decoder_of

    decoder = decoder_of(verifier.model, strategy)  # type: ignore[arg-type]
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
                position=position, tree=rec.draft_tree(), winner=rec.winner,
                n=rec.n, source="device", accept_lengths=rec.accept_lengths, tokens=rec.new,
                forward_s=rec.launch_s + rec.wait_s, other_s=rec.host_s))
            position += len(rec.new)
        results.append(DecodeResult(
            tokens=run.tokens, calls=1 + len(steps), steps=tuple(steps),
            prompt_length=len(prompt), stopped=run.stopped, criterion=criterion,
            drafter=name, prefill_s=run.prefill_s, wall_s=time.perf_counter() - start))
    return results
