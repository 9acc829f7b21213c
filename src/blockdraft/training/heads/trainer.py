"""Train Medusa heads on cached self-distillation data (frozen base, docs/definitions.md sec. 10).

The data are a distillation set (:mod:`blockdraft.training.heads.distill`) read as flat
positions (:mod:`blockdraft.training.heads.positions`): for every answer token ``y_{j+1}`` the
base's final
hidden state ``h_j`` that predicted it. Only the heads train; the base is not run at all: its
``lm_head`` (for SmolLM2 the tied embedding, frozen) is the only part of it loaded.

Loss (the Medusa-1 recipe). Medusa head ``i - 1`` (blockdraft head ``i + 1``, ``i = 1 .. n``)
at ``h_j`` predicts ``y_{j+1+i}``, the token ``i`` positions after the base's own next token:

    loss = sum_i decay^(i-1) * CE(head i's logits at h_j, y_{j+1+i})

averaged per head over the positions where ``y_{j+1+i}`` exists (``decay`` 0.8). With
``loss="kl"`` the hard target is replaced by the base's own distribution at that position,
``softmax(lm_head(h_{j+i}))``, computed from the cached states (KL(base || head)).

Positions are sampled uniformly (with replacement, a seeded generator) across all training
shards; AdamW with a linear warm-up then a cosine (or constant) learning rate. Every
``eval_every`` steps the heads are scored on a fixed sample of held-out positions (prompts
never trained on): top-1 and top-5 accuracy per head against ``y_{j+1+i}``, and the loss; a
checkpoint (heads, the best heads so far, optimizer, step, sampler state, curve) is written
then, so a run resumes where it stopped and ends with the same heads as an uninterrupted one.
The heads returned are those of the best evaluation (mean held-out top-1), not the last. The
loop itself is every kind's (:func:`~blockdraft.training.heads.loop.run_loop`; the EAGLE draft
layer's run: :mod:`~blockdraft.training.heads.eagle_train`).

Public surface:
    HeadsTrainSettings                         every training setting (in the signature)
    HeadsTrainResult                           the heads, their learning curve, the signature
    lm_head_weight(base) -> [V, d]             the base's output projection (frozen)
    answer_shortlist(targets, size, V) -> ids  the draft vocabulary of the training targets
    heads_loss(heads, lm_head, data, rows, settings) -> (loss, logits, targets)
    evaluate_heads(heads, lm_head, data, rows, settings) -> held-out top-1/top-5 per head
    data_key(dset) -> str                      the identity of a set's finished shards
    read_checkpoint, check_training_folder, CHECKPOINT_FILE, CURVE_FILE
                                               (their home: :mod:`.loop`, which runs the loop)
    train_heads(dset, lm_head, work, settings, ...) -> HeadsTrainResult
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812

from blockdraft.core.signature import environment, format_signature, human_count
from blockdraft.models.heads.eagle_layer import EagleLayer
from blockdraft.models.hf.medusa import MedusaHeads
from blockdraft.models.hf.prefix_heads import PrefixHeads
from blockdraft.training.errors import TrainingError
from blockdraft.training.heads.loop import (
    CHECKPOINT_FILE,
    CURVE_FILE,
    check_training_folder,
    read_checkpoint,
    run_loop,
)
from blockdraft.training.heads.positions import IGNORE, PositionData, head_targets, load_positions
from blockdraft.training.heads.progress import log_line
from blockdraft.training.heads.shards import DistillSet
from blockdraft.training.heads.shortlist import frequency_shortlist

__all__ = ["ARCHS", "CHECKPOINT_FILE", "CURVE_FILE", "LOSSES", "SCHEDULES", "VOCABS",
           "HeadsTrainResult", "HeadsTrainSettings", "answer_shortlist", "check_training_folder",
           "data_key", "evaluate_heads", "head_states", "heads_loss", "lm_head_weight",
           "read_checkpoint", "recorded_settings", "restrict_vocab", "train_heads"]

LOSSES = ("ce", "kl")
ARCHS = ("medusa", "prefix", "eagle")
VOCABS = ("full", "seen", "shortlist")
SCHEDULES = ("cosine", "constant")


@dataclass(frozen=True)
class HeadsTrainSettings:
    """Every setting of a head-training run (all are in its signature).

    Attributes:
        heads: Medusa heads ``n`` (the model then has ``h = n + 1`` heads).
        layers: ResBlocks per head.
        steps: optimizer steps in all (the cosine schedule's length).
        batch: positions per step.
        lr: peak learning rate (AdamW).
        weight_decay: AdamW weight decay.
        warmup: linear warm-up steps.
        schedule: ``"cosine"`` (to 0 at ``steps``) or ``"constant"`` after the warm-up.
        decay: head ``i``'s loss weight is ``decay ** (i - 1)``.
        loss: ``"ce"`` (the base's greedy tokens) or ``"kl"`` (its distributions).
        seed: seeds the heads' initialisation and the position sampler.
        eval_every: steps between held-out evaluations (and checkpoints).
        eval_positions: held-out positions scored (a fixed seeded sample).
        patience: stop after this many evaluations without a better mean held-out top-1
            (0: never stop early).
        vocab: the softmax of the training loss over the ``"full"`` vocabulary, or only over
            the tokens ``"seen"`` in the training answers (every target is one of them; on
            SmolLM2 a small share of ``V``, so a step costs that much less; the
            approximation: the heads are never taught to push unseen tokens down).
            ``"shortlist"``: over the ``shortlist`` most frequent tokens of the training
            answers (:func:`~blockdraft.training.heads.shortlist.frequency_shortlist`), the
            draft vocabulary the packaged heads are normalised over at decode time
            (``heads package --shortlist``); targets outside it leave the loss, and the
            held-out scores rank the shortlist only (a target outside it is a miss).
            Otherwise evaluation ranks the full vocabulary.
        shortlist: the shortlist's size (used by ``vocab="shortlist"`` only).
        arch: ``"medusa"`` (independent heads) or ``"prefix"`` (each head also reads the
            token before its target: :class:`~blockdraft.models.hf.prefix_heads.PrefixHeads`,
            Hydra-style).
        init: the heads the run starts from, as ``name@digest`` of their weights (a warm
            start: another epoch, new data), or ``""`` for a seeded random start; the
            weights themselves are :func:`train_heads`' ``init``.

    With ``arch="eagle"`` (an EAGLE draft layer, :mod:`~blockdraft.training.heads
    .eagle_train`): ``heads`` is the draft steps evaluated (held-out top-1/top-5 of steps
    ``1 .. heads``), ``batch`` whole answers (sequences) per step, ``decay`` the weight
    ratio of successive unrolled steps, ``vocab`` ``"shortlist"`` (the head is the
    shortlist's rows of the base's ``lm_head``) or ``"full"``; ``layers`` and ``loss`` are
    not read, and four more settings apply (:data:`~blockdraft.training.heads.eagle_train
    .EAGLE_DEFAULTS` gives each fusion's defaults):

    Attributes:
        fusion: the layer's base feature, ``"top"`` (EAGLE-1: the final hidden state) or
            ``"layers"`` (EAGLE-3: low, middle and high layers fused).
        unroll: draft steps unrolled in training on the layer's own output features
            ("training-time test"; 1: teacher-forced features only, as EAGLE-1).
        feature_weight: the weight of the smooth-L1 regression of each step's output feature
            onto the base's next feature (``"top"`` only; EAGLE-1: 10, the ratio of its
            1.0 regression to 0.1 classification weights), beside cross-entropy weight 1.
        context: what the layer attends to: ``"answer"`` (the answer positions: the base
            states the set stores, no base run with ``"top"``) or ``"prompt"`` (the prompt's
            positions too, as it would run over them at decode time: features from a
            teacher-forced forward of the base, batch by batch).
    """

    heads: int = 5
    layers: int = 1
    steps: int = 4000
    batch: int = 128
    lr: float = 1e-3
    weight_decay: float = 0.0
    warmup: int = 50
    schedule: str = "cosine"
    decay: float = 0.8
    loss: str = "ce"
    seed: int = 0
    eval_every: int = 100
    eval_positions: int = 2048
    patience: int = 0
    vocab: str = "full"
    shortlist: int = 4096
    arch: str = "medusa"
    init: str = ""
    fusion: str = "top"
    unroll: int = 1
    feature_weight: float = 10.0
    context: str = "answer"
    version: str = field(default="1")

    def check(self) -> None:
        """Raise :class:`TrainingError` on an invalid setting."""
        for name in ("heads", "layers", "steps", "batch", "eval_every", "eval_positions",
                     "shortlist"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise TrainingError(f"{name} must be an integer >= 1, got {value!r}")
        if self.loss not in LOSSES:
            raise TrainingError(f"loss must be one of {', '.join(LOSSES)}, got {self.loss!r}")
        if self.arch not in ARCHS:
            raise TrainingError(f"arch must be one of {', '.join(ARCHS)}, got {self.arch!r}")
        if self.vocab not in VOCABS:
            raise TrainingError(f"vocab must be one of {', '.join(VOCABS)}, got {self.vocab!r}")
        if self.schedule not in SCHEDULES:
            raise TrainingError(f"schedule must be one of {', '.join(SCHEDULES)}")
        if not self.lr > 0 or self.warmup < 0 or self.patience < 0:
            raise TrainingError("lr must be > 0, warmup and patience >= 0")
        if self.arch == "eagle":
            self._check_eagle()

    def _check_eagle(self) -> None:
        """The settings of an EAGLE draft layer's run."""
        if self.fusion not in ("top", "layers"):
            raise TrainingError(f"fusion must be 'top' or 'layers', got {self.fusion!r}")
        if self.context not in ("answer", "prompt"):
            raise TrainingError(f"context must be 'answer' or 'prompt', got {self.context!r}")
        if isinstance(self.unroll, bool) or not isinstance(self.unroll, int) or self.unroll < 1:
            raise TrainingError(f"unroll must be an integer >= 1, got {self.unroll!r}")
        if not self.feature_weight >= 0:
            raise TrainingError(f"feature_weight must be >= 0, got {self.feature_weight!r}")
        if self.fusion == "layers" and self.feature_weight:
            raise TrainingError(f"feature_weight {self.feature_weight} applies to fusion 'top' "
                                "(the base's next feature is the regression target); fused "
                                "layers have none: set it to 0")
        if self.vocab not in ("full", "shortlist"):
            raise TrainingError(f"an EAGLE layer's head is the base's lm_head rows of the "
                                f"shortlist or of the full vocabulary; vocab {self.vocab!r} "
                                "does not apply")
        if self.loss != "ce":
            raise TrainingError(f"an EAGLE layer trains on the base's greedy tokens (loss "
                                f"'ce'), got loss {self.loss!r}")

    def lr_at(self, step: int) -> float:
        """The learning rate of step ``step`` (0-based)."""
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        if self.schedule == "constant":
            return self.lr
        span = max(self.steps - self.warmup, 1)
        return self.lr * 0.5 * (1.0 + math.cos(math.pi * min(step - self.warmup, span) / span))


def _warm_start(heads: torch.nn.Module, init: torch.nn.Module,
                settings: HeadsTrainSettings) -> None:
    """``heads`` take ``init``'s weights (float32), refused unless they are alike."""
    if isinstance(init, PrefixHeads) != isinstance(heads, PrefixHeads):
        have = "prefix" if isinstance(init, PrefixHeads) else "medusa"
        raise TrainingError(f"the heads to start from ({settings.init}) are {have} heads, the "
                            f"run's arch is {settings.arch}")
    mine, theirs = heads.state_dict(), init.state_dict()
    wrong = sorted(k for k in mine.keys() | theirs.keys()
                   if k not in mine or k not in theirs or mine[k].shape != theirs[k].shape)
    if wrong:
        raise TrainingError(f"the heads to start from ({settings.init}) differ in shape from "
                            f"the run's ({settings.heads} heads, {settings.layers} ResBlocks): "
                            + ", ".join(wrong[:4]) + " (set --heads and --layers to theirs)")
    heads.load_state_dict({k: v.float() for k, v in theirs.items()})


def recorded_settings(settings: HeadsTrainSettings) -> dict[str, Any]:
    """The settings a run's identity and signature record: the shortlist's size and the
    architecture only where they are not the defaults of before (so older checkpoints keep
    their identity)."""
    fields = asdict(settings)
    if settings.vocab != "shortlist":
        del fields["shortlist"]
    if settings.arch == "medusa":
        del fields["arch"]
    if not settings.init:
        del fields["init"]
    if settings.arch != "eagle":
        for name in ("fusion", "unroll", "feature_weight", "context"):
            del fields[name]
    return fields


def lm_head_weight(base: Any) -> torch.Tensor:
    """The base model's output projection ``[V, d]`` as a float32 copy (frozen)."""
    return base.get_output_embeddings().weight.detach().float().clone()  # type: ignore[no-any-return]


def answer_shortlist(targets: torch.Tensor, size: int, vocab_size: int) -> torch.Tensor:
    """The draft vocabulary: the ``size`` most frequent of the training targets (int64 base
    ids, :func:`~blockdraft.training.heads.shortlist.frequency_shortlist`), sorted.

    Raises:
        TrainingError: ``size`` larger than the vocabulary (never clamped in silence).
    """
    if size > vocab_size:
        raise TrainingError(f"shortlist {size} is larger than the base's vocabulary "
                            f"V = {vocab_size}; ask for at most {vocab_size} tokens")
    counts = np.bincount(targets.numpy(), minlength=vocab_size)
    return torch.from_numpy(frequency_shortlist(counts, size))


def restrict_vocab(data: PositionData, ids: torch.Tensor, vocab_size: int) -> PositionData:
    """``data`` with its targets renumbered into ``ids`` (int64 ``[V']``, distinct): target
    ``ids[k]`` becomes ``k``, a target outside ``ids`` becomes :data:`IGNORE` (it leaves
    the loss)."""
    remap = torch.full((vocab_size,), IGNORE, dtype=torch.long)
    remap[ids] = torch.arange(ids.numel())
    return PositionData(data.hidden, remap[data.token_ids], data.remaining, data.prompts,
                        data.token_ids)


def head_states(heads: MedusaHeads, data: PositionData, rows: torch.Tensor,
                embed: torch.Tensor | None) -> torch.Tensor:
    """The heads' pre-projection states at ``rows``: ``[B, n, d]`` float32.

    Prefix heads (:class:`~blockdraft.models.hf.prefix_heads.PrefixHeads`) also read the
    embedding (``embed [V, d]``, the base's input embeddings) of the token before each head's
    target, teacher-forced: the base's greedy token ``y_{j+1+i-1}`` (row ``rows + i - 1``;
    past an answer's end a placeholder whose target is :data:`IGNORE` anyway).

    Raises:
        TrainingError: prefix heads without ``embed``.
    """
    x = data.hidden[rows].float()  # (B, d)
    if not isinstance(heads, PrefixHeads):
        return heads(x)  # type: ignore[no-any-return]
    if embed is None:
        raise TrainingError("prefix heads need the base's input embeddings (embed)")
    index = (rows[:, None] + torch.arange(heads.num_heads)).clamp(max=data.tokens - 1)
    previous = embed[data.token_ids[index]].float()  # (B, n, d)
    return heads(x, previous=previous)  # type: ignore[no-any-return]


# --------------------------------------------------------------------------------- the loss


def heads_loss(
    heads: MedusaHeads,
    lm_head: torch.Tensor,
    data: PositionData,
    rows: torch.Tensor,
    settings: HeadsTrainSettings,
    embed: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The weighted loss at ``rows`` and each head's logits (``embed``: see
    :func:`head_states`).

    Returns:
        ``(loss [], logits [B, n, V], targets [B, n])`` (targets :data:`IGNORE` where the
        answer has ended).
    """
    n = settings.heads
    logits = head_states(heads, data, rows, embed) @ lm_head.T  # (B, n, V)
    targets = head_targets(data, rows, n)  # (B, n)
    total = logits.new_zeros(())
    for i in range(n):
        valid = targets[:, i] != IGNORE
        if not bool(valid.any()):
            continue
        if settings.loss == "ce":
            term = F.cross_entropy(logits[valid, i], targets[valid, i])
        else:
            with torch.no_grad():
                teacher = data.hidden[(rows[valid] + i + 1)].float() @ lm_head.T  # (b, V)
            term = F.kl_div(F.log_softmax(logits[valid, i], -1), F.log_softmax(teacher, -1),
                            log_target=True, reduction="batchmean")
        total = total + settings.decay ** i * term
    return total, logits, targets


@torch.no_grad()
def evaluate_heads(
    heads: MedusaHeads,
    lm_head: torch.Tensor,
    data: PositionData,
    rows: torch.Tensor,
    settings: HeadsTrainSettings,
    chunk: int = 256,
    vocab: torch.Tensor | None = None,
    embed: torch.Tensor | None = None,
) -> dict[str, Any]:
    """Held-out top-1 / top-5 per head (against the base's greedy ``y_{j+1+i}``) and loss.

    Args:
        vocab: int64 ``[Vs]`` ids: rank these tokens only, as heads with this shortlist
            draft (a target outside it is a miss; the loss is over the targets inside it).
            None: the full vocabulary.
        embed: the base's input embeddings (prefix heads; :func:`head_states`).

    Returns:
        ``{"loss": float, "top1": [n floats], "top5": [n floats], "positions": [n ints]}``.
    """
    n = settings.heads
    scored = data
    if vocab is not None:  # the loss and the ranking over the shortlist
        scored = restrict_vocab(data, vocab, lm_head.shape[0])
        lm_head = lm_head[vocab]
    hit1 = torch.zeros(n)
    hit5 = torch.zeros(n)
    count = torch.zeros(n)
    loss = 0.0
    for start in range(0, rows.numel(), chunk):
        part = rows[start:start + chunk]
        value, logits, targets = heads_loss(heads, lm_head, scored, part, settings, embed)
        loss += float(value) * part.numel()
        top5 = logits.topk(min(5, logits.shape[-1]), dim=-1).indices  # (B, n, 5)
        if vocab is not None:  # back to token ids, against every target
            top5, targets = vocab[top5], head_targets(data, part, n)
        valid = targets != IGNORE
        match = (top5 == targets[..., None]) & valid[..., None]
        hit1 += match[..., 0].sum(0).float()
        hit5 += match.any(-1).sum(0).float()
        count += valid.sum(0).float()
    safe = count.clamp(min=1)
    return {"loss": loss / max(rows.numel(), 1), "top1": (hit1 / safe).tolist(),
            "top5": (hit5 / safe).tolist(), "positions": [int(c) for c in count]}


# ------------------------------------------------------------------------------ the loop


@dataclass
class HeadsTrainResult:
    """What :func:`train_heads` returns.

    Attributes:
        heads: the trained heads (float32, eval mode): those of the evaluation with the
            best mean held-out top-1 (``best_step``), not necessarily the last (an EAGLE
            draft layer: :func:`~blockdraft.training.heads.eagle_train.train_eagle`).
        curve: one entry per evaluation: ``step``, ``positions`` (training positions seen),
            ``seconds`` (training wall time so far), ``train_loss``, ``heldout_loss``,
            ``top1``/``top5`` (per head).
        signature: the run's settings and data (:func:`format_signature`).
        step: steps done.
        finished: True when the run reached ``steps`` or stopped early on ``patience``.
        best_step: the step whose heads are returned (0: no evaluation yet).
    """

    heads: MedusaHeads | EagleLayer
    curve: list[dict[str, Any]]
    signature: str
    step: int
    finished: bool
    best_step: int = 0


def data_key(dset: DistillSet) -> str:
    """A 12-hex-digit hash of a distillation set's settings and finished shards."""
    raw = json.dumps([dset.plan["settings"], dset.done], sort_keys=True).encode()
    return hashlib.sha256(raw).hexdigest()[:12]


def train_heads(
    dset: DistillSet,
    lm_head: torch.Tensor,
    work: str | os.PathLike[str],
    settings: HeadsTrainSettings,
    *,
    minutes: float | None = None,
    stop_after: int | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = log_line,
    extra_signature: dict[str, object] | None = None,
    embed: torch.Tensor | None = None,
    init: torch.nn.Module | None = None,
) -> HeadsTrainResult:
    """Train Medusa heads on a distillation set, resuming from ``work/checkpoint.pt``.

    Args:
        dset: the data (its train shards train, its held-out shards evaluate).
        lm_head: the base's output projection ``[V, d]`` (float32, frozen).
        work: the run's folder: ``checkpoint.pt`` and ``curve.json``, created with the first
            checkpoint (a new or empty folder, or one of an earlier call to continue).
        settings: see :class:`HeadsTrainSettings`.
        minutes: this run's time box (wall minutes of training; a checkpoint is written
            when it ends, and a later call goes on).
        stop_after: stop (with a checkpoint) after this step, for tests.
        progress: a rich progress bar on a terminal.
        log: one line per evaluation; None for silence.
        extra_signature: more fields for the signature (the base, the command...).
        embed: the base's input embeddings ``[V, d]`` (prefix heads; default ``lm_head``,
            right for tied embeddings).
        init: heads to start from (``settings.init`` names them): the same architecture,
            heads, ResBlocks and ``d`` as the run's; their weights replace the random start.

    Returns:
        See :class:`HeadsTrainResult`.

    Raises:
        TrainingError: bad settings, no data, a ``work`` folder that holds other files, or a
            checkpoint from other settings or data (each changed setting named).
    """
    settings.check()
    if settings.arch == "eagle":
        raise TrainingError("an EAGLE draft layer trains with train_eagle "
                            "(blockdraft.training.heads.eagle_train), not train_heads")
    root = check_training_folder(work)
    train = load_positions(dset, "train")
    held = load_positions(dset, "heldout")
    d = train.hidden.shape[1]
    if lm_head.shape[1] != d:
        raise TrainingError(f"lm_head has d = {lm_head.shape[1]}, the data d = {d}")
    lm_head = lm_head.float().requires_grad_(False)
    fields: dict[str, object] = {
        **(extra_signature or {}),
        "data": data_key(dset), "prompts": train.prompts, "tokens": human_count(train.tokens),
        "heldout": f"{held.prompts}p/{human_count(held.tokens)}",
        **{k: v for k, v in recorded_settings(settings).items() if k != "version"},
        "threads": torch.get_num_threads(), **environment(),
    }
    signature = format_signature(fields)
    identity: dict[str, Any] = {"settings": recorded_settings(settings), "data": data_key(dset)}

    torch.manual_seed(settings.seed)
    heads = (PrefixHeads(d, settings.heads, settings.layers) if settings.arch == "prefix"
             else MedusaHeads(d, None, settings.heads, settings.layers))
    if bool(settings.init) != (init is not None):
        raise TrainingError("settings.init names the heads to start from and init gives "
                            "them: pass both or neither")
    if init is not None:
        _warm_start(heads, init, settings)
    if embed is None and settings.arch == "prefix":
        embed = lm_head  # tied input and output embeddings (SmolLM2, the tiny models)
    if embed is not None:
        embed = embed.float().requires_grad_(False)
    optimizer = torch.optim.AdamW(heads.parameters(), lr=settings.lr,
                                  weight_decay=settings.weight_decay)
    sampler = torch.Generator().manual_seed(settings.seed)
    usable = train.usable()
    train_head = lm_head
    eval_vocab: torch.Tensor | None = None
    if settings.vocab != "full":  # the loss's softmax over part of the vocabulary
        if settings.vocab == "seen":  # the training answers' tokens
            part = torch.unique(train.targets)  # (V',)
        else:  # the draft vocabulary the packaged heads are normalised over
            part = answer_shortlist(train.targets, settings.shortlist, lm_head.shape[0])
            eval_vocab = part
        train = restrict_vocab(train, part, lm_head.shape[0])
        train_head = lm_head[part].contiguous()  # (V', d)
    eval_rows = held.usable()
    if eval_rows.numel() > settings.eval_positions:
        pick = torch.randperm(eval_rows.numel(), generator=torch.Generator().manual_seed(
            settings.seed + 1))[:settings.eval_positions]
        eval_rows = eval_rows[pick.sort().values]

    def batch_loss() -> tuple[torch.Tensor, int]:
        rows = usable[torch.randint(usable.numel(), (settings.batch,), generator=sampler)]
        return heads_loss(heads, train_head, train, rows, settings, embed)[0], settings.batch

    def evaluate() -> dict[str, Any]:
        return evaluate_heads(heads, lm_head, held, eval_rows, settings, vocab=eval_vocab,
                              embed=embed)

    done = run_loop(heads, optimizer, sampler, batch_loss, evaluate, settings, root, identity,
                    signature, minutes=minutes, stop_after=stop_after, progress=progress,
                    log=log, extra_state={"shortlist": eval_vocab})
    if eval_vocab is not None:  # the heads draft over the shortlist they were trained on
        heads.set_shortlist(eval_vocab, lm_head.shape[0], info={
            "counted_on": f"training targets of {data_key(dset)}",
            "tokens": int(train.targets.numel()),
            "coverage": round(float((train.targets != IGNORE).double().mean()), 6)})
    heads.eval()
    return HeadsTrainResult(heads, done.curve, signature, done.step, done.finished,
                            done.best_step)
