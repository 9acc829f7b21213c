"""Train Medusa heads on cached self-distillation data (frozen base, docs/definitions.md sec. 10).

The data are a distillation set (:mod:`blockdraft.models.hf.distill`): for every answer token
``y_{j+1}`` the base's final hidden state ``h_j`` that predicted it. Only the heads train; the
base is not run at all: its ``lm_head`` (for SmolLM2 the tied embedding, frozen) is the only
part of it loaded.

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
checkpoint (heads, optimizer, step, sampler state, curve) is written then, so a run resumes
where it stopped and ends with the same heads as an uninterrupted one.

Public surface:
    TrainSettings                                  every training setting (in the signature)
    PositionData, load_positions(dset, split)      answer ids + hidden states, flat
    lm_head_weight(base) -> [V, d]                 the base's output projection (frozen)
    train_heads(dset, lm_head, work, settings, ...) -> TrainResult
    train_medusa_heads(base, prompts, out, ...)    distill + train + write (the CLI's)
    plot_curve(curve, path)                        the learning curve as a PNG
    main()                                         ``python -m blockdraft.models.hf.training``
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812

from blockdraft.core.files import atomic_path, cache_dir, write_text_atomic
from blockdraft.core.signature import environment, format_signature, human_count
from blockdraft.models.errors import ModelError
from blockdraft.models.hf.distill import DistillSet, default_threads, distill
from blockdraft.models.hf.medusa import MedusaHeads

LOSSES = ("ce", "kl")
VOCABS = ("full", "seen")
SCHEDULES = ("cosine", "constant")
IGNORE = -100


@dataclass(frozen=True)
class TrainSettings:
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
            Evaluation always ranks the full vocabulary.
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
    version: str = field(default="1")

    def check(self) -> None:
        """Raise :class:`ModelError` on an invalid setting."""
        for name in ("heads", "layers", "steps", "batch", "eval_every", "eval_positions"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ModelError(f"{name} must be an integer >= 1, got {value!r}")
        if self.loss not in LOSSES:
            raise ModelError(f"loss must be one of {', '.join(LOSSES)}, got {self.loss!r}")
        if self.vocab not in VOCABS:
            raise ModelError(f"vocab must be one of {', '.join(VOCABS)}, got {self.vocab!r}")
        if self.schedule not in SCHEDULES:
            raise ModelError(f"schedule must be one of {', '.join(SCHEDULES)}")
        if not self.lr > 0 or self.warmup < 0 or self.patience < 0:
            raise ModelError("lr must be > 0, warmup and patience >= 0")

    def lr_at(self, step: int) -> float:
        """The learning rate of step ``step`` (0-based)."""
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        if self.schedule == "constant":
            return self.lr
        span = max(self.steps - self.warmup, 1)
        return self.lr * 0.5 * (1.0 + math.cos(math.pi * min(step - self.warmup, span) / span))


# ------------------------------------------------------------------------------------- data


@dataclass
class PositionData:
    """The positions of one split, flat across its shards.

    Attributes:
        hidden: ``[N, d]`` the base's final hidden states ``h_j`` (stored dtype).
        targets: int64 ``[N]``: row ``r`` holds the base's greedy token from ``hidden[r]``.
        remaining: int64 ``[N]``: answer tokens after ``targets[r]`` in its answer, so head
            ``i`` has a target at row ``r`` iff ``i <= remaining[r]``
            (``targets[r + i]``).
        prompts: prompts in the split.
    """

    hidden: torch.Tensor
    targets: torch.Tensor
    remaining: torch.Tensor
    prompts: int

    @property
    def tokens(self) -> int:
        return int(self.targets.numel())

    def usable(self) -> torch.Tensor:
        """Rows where at least head 1 has a target (int64 ``[M]``)."""
        return torch.nonzero(self.remaining >= 1).flatten()


def load_positions(dset: DistillSet, split: str) -> PositionData:
    """The finished shards of ``split`` of a distillation set as flat positions.

    Raises:
        ModelError: the split has no finished shard.
    """
    shards = dset.load(split)
    if not shards:
        raise ModelError(f"the distillation set {dset.folder} has no finished {split} shard")
    hidden, targets, remaining = [], [], []
    prompts = 0
    for shard in shards:
        offsets = shard.answer_offsets
        lengths = np.diff(offsets)
        rows = np.arange(offsets[-1]) - np.repeat(offsets[:-1], lengths)  # j in each answer
        remaining.append(torch.from_numpy(np.repeat(lengths, lengths) - 1 - rows))
        targets.append(torch.from_numpy(shard.answer_ids.astype(np.int64)))
        hidden.append(shard.hidden)
        prompts += shard.num_prompts
    return PositionData(torch.cat(hidden), torch.cat(targets), torch.cat(remaining), prompts)


def lm_head_weight(base: Any) -> torch.Tensor:
    """The base model's output projection ``[V, d]`` as a float32 copy (frozen)."""
    return base.get_output_embeddings().weight.detach().float().clone()  # type: ignore[no-any-return]


