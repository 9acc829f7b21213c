"""The main job on a small corpus, end to end, with a real trained blockwise model.

``blockdraft demo`` (``make demo``) runs, on the documentation text that ships with CPython
(``pydoc_data.topics``) or on a user's text (``--corpus PATH``):

1. drop repeated paragraphs and split the rest (seeded) into training and held-out text;
2. train on the training part, or load from the cache: a byte-level BPE tokenizer, a
   :class:`~blockdraft.models.BlockwiseLM` (base LM, then its extra heads on the frozen base),
   a small :class:`~blockdraft.models.RescorerLM` for local neural rescoring (exported to ONNX)
   and a 4-gram LM over token ids (lmplz);
3. decode a handful of held-out prompts (the first 24 tokens of held-out paragraphs; 48 new
   tokens each, EOS decoded as the paragraph separator it is in training unless
   ``stop_at_eos``) with the online pipeline
   (:func:`blockdraft.verify.decode`, exact criterion): vanilla BPD, neural rescoring,
   16-best 0-gram, 4-gram rescoring and 16-best 4-gram drafts; every output is checked
   against greedy decoding token for token (:class:`DemoError` otherwise);
4. record a trace of the same prompts (``<out>/trace``), get the oracle at k = 16 from it and
   re-simulate every strategy offline, which must agree with the online decode (SPEC sec. 6);
5. draw the lattice of the first step of the first prompt (top 6 per slot) with the greedy
   path highlighted (Kim et al. Fig. 4) to ``<out>/demo_lattice.png``.

It reports the held-out loss and top-1 accuracy of every head, the unigram loss for scale,
consecutive repetition in the vanilla drafts and one greedy sample, so that a reader can judge
the model before reading its block efficiency (an undertrained base loops, which inflates ``B``).

Everything trained is cached under ``$BLOCKDRAFT_CACHE`` (default ``~/.cache/blockdraft``)
``/demo/<key>``; the key hashes :data:`DEMO_VERSION`, the corpus text, the seed and every
field of :class:`DemoConfig`, so a second run trains nothing (about 15 s on 2 cores, most of
it decoding).

Public surface:
    run_demo(corpus=None, out_dir="demo-output", *, config=DemoConfig(), ...) -> DemoResult
    DemoConfig      sizes and training steps of what the demo trains (all in the cache key)
    DemoResult, DemoRow, DemoError
    default_corpus(), read_corpus(path), split_corpus(...), cache_root(), cache_key(...)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from blockdraft.errors import BlockdraftError

DEMO_VERSION = 2  # part of the cache key: bump when what the demo caches changes meaning
DEMO_K = 16  # lattice width of the rescored and p-best strategies and of the oracle
DEMO_P = 16  # drafts verified per call by the p-best strategies
NGRAM_ALPHA = 1.0  # weight of the n-gram LM (SPEC sec. 4)
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
        """The :class:`~blockdraft.models.BlockwiseConfig` of the blockwise model."""
        from blockdraft.models import BlockwiseConfig

        d = self.d_model
        return BlockwiseConfig.tiny(vocab_size=vocab_size, n_layer=self.n_layer,
                                    n_head=self.n_head, d_model=d, d_ff=4 * d,
                                    head_hidden=2 * d, h=self.h,
                                    max_seq_len=max(256, self.seq_len))

    def rescorer_config(self, vocab_size: int) -> Any:
        """The :class:`~blockdraft.models.BlockwiseConfig` of the rescoring LM (``h = 1``)."""
        from blockdraft.models import BlockwiseConfig

        d = self.rescorer_d_model
        return BlockwiseConfig.tiny(vocab_size=vocab_size, n_layer=self.rescorer_n_layer,
                                    n_head=4, d_model=d, d_ff=4 * d, head_hidden=d, h=1,
                                    max_seq_len=max(256, self.seq_len))

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


# ---------------------------------------------------------------------------- corpus
def cache_root() -> Path:
    """``$BLOCKDRAFT_CACHE``, else ``~/.cache/blockdraft``."""
    return Path(os.environ.get("BLOCKDRAFT_CACHE", Path.home() / ".cache" / "blockdraft"))


def default_corpus() -> list[str]:
    """Paragraphs of the CPython documentation topics that ship with Python (whitespace
    collapsed; repeats kept: :func:`run_demo` drops them)."""
    from pydoc_data.topics import topics

    paras: list[str] = []
    for name in sorted(topics):
        paras += [" ".join(p.split()) for p in topics[name].split("\n\n") if p.strip()]
    return paras


def read_corpus(path: Path) -> list[str]:
    """Paragraphs (blank-line separated, else lines) of a user's text file."""
    if not path.is_file():
        raise DemoError(f"corpus file {path} does not exist")
    text = path.read_text(encoding="utf-8", errors="replace")
    paras = [" ".join(p.split()) for p in text.split("\n\n") if p.strip()]
    if len(paras) < 20:
        paras = [" ".join(line.split()) for line in text.splitlines() if line.strip()]
    return paras


