"""Training the reference BlockwiseLM and its heads, or a RescorerLM (Stern et al. 2018
sec. 6; Kim et al. 2024 App. C.1).

Public surface:
    TrainConfig                  frozen hyper-parameters (defaults sized for ``small`` on a CPU)
    train(model, token_ids, cfg, eval_ids=None, mode="joint", ...) -> TrainResult
    evaluate(model, token_ids, seq_len, batch_size, n_batches) -> EvalResult
    distill_targets(model, prompts, max_new_tokens, eos_id=None) -> np.ndarray
    the recipe of ``blockdraft train`` and the demo (:mod:`.recipe`): train_tokenizer,
    eos_stream, split_tail, model_config, new_model, train_and_save

The loss (Kim App. C.1) is ``sum_i w_i * CE_i``: head ``i`` at position ``t`` predicts token
``t + i`` (natural-log cross-entropy, mean over positions, weights 1 by default). Head 1's loss
covers every position; heads 2..h take theirs on a random ``head_position_fraction`` of the
positions (the same ones for every head), because ``h`` full softmaxes at every position cost
about 5x the transformer body (measured on the ``small`` preset).

Modes:
    "joint"            every parameter, every head's loss
    "base"             the base LM alone (head 1's loss); the extra heads are untouched
    "heads"            the extra heads alone on a frozen base (Stern's "regular" setting): the
                       base runs without gradients, so head 1's output is unchanged
    "base-then-heads"  "base" for ``base_fraction`` of the steps, then "heads": joint training
                       from scratch was found to hold the base near the unigram entropy

Each phase has its own schedule (linear warm-up, then cosine/linear decay or constant).
A run is seeded (``random``, numpy, torch) and reproducible: the same seed, model
initialisation and data give the same weights, and a resumed run continues exactly where the
checkpoint left off (model, optimizer, every RNG).

Modules: ``config`` (settings and results), ``data`` (token windows), ``schedule`` (phases,
learning rate, trainable parameters, optimizer), ``loss``, ``evaluate``, ``state`` (resumable
checkpoints), ``loop`` (:func:`train`), ``distill`` (distillation targets), ``recipe`` (texts
to a saved model directory).
"""

from blockdraft.training.blockwise.config import (
    MODES,
    SCHEDULES,
    EvalResult,
    TrainConfig,
    TrainMode,
    TrainResult,
)
from blockdraft.training.blockwise.distill import distill_targets
from blockdraft.training.blockwise.evaluate import evaluate
from blockdraft.training.blockwise.loop import train
from blockdraft.training.blockwise.recipe import (
    eos_stream,
    model_config,
    new_model,
    split_tail,
    train_and_save,
    train_tokenizer,
)
from blockdraft.training.blockwise.state import OPTIMIZER_FILE, TRAIN_STATE_FILE

__all__ = [
    "MODES",
    "OPTIMIZER_FILE",
    "SCHEDULES",
    "TRAIN_STATE_FILE",
    "EvalResult",
    "TrainConfig",
    "TrainMode",
    "TrainResult",
    "distill_targets",
    "eos_stream",
    "evaluate",
    "model_config",
    "new_model",
    "split_tail",
    "train",
    "train_and_save",
    "train_tokenizer",
]