def _head_targets(data: PositionData, rows: torch.Tensor, n: int) -> torch.Tensor:
    """int64 ``[B, n]``: column ``i - 1`` is ``y_{j+1+i}`` or :data:`IGNORE`."""
    offsets = torch.arange(1, n + 1)
    index = (rows[:, None] + offsets).clamp(max=data.tokens - 1)
    tgt = data.targets[index]
    return torch.where(offsets <= data.remaining[rows, None], tgt, IGNORE)


# --------------------------------------------------------------------------------- the loss


def heads_loss(
    heads: MedusaHeads,
    lm_head: torch.Tensor,
    data: PositionData,
    rows: torch.Tensor,
    settings: TrainSettings,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The weighted loss at ``rows`` and each head's logits.

    Returns:
        ``(loss [], logits [B, n, V], targets [B, n])`` (targets :data:`IGNORE` where the
        answer has ended).
    """
    n = settings.heads
    x = data.hidden[rows].float()  # (B, d)
    logits = heads(x) @ lm_head.T  # (B, n, V)
    targets = _head_targets(data, rows, n)  # (B, n)
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
def evaluate(
    heads: MedusaHeads,
    lm_head: torch.Tensor,
    data: PositionData,
    rows: torch.Tensor,
    settings: TrainSettings,
    chunk: int = 256,
) -> dict[str, Any]:
    """Held-out top-1 / top-5 per head (against the base's greedy ``y_{j+1+i}``) and loss.

    Returns:
        ``{"loss": float, "top1": [n floats], "top5": [n floats], "positions": [n ints]}``.
    """
    n = settings.heads
    hit1 = torch.zeros(n)
    hit5 = torch.zeros(n)
    count = torch.zeros(n)
    loss = 0.0
    for start in range(0, rows.numel(), chunk):
        part = rows[start:start + chunk]
        value, logits, targets = heads_loss(heads, lm_head, data, part, settings)
        loss += float(value) * part.numel()
        top5 = logits.topk(5, dim=-1).indices  # (B, n, 5)
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
class TrainResult:
    """What :func:`train_heads` returns.

    Attributes:
        heads: the trained heads (float32, eval mode).
        curve: one entry per evaluation: ``step``, ``positions`` (training positions seen),
            ``seconds`` (training wall time so far), ``train_loss``, ``heldout_loss``,
            ``top1``/``top5`` (per head).
        signature: the run's settings and data (:func:`format_signature`).
        step: steps done.
        finished: True when the run reached ``steps`` or stopped early on ``patience``.
    """

    heads: MedusaHeads
    curve: list[dict[str, Any]]
    signature: str
    step: int
    finished: bool


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def data_key(dset: DistillSet) -> str:
    """A 12-hex-digit hash of a distillation set's settings and finished shards."""
    raw = json.dumps([dset.plan["settings"], dset.done], sort_keys=True).encode()
    return hashlib.sha256(raw).hexdigest()[:12]


def train_heads(
    dset: DistillSet,
    lm_head: torch.Tensor,
    work: str | os.PathLike[str],
    settings: TrainSettings,
    *,
    minutes: float | None = None,
    stop_after: int | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = _log,
    extra_signature: dict[str, object] | None = None,
) -> TrainResult:
    """Train Medusa heads on a distillation set, resuming from ``work/checkpoint.pt``.

    Args:
        dset: the data (its train shards train, its held-out shards evaluate).
        lm_head: the base's output projection ``[V, d]`` (float32, frozen).
        work: the run's folder: ``checkpoint.pt`` and ``curve.json`` (created).
        settings: see :class:`TrainSettings`.
        minutes: this run's time box (wall minutes of training; a checkpoint is written
            when it ends, and a later call goes on).
        stop_after: stop (with a checkpoint) after this step, for tests.
        progress: a rich progress bar on a terminal.
        log: one line per evaluation; None for silence.
        extra_signature: more fields for the signature (the base, the command...).

    Returns:
        See :class:`TrainResult`.

    Raises:
        ModelError: bad settings, no data, or a checkpoint from other settings or data.
    """
    settings.check()
    root = Path(work)
    root.mkdir(parents=True, exist_ok=True)
    train = load_positions(dset, "train")
    held = load_positions(dset, "heldout")
    d = train.hidden.shape[1]
    if lm_head.shape[1] != d:
        raise ModelError(f"lm_head has d = {lm_head.shape[1]}, the data d = {d}")
    lm_head = lm_head.float().requires_grad_(False)
    fields: dict[str, object] = {
        **(extra_signature or {}),
        "data": data_key(dset), "prompts": train.prompts, "tokens": human_count(train.tokens),
        "heldout": f"{held.prompts}p/{human_count(held.tokens)}",
        **{k: v for k, v in asdict(settings).items() if k != "version"},
        "threads": torch.get_num_threads(), **environment(),
    }
    signature = format_signature(fields)
    identity = {"settings": asdict(settings), "data": data_key(dset)}

    torch.manual_seed(settings.seed)
    heads = MedusaHeads(d, None, settings.heads, settings.layers)
    optimizer = torch.optim.AdamW(heads.parameters(), lr=settings.lr,
                                  weight_decay=settings.weight_decay)
    sampler = torch.Generator().manual_seed(settings.seed)
    usable = train.usable()
    train_head = lm_head
    if settings.vocab == "seen":  # the loss's softmax over the training answers' tokens only
        seen = torch.unique(train.targets)  # (V',)
        remap = torch.full((lm_head.shape[0],), IGNORE, dtype=torch.long)
        remap[seen] = torch.arange(seen.numel())
        train = PositionData(train.hidden, remap[train.targets], train.remaining, train.prompts)
        train_head = lm_head[seen].contiguous()  # (V', d)
    eval_rows = held.usable()
    if eval_rows.numel() > settings.eval_positions:
        pick = torch.randperm(eval_rows.numel(), generator=torch.Generator().manual_seed(
            settings.seed + 1))[:settings.eval_positions]
        eval_rows = eval_rows[pick.sort().values]
    step, curve, best, stale, running = 0, [], -1.0, 0, []
    checkpoint = root / "checkpoint.pt"
    if checkpoint.is_file():
        state = torch.load(checkpoint, weights_only=False)
        if state["identity"] != identity:
            raise ModelError(f"{checkpoint} is from other settings or data; use another folder")
        heads.load_state_dict(state["heads"])
        optimizer.load_state_dict(state["optimizer"])
        sampler.set_state(state["sampler"])
        step, curve, best, stale = state["step"], state["curve"], state["best"], state["stale"]
        running = state["running"]
        if log is not None:
            log(f"resumed {checkpoint} at step {step}")
    seconds_before = curve[-1]["seconds"] if curve else 0.0

    def save() -> None:
        with atomic_path(checkpoint) as tmp:
            torch.save({"identity": identity, "signature": signature, "heads": heads.state_dict(),
                        "optimizer": optimizer.state_dict(), "sampler": sampler.get_state(),
                        "step": step, "curve": curve, "best": best, "stale": stale,
                        "running": running}, tmp)
        write_text_atomic(root / "curve.json", json.dumps(
            {"signature": signature, "curve": curve}, indent=1) + "\n")

    start = time.monotonic()
    bar = _Bar(progress, settings.steps, step)
    finished = step >= settings.steps or (settings.patience > 0 and stale >= settings.patience)
    try:
        heads.train()
        while not finished:
            rows = usable[torch.randint(usable.numel(), (settings.batch,), generator=sampler)]
            for group in optimizer.param_groups:
                group["lr"] = settings.lr_at(step)
            loss, _, _ = heads_loss(heads, train_head, train, rows, settings)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            step += 1
            running.append(float(loss.detach()))
            bar.advance(running[-1])
            finished = step >= settings.steps
            out_of_time = minutes is not None and time.monotonic() - start >= 60.0 * minutes
            stop = stop_after is not None and step >= stop_after
            if step % settings.eval_every == 0 or finished or out_of_time or stop:
                heads.eval()
                scores = evaluate(heads, lm_head, held, eval_rows, settings)
                heads.train()
                seconds = seconds_before + time.monotonic() - start
                curve.append({"step": step, "positions": step * settings.batch,
                              "seconds": round(seconds, 1),
                              "train_loss": sum(running) / max(len(running), 1),
                              "heldout_loss": scores["loss"], "top1": scores["top1"],
                              "top5": scores["top5"]})
                running = []
                mean1 = float(np.mean(scores["top1"]))
                if mean1 > best:
                    best, stale = mean1, 0
                else:
                    stale += 1
                if settings.patience > 0 and stale >= settings.patience:
                    finished = True
                save()
                if log is not None:
                    log(f"step {step} ({step * settings.batch} positions, {seconds:.0f} s): "
                        f"train loss {curve[-1]['train_loss']:.3f}, held-out loss "
                        f"{scores['loss']:.3f}, top-1 "
                        + " ".join(f"{v:.3f}" for v in scores["top1"]) + ", top-5 "
                        + " ".join(f"{v:.3f}" for v in scores["top5"]))
                if out_of_time or stop:
                    break
    finally:
        bar.close()
    heads.eval()
    return TrainResult(heads, curve, signature, step, finished)


class _Bar:
    """A rich progress bar over steps with the running loss (only on a terminal)."""

    def __init__(self, enabled: bool, total: int, done: int) -> None:
        self.progress: Any = None
        if enabled and sys.stderr.isatty():
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.progress = Progress(
                TextColumn("heads"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                TextColumn("loss {task.fields[loss]}"), TimeElapsedColumn())
            self.progress.start()
            self.task = self.progress.add_task("heads", total=total, completed=done, loss="")

    def advance(self, loss: float) -> None:
        if self.progress is not None:
            self.progress.update(self.task, advance=1, loss=f"{loss:.3f}")

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


# ---------------------------------------------------------------------------- the outputs


def plot_curve(curve: Sequence[dict[str, Any]], path: str | os.PathLike[str],
               title: str = "") -> None:
    """Held-out top-1 (solid) and top-5 (dashed) per head against steps and against
    training positions seen, as a PNG (written atomically)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    n = len(curve[0]["top1"]) if curve else 0
    for ax, key, label in ((axes[0], "step", "step"),
                           (axes[1], "positions", "training positions seen")):
        xs = [c[key] for c in curve]
        for i in range(n):
            color = f"C{i}"
            ax.plot(xs, [c["top1"][i] for c in curve], color=color, label=f"head {i + 2} top-1")
            ax.plot(xs, [c["top5"][i] for c in curve], color=color, linestyle="--",
                    label=f"head {i + 2} top-5")
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("held-out accuracy vs the base's greedy tokens")
    axes[1].legend(fontsize=7, ncol=2)
    if title:
        fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


def write_trained_heads(result: TrainResult, out: str | os.PathLike[str], base: str,
                        readme: str = "") -> Path:
    """Write the heads in Medusa version-2 layout, bfloat16, with ``curve.json``,
    ``curve.png`` and (when given) ``README.md`` beside them; ``out`` is replaced."""
    from blockdraft.models.hf.formats import write_heads

    heads = MedusaHeads(result.heads.d_model, None, result.heads.num_heads,
                        result.heads.num_layers)
    heads.load_state_dict(result.heads.state_dict())
    folder = write_heads(heads.to(torch.bfloat16), out, "medusa-v2", base_model=base)
    write_text_atomic(folder / "curve.json", json.dumps(
        {"signature": result.signature, "curve": result.curve}, indent=1) + "\n")
    if result.curve:
        plot_curve(result.curve, folder / "curve.png")
    if readme:
        write_text_atomic(folder / "README.md", readme)
    for file in folder.iterdir():  # package data: readable by all (safetensors writes 0600)
        file.chmod(0o644)
    return folder


def _table(curve: Sequence[dict[str, Any]]) -> str:
    if not curve:
        return "(no evaluation yet)\n"
    last = curve[-1]
    lines = ["| head (blockdraft numbering) | " + " | ".join(
        str(i + 2) for i in range(len(last["top1"]))) + " |",
        "|---" * (len(last["top1"]) + 1) + "|",
        "| held-out top-1 | " + " | ".join(f"{v:.3f}" for v in last["top1"]) + " |",
        "| held-out top-5 | " + " | ".join(f"{v:.3f}" for v in last["top5"]) + " |"]
    return "\n".join(lines) + "\n"


def train_medusa_heads(
    base: str = "smollm2",
    prompts: Sequence[str | os.PathLike[str]] = (),
    out: str | os.PathLike[str] = "medusa-heads",
    *,
    heads: int = 5,
    layers: int = 1,
    max_prompts: int | None = None,
    minutes: float | None = None,
    distill_minutes: float | None = None,
    seed: int = 0,
    threads: int | None = None,
    dtype: str = "float32",
    max_new_tokens: int = 192,
    batch_size: int = 32,
    shard_size: int = 256,
    heldout_fraction: float = 0.005,
    heldout_min: int = 200,
    data: str | os.PathLike[str] | None = None,
    work: str | os.PathLike[str] | None = None,
    settings: TrainSettings | None = None,
    command: str = "",
    progress: bool = True,
    log: Callable[[str], None] | None = _log,
) -> TrainResult:
    """Self-distil a base model on prompt files, train Medusa heads, write them (one call).

    Args:
        base: a known model name (``"smollm2"``), an HF folder or a GGUF file.
        prompts: JSON-lines prompt files (training prompts only, never evaluation data).
        out: the heads folder to write (Medusa version 2, bfloat16, README, curve).
        heads, layers: Medusa heads and ResBlocks per head (override ``settings``).
        max_prompts: train prompts to distil (the data step stops between shards).
        minutes: the training time box, wall minutes (None: until ``steps`` or patience).
        distill_minutes: the data step's time box, wall minutes (None: no box).
        seed: seeds the split, the heads and the sampler.
        threads: torch CPU threads (default: 1 on a busy machine).
        dtype, max_new_tokens, batch_size, shard_size, heldout_fraction, heldout_min, data: the
            data step
            (:func:`blockdraft.models.hf.distill.distill`; ``data`` its folder).
        work: the training folder (checkpoint); default ``$BLOCKDRAFT_CACHE/medusa-train/<key>``.
        settings: the other training settings (:class:`TrainSettings`).
        command: the command line to record in the README.
        progress, log: progress bars and log lines.

    Returns:
        The training result (also written to ``out``).
    """
    from blockdraft.models.hf.loading import load_causal_lm

    torch.set_num_threads(threads or default_threads())
    wall = time.monotonic()
    dset = distill(base, prompts, folder=data, dtype=dtype, max_new_tokens=max_new_tokens,
                   batch_size=batch_size, shard_size=shard_size, seed=seed,
                   heldout_fraction=heldout_fraction,
                   heldout_min=heldout_min, max_prompts=max_prompts, minutes=distill_minutes,
                   threads=torch.get_num_threads(), progress=progress, log=log)
    distill_seconds = time.monotonic() - wall
    model, _ = load_causal_lm(base, "float32")
    lm_head = lm_head_weight(model)
    del model
    fields = dict(asdict(settings or TrainSettings()), heads=heads, layers=layers, seed=seed)
    run = TrainSettings(**fields)
    folder = Path(work) if work is not None else cache_dir(
        "medusa-train", hashlib.sha256(json.dumps(
            [asdict(run), data_key(dset)], sort_keys=True).encode()).hexdigest()[:12])
    t0 = time.monotonic()
    result = train_heads(dset, lm_head, folder, run, minutes=minutes, progress=progress, log=log,
                         extra_signature={"base": base})
    train_seconds = time.monotonic() - t0
    summary = dset.summary()
    readme = (
        f"# Medusa heads for {base}\n\n"
        f"{heads} Medusa heads (blockdraft heads 2..{heads + 1}, so h = {heads + 1}), "
        f"{layers} ResBlock each, sharing the base's lm_head (Medusa version-2 layout, "
        "bfloat16), trained by self-distillation: the base's own greedy answers to training "
        "prompts and its final hidden states (docs/definitions.md sec. 10).\n\n"
        f"Command:\n\n    {command or '(called from Python)'}\n\n"
        f"Wall time (this call): data step {distill_seconds / 60:.1f} min, training "
        f"{train_seconds / 60:.1f} min; training time in all "
        f"{(result.curve[-1]['seconds'] if result.curve else 0) / 60:.1f} min over "
        f"{result.step} steps.\n\n"
        f"Data: {summary['train_prompts']} training prompts, {summary['train_tokens']} answer "
        f"tokens; held out {summary['heldout_prompts']} prompts, {summary['heldout_tokens']} "
        f"tokens (scored on up to {run.eval_positions} held-out positions).\n\n"
        "Held-out accuracy against the base's greedy token at that offset (last evaluation):\n\n"
        + _table(result.curve)
        + f"\nSignature: `{result.signature}`\n\nThe learning curve: `curve.json`, `curve.png`.\n")
    write_trained_heads(result, out, base, readme)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m blockdraft.models.hf.training``: distil, train and write Medusa heads."""
    import argparse
    import shlex

    defaults = TrainSettings()
    parser = argparse.ArgumentParser(
        prog="python -m blockdraft.models.hf.training",
        description="Train Medusa heads on a base model by self-distillation (CPU): generate "
                    "the base's greedy answers to training prompts (cached, resumable), then "
                    "train the heads on its cached hidden states and write them (Medusa "
                    "version-2 layout, bfloat16) with their learning curve.")
    parser.add_argument("--base", default="smollm2", help="model name, HF folder or GGUF file")
    parser.add_argument("--prompts", nargs="+", required=True,
                        help="JSON-lines files of {source, prompt} (training prompts only)")
    parser.add_argument("-o", "--out", required=True, help="the heads folder to write")
    parser.add_argument("--heads", type=int, default=defaults.heads)
    parser.add_argument("--layers", type=int, default=defaults.layers)
    parser.add_argument("--max-prompts", type=int, default=None,
                        help="training prompts to distil (default: all)")
    parser.add_argument("--distill-minutes", type=float, default=None,
                        help="time box of the data step (minutes)")
    parser.add_argument("--minutes", type=float, default=None,
                        help="time box of the training (minutes)")
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--batch", type=int, default=defaults.batch, help="positions per step")
    parser.add_argument("--lr", type=float, default=defaults.lr)
    parser.add_argument("--warmup", type=int, default=defaults.warmup)
    parser.add_argument("--schedule", choices=SCHEDULES, default=defaults.schedule)
    parser.add_argument("--loss", choices=LOSSES, default=defaults.loss)
    parser.add_argument("--vocab", choices=VOCABS, default=defaults.vocab,
                        help="softmax of the training loss over the full vocabulary or only the "
                             "tokens seen in the training answers (several times faster)")
    parser.add_argument("--eval-every", type=int, default=defaults.eval_every)
    parser.add_argument("--eval-positions", type=int, default=defaults.eval_positions)
    parser.add_argument("--patience", type=int, default=defaults.patience,
                        help="stop after this many evaluations without progress (0: never)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default: 1 when the machine is busy)")
    parser.add_argument("--dtype", default="float32", help="the base's dtype while generating")
    parser.add_argument("--max-new-tokens", type=int, default=192)
    parser.add_argument("--batch-size", type=int, default=32, help="prompts per generation")
    parser.add_argument("--shard-size", type=int, default=256, help="prompts per data shard")
    parser.add_argument("--heldout-fraction", type=float, default=0.005)
    parser.add_argument("--heldout-min", type=int, default=200)
    parser.add_argument("--data", default=None, help="distillation folder (default: cache)")
    parser.add_argument("--work", default=None, help="training folder (default: cache)")
    args = parser.parse_args(argv)
    settings = TrainSettings(steps=args.steps, batch=args.batch, lr=args.lr, warmup=args.warmup,
                             schedule=args.schedule, loss=args.loss, eval_every=args.eval_every,
                             eval_positions=args.eval_positions, patience=args.patience,
                             vocab=args.vocab)
    command = "python -m blockdraft.models.hf.training " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    result = train_medusa_heads(
        args.base, args.prompts, args.out, heads=args.heads, layers=args.layers,
        max_prompts=args.max_prompts, minutes=args.minutes, distill_minutes=args.distill_minutes,
        seed=args.seed, threads=args.threads, dtype=args.dtype,
        max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
        shard_size=args.shard_size,
        heldout_fraction=args.heldout_fraction, heldout_min=args.heldout_min, data=args.data,
        work=args.work, settings=settings, command=command)
    print(json.dumps({"out": args.out, "step": result.step, "finished": result.finished,
                      "last": result.curve[-1] if result.curve else None}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
