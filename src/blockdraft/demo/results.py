"""What the demos report: :class:`DemoRow` and :class:`DemoResult` (the small blockwise
model's), :class:`RealDemoRow`, :class:`LatticeView` and :class:`RealDemoResult` (the real
model's). Frozen records, each with ``to_dict()`` for ``--json``."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path


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
        speedup: greedy's wall seconds / ``wall_s`` (1.0 for greedy): over the greedy loop
            of the same runtime and precision.
        speedup_torch: the PyTorch greedy loop's wall seconds / ``wall_s`` (None when the
            demo ran on PyTorch itself).
        identical: prompts whose output equals greedy decoding's, token for token.
        prompts: prompts decoded.
        settings: the row's own part of the signature (``k``, ``p``, ``alpha``, the LM).
        signature: the full signature of the numbers (the demo's and the row's settings).
        split: where ``wall_s`` went, seconds over all prompts: ``prefill_s``, the steps'
            ``forward_s``, ``heads_s`` (the next step's Medusa heads), ``lattice_s``,
            ``search_s`` (drafting), ``other_s``, what lies ``outside_s`` both, and the
            ``steps``.
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
    speedup_torch: float | None = None
    split: dict[str, float] | None = None

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
        model, heads, dtype: what was loaded (names for the signature); ``dtype`` is the
            strategies' precision (the runtime's: ``"float32"``, ``"int8"``, ...).
        h: prediction heads, the base head included.
        runtime: where the strategies ran (``"onnxruntime"``, ``"torch"``).
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
    runtime: str = "torch"

    def to_dict(self) -> dict[str, object]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["rows"] = [r.to_dict() for r in self.rows]
        data["lattice"] = self.lattice.to_dict()
        data["prompts"] = list(self.prompts)
        data["ngram_counts"] = list(self.ngram_counts)
        for key in ("lattice_png", "ngram_path"):
            data[key] = str(data[key])
        return data
