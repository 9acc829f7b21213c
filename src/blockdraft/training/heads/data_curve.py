"""Held-out accuracy of trained Medusa heads against the amount of training data.

docs/definitions.md sec. 10. The training loop picks its heads by a seeded sample of held-out
positions (``eval_positions``), so its own figures are noisy (about +-0.01 at 2,048
positions) and slightly flattering (the best of several evaluations). This module scores
finished heads once on *every* usable position of a distillation set's held-out split, so heads
trained on different amounts of data compare on the same footing: the data curve that tells
whether more distilled data still pays. Beside the accuracy it gives the block efficiency those
heads reach on the held-out answers: vanilla BPD (each head's argmax) and the top-``k`` oracle,
walked along the base's greedy answer exactly as the decode loop walks it (docs/definitions.md
secs. 2 and 5), from the stored hidden states, without running the base again.

A run is either a heads folder written by
:func:`~blockdraft.training.heads.recipe.write_trained_heads` (any layout :func:`read_heads`
reads, with the ``curve.json`` holding the training signature) or a training folder
(``checkpoint.pt``: its best evaluation's heads, float32). The training data size comes from
the signature (``prompts:``, ``tokens:``).

Public surface:
    HeadsRun, read_run(path) -> HeadsRun        heads plus the training signature
    signature_fields(signature) -> dict         ``k:v|k:v`` as a dict
    head_topk(heads, lm_head, data, k) -> [N, n, k]   each head's top-k at every position
    chain_block_efficiency(topk, data, k) -> float     B of vanilla (k = 1) / oracle(k) BPD
    topk_scores(topk, data) -> dict             top-1/top-5 per head, vanilla and oracle B
    score_runs(runs, dset, lm_head) -> rows     held-out top-1/top-5 per head and B, per run
    write_data_curve(rows, out, title)          data_curve.{json,md,png}, atomically
    CURVE_FILES                                 the names it writes

The command: ``blockdraft heads curve`` (:mod:`blockdraft.cli.heads`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from blockdraft.core.efficiency import block_efficiency
from blockdraft.core.files import atomic_directory, atomic_path, write_text_atomic
from blockdraft.models.heads.eagle_layer import EagleLayer
from blockdraft.models.hf.medusa import MedusaHeads
from blockdraft.models.hf.prefix_heads import PrefixHeads, is_prefix_folder, read_prefix_heads
from blockdraft.training.errors import TrainingError
from blockdraft.training.heads.positions import IGNORE, PositionData, head_targets, load_positions
from blockdraft.training.heads.progress import log_line
from blockdraft.training.heads.shards import DistillSet
from blockdraft.training.heads.trainer import (
    CHECKPOINT_FILE,
    CURVE_FILE,
    head_states,
    read_checkpoint,
)

CURVE_FILES = ("data_curve.json", "data_curve.md", "data_curve.png")
"""The files :func:`write_data_curve` writes in its folder."""


@dataclass(frozen=True)
class HeadsRun:
    """One set of trained heads and what it was trained on.

    Attributes:
        path: the folder it was read from.
        heads: the heads (eval mode; float32 or the stored dtype), or an EAGLE draft layer
            (not attached to its base; scored by :func:`~blockdraft.training.heads
            .eagle_train.score_eagle_runs`).
        signature: the training signature (``k:v|k:v``).
        prompts: training prompts (from the signature).
        tokens: training answer tokens, as the signature rounds them (``186k`` -> 186,000).
        step: the training step of these heads (0 when unknown).
    """

    path: Path
    heads: MedusaHeads | EagleLayer
    signature: str
    prompts: int
    tokens: int
    step: int


def signature_fields(signature: str) -> dict[str, str]:
    """``"a:1|b:x:y"`` -> ``{"a": "1", "b": "x:y"}`` (split at each field's first colon)."""
    out: dict[str, str] = {}
    for part in signature.split("|"):
        key, sep, value = part.partition(":")
        if sep:
            out[key] = value
    return out


def _count(text: str, where: Path) -> int:
    """``"186k"`` -> 186000, ``"1.2M"`` -> 1200000, ``"950"`` -> 950."""
    match = re.fullmatch(r"([0-9.]+)([kM]?)", text.strip())
    if match is None:
        raise TrainingError(f"{where}: cannot read a count from {text!r} in the signature")
    return round(float(match.group(1)) * {"": 1, "k": 1e3, "M": 1e6}[match.group(2)])


def read_run(path: str | os.PathLike[str]) -> HeadsRun:
    """A heads folder (with ``curve.json``) or a training folder (``checkpoint.pt``).

    Raises:
        TrainingError: neither, or no signature with ``prompts:`` and ``tokens:``.
    """
    root = Path(path)
    checkpoint = root / CHECKPOINT_FILE
    curve = root / CURVE_FILE
    heads: MedusaHeads | EagleLayer
    if checkpoint.is_file():
        state = read_checkpoint(checkpoint)
        weights = state.get("best_heads") or state["heads"]
        signature, step = state.get("signature", ""), int(state.get("best_step", state["step"]))
        fields = signature_fields(signature)
        if fields.get("arch") == "eagle":
            raise TrainingError(f"{checkpoint} is an EAGLE draft layer's training folder: "
                                "score the layer's folder (the -o of heads train)")
        if "heads" not in fields or "blocks.0.0.linear.weight" not in weights:
            raise TrainingError(f"{checkpoint} is not a Medusa head training checkpoint")
        d = int(weights["blocks.0.0.linear.weight"].shape[1])
        n, layers = int(fields["heads"]), int(fields.get("layers", 1))
        medusa = (PrefixHeads(d, n, layers) if "prefix.0.weight" in weights
                  else MedusaHeads(d, None, n, layers))
        medusa.load_state_dict(weights)
        if state.get("shortlist") is not None:  # trained over it: scored as it drafts
            medusa.set_shortlist(state["shortlist"])
        heads = medusa
    elif curve.is_file():
        from blockdraft.models.heads.eagle_files import is_eagle_folder, read_eagle
        from blockdraft.models.hf.formats import read_heads

        heads = (read_eagle(root) if is_eagle_folder(root) else read_prefix_heads(root)
                 if is_prefix_folder(root) else read_heads(root))
        try:
            record = json.loads(curve.read_text(encoding="utf-8"))
            signature = str(record["signature"])
            step = _best_step(record["curve"])
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError,
                ValueError) as e:
            raise TrainingError(f"cannot read {str(curve)!r} ({type(e).__name__}: {e}): it "
                                "must hold the training's signature and curve") from e
        fields = signature_fields(signature)
    else:
        raise TrainingError(f"{str(root)!r} holds neither trained heads with a {CURVE_FILE} nor "
                            f"a training {CHECKPOINT_FILE}: pass a folder written by "
                            "blockdraft heads train (its -o or its --work)")
    if "prompts" not in fields or "tokens" not in fields:
        raise TrainingError(f"{root}: the signature names no training data (prompts:, tokens:)")
    return HeadsRun(root, heads.eval(), signature, int(fields["prompts"]),
                    _count(fields["tokens"], root), step)


