"""The training room: everything that makes weights.

    blockwise/   the reference BlockwiseLM (its heads, or a RescorerLM) trained on a token
                 stream: settings, windows, loss, schedule, resumable checkpoints, the loop,
                 sequence-level distillation, and the recipe ``blockdraft train`` and the demo
                 share (texts -> tokenizer -> model -> a saved model directory)
    heads/       Medusa heads for a Hugging Face base by self-distillation: prompts, batched
                 greedy generation with the base's hidden states, shards of a distillation set,
                 the head trainer, the end-to-end recipe, the data curve
                 (``blockdraft heads distill|train|curve``; ``blockdraft train --mode medusa``)
    ngram/       the n-gram LMs the rescorers read: modified Kneser-Ney over token ids (built in
                 or lmplz), the KenLM binary, two LMs interpolated into one
                 (``blockdraft ngram train|interpolate``; :mod:`blockdraft.training.ngram`)
    errors       TrainingError (a ModelError)
    resume       what a resumed run must share with the run it continues

Public surface (the blockwise trainer and its recipe; the Medusa heads' names live in
:mod:`blockdraft.training.heads`):
    TrainConfig, TrainMode, MODES, TrainResult, EvalResult
    train(model, token_ids, cfg, eval_ids=None, mode="joint", ...) -> TrainResult
    evaluate(model, token_ids, seq_len, batch_size, n_batches) -> EvalResult
    distill_targets(model, prompts, max_new_tokens, eos_id=None) -> int64 [N]
    train_tokenizer, eos_stream, split_tail, model_config, new_model, train_and_save
    train_medusa_heads(base, prompts, out, ...) -> HeadsTrainResult
    TrainingError

In the house's order it comes after the rooms of decoding (core ... oracle) and before the demo
and the CLI, which train through it; it imports core and models, and the n-gram rescorers'
reading side (the ARPA reader, an LM's records, the native binary writer) for ``ngram/``.
"""

from blockdraft.training.blockwise import (
    MODES,
    EvalResult,
    TrainConfig,
    TrainMode,
    TrainResult,
    distill_targets,
    eos_stream,
    evaluate,
    model_config,
    new_model,
    split_tail,
    train,
    train_and_save,
    train_tokenizer,
)
from blockdraft.training.errors import TrainingError
from blockdraft.training.heads import train_medusa_heads

__all__ = [
    "MODES",
    "EvalResult",
    "TrainConfig",
    "TrainMode",
    "TrainResult",
    "TrainingError",
    "distill_targets",
    "eos_stream",
    "evaluate",
    "model_config",
    "new_model",
    "split_tail",
    "train",
    "train_and_save",
    "train_medusa_heads",
    "train_tokenizer",
]