def split_corpus(paras: Sequence[str], fraction: float, seed: int) -> tuple[list[str], list[str]]:
    """``(train, held_out)`` paragraphs: a seeded shuffle, the first ``max(10, fraction * n)``
    held out."""
    order = np.random.default_rng(seed).permutation(len(paras))
    n_held = max(10, round(fraction * len(paras)))
    return [paras[i] for i in order[n_held:]], [paras[i] for i in order[:n_held]]


def cache_key(paras: Sequence[str], config: DemoConfig, seed: int) -> str:
    """The cache directory's name: a hash of :data:`DEMO_VERSION`, the corpus paragraphs, the
    seed and every field of ``config`` (everything that changes what the demo trains)."""
    fields = {"version": DEMO_VERSION, "seed": seed, "config": config.to_dict(),
              "corpus": hashlib.sha256("\n".join(paras).encode()).hexdigest()}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def _stream(ids: Sequence[Sequence[int]], eos_id: int) -> np.ndarray:
    """Texts as one EOS-separated int64 stream (each text followed by EOS)."""
    return np.asarray([t for x in ids for t in (*x, eos_id)], dtype=np.int64)


def pick_threads(requested: int | None = None) -> int:
    """Torch threads: ``requested``, else the cores not already busy (the cores minus the
    whole part of the 1-minute load average), at least 1. Oversubscribed cores slow
    small-model training down several-fold (2 threads beside another 2-thread job on 2 cores
    measured 10x slower than 1 thread)."""
    if requested is not None:
        if requested < 1:
            raise DemoError(f"threads must be >= 1, got {requested}")
        return requested
    cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:  # pragma: no cover - platforms without a load average
        load = 0.0
    return max(1, min(cores, cores - int(load)))


# ---------------------------------------------------------------------------- artefacts
@dataclass(frozen=True)
class _Artefacts:
    """The trained pieces, loaded, and their held-out numbers."""

    tokenizer: Any
    model: Any
    rescorer_dir: Path
    lm: Any
    ngram_counts: tuple[int, ...]
    heldout_loss: tuple[float, ...]
    heldout_accuracy: tuple[float, ...]
    rescorer_loss: float
    trained: bool
    train_s: float