def _best_step(curve: Sequence[dict[str, Any]]) -> int:
    """The step whose heads the training kept: its first evaluation with the best mean top-1
    (the rule of :func:`~blockdraft.training.heads.trainer.train_heads`); 0 for no curve."""
    means = [float(np.mean(c["top1"])) for c in curve]
    return int(curve[means.index(max(means))]["step"]) if curve else 0


@torch.no_grad()
def head_topk(heads: MedusaHeads, lm_head: torch.Tensor, data: PositionData, k: int = 5,
              chunk: int = 256, embed: torch.Tensor | None = None) -> torch.Tensor:
    """int64 ``[N, n, k]``: the ``k`` best tokens of each of the ``n`` heads at every row of
    ``data`` (best first; logits ``heads(h_j) @ lm_head.T`` in float32), ranked over the heads'
    shortlist when they carry one (as they draft). Prefix heads read the greedy token before
    each target (teacher-forced; ``embed`` the base's input embeddings, default ``lm_head``:
    :func:`~blockdraft.training.heads.trainer.head_states`)."""
    out = []
    ids = heads.shortlist
    weight = lm_head.float() if ids is None else lm_head.float()[ids]  # (V or Vs, d)
    embed = lm_head if embed is None else embed
    for start in range(0, data.tokens, chunk):
        rows = torch.arange(start, min(start + chunk, data.tokens))
        states = head_states(heads, data, rows, embed)  # (b, n, d)
        best = (states @ weight.T).topk(k, dim=-1).indices  # (b, n, k)
        out.append(best if ids is None else ids[best])
    return torch.cat(out)


