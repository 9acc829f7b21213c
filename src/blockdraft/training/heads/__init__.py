"""Medusa heads for a Hugging Face base model, trained by self-distillation on a frozen base
(docs/definitions.md sec. 10).

    prompts -> the base's greedy answers and final hidden states (``distill``: shards of a
    cached, resumable distillation set) -> flat positions (``positions``) -> the heads, trained
    on the stored states without running the base (``trainer``) -> a heads folder in Medusa
    version-2 layout with its learning curve (``recipe``) -> their held-out accuracy and B
    against the amount of data (``data_curve``)

An EAGLE-style draft layer (:mod:`blockdraft.models.heads.eagle_layer`) trains on whole
answers instead (``eagle_data``: the sequences and the base's features along them, stored or
from a teacher-forced forward; ``eagle_train``: its loss, evaluation, the offline chain measure
``score_eagle`` and ``train_eagle``), through the same resumable loop as the heads (``loop``).

The prompts themselves come from ``mix`` (kinds of requests by declared weights over the
shared data), ``questions`` (the base's own questions about corpus passages) and
``followups`` (a training prompt, the base's answer from a distillation set, a follow-up);
import those modules by name.

Public surface (details in each module):
    read_prompts, split_prompts, format_prompts, hash_prompts, MIN_PROMPTS         (prompts)
    greedy_batch(model, prompts, max_new_tokens, eos_id, pad_id) -> (answers, hidden)
                                                                               (generation)
    Shard, DistillSet, open_distill_set, read_shard, write_shard, read_answers,
    check_distill_folder, PLAN_FILE, SET_FILES                                     (shards)
    DistillSettings, build_distill_set, distill, default_threads                  (distill)
    PositionData, load_positions, head_targets, IGNORE                          (positions)
    HeadsTrainSettings, HeadsTrainResult, train_heads, evaluate_heads, heads_loss,
    lm_head_weight, data_key, read_checkpoint, check_training_folder,
    CHECKPOINT_FILE, CURVE_FILE                                                   (trainer)
    train_medusa_heads, write_trained_heads, plot_curve, HEADS_FILES               (recipe)
    HeadsRun, read_run, score_runs, write_data_curve, chain_block_efficiency, CURVE_FILES,
    head_topk, signature_fields                                                (data_curve)
    ProgressBar, log_line                      the jobs' progress on standard error (progress)

The commands: ``blockdraft heads prompts|questions|follow-ups|distill|train|curve``
(:mod:`blockdraft.cli.heads`).
Nothing here imports ``transformers`` until a base model is loaded.
"""

from blockdraft.training.heads.data_curve import (
    CURVE_FILES,
    HeadsRun,
    chain_block_efficiency,
    head_topk,
    read_run,
    score_runs,
    signature_fields,
    write_data_curve,
)
from blockdraft.training.heads.distill import (
    DistillSettings,
    build_distill_set,
    default_threads,
    distill,
)
from blockdraft.training.heads.generation import final_norm, greedy_batch
from blockdraft.training.heads.positions import (
    IGNORE,
    PositionData,
    head_targets,
    load_positions,
)
from blockdraft.training.heads.progress import ProgressBar, log_line
from blockdraft.training.heads.prompts import (
    MIN_PROMPTS,
    format_prompts,
    hash_prompts,
    read_prompts,
    split_prompts,
)
from blockdraft.training.heads.recipe import (
    HEADS_FILES,
    plot_curve,
    train_medusa_heads,
    write_trained_heads,
)
from blockdraft.training.heads.shards import (
    PLAN_FILE,
    SET_FILES,
    DistillSet,
    Shard,
    check_distill_folder,
    open_distill_set,
    read_answers,
    read_shard,
    write_shard,
)
from blockdraft.training.heads.trainer import (
    CHECKPOINT_FILE,
    CURVE_FILE,
    HeadsTrainResult,
    HeadsTrainSettings,
    check_training_folder,
    data_key,
    evaluate_heads,
    heads_loss,
    lm_head_weight,
    read_checkpoint,
    train_heads,
)

__all__ = [
    "CHECKPOINT_FILE",
    "CURVE_FILE",
    "CURVE_FILES",
    "HEADS_FILES",
    "IGNORE",
    "MIN_PROMPTS",
    "PLAN_FILE",
    "SET_FILES",
    "DistillSet",
    "DistillSettings",
    "HeadsRun",
    "HeadsTrainResult",
    "HeadsTrainSettings",
    "PositionData",
    "ProgressBar",
    "Shard",
    "build_distill_set",
    "chain_block_efficiency",
    "check_distill_folder",
    "check_training_folder",
    "data_key",
    "default_threads",
    "distill",
    "evaluate_heads",
    "final_norm",
    "format_prompts",
    "greedy_batch",
    "hash_prompts",
    "head_targets",
    "head_topk",
    "heads_loss",
    "lm_head_weight",
    "load_positions",
    "log_line",
    "open_distill_set",
    "plot_curve",
    "read_answers",
    "read_checkpoint",
    "read_prompts",
    "read_run",
    "read_shard",
    "score_runs",
    "signature_fields",
    "split_prompts",
    "train_heads",
    "train_medusa_heads",
    "write_data_curve",
    "write_shard",
    "write_trained_heads",
]
