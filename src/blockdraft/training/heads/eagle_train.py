"""Train an EAGLE draft layer on a distillation set (frozen base), and score its chain.

The layer (:class:`~blockdraft.models.heads.eagle_layer.EagleLayer`) trains by
self-distillation on whole answers (:mod:`~blockdraft.training.heads.eagle_data`): at answer
position ``j`` it reads the base feature and the accepted token ``t_{j+1}``, and its target is
the base's own next token ``g_{j+2}``. The base, its embedding and its head (the shortlist's
rows of ``lm_head``) are frozen; the layer's own weights train.

Loss, over ``unroll`` draft steps unrolled on the layer's own output features with the true
tokens ("training-time test", :meth:`EagleLayer.unroll
<blockdraft.models.heads.eagle_layer.EagleLayer.unroll>`), step ``k`` scored at every row whose
root (``k`` rows back) lies in the answer:

    loss = sum_k decay^k * (CE(step k's logits, g) + feature_weight * SmoothL1(a_k, f_next))

CE over the shortlist (a target outside it leaves the loss); the regression (``"top"``
fusion: EAGLE-1) pulls each step's output feature onto the base's next feature (its final
hidden state at the next position). ``unroll = 1`` with ``feature_weight`` 10 is EAGLE-1;
``"layers"`` with ``unroll >= 3`` and no regression is EAGLE-3.

Evaluation (every ``eval_every`` steps, on held-out answers whose features are computed once):
the loss, and for draft steps ``1 .. heads`` teacher-forced top-1/top-5 against the base's
token at that offset (step ``k``'s prediction given a correct chain so far: what a greedy chain
or a tree's oracle path sees wherever the earlier steps were right), and ``chain_B``: the
block efficiency of the greedy chain of that depth along the held-out greedy answers, walked
as :func:`~blockdraft.training.heads.data_curve.chain_block_efficiency` walks the Medusa and
prefix heads' (a chain accepts the run of steps whose top-1 is right, and a greedy chain's
step ``k`` equals the teacher-forced one exactly while that run lasts).

:func:`score_eagle` is the offline chain measure on every held-out answer (depth 8 by
default), in the rows :func:`~blockdraft.training.heads.data_curve.score_runs` gives the other
heads: ``B_vanilla`` is the chain's B, ``B_oracle5`` the oracle of a full top-5 tree.

Public surface:
    EAGLE_DEFAULTS                fusion -> its default unroll, feature_weight, context
    EAGLE_BATCH                   default answers per step
    eagle_loss(layer, batch, steps, settings, remap) -> loss []
    eagle_topk(layer, batches, depth, k=5) -> int64 [N, depth, k]
    evaluate_eagle(layer, batches, data, settings, remap) -> held-out scores
    score_eagle(layer, dset, maker, depth=8) -> dict       every held-out answer
    score_eagle_runs(runs, dset, base, lm_head, embed, depth=8) -> rows   (heads curve)
    train_eagle(dset, base, work, settings, ...) -> HeadsTrainResult
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812

from blockdraft.core.signature import environment, format_signature, human_count
from blockdraft.models.errors import ModelError
from blockdraft.models.heads.eagle_config import EagleConfig
from blockdraft.models.heads.eagle_layer import EagleLayer, EagleStep
from blockdraft.training.errors import TrainingError
from blockdraft.training.heads.data_curve import HeadsRun, chain_block_efficiency, topk_scores
from blockdraft.training.heads.eagle_data import (
    EagleBatch,
    EagleSequences,
    FeatureMaker,
    load_sequences,
)
from blockdraft.training.heads.generation import final_norm
from blockdraft.training.heads.loop import check_training_folder, run_loop
from blockdraft.training.heads.positions import IGNORE, PositionData
from blockdraft.training.heads.progress import log_line
from blockdraft.training.heads.shards import DistillSet
from blockdraft.training.heads.shortlist import shortlist_record
from blockdraft.training.heads.trainer import (
    HeadsTrainResult,
    HeadsTrainSettings,
    answer_shortlist,
    data_key,
    lm_head_weight,
    recorded_settings,
)

EAGLE_DEFAULTS: dict[str, dict[str, Any]] = {
    "top": {"unroll": 1, "feature_weight": 10.0, "context": "answer"},
    "layers": {"unroll": 3, "feature_weight": 0.0, "context": "prompt"},
}
"""Each fusion's defaults: EAGLE-1 (``"top"``: teacher-forced features, the regression, the
stored states of the answers) and EAGLE-3 (``"layers"``: training-time test over 3 steps, no
regression, the prompt in context as at decode time)."""
EAGLE_BATCH = 8
"""Answers (whole sequences) per step by default (about 1,100 answer positions on SmolLM2's
chat set, where a Medusa step takes 128)."""
EVAL_BATCH = 8
"""Held-out answers per evaluation batch."""


def eagle_loss(layer: EagleLayer, batch: EagleBatch, steps: Sequence[EagleStep],
               settings: HeadsTrainSettings, remap: torch.Tensor) -> torch.Tensor:
    """The loss of the module docstring over ``steps[:settings.unroll]`` (from
    :meth:`EagleLayer.unroll <blockdraft.models.heads.eagle_layer.EagleLayer.unroll>` on
    ``batch``; their logits are not read: the scored rows are projected here).

    Args:
        remap: int64 ``[V]``: base id -> the head's row (:data:`IGNORE` outside the shortlist).
    """
    total = batch.features.new_zeros(())
    regress = settings.feature_weight > 0 and layer.config.fusion == "top"
    following = torch.cat((batch.features[:, 1:], batch.features[:, -1:]), dim=1)  # f_{p+1}
    for k, step in enumerate(steps[:settings.unroll]):
        valid = batch.valid(k)
        if not bool(valid.any()):
            continue
        out = step.features[valid]  # (n, d)
        target = remap[batch.targets[valid]]
        keep = target != IGNORE
        term = (F.cross_entropy(layer.logits(out[keep]), target[keep]) if bool(keep.any())
                else total)
        if regress:
            term = term + settings.feature_weight * F.smooth_l1_loss(out, following[valid])
        total = total + settings.decay ** k * term
    return total


def _fill(topk: torch.Tensor, start: int, batch: EagleBatch, k: int, best: torch.Tensor
          ) -> None:
    """Step ``k``'s top ids ``best [B, T, K]`` into ``topk``'s rows of the batch's answers
    (the first at ``start``): answer row ``r``'s step ``k`` is at ``root + r + k``."""
    row = start
    for b in range(best.shape[0]):
        m, root = int(batch.lengths[b]), int(batch.roots[b])
        if m - k - 1 > 0:  # roots r = 0 .. m - k - 2 have a target at step k
            topk[row:row + m - k - 1, k] = best[b, root + k:root + m - 1]
        row += m