def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else None


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def _train_lm(model: Any, train_ids: np.ndarray, held_ids: np.ndarray, steps: int,
              mode: str, config: DemoConfig, seed: int, progress: bool) -> Any:
    from blockdraft.models import TrainConfig, train

    cfg = TrainConfig(steps=steps, batch_size=config.batch_size, seq_len=config.seq_len,
                      lr=config.lr, warmup_steps=max(1, min(50, steps // 10)),
                      base_fraction=config.base_fraction,
                      head_position_fraction=config.head_position_fraction,
                      eval_interval=0, eval_batches=8)
    return train(model, train_ids, cfg, eval_ids=held_ids, mode=mode,  # type: ignore[arg-type]
                 progress=progress, seed=seed)


def _prepare(cache: Path, train_paras: list[str], held_paras: list[str], config: DemoConfig,
             seed: int, name: str, log: Callable[[str], None], progress: bool) -> _Artefacts:
    """Train what the cache lacks (each piece marked done by a JSON file written last)."""
    import torch

    from blockdraft.models import (
        BlockwiseLM,
        RescorerLM,
        Tokenizer,
        load_model,
        save_model,
    )
    from blockdraft.rescorers.ngram import NgramLM, train_ngram

    trained = False
    t_train = 0.0
    tok_path = cache / "tokenizer.json"
    if tok_path.is_file():
        tok = Tokenizer.load(tok_path)
    else:
        log(f"training a {config.vocab_size}-token BPE on {len(train_paras)} paragraphs of "
            f"{name}")
        t0 = time.perf_counter()
        tok = Tokenizer.train(train_paras, vocab_size=config.vocab_size)
        tok.save(cache)
        t_train += time.perf_counter() - t0
        trained = True
    train_ids = tok.encode_batch(train_paras)
    held_ids = tok.encode_batch(held_paras)
    train_stream, held_stream = _stream(train_ids, tok.eos_id), _stream(held_ids, tok.eos_id)
    window = config.seq_len + config.h + 1
    if train_stream.size < window or held_stream.size < window:
        raise DemoError(
            f"{name}: {train_stream.size} training and {held_stream.size} held-out tokens; "
            f"the demo needs more than {window} of each: use more text or a smaller seq_len"
        )

    model_dir = cache / "blockwise"
    meta = _read_json(model_dir / "demo.json")
    if meta is None:
        mc = config.model_config(tok.vocab_size)
        log(f"training a BlockwiseLM ({config.n_layer} layers, d={config.d_model}, "
            f"h={config.h}, V={tok.vocab_size}): {config.steps} steps of {config.batch_size} x "
            f"{config.seq_len} tokens over {train_stream.size:,} tokens, base then heads")
        t0 = time.perf_counter()
        torch.manual_seed(seed)
        model = BlockwiseLM(mc)
        res = _train_lm(model, train_stream, held_stream, config.steps, "base-then-heads",
                        config, seed, progress)
        ev = res.evals[-1]
        meta = {"heldout_loss": list(ev.loss), "heldout_accuracy": list(ev.accuracy),
                "train_s": res.wall_s, "tokens_per_s": res.tokens_per_s}
        save_model(model, model_dir, tokenizer=tok, extra_meta={"demo": meta})
        _write_json(model_dir / "demo.json", meta)
        t_train += time.perf_counter() - t0
        trained = True
        log(f"BlockwiseLM: held-out loss of head 1 {ev.loss[0]:.3f} nats, "
            f"{res.tokens_per_s:,.0f} tokens/s, {res.wall_s:.0f} s")
    model = load_model(model_dir)

    rescorer_dir = cache / "rescorer"
    rmeta = _read_json(rescorer_dir / "demo.json")
    if rmeta is None:
        from blockdraft.rescorers.neural.onnx_export import export_rescorer_onnx

        rc = config.rescorer_config(tok.vocab_size)
        log(f"training a RescorerLM ({config.rescorer_n_layer} layers, "
            f"d={config.rescorer_d_model}): {config.rescorer_steps} steps, then ONNX export")
        t0 = time.perf_counter()
        torch.manual_seed(seed + 1)
        rescorer = RescorerLM(rc)
        res = _train_lm(rescorer, train_stream, held_stream, config.rescorer_steps, "base",
                        config, seed + 1, progress)
        rmeta = {"heldout_loss": res.evals[-1].loss[0], "train_s": res.wall_s}
        save_model(rescorer, rescorer_dir, tokenizer=tok, extra_meta={"demo": rmeta})
        export_rescorer_onnx(rescorer, rescorer_dir)
        _write_json(rescorer_dir / "demo.json", rmeta)
        t_train += time.perf_counter() - t0
        trained = True
        log(f"RescorerLM: held-out loss {rmeta['heldout_loss']:.3f} nats, "
            f"{res.wall_s:.0f} s")

    order = config.ngram_order
    lm_prefix = cache / f"lm{order}"
    lmeta = _read_json(cache / f"lm{order}.json")
    if lmeta is None:
        log(f"training a {order}-gram LM with lmplz")
        t0 = time.perf_counter()
        r = train_ngram(train_ids, lm_prefix, order=order)
        lmeta = {"binary": str(r.binary.name if r.binary else r.arpa.name),
                 "counts": list(r.counts)}
        _write_json(cache / f"lm{order}.json", lmeta)
        t_train += time.perf_counter() - t0
        trained = True
    lm = NgramLM(cache / str(lmeta["binary"]))
    lm.check_vocab(tok.vocab_size)
    return _Artefacts(
        tokenizer=tok, model=model, rescorer_dir=rescorer_dir, lm=lm,
        ngram_counts=tuple(int(c) for c in lmeta["counts"]),
        heldout_loss=tuple(float(x) for x in meta["heldout_loss"]),
        heldout_accuracy=tuple(float(x) for x in meta["heldout_accuracy"]),
        rescorer_loss=float(rmeta["heldout_loss"]), trained=trained, train_s=t_train,
    )


def _unigram_loss(train_stream: np.ndarray, held_stream: np.ndarray, vocab_size: int) -> float:
    """Held-out cross-entropy (nats) of the add-one-smoothed training unigram distribution."""
    counts = np.bincount(train_stream, minlength=vocab_size).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    return float(-logp[held_stream].mean())


def _ngram_loss(lm: Any, held_ids: Sequence[Sequence[int]]) -> float:
    """Held-out cross-entropy (nats per token) of the n-gram LM, each text from ``<s>``."""
    total, count = 0.0, 0
    for ids in held_ids:
        if not ids:
            continue
        scores = lm.score(np.asarray(ids, dtype=np.int64))  # from <s>: empty context
        total -= float(np.sum(scores))
        count += len(ids)
    return total / max(count, 1)


# ---------------------------------------------------------------------------- the run
def run_demo(
    corpus: Path | None = None,
    out_dir: Path = Path("demo-output"),
    *,
    config: DemoConfig | None = None,
    num_examples: int = 8,
    prompt_len: int = 24,
    max_new_tokens: int = 48,
    stop_at_eos: bool = False,
    seed: int = 0,
    threads: int | None = None,
    progress: bool = False,
    log: Callable[[str], None] = print,
) -> DemoResult:
    """Run the pipeline of the module docstring and return its table.

    Args:
        corpus: a text file (paragraphs separated by blank lines, else lines); None: the
            CPython documentation topics (``pydoc_data.topics``).
        out_dir: where the lattice drawing, the trace and ``demo.json`` go (created).
        config: what to train (default :class:`DemoConfig`); part of the cache key.
        num_examples: held-out prompts to decode.
        prompt_len: tokens of each prompt (taken from the start of a held-out paragraph,
            after an EOS that stands for the start of a text).
        max_new_tokens: tokens generated per prompt.
        stop_at_eos: stop a prompt's decode at EOS. Off by default: the paragraphs are short
            and the model ends most of them within a dozen tokens, so EOS is decoded as the
            paragraph separator it is in the training stream and every prompt gets exactly
            ``max_new_tokens`` tokens (a steadier ``B``).
        seed: the split, the models' initialisation and training; part of the cache key.
        threads: torch intra-op threads (default: the cores not already busy).
        progress: show training progress bars on stderr.
        log: receives one-line progress messages; those about training start with
            ``"training"`` (a cached run sends none of those).

    Returns:
        A :class:`DemoResult`.

    Raises:
        DemoError: on too little text, no held-out paragraph long enough for a prompt, a
            lossless decode that differs from greedy decoding, or bad settings.
    """
    import torch

    from blockdraft.drafts.heads import HeadDrafter
    from blockdraft.lattice.draw import draw_lattice
    from blockdraft.models import greedy_generate
    from blockdraft.oracle import Oracle, repetition, simulate
    from blockdraft.oracle.record import record_trace
    from blockdraft.rescorers.neural import NeuralRescorer
    from blockdraft.rescorers.ngram import NgramRescorer
    from blockdraft.signature import environment, format_signature, human_count
    from blockdraft.verify import decode

    t_start = time.perf_counter()
    config = config or DemoConfig()
    for label, value in (("num_examples", num_examples), ("prompt_len", prompt_len),
                         ("max_new_tokens", max_new_tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise DemoError(f"{label} must be a positive integer, got {value!r}")
    paras = default_corpus() if corpus is None else read_corpus(corpus)
    # Repeated paragraphs ("Note:", shared grammar) would leak into the held-out part.
    paras = list(dict.fromkeys(paras))
    name = "pydoc_data.topics" if corpus is None else corpus.name
    train_paras, held_paras = split_corpus(paras, config.heldout_fraction, seed)
    if len(train_paras) < MIN_TRAIN_PARAGRAPHS:
        raise DemoError(
            f"{name}: {len(paras)} paragraphs is too little text for the demo (it needs at "
            f"least {MIN_TRAIN_PARAGRAPHS} for training after holding out {len(held_paras)}); "
            "use a longer text"
        )
    key = cache_key(paras, config, seed)
    cache = cache_root() / "demo" / key
    cache.mkdir(parents=True, exist_ok=True)
    _write_json(cache / "settings.json", {"version": DEMO_VERSION, "corpus": name,
                                          "paragraphs": len(paras), "seed": seed,
                                          "config": config.to_dict()})

    n_threads = pick_threads(threads)
    old_threads = torch.get_num_threads()
    torch.set_num_threads(n_threads)
    try:
        art = _prepare(cache, train_paras, held_paras, config, seed, name, log, progress)
        tok, model, lm = art.tokenizer, art.model, art.lm
        h = int(model.config.h)

        # Held-out prompts: the first paragraphs (in the seeded order) long enough to leave a
        # continuation; each starts after an EOS, as texts do in the training stream.
        held_ids = tok.encode_batch(held_paras)
        prompts = [[tok.eos_id, *ids[:prompt_len]] for ids in held_ids
                   if len(ids) >= prompt_len + 16][:num_examples]
        if not prompts:
            raise DemoError(f"{name}: no held-out paragraph has {prompt_len + 16} tokens; "
                            "use longer paragraphs or a smaller prompt_len")
        unigram = _unigram_loss(_stream(tok.encode_batch(train_paras), tok.eos_id),
                                _stream(held_ids, tok.eos_id), tok.vocab_size)

        eos = tok.eos_id if stop_at_eos else None
        log(f"greedy decoding {len(prompts)} held-out prompts (the reference)")
        greedy: list[list[int]] = []
        t0 = time.perf_counter()
        for prompt in prompts:
            greedy.append(greedy_generate(model, prompt, max_new_tokens, eos_id=eos))
        greedy_s = time.perf_counter() - t0

        neural = NeuralRescorer(art.rescorer_dir, alpha=NEURAL_ALPHA, backend="onnx",
                                bos_id=tok.eos_id)
        ngram = NgramRescorer(lm, alpha=NGRAM_ALPHA)
        order = lm.order
        strategies: list[tuple[str, int, int, Any, str]] = [
            ("vanilla BPD", 1, 1, None, "k:1|p:1|alpha:0|lm:none"),
            ("neural rescoring", DEMO_K, 1, neural,
             f"k:{DEMO_K}|p:1|alpha:{NEURAL_ALPHA}|lm:rescorer(onnx)"),
            (f"{DEMO_P}-best 0-gram", DEMO_K, DEMO_P, None,
             f"k:{DEMO_K}|p:{DEMO_P}|alpha:0|lm:none"),
            (f"{order}-gram rescoring", DEMO_K, 1, ngram,
             f"k:{DEMO_K}|p:1|alpha:{NGRAM_ALPHA}|lm:{order}-gram"),
            (f"{DEMO_P}-best {order}-gram", DEMO_K, DEMO_P, ngram,
             f"k:{DEMO_K}|p:{DEMO_P}|alpha:{NGRAM_ALPHA}|lm:{order}-gram"),
        ]

        trace_dir = out_dir / "trace"
        out_dir.mkdir(parents=True, exist_ok=True)
        trace = record_trace(model, prompts, trace_dir, max_new_tokens=max_new_tokens,
                             eos_id=eos, K=DEMO_K, overwrite=True,
                             signature={"model": config.describe(), "corpus": name,
                                        "cache": key, "seed": seed})
        for i, ref in enumerate(greedy):
            if trace[i].greedy_ids.tolist() != ref:
                raise DemoError(f"the trace's greedy output of prompt {i} differs from "
                                "greedy decoding (a bug: report it)")

        shared = {
            "model": f"{config.describe()}/{key}",
            "rescorer": f"rescorer({config.rescorer_n_layer}L,d{config.rescorer_d_model})",
            "corpus": name, "examples": len(prompts), "prompt": prompt_len,
            "max_new": max_new_tokens, "eos_stops": stop_at_eos, "h": h,
            "criterion": "exact", "order": order,
            "ngrams": human_count(sum(art.ngram_counts)), "seed": seed,
            "threads": n_threads, **environment(),
        }
        signature = format_signature(shared)
        rows: list[DemoRow] = []
        base_b: float | None = None
        vanilla_rep = math.nan
        for label, k, p, rescorer, settings in strategies:
            log(f"decoding with {label}")
            calls = tokens = 0
            wall = 0.0
            for i, prompt in enumerate(prompts):
                res = decode(model, prompt, rescorer=rescorer, k=k, p=p, criterion="exact",
                             max_new_tokens=max_new_tokens, eos_id=eos)
                if res.tokens != greedy[i]:
                    raise DemoError(
                        f"{label}: the lossless decode of prompt {i} differs from greedy "
                        f"decoding at token {_first_difference(res.tokens, greedy[i])} (a bug: "
                        "report it)"
                    )
                calls += res.calls
                tokens += len(res.tokens)
                wall += res.wall_s
            b = tokens / calls
            offline = simulate(trace, HeadDrafter(k=k, p=p, rescorer=rescorer))
            base_b = b if base_b is None else base_b
            rows.append(DemoRow(label, b, b / base_b - 1.0, offline.block_efficiency, wall,
                                greedy_s / wall, settings,
                                format_signature({**shared, **_fields(settings)})))
            if label == "vanilla BPD":
                vanilla_rep = repetition(offline).pct_consecutive
        oracle_b = simulate(trace, Oracle(DEMO_K)).block_efficiency
        settings = f"k:{DEMO_K}|p:1|alpha:-|lm:oracle"
        assert base_b is not None
        rows.append(DemoRow(f"oracle (k={DEMO_K})", oracle_b, oracle_b / base_b - 1.0, oracle_b,
                            None, None, settings,
                            format_signature({**shared, **_fields(settings)})))

        # One real step's lattice: the first step of the first prompt, greedy path in red.
        ex = trace[0]
        lat = ex.lattice(0, k=DRAW_K, certain_first=True)
        reference = np.asarray(ex.greedy_ids[:h], dtype=np.int64) if ex.m >= h else None
        png = out_dir / "demo_lattice.png"
        draw_lattice(lat, png, reference=reference, labels=lambda i: tok.decode([i]),
                     title=f"first step of held-out prompt 1: top {DRAW_K} of each of {h} "
                           "heads; greedy path in red")
        result = DemoResult(
            rows=tuple(rows), num_examples=len(prompts),
            generated_tokens=sum(len(g) for g in greedy), greedy_s=greedy_s,
            heldout_loss=art.heldout_loss, heldout_accuracy=art.heldout_accuracy,
            unigram_loss=unigram, rescorer_loss=art.rescorer_loss,
            ngram_loss=_ngram_loss(lm, held_ids), vanilla_repetition=float(vanilla_rep),
            sample_prompt=tok.decode(prompts[0][1:]), sample_output=tok.decode(greedy[0]),
            lattice_png=png, trace_dir=trace_dir, cache_dir=cache, trained=art.trained,
            train_s=art.train_s, threads=n_threads, signature=signature,
            seconds=time.perf_counter() - t_start,
        )
        _write_json(out_dir / "demo.json", result.to_dict())
        return result
    finally:
        torch.set_num_threads(old_threads)


def _fields(settings: str) -> dict[str, str]:
    """``"k:16|p:1"`` -> ``{"k": "16", "p": "1"}``."""
    return dict(part.split(":", 1) for part in settings.split("|"))  # type: ignore[misc]


def _first_difference(a: Sequence[int], b: Sequence[int]) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))
