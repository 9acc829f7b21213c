"""Medusa heads for a base model, end to end: distil, train, write (the CLI's recipe).

:func:`train_medusa_heads` runs the data step (:mod:`~blockdraft.training.heads.distill`,
cached and resumable), trains the heads (:mod:`~blockdraft.training.heads.trainer`, resumable)
and writes them in Medusa version-2 layout, bfloat16, with their learning curve (JSON and PNG) and
a README giving the command, the wall time and the held-out accuracy per head.

Public surface:
    train_medusa_heads(base, prompts, out, ...) -> HeadsTrainResult   distill + train + write
    write_trained_heads(result, out, base, readme) -> Path    the heads folder, atomically
    HEADS_FILES                                the names a heads folder holds (globs)
    plot_curve(curve, path)                    the learning curve as a PNG

The commands: ``blockdraft heads train`` and ``blockdraft train --mode medusa``
(:mod:`blockdraft.cli.heads`).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from blockdraft.core.files import atomic_directory, atomic_path, cache_dir, write_text_atomic
from blockdraft.models.hf.medusa import MedusaHeads
from blockdraft.training.errors import TrainingError
from blockdraft.training.heads.distill import distill
from blockdraft.training.heads.mix import describe_mix, read_mix
from blockdraft.training.heads.progress import log_line
from blockdraft.training.heads.shards import PLAN_FILE, open_distill_set
from blockdraft.training.heads.trainer import (
    CURVE_FILE,
    HeadsTrainResult,
    HeadsTrainSettings,
    data_key,
    lm_head_weight,
    train_heads,
)

HEADS_FILES = ("config.json", "*.safetensors", CURVE_FILE, "curve.png", "README.md")
"""Glob patterns of every name :func:`write_trained_heads` writes in a heads folder."""


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


def _write_module(trained: Any, folder: Path, base: str,
                  record: dict[str, Any] | None) -> None:
    """The trained module's files in ``folder``, bfloat16: Medusa version-2, prefix heads or
    an EAGLE draft layer (``record``: what its config keeps of its training)."""
    from blockdraft.models.heads.eagle_files import write_eagle
    from blockdraft.models.heads.eagle_layer import EagleLayer
    from blockdraft.models.hf.formats import write_heads
    from blockdraft.models.hf.prefix_heads import PrefixHeads, write_prefix_heads

    if isinstance(trained, EagleLayer):  # a fresh copy: without the base's tensors
        layer = EagleLayer(trained.config, trained.shortlist, trained.shortlist_info)
        layer.load_state_dict(trained.state_dict())
        write_eagle(layer.to(torch.bfloat16), folder, base_model=base, record=record)
        return
    prefix = isinstance(trained, PrefixHeads)
    heads = (PrefixHeads(trained.d_model, trained.num_heads, trained.num_layers)
             if prefix else MedusaHeads(trained.d_model, None, trained.num_heads,
                                        trained.num_layers))
    heads.load_state_dict(trained.state_dict())
    if trained.shortlist is not None:  # trained over it (vocab="shortlist")
        heads.set_shortlist(trained.shortlist, info=trained.shortlist_info)
    if isinstance(heads, PrefixHeads):
        write_prefix_heads(heads.to(torch.bfloat16), folder, base_model=base)
    else:
        write_heads(heads.to(torch.bfloat16), folder, "medusa-v2", base_model=base)


def write_trained_heads(result: HeadsTrainResult, out: str | os.PathLike[str], base: str,
                        readme: str = "", record: dict[str, Any] | None = None) -> Path:
    """Write the heads in Medusa version-2 layout (prefix heads in theirs, an EAGLE draft
    layer in its own with ``record`` in its config), bfloat16, with ``curve.json``,
    ``curve.png`` and (when given) ``README.md`` beside them.

    The folder is built beside ``out`` and swapped into place complete
    (:func:`~blockdraft.core.files.atomic_directory`): whatever was at ``out`` is replaced,
    and stays as it was if this fails or is interrupted. Callers that must not replace a
    user's files check ``out`` first (:func:`blockdraft.core.outputs.claim_output`).
    """
    folder = Path(out)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with atomic_directory(folder) as tmp:
        _write_module(result.heads, tmp, base, record)
        write_text_atomic(tmp / CURVE_FILE, json.dumps(
            {"signature": result.signature, "curve": result.curve}, indent=1) + "\n")
        if result.curve:
            plot_curve(result.curve, tmp / "curve.png")
        if readme:
            write_text_atomic(tmp / "README.md", readme)
        for file in tmp.iterdir():  # package data: readable by all (safetensors writes 0600)
            file.chmod(0o644)
    return folder


def _table(curve: Sequence[dict[str, Any]], step: int, eagle: bool = False) -> str:
    """Held-out top-1/top-5 per head (an EAGLE layer: per draft step) at the evaluation of
    ``step`` (else the last one)."""
    if not curve:
        return "(no evaluation yet)\n"
    last = next((c for c in curve if c["step"] == step), curve[-1])
    first, what = (1, "draft step") if eagle else (2, "head (blockdraft numbering)")
    lines = [f"| {what} | " + " | ".join(
        str(i + first) for i in range(len(last["top1"]))) + " |",
        "|---" * (len(last["top1"]) + 1) + "|",
        "| held-out top-1 | " + " | ".join(f"{v:.3f}" for v in last["top1"]) + " |",
        "| held-out top-5 | " + " | ".join(f"{v:.3f}" for v in last["top5"]) + " |"]
    return "\n".join(lines) + "\n"


def _init_heads(folder: str | os.PathLike[str] | None) -> tuple[Any, str]:
    """``(heads, "name@digest")`` of the folder a run starts from (``(None, "")``: none)."""
    if folder is None:
        return None, ""
    from blockdraft.models.errors import ModelError
    from blockdraft.models.hf.formats import read_heads, tensors_digest
    from blockdraft.models.hf.prefix_heads import is_prefix_folder, read_prefix_heads

    try:
        heads = read_prefix_heads(folder) if is_prefix_folder(folder) else read_heads(folder)
    except ModelError as e:
        raise TrainingError(f"the heads to start from: {e}") from e
    digest = tensors_digest({k: v.float() for k, v in heads.state_dict().items()})
    return heads, f"{Path(folder).name}@{digest[:12]}"


def train_medusa_heads(
    base: str = "smollm2",
    prompts: Sequence[str | os.PathLike[str]] = (),
    out: str | os.PathLike[str] = "medusa-heads",
    *,
    heads: int = 5,
    layers: int = 1,
    max_prompts: int | None = None,
    train_tokens: int | None = None,
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
    settings: HeadsTrainSettings | None = None,
    command: str = "",
    progress: bool = True,
    log: Callable[[str], None] | None = log_line,
    init: str | os.PathLike[str] | None = None,
) -> HeadsTrainResult:
    """Self-distil a base model on prompt files, train Medusa heads, write them (one call).

    Args:
        base: a known model name (``"smollm2"``), an HF folder or a GGUF file.
        prompts: JSON-lines prompt files (training prompts only, never evaluation data).
        out: the heads folder to write (Medusa version 2, bfloat16, README, curve).
        heads, layers: Medusa heads and ResBlocks per head (override ``settings``).
        max_prompts: train prompts to distil (the data step stops between shards).
        train_tokens: train on the first training shards that hold this many answer tokens
            (:meth:`DistillSet.first`; a learning curve's points), not on all of them.
        minutes: the training time box, wall minutes (None: until ``steps`` or patience).
        distill_minutes: the data step's time box, wall minutes (None: no box).
        seed: seeds the split, the heads and the sampler.
        threads: torch CPU threads (default: 1 on a busy machine; set by the data step).
        dtype, max_new_tokens, batch_size, shard_size, heldout_fraction, heldout_min, data: the
            data step (:func:`blockdraft.training.heads.distill.distill`; ``data`` its
            folder, default ``$BLOCKDRAFT_CACHE/distill/<key>``; a labelled set there,
            :mod:`~blockdraft.training.heads.labels`, is trained on as it is: no data step).
        work: the training folder (checkpoint); default ``$BLOCKDRAFT_CACHE/medusa-train/<key>``.
        settings: the other training settings (:class:`HeadsTrainSettings`).
        command: the command line to record in the README.
        progress, log: progress bars and log lines.
        init: a heads folder to start from (Medusa or prefix, as ``settings.arch``; the same
            heads and ResBlocks): a warm start, recorded in the run's settings as
            ``name@digest``.

    Returns:
        The training result (also written to ``out``).
    """
    from blockdraft.models.hf.loading import load_causal_lm

    wall = time.monotonic()
    if data is not None and (Path(data) / PLAN_FILE).is_file() and open_distill_set(
            data).labelled:  # labelled by one forward: no data step here
        dset = open_distill_set(data)
        if threads:
            torch.set_num_threads(threads)
    else:
        # the prompts are read (and refused with a line number) before the base is loaded
        dset = distill(base, prompts, folder=data, dtype=dtype, max_new_tokens=max_new_tokens,
                       batch_size=batch_size, shard_size=shard_size, seed=seed,
                       heldout_fraction=heldout_fraction,
                       heldout_min=heldout_min, max_prompts=max_prompts,
                       minutes=distill_minutes, threads=threads, progress=progress, log=log)
    if train_tokens is not None:
        dset = dset.first(train_tokens)
    distill_seconds = time.monotonic() - wall
    model, tokenizer = load_causal_lm(base, "float32")
    lm_head = lm_head_weight(model)
    embed = model.get_input_embeddings().weight.detach().float().clone()  # prefix heads
    eagle = (settings or HeadsTrainSettings()).arch == "eagle"
    if eagle and init is not None:
        raise TrainingError("--init (a warm start) applies to Medusa and prefix heads; an "
                            "EAGLE draft layer starts from a seeded random layer")
    if not eagle:
        del model
    start_from, init_label = _init_heads(init)
    fields = dict(asdict(settings or HeadsTrainSettings()), heads=heads, layers=layers, seed=seed,
                  init=init_label)
    run = HeadsTrainSettings(**fields)
    folder = Path(work) if work is not None else cache_dir(
        "medusa-train", hashlib.sha256(json.dumps(
            [asdict(run), data_key(dset)], sort_keys=True).encode()).hexdigest()[:12])
    mixes = [(Path(p).name, m) for p in prompts if (m := read_mix(p)) is not None]
    extra: dict[str, Any] = {"base": base}
    if mixes:  # the declared mix of the prompt files (blockdraft heads prompts)
        extra["mix"] = "+".join(describe_mix(m) for _, m in mixes)
    t0 = time.monotonic()
    record: dict[str, Any] | None = None
    if eagle:
        from blockdraft.training.heads.eagle_train import train_eagle
        from blockdraft.training.heads.generation import pad_id_of

        if not (run.fusion == "top" and run.context == "answer") and dtype != "float32":
            model = model.to(getattr(torch, dtype))  # the features' forward (weights: float32)
        result = train_eagle(dset, model, folder, run, minutes=minutes, progress=progress,
                             log=log, extra_signature=extra, lm_head=lm_head, embed=embed,
                             pad_id=pad_id_of(tokenizer) if tokenizer is not None else 0)
        record = {"fusion": run.fusion, "context": run.context, "unroll": run.unroll,
                  "feature_weight": run.feature_weight, "signature": result.signature}
    else:
        result = train_heads(dset, lm_head, folder, run, minutes=minutes, progress=progress,
                             log=log, extra_signature=extra, embed=embed, init=start_from)
    train_seconds = time.monotonic() - t0
    summary = dset.summary()
    prefix = run.arch == "prefix"
    kind = "prefix-conditioned (Hydra-style) heads" if prefix else "Medusa heads"
    intro = (
        f"# {kind[0].upper()}{kind[1:]} for {base}\n\n"
        f"{heads} {kind} (blockdraft heads 2..{heads + 1}, so h = {heads + 1}), "
        f"{layers} ResBlock{'' if layers == 1 else 's'} each"
        + (", each also reading the embedding of the token before its target through a "
           "d x d projection" if prefix else "")
        + ", sharing the base's lm_head ("
        + ("blockdraft-prefix layout: `load_model(base, heads=FOLDER)`, PyTorch and ONNX "
           "Runtime" if prefix else "Medusa version-2 layout")
        + ", bfloat16), trained by self-distillation: ")
    if eagle:
        intro = _eagle_intro(base, run)
    readme = (
        intro
        + ("the base's own predictions and final hidden states along the answers of "
           f"{dset.plan['labels'].get('source')}, labelled by one forward each"
           if dset.labelled else
           "the base's own greedy answers to training prompts and its final hidden states")
        + " (docs/definitions.md sec. 10).\n\n"
        f"Command:\n\n    {command or '(called from Python)'}\n\n"
        f"Wall time (this call): data step {distill_seconds / 60:.1f} min, training "
        f"{train_seconds / 60:.1f} min; training time in all "
        f"{(result.curve[-1]['seconds'] if result.curve else 0) / 60:.1f} min over "
        f"{result.step} steps.\n\n"
        f"Data: {summary['train_prompts']} training prompts, {summary['train_tokens']} answer "
        f"tokens; held out {summary['heldout_prompts']} prompts, {summary['heldout_tokens']} "
        f"tokens (scored on up to {run.eval_positions} held-out positions).\n\n"
        + "".join(f"Prompt mix of {name}: {describe_mix(m)} ({m.get('n')} prompts, seed "
                  f"{m.get('seed')}; counts {m.get('counts')}).\n\n" for name, m in mixes)
        + "Held-out accuracy against the base's greedy token at that offset (the evaluation "
        f"at step {result.best_step}, whose heads these are: the best mean top-1):\n\n"
        + _table(result.curve, result.best_step, eagle)
        + f"\nSignature: `{result.signature}`\n\nThe learning curve: `curve.json`, `curve.png`.\n")
    write_trained_heads(result, out, base, readme, record)
    return result


def _eagle_intro(base: str, run: HeadsTrainSettings) -> str:
    """The first paragraph of an EAGLE draft layer's README (up to "trained by ...: ")."""
    fusion = ("the base's final hidden state (EAGLE-1)" if run.fusion == "top" else
              "the base's low, middle and high layers fused (EAGLE-3)")
    size = f"{run.shortlist}-token shortlist" if run.vocab == "shortlist" else "vocabulary"
    loss = (f"training-time test over {run.unroll} unrolled steps" if run.unroll > 1 else
            "teacher-forced features")
    if run.feature_weight and run.fusion == "top":
        loss += f", feature regression weight {run.feature_weight:g}"
    context = ("the answer's positions (the set's stored states)" if run.context == "answer"
               else "the prompt's and the answer's positions")
    return (f"# EAGLE draft layer for {base}\n\n"
            f"One decoder layer of {base}'s block shape reading {fusion} and the embedding "
            f"of the next token, drafting autoregressively with its own KV cache over the "
            f"{size}'s rows of the base's lm_head (frozen); {loss}; it attends to {context} "
            "(blockdraft-eagle layout: `read_eagle(FOLDER, embed, lm_head)`, bfloat16), "
            "trained by self-distillation: ")

