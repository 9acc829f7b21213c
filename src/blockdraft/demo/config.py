"""The demo's settings: :class:`DemoConfig` (what the blockwise demo trains; every field
part of the cache key) and the fixed settings of both demos (lattice width, drafts, LM
weights; the real model, its dtype and prompts). What the demos report is in
:mod:`blockdraft.demo.results`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from blockdraft.demo.errors import DemoError

DEMO_VERSION = 2  # part of the cache key: bump when what the demo caches changes meaning
DEMO_K = 16  # lattice width of the rescored and p-best strategies and of the oracle
DEMO_P = 16  # drafts verified per call by the p-best strategies
NGRAM_ALPHA = 1.0  # weight of the n-gram LM (docs/definitions.md sec. 4)
NEURAL_ALPHA = 1.0  # weight of the neural rescoring LM (Kim Alg. 2)
DRAW_K = 6  # arcs per slot in the lattice drawing
MIN_TRAIN_PARAGRAPHS = 50

@dataclass(frozen=True)
class DemoConfig:
    """What the demo trains; every field is part of the cache key.

    On the ~114k training tokens of ``pydoc_data.topics`` (V = 1024) the defaults trained in
    6 minutes with one torch thread beside another job on this 2-core CPU (~8-9k tokens/s
    for the blockwise model); two threads on an idle machine train at ~15k tokens/s (about
    3.5 minutes). The base reaches 3.34 nats per token on held-out text (unigram: 5.98).
    """

    vocab_size: int = 1024  # BPE vocabulary (a small corpus may stop merging earlier)
    n_layer: int = 2  # BlockwiseLM: transformer blocks
    n_head: int = 4  # BlockwiseLM: attention heads
    d_model: int = 128  # BlockwiseLM: residual width (MLP 4x, extra heads' FFN 2x)
    h: int = 8  # prediction heads (head 1 = the base LM)
    steps: int = 1200  # BlockwiseLM optimizer steps, base and heads phases together
    base_fraction: float = 0.5  # share of the steps on the base LM before the heads
    head_position_fraction: float = 0.5  # positions where heads 2..h take a loss
    batch_size: int = 16  # sequences per step (both models)
    seq_len: int = 128  # tokens per training sequence (both models)
    lr: float = 3e-3  # peak learning rate (both models)
    rescorer_n_layer: int = 2  # RescorerLM: transformer blocks
    rescorer_d_model: int = 64  # RescorerLM: residual width (MLP 4x), 4 attention heads
    rescorer_steps: int = 600  # RescorerLM optimizer steps
    ngram_order: int = 4  # order of the n-gram LM
    heldout_fraction: float = 0.05  # paragraphs held out (at least 10)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise DemoError(f"DemoConfig.{f.name} must be a positive number, got {value!r}")
        for name in ("base_fraction", "head_position_fraction"):
            if getattr(self, name) > 1:
                raise DemoError(f"DemoConfig.{name} must lie in (0, 1], got "
                                f"{getattr(self, name)}")
        if not 0 < self.heldout_fraction < 0.5:
            raise DemoError(
                f"DemoConfig.heldout_fraction must lie in (0, 0.5), got {self.heldout_fraction}"
            )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return dataclasses.asdict(self)

    def model_config(self, vocab_size: int) -> Any:
        """The :class:`~blockdraft.models.BlockwiseConfig` of the blockwise model (the
        ``tiny`` preset, resized)."""
        from blockdraft.training import model_config

        d = self.d_model
        return model_config("tiny", vocab_size, n_layer=self.n_layer, n_head=self.n_head,
                            d_model=d, d_ff=4 * d, head_hidden=2 * d, h=self.h,
                            max_seq_len=max(256, self.seq_len))

    def rescorer_config(self, vocab_size: int) -> Any:
        """The :class:`~blockdraft.models.BlockwiseConfig` of the rescoring LM (``h = 1``)."""
        from blockdraft.training import model_config

        d = self.rescorer_d_model
        return model_config("tiny", vocab_size, rescorer=True, n_layer=self.rescorer_n_layer,
                            n_head=4, d_model=d, d_ff=4 * d, head_hidden=d,
                            max_seq_len=max(256, self.seq_len))

    def train_config(self, steps: int) -> Any:
        """The :class:`~blockdraft.training.TrainConfig` of a model trained for ``steps`` steps
        (both models share the batch, sequence length and learning rate; a short warm-up;
        one held-out evaluation, at the end)."""
        from blockdraft.training import TrainConfig

        return TrainConfig(steps=steps, batch_size=self.batch_size, seq_len=self.seq_len,
                           lr=self.lr, warmup_steps=max(1, min(50, steps // 10)),
                           base_fraction=self.base_fraction,
                           head_position_fraction=self.head_position_fraction,
                           eval_interval=0, eval_batches=8)

    def describe(self) -> str:
        """A short label of the model sizes, for signatures."""
        return (f"blockwise({self.n_layer}L,d{self.d_model},h{self.h},V{self.vocab_size},"
                f"{self.steps}steps)")


# ------------------------------------------------------------------ the real-model demo
REAL_MODEL = "smollm2"  # the default model of ``blockdraft demo`` (blockdraft.models.load_model)
REAL_DTYPE = "float32"  # PyTorch's dtype: the reference greedy loop and what is exported
REAL_RUNTIME = "onnxruntime"  # the fastest lossless runtime on a CPU (docs/real-models.md)
REAL_PRECISION = "float32"  # the runtime's precision: float32 gives PyTorch's answers
REAL_ALSO_PRECISION = "q4"  # rows beside, on the GGUF file's own blocks (a model loaded from one)
REAL_K = 16  # lattice width of the rescored strategies
REAL_P = 4  # drafts verified per call by the p-best strategy (their trie per forward)
REAL_ORDER = 4  # order of the n-gram LM over the model's token ids
REAL_MAX_NEW_TOKENS = 40  # tokens per prompt (EOS stops earlier); see the note below
REAL_PROMPTS = (
    "Rewrite this Python function with type hints and a docstring:\n\n"
    "def mean(values):\n    total = 0\n    for v in values:\n        total += v\n"
    "    return total / len(values)",
    "Summarize in one sentence: Python lists are mutable sequences that can grow and shrink, "
    "while tuples are immutable sequences whose length and items are fixed once created; "
    "tuples can be dictionary keys, lists cannot.",
    "How do I read a text file line by line in Python?",
)
"""The chat prompts of the real-model demo: one user turn each, in the model's chat template:
a rewrite and a summary (answers that copy their input, where prompt lookup shines) and an open
question (where only the heads can guess). Written for the demo, never used to train anything
(the heads were distilled on other prompts, the n-gram LM is trained on the corpus).

Sized for the 1-minute budget of a cached run on a 2-core CPU: on ONNX Runtime (float32, one
thread) a SmolLM2 greedy step costs about 35 ms, so the seven rows (six strategies and the
PyTorch greedy loop, about 65 ms a token) of 3 x 40 tokens take about 30 s of decoding."""