@torch.no_grad()
def eagle_topk(layer: EagleLayer, batches: Sequence[EagleBatch], depth: int, k: int = 5,
               steps: Sequence[Sequence[EagleStep]] | None = None) -> torch.Tensor:
    """int64 ``[N, depth, k]``: at every answer row of ``batches`` (in order), the ``k`` best
    base ids of draft steps ``1 .. depth`` along the teacher-forced chain from that root
    (ranked over the shortlist; ``-1`` where the answer has ended); ``steps``: the batches'
    unrolled steps when the caller has them (at least ``depth``)."""
    rows = sum(int(b.lengths.sum()) for b in batches)
    out = torch.full((rows, depth, k), -1, dtype=torch.int64)
    start = 0
    for i, batch in enumerate(batches):
        unrolled = (steps[i] if steps is not None else
                    layer.unroll(batch.features, batch.tokens, batch.positions, depth,
                                 project=False))
        for j in range(depth):
            logits = layer.logits(unrolled[j].features)  # (B, T, Vs)
            best = layer.token_ids(logits.topk(min(k, logits.shape[-1]), dim=-1).indices)
            if best.shape[-1] < k:
                best = torch.cat((best, best.new_full((*best.shape[:2], k - best.shape[-1]),
                                                      -1)), dim=-1)
            _fill(out, start, batch, j, best)
        start += int(batch.lengths.sum())
    return out


@torch.no_grad()
def evaluate_eagle(layer: EagleLayer, batches: Sequence[EagleBatch], data: PositionData,
                   settings: HeadsTrainSettings, remap: torch.Tensor) -> dict[str, Any]:
    """Held-out loss, top-1/top-5 of draft steps ``1 .. settings.heads`` and the chain's B at
    that depth (``data``: the batches' answers as positions, in the same order).

    Returns:
        ``{"loss", "top1": [heads], "top5": [heads], "positions": [heads], "chain_B"}``.
    """
    depth = max(settings.heads, settings.unroll)
    loss, count, unrolled = 0.0, 0, []
    for batch in batches:
        steps = layer.unroll(batch.features, batch.tokens, batch.positions, depth,
                             project=False)
        loss += float(eagle_loss(layer, batch, steps, settings, remap)) * batch.count
        count += batch.count
        unrolled.append(steps)
    topk = eagle_topk(layer, batches, settings.heads, 5, unrolled)
    scores = topk_scores(topk, data)
    return {"loss": loss / max(count, 1), "top1": scores["top1"], "top5": scores["top5"],
            "positions": scores["positions"], "chain_B": scores["B_vanilla"]}


