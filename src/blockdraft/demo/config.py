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


# ------------------------------------------------------------------ the real-model demo
REAL_MODEL = "smollm2"  # the default model of ``blockdraft demo`` (blockdraft.models.load_model)
REAL_DTYPE = "float32"  # on a CPU without bfloat16 units float32 is the faster dtype
REAL_K = 16  # lattice width of the rescored strategies
REAL_P = 4  # drafts verified per call by the p-best strategy (p x h tokens per forward)
REAL_ORDER = 4  # order of the n-gram LM over the model's token ids
REAL_MAX_NEW_TOKENS = 12  # tokens per prompt (EOS stops earlier); see the note below
REAL_PROMPTS = (
    "How do I reverse a list in Python?",
    "What is the difference between a list and a tuple in Python?",
    "How do I read a text file line by line in Python?",
)
"""The chat prompts of the real-model demo: one user turn each, in the model's chat template.
Written for the demo, never used to train anything (the heads were distilled on other prompts,
the n-gram LM is trained on the corpus).

Sized for the 1-minute budget of a cached run on this 2-core CPU: with one torch thread (the
other core busy) a float32 SmolLM2 step took 135 ms and a verification call 2.5 greedy steps
(6 tokens 1.75x and 24 tokens 2.85x a 1-token forward), so with the preliminary heads (B about
1.1) the four strategies cost about 1.1 s per generated token together: 3 prompts x 16 tokens
took 72 s in all, 3 x 12 took 53 s."""


@dataclass(frozen=True)
class RealDemoRow:
    """One decoding strategy of the real-model demo, over all prompts.

    Attributes:
        strategy: the label printed in the table (``"greedy"`` first: the reference).
        block_efficiency: ``B`` = tokens / serial model calls, the prefill included (the
            Spec-Bench definition: the bonus token counts; greedy = 1.00).
        tokens: tokens generated, all prompts together.
        calls: serial model calls, all prompts together.
        wall_s: wall seconds of the decodes (measured in this run, around each call).
        draft_s: the part of ``wall_s`` spent building lattices and drafting (rescoring
            included; 0 for greedy).
        speedup: greedy's wall seconds / ``wall_s`` (1.0 for greedy).
        identical: prompts whose output equals greedy decoding's, token for token.
        prompts: prompts decoded.
        settings: the row's own part of the signature (``k``, ``p``, ``alpha``, the LM).
        signature: the full signature of the numbers (the demo's and the row's settings).
    """

    strategy: str
    block_efficiency: float
    tokens: int
    calls: int
    wall_s: float
    draft_s: float
    speedup: float
    identical: int
    prompts: int
    settings: str
    signature: str

    @property
    def tokens_per_s(self) -> float:
        """Generated tokens per wall second."""
        return self.tokens / self.wall_s if self.wall_s > 0 else math.inf

    @property
    def equals_greedy(self) -> bool:
        """Whether every prompt's output equals greedy decoding's."""
        return self.identical == self.prompts

    def to_dict(self) -> dict[str, object]:
        data: dict[str, object] = {f.name: getattr(self, f.name)
                                   for f in dataclasses.fields(self)}
        data.update(tokens_per_s=self.tokens_per_s, equals_greedy=self.equals_greedy)
        return data


@dataclass(frozen=True)
class LatticeView:
    """One step's lattice as text, for the terminal (the drawing is ``lattice_png``).

    Attributes:
        title: which step it is.
        slots: per slot, its arcs best first as ``(token text, score in nats)`` (slot 1 holds
            the certain token alone).
        greedy: the greedy continuation's token text at each slot (the path to highlight).
        greedy_rank: per slot, the index of the greedy token among the slot's arcs, or None
            when it is not among them.
    """

    title: str
    slots: tuple[tuple[tuple[str, float], ...], ...]
    greedy: tuple[str, ...]
    greedy_rank: tuple[int | None, ...]

    def to_dict(self) -> dict[str, object]:
        return {"title": self.title,
                "slots": [[{"token": t, "score": s} for t, s in slot] for slot in self.slots],
                "greedy": list(self.greedy), "greedy_rank": list(self.greedy_rank)}


@dataclass(frozen=True)
class RealDemoResult:
    """What :func:`~blockdraft.demo.run_real_demo` measured.

    Attributes:
        rows: greedy decoding first (the reference), then vanilla heads and the rescored
            strategies, all with the exact criterion.
        model, heads, dtype: what was loaded (names for the signature).
        h: prediction heads, the base head included.
        prompts: the prompts (user turns), as text.
        chat: whether they were wrapped in the model's chat template (else plain text).
        max_new_tokens: the cap per prompt (EOS stops earlier).
        sample_prompt, sample_answer: the first prompt and its greedy answer, as text.
        lattice: one step in the middle of the first prompt's answer, as text.
        lattice_png: the same lattice drawn (greedy path in red).
        corpus: the n-gram LM's text (``pydoc_data.topics`` or a file name).
        ngram_path: the n-gram LM's binary (in the cache).
        ngram_counts: n-grams per order.
        ngram_trained: whether this run trained the n-gram LM (False: from the cache).
        load_s: seconds loading the model (a first load dequantises a GGUF file).
        ngram_s: seconds training or loading the n-gram LM.
        warmup_s: seconds of the untimed warm-up decodes (one short decode per strategy).
        decode_s: seconds of the timed decodes, all strategies.
        threads: torch intra-op threads.
        signature: the settings every number shares.
        seconds: wall seconds of the whole run.
    """

    rows: tuple[RealDemoRow, ...]
    model: str
    heads: str
    dtype: str
    h: int
    prompts: tuple[str, ...]
    chat: bool
    max_new_tokens: int
    sample_prompt: str
    sample_answer: str
    lattice: LatticeView
    lattice_png: Path
    corpus: str
    ngram_path: Path
    ngram_counts: tuple[int, ...]
    ngram_trained: bool
    load_s: float
    ngram_s: float
    warmup_s: float
    decode_s: float
    threads: int
    signature: str
    seconds: float

    def to_dict(self) -> dict[str, object]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["rows"] = [r.to_dict() for r in self.rows]
        data["lattice"] = self.lattice.to_dict()
        data["prompts"] = list(self.prompts)
        data["ngram_counts"] = list(self.ngram_counts)
        for key in ("lattice_png", "ngram_path"):
            data[key] = str(data[key])
        return data
