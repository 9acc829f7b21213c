"""What the demo trains and what it reports: :class:`DemoConfig` (every field part of the
cache key), :class:`DemoRow`, :class:`DemoResult`, :class:`DemoError` and the demo's fixed
settings."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blockdraft.core.errors import BlockdraftError

DEMO_VERSION = 2  # part of the cache key: bump when what the demo caches changes meaning
DEMO_K = 16  # lattice width of the rescored and p-best strategies and of the oracle
DEMO_P = 16  # drafts verified per call by the p-best strategies
NGRAM_ALPHA = 1.0  # weight of the n-gram LM (docs/definitions.md sec. 4)
NEURAL_ALPHA = 1.0  # weight of the neural rescoring LM (Kim Alg. 2)
DRAW_K = 6  # arcs per slot in the lattice drawing
MIN_TRAIN_PARAGRAPHS = 50


class DemoError(BlockdraftError):
    """The demo could not run on the given corpus, or its checks failed."""


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
        from blockdraft.recipes import model_config

        d = self.d_model
        return model_config("tiny", vocab_size, n_layer=self.n_layer, n_head=self.n_head,
                            d_model=d, d_ff=4 * d, head_hidden=2 * d, h=self.h,
                            max_seq_len=max(256, self.seq_len))

    def rescorer_config(self, vocab_size: int) -> Any:
        """The :class:`~blockdraft.models.BlockwiseConfig` of the rescoring LM (``h = 1``)."""
        from blockdraft.recipes import model_config

        d = self.rescorer_d_model
        return model_config("tiny", vocab_size, rescorer=True, n_layer=self.rescorer_n_layer,
                            n_head=4, d_model=d, d_ff=4 * d, head_hidden=d,
                            max_seq_len=max(256, self.seq_len))

    def train_config(self, steps: int) -> Any:
        """The :class:`~blockdraft.models.TrainConfig` of a model trained for ``steps`` steps
        (both models share the batch, sequence length and learning rate; a short warm-up;
        one held-out evaluation, at the end)."""
        from blockdraft.models import TrainConfig

        return TrainConfig(steps=steps, batch_size=self.batch_size, seq_len=self.seq_len,
                           lr=self.lr, warmup_steps=max(1, min(50, steps // 10)),
                           base_fraction=self.base_fraction,
                           head_position_fraction=self.head_position_fraction,
                           eval_interval=0, eval_batches=8)

    def describe(self) -> str:
        """A short label of the model sizes, for signatures."""
        return (f"blockwise({self.n_layer}L,d{self.d_model},h{self.h},V{self.vocab_size},"
                f"{self.steps}steps)")


@dataclass(frozen=True)
class DemoRow:
    """Block efficiency of one strategy on the demo's held-out prompts.

    Attributes:
        strategy: the label printed in the table.
        block_efficiency: ``B`` of the online decode (the oracle: of the offline simulation).
        relative: ``B / B_vanilla - 1``.
        offline_block_efficiency: ``B`` of the offline simulation over the trace.
        wall_s: seconds of the online decodes (None for the oracle, which is offline only).
        speedup: greedy decoding's wall seconds / ``wall_s`` (None for the oracle).
        settings: the row's own part of the signature (``k``, ``p``, ``alpha``, the LM).
        signature: the full signature of the number (the demo's and the row's settings).
    """

    strategy: str
    block_efficiency: float
    relative: float
    offline_block_efficiency: float
    wall_s: float | None
    speedup: float | None
    settings: str
    signature: str

    @property
    def agrees(self) -> bool:
        """Whether the online decode and the offline simulation give the same ``B``."""
        return math.isclose(self.block_efficiency, self.offline_block_efficiency,
                            rel_tol=0, abs_tol=1e-9)

    def to_dict(self) -> dict[str, object]:
        return {"strategy": self.strategy, "block_efficiency": self.block_efficiency,
                "relative": self.relative,
                "offline_block_efficiency": self.offline_block_efficiency,
                "agrees": self.agrees, "wall_s": self.wall_s, "speedup": self.speedup,
                "signature": self.signature}


@dataclass(frozen=True)
class DemoResult:
    """What :func:`run_demo` measured.

    Attributes:
        rows: one per strategy, vanilla BPD first, the oracle last.
        num_examples: held-out prompts decoded.
        generated_tokens: tokens of the greedy references, all prompts together.
        greedy_s: wall seconds of plain greedy decoding of every prompt.
        heldout_loss: held-out cross-entropy of heads 1..h (nats per token).
        heldout_accuracy: held-out top-1 accuracy of heads 1..h.
        unigram_loss: held-out cross-entropy of the training unigram distribution (nats), for
            scale.
        rescorer_loss: held-out cross-entropy of the rescoring LM (nats).
        ngram_loss: held-out cross-entropy of the n-gram LM (nats per token, ``</s>`` not
            counted).
        vanilla_repetition: % of consecutive equal tokens in the vanilla drafts (Kim Table 3).
        sample_prompt, sample_output: the first prompt and its greedy continuation, as text.
        lattice_png: the drawing of one lattice.
        trace_dir: the trace of the prompts (for ``blockdraft oracle`` and friends).
        cache_dir: where the trained artefacts are.
        trained: whether this run trained anything (False: everything came from the cache).
        train_s: seconds spent training in this run.
        threads: torch intra-op threads used.
        signature: the settings every number shares.
        seconds: wall seconds of the whole run.
    """

    rows: tuple[DemoRow, ...]
    num_examples: int
    generated_tokens: int
    greedy_s: float
    heldout_loss: tuple[float, ...]
    heldout_accuracy: tuple[float, ...]
    unigram_loss: float
    rescorer_loss: float
    ngram_loss: float
    vanilla_repetition: float
    sample_prompt: str
    sample_output: str
    lattice_png: Path
    trace_dir: Path
    cache_dir: Path
    trained: bool
    train_s: float
    threads: int
    signature: str
    seconds: float

    def to_dict(self) -> dict[str, object]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["rows"] = [r.to_dict() for r in self.rows]
        for key in ("lattice_png", "trace_dir", "cache_dir"):
            data[key] = str(data[key])
        return data