@torch.no_grad()
def score_eagle(layer: EagleLayer, dset: DistillSet, maker: FeatureMaker, depth: int = 8,
                log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The offline chain measure: every held-out answer of ``dset``, draft steps ``1 ..
    depth`` from every root (the layer's own features after step 1).

    Returns:
        :func:`~blockdraft.training.heads.data_curve.topk_scores`' figures (``B_vanilla``:
        the greedy chain of ``depth``; ``B_oracle5``: a full top-5 tree's oracle) and
        ``B_chain``: the chain's B at each depth ``1 .. depth``.
    """
    held = load_sequences(dset, "heldout", maker.stored)
    order = list(range(len(held)))
    data = held.positions(order)
    parts = []
    for i in range(0, len(order), EVAL_BATCH):
        batch = maker.batch(held, order[i:i + EVAL_BATCH])
        parts.append(eagle_topk(layer, [batch], depth))
        if log is not None and (i // EVAL_BATCH) % 10 == 9:
            log(f"scored {i + EVAL_BATCH} of {len(order)} held-out answers")
    topk = torch.cat(parts)
    scores = topk_scores(topk, data)
    scores["B_chain"] = [chain_block_efficiency(topk[:, :n], data, 1)
                         for n in range(1, depth + 1)]
    return scores


def score_eagle_runs(runs: Sequence[HeadsRun], dset: DistillSet, base: Any,
                     lm_head: torch.Tensor, embed: torch.Tensor, depth: int = 8,
                     pad_id: int = 0, log: Callable[[str], None] | None = log_line
                     ) -> list[dict[str, Any]]:
    """:func:`score_eagle` of each run's layer (the runs of
    :func:`~blockdraft.training.heads.data_curve.read_run` on EAGLE layers' folders), in the
    rows :func:`~blockdraft.training.heads.data_curve.score_runs` gives other heads (sorted
    by training tokens; ``top1``/``top5`` per draft step).

    Args:
        base: the base (its forward makes the features a layer's context needs; unused
            when a layer reads the stored states of the answers).
        lm_head, embed: the base's output projection and input embedding, float32.

    Raises:
        TrainingError: a run that holds no EAGLE layer.
    """
    from blockdraft.models.heads.eagle_files import eagle_record

    out = []
    for run in sorted(runs, key=lambda r: r.tokens):
        layer = run.heads
        if not isinstance(layer, EagleLayer):
            raise TrainingError(f"{run.path} holds no EAGLE draft layer: score_runs scores it")
        layer = layer.float().attach(embed, lm_head).eval()
        context = str(eagle_record(run.path).get("context", "answer"))
        maker = FeatureMaker(layer.config.fusion, context, base, layer.config.fuse_layers,
                             pad_id)
        row = {"path": str(run.path), "prompts": run.prompts, "tokens": run.tokens,
               "step": run.step, "signature": run.signature,
               **score_eagle(layer, dset, maker, depth)}
        out.append(row)
        if log is not None:
            log(f"{run.path}: {run.tokens} tokens, top-1 "
                + " ".join(f"{v:.3f}" for v in row["top1"]) + ", chain B by depth "
                + " ".join(f"{v:.3f}" for v in row["B_chain"])
                + f", oracle(5) {row['B_oracle5']:.3f}")
    return out


def _eval_answers(held: EagleSequences, positions: int, seed: int) -> list[int]:
    """Held-out answers (a seeded pick, in set order) holding at least ``positions`` targets
    (all of them if they hold fewer)."""
    pick = torch.randperm(len(held), generator=torch.Generator().manual_seed(seed)).tolist()
    weights = held.weights()
    chosen, total = [], 0.0
    for s in pick:
        if total >= positions:
            break
        if weights[s] > 0:
            chosen.append(s)
            total += float(weights[s])
    return sorted(chosen)


def train_eagle(
    dset: DistillSet,
    base: Any,
    work: Any,
    settings: HeadsTrainSettings,
    *,
    minutes: float | None = None,
    stop_after: int | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = log_line,
    extra_signature: dict[str, object] | None = None,
    pad_id: int = 0,
    lm_head: torch.Tensor | None = None,
    embed: torch.Tensor | None = None,
) -> HeadsTrainResult:
    """Train an EAGLE draft layer on a distillation set, resuming from ``work/checkpoint.pt``
    (the loop of every kind: :func:`~blockdraft.training.heads.loop.run_loop`).

    Args:
        dset: the data (its train shards train, its held-out shards evaluate).
        base: the ``transformers`` base (eval mode): its config (the layer's sizes), its
            embedding and ``lm_head`` (frozen), its final norm (the EAGLE-3 head norm's
            start) and, unless the features are the stored states, its forward (its dtype).
        work: the run's folder (``checkpoint.pt``, ``curve.json``).
        settings: ``arch="eagle"`` (see :class:`~blockdraft.training.heads.trainer
            .HeadsTrainSettings`).
        minutes, stop_after, progress, log: see :func:`~blockdraft.training.heads.loop.run_loop`.
        extra_signature: more fields for the signature (the base, the command...).
        pad_id: the id the base's padded forward fills with.
        lm_head, embed: the base's output projection and input embedding ``[V, d]`` when
            the caller has them in float32 (a base run in bfloat16 for its features); by
            default read from ``base``.

    Returns:
        The layer (``heads``: float32, eval mode, the best evaluation's weights, attached to
        the base) with its curve.

    Raises:
        TrainingError: bad settings, a base the layer cannot copy (naming the value), no
            data, stored states of another width, or a checkpoint of other settings or data.
    """
    settings.check()
    if settings.arch != "eagle":
        raise TrainingError(f"train_eagle trains arch 'eagle', got {settings.arch!r}")
    root = check_training_folder(work)
    try:
        config = EagleConfig.from_base(base.config, settings.fusion)
    except ModelError as e:
        raise TrainingError(f"the base does not fit an EAGLE layer: {e}") from e
    maker = FeatureMaker(settings.fusion, settings.context, base, config.fuse_layers, pad_id)
    train = load_sequences(dset, "train", maker.stored)
    held = load_sequences(dset, "heldout", maker.stored)
    if train.hidden is not None and train.hidden.shape[1] != config.d_model:
        raise TrainingError(f"the set's states have width {train.hidden.shape[1]}; the base's "
                            f"d = {config.d_model}: train on a set this base made")
    lm_head = (lm_head_weight(base) if lm_head is None else lm_head).float()
    embed = (base.get_input_embeddings().weight if embed is None else embed).detach().float()
    vocab = lm_head.shape[0]
    flat = torch.from_numpy(np.concatenate(train.answers))
    shortlist, info = None, {}
    if settings.vocab == "shortlist":
        shortlist = answer_shortlist(flat, settings.shortlist, vocab)
        info = shortlist_record(np.bincount(flat.numpy(), minlength=vocab), shortlist.numpy(),
                                f"training targets of {data_key(dset)}")
    torch.manual_seed(settings.seed)
    layer = EagleLayer(config, shortlist, info)
    if config.head_norm:  # the base's final norm as the start of the layer's own
        with torch.no_grad():
            layer.out_norm.weight.copy_(final_norm(base).get_parameter("weight").detach().float())
    layer.attach(embed, lm_head)
    remap = torch.full((vocab,), IGNORE, dtype=torch.int64)
    rows = torch.arange(vocab) if shortlist is None else shortlist
    remap[rows] = torch.arange(rows.numel())
    fields: dict[str, object] = {
        **(extra_signature or {}), "data": data_key(dset), "prompts": len(train),
        "tokens": human_count(train.tokens), "heldout": f"{len(held)}p/"
        f"{human_count(held.tokens)}", "fuse_layers": "+".join(map(str, config.fuse_layers)),
        "feature_dtype": "stored" if maker.stored else str(next(base.parameters()).dtype),
        **{k: v for k, v in recorded_settings(settings).items() if k != "version"},
        "threads": torch.get_num_threads(), **environment()}
    signature = format_signature(fields)
    identity: dict[str, Any] = {"settings": recorded_settings(settings), "data": data_key(dset)}
    optimizer = torch.optim.AdamW(layer.parameters(), lr=settings.lr,
                                  weight_decay=settings.weight_decay)
    sampler = torch.Generator().manual_seed(settings.seed)
    weights = train.weights()
    if not bool((weights > 0).any()):
        raise TrainingError(f"the training answers of {dset.folder} are all shorter than 2 "
                            "tokens: nothing for a draft layer to learn")
    chosen = _eval_answers(held, settings.eval_positions, settings.seed + 1)
    cached: list[EagleBatch] = []

    def batch_loss() -> tuple[torch.Tensor, int]:
        picked = torch.multinomial(weights, settings.batch, replacement=True,
                                   generator=sampler).tolist()
        batch = maker.batch(train, picked)
        steps = layer.unroll(batch.features, batch.tokens, batch.positions, settings.unroll,
                             project=False)
        return eagle_loss(layer, batch, steps, settings, remap), batch.count

    def evaluate() -> dict[str, Any]:
        if not cached:  # the held-out features, once
            cached.extend(maker.batch(held, chosen[i:i + EVAL_BATCH])
                          for i in range(0, len(chosen), EVAL_BATCH))
        return evaluate_eagle(layer, cached, held.positions(chosen), settings, remap)

    done = run_loop(layer, optimizer, sampler, batch_loss, evaluate, settings, root, identity,
                    signature, minutes=minutes, stop_after=stop_after, progress=progress,
                    log=log, label="eagle", extra_state={"shortlist": shortlist})
    return HeadsTrainResult(layer, done.curve, signature, done.step, done.finished,
                            done.best_step)