def chain_block_efficiency(topk: torch.Tensor, data: PositionData, k: int = 1) -> float:
    """Pooled ``B`` of BPD along each stored greedy answer (docs/definitions.md sec. 2).

    The prefill gives ``y_1`` and a draft from ``h_0``; a step from ``h_s`` accepts ``a``
    tokens, the longest run of heads ``i = 1, 2, ...`` whose top-``k`` holds ``y_{s+1+i}``
    (``k = 1``: vanilla BPD; ``k > 1``: the oracle of the top-``k`` lattice, sec. 5), plus the
    base's bonus token, and the next step drafts from ``h_{s+a+1}``. ``B`` = answer tokens /
    calls, the prefill counted, pooled over answers.

    Args:
        topk: ``[N, n, K]`` from :func:`head_topk`, ``K >= k``.
        data: the positions ``topk`` was computed on.
        k: lattice width.
    """
    if not 1 <= k <= topk.shape[2]:
        raise TrainingError(f"k = {k} is outside 1..{topk.shape[2]} (the top-K computed)")
    targets = head_targets(data, torch.arange(data.tokens), topk.shape[1])  # (N, n)
    # IGNORE (past the answer's end) equals no token id: such a head never hits
    hit = (topk[:, :, :k] == targets[..., None]).any(-1)  # (N, n)
    run = torch.cumprod(hit.to(torch.int64), dim=1).sum(1).numpy()  # (N,) accepted a
    remaining = data.remaining.numpy()
    tokens = calls = 0
    row = 0
    while row < data.tokens:  # one answer: rows row .. row + m - 1
        m = int(remaining[row]) + 1
        s, calls = 0, calls + 1  # the prefill: y_1 and the draft from h_0
        while s + 1 < m:
            s += int(run[row + s]) + 1
            calls += 1
        tokens += m
        row += m
    return block_efficiency(tokens, calls)


def topk_scores(topk: torch.Tensor, data: PositionData) -> dict[str, Any]:
    """The held-out figures of every head's (or draft step's) top-``K`` at every row of
    ``data`` (``topk`` int64 ``[N, n, K >= 5]`` base ids, best first, as :func:`head_topk`
    gives them; ``-1`` where nothing was drafted).

    Returns:
        ``top1``/``top5`` per head against the base's greedy token at that offset,
        ``mean_top1``, ``positions`` (scored per head), ``B_vanilla`` and ``B_oracle5``
        (:func:`chain_block_efficiency`).
    """
    targets = head_targets(data, torch.arange(data.tokens), topk.shape[1])  # (N, n)
    valid = targets != IGNORE
    match = topk[..., :5] == targets[..., None]  # (N, n, 5)
    count = valid.sum(0).clamp(min=1).double()
    top1 = ((match[..., 0] & valid).sum(0) / count).tolist()
    top5 = ((match.any(-1) & valid).sum(0) / count).tolist()
    return {"top1": top1, "top5": top5, "mean_top1": float(np.mean(top1)),
            "positions": valid.sum(0).tolist(),
            "B_vanilla": chain_block_efficiency(topk, data, 1),
            "B_oracle5": chain_block_efficiency(topk, data, 5)}


def score_runs(
    runs: Sequence[HeadsRun],
    dset: DistillSet,
    lm_head: torch.Tensor,
    log: Callable[[str], None] | None = log_line,
    embed: torch.Tensor | None = None,
) -> list[dict[str, Any]]:
    """Every run's held-out top-1/top-5 per head on all usable held-out positions.

    Args:
        runs: the heads to score (any number of heads each).
        dset: the distillation set whose held-out split scores them (the one they were
            trained beside: its held-out prompts were never trained on).
        lm_head: the base's output projection ``[V, d]`` (float32).
        log: one line per run; None for silence.
        embed: the base's input embeddings ``[V, d]`` (prefix heads; default ``lm_head``).

    Returns:
        One dict per run, sorted by training tokens: ``path``, ``prompts``, ``tokens``,
        ``step``, ``signature``, ``top1``/``top5`` (per head), ``mean_top1``, ``positions``
        (scored per head), ``B_vanilla`` and ``B_oracle5`` (:func:`chain_block_efficiency`).
    """
    held = load_positions(dset, "heldout")
    out = []
    for run in sorted(runs, key=lambda r: r.tokens):
        if isinstance(run.heads, EagleLayer):
            raise TrainingError(f"{run.path} holds an EAGLE draft layer: score_eagle_runs "
                                "scores it (heads curve does)")
        heads = run.heads.float()
        topk = head_topk(heads, lm_head, held, 5, embed=embed)  # (N, n, 5)
        row = {"path": str(run.path), "prompts": run.prompts, "tokens": run.tokens,
               "step": run.step, "signature": run.signature, **topk_scores(topk, held)}
        out.append(row)
        if log is not None:
            log(f"{run.path}: {run.tokens} tokens, top-1 "
                + " ".join(f"{v:.3f}" for v in row['top1']) + f" (mean {row['mean_top1']:.3f}), "
                f"B vanilla {row['B_vanilla']:.3f}, oracle(5) {row['B_oracle5']:.3f}")
    return out


def _label(i: int, steps: bool) -> str:
    """Column ``i``'s name: blockdraft head ``i + 2``, or an EAGLE layer's draft step ``i + 1``."""
    return f"draft step {i + 1}" if steps else f"head {i + 2}"


def _markdown(rows: Sequence[dict[str, Any]], title: str, command: str,
              steps: bool = False) -> str:
    n = max(len(r["top1"]) for r in rows)
    head = " | ".join(_label(i, steps) for i in range(n))
    scored = rows[0]["positions"][0]
    what = ("the greedy chain of the draft layer (its top-1 at every step) and a full top-5 "
            "tree's oracle" if steps else "vanilla heads and the top-5 oracle")
    lines = [f"# {title}", ""] + ([f"Command: `{command}`", ""] if command else []) + [
             f"Scored on every usable held-out position ({scored:,} for {_label(0, steps)});"
             " top-1 (top-5) against the base's greedy token at that offset. B: "
             "block efficiency along the held-out greedy answers (prefill counted, pooled), "
             f"{what}.", "",
             f"| training answer tokens | prompts | step | {head} | mean top-1 | vanilla B | "
             "oracle(5) B |", "|---|---|---|" + "---|" * n + "---|---|---|"]
    for r in rows:
        cells = " | ".join(f"{a:.3f} ({b:.3f})" for a, b in zip(r["top1"], r["top5"], strict=True))
        lines.append(f"| {r['tokens']:,} | {r['prompts']:,} | {r['step']} | {cells} | "
                     f"{r['mean_top1']:.3f} | {r['B_vanilla']:.3f} | {r['B_oracle5']:.3f} |")
    lines += ["", "Runs:", ""] + [f"- `{r['path']}`: `{r['signature']}`" for r in rows]
    return "\n".join(lines) + "\n"


def write_data_curve(rows: Sequence[dict[str, Any]], out: str | os.PathLike[str],
                     title: str = "Medusa heads: held-out accuracy against training data",
                     command: str = "", steps: bool = False) -> Path:
    """``data_curve.json``, ``data_curve.md`` and ``data_curve.png`` in the folder ``out``,
    built beside it and swapped into place complete (what was at ``out`` is replaced; check it
    first with :func:`blockdraft.core.outputs.claim_output`); ``command``, when given, is the
    command line the Markdown names; ``steps``: the rows are EAGLE draft layers' (columns
    are draft steps ``1 ..``, not heads ``2 ..``).

    Raises:
        TrainingError: no rows.
    """
    if not rows:
        raise TrainingError("no runs to write a data curve of")
    root = Path(out)
    root.parent.mkdir(parents=True, exist_ok=True)
    with atomic_directory(root) as tmp:
        json_file, md_file, png_file = (tmp / name for name in CURVE_FILES)
        write_text_atomic(json_file, json.dumps(
            {"command": command, "runs": list(rows)}, indent=1) + "\n")
        write_text_atomic(md_file, _markdown(rows, title, command, steps))
        _plot_data_curve(rows, png_file, title, steps)
    return root


def _plot_data_curve(rows: Sequence[dict[str, Any]], path: Path, title: str,
                     steps: bool = False) -> None:
    """Held-out top-1 (and dashed top-5) per head against training tokens, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    xs = [r["tokens"] for r in rows]
    for i in range(max(len(r["top1"]) for r in rows)):
        ax.plot(xs, [r["top1"][i] for r in rows], marker="o", color=f"C{i}",
                label=f"{_label(i, steps)} top-1")
        ax.plot(xs, [r["top5"][i] for r in rows], marker=".", linestyle="--", color=f"C{i}",
                alpha=0.6)
    ax.plot(xs, [r["mean_top1"] for r in rows], marker="s", color="black", label="mean top-1")
    ax.set_xscale("log")
    ax.set_xlabel("training answer tokens (log scale)")
    ax.set_ylabel("held-out accuracy (dashed: top-5)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)

