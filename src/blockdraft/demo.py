"""The main job on a small corpus: lattices, n-gram rescoring and the oracle, end to end.

``blockdraft demo`` (``make demo``) runs, on the documentation text that ships with CPython
(``pydoc_data.topics``) or on a user's text (``--corpus PATH``):

1. train a byte-level BPE tokenizer and a 4-gram LM (lmplz) on the training part;
2. record a trace over held-out passages: each passage's first tokens are the prompt, the
   rest is taken as the greedy continuation, and the heads are **SIMULATED** (the true next
   tokens placed at random ranks among frequency-drawn distractors, see
   :mod:`blockdraft.bench.simulated`) until a trained blockwise model is plugged in;
3. simulate BPD offline with vanilla drafts, 16-best 0-gram, 4-gram rescoring (1-best and
   16-best) and the oracle at k = 16, and print block efficiency for each;
4. draw one lattice with its greedy path highlighted (Kim et al. Fig. 4).

Everything it trains is cached under ``$BLOCKDRAFT_CACHE`` (default ``~/.cache/blockdraft``)
``/demo/<corpus hash>``, so a second run takes seconds.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from blockdraft.errors import BlockdraftError

DEMO_H = 8
DEMO_K = 16
PROMPT_LEN = 24
GEN_LEN = 48
VOCAB = 2048
DEMO_VERSION = 1  # part of the cache key: bump when what the demo caches changes meaning


class DemoError(BlockdraftError):
    """The demo could not run on the given corpus."""


@dataclass(frozen=True)
class DemoRow:
    """Block efficiency of one strategy on the demo trace."""

    strategy: str
    block_efficiency: float
    relative: float  # B / B_vanilla - 1

    def to_dict(self) -> dict[str, object]:
        return {"strategy": self.strategy, "block_efficiency": self.block_efficiency,
                "relative": self.relative}


@dataclass(frozen=True)
class DemoResult:
    rows: tuple[DemoRow, ...]
    num_examples: int
    generated_tokens: int
    lattice_png: Path
    signature: str
    seconds: float


def cache_root() -> Path:
    import os

    return Path(os.environ.get("BLOCKDRAFT_CACHE", Path.home() / ".cache" / "blockdraft"))


def default_corpus() -> list[str]:
    """Paragraphs of the CPython documentation topics that ship with Python."""
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


def run_demo(
    corpus: Path | None = None,
    out_dir: Path = Path("demo-output"),
    *,
    num_examples: int = 24,
    seed: int = 0,
    log: Callable[[str], None] = print,
) -> DemoResult:
    """Run the pipeline (see the module docstring) and return its table."""
    from blockdraft.bench.simulated import SimulatedHeads, simulate_head_logits
    from blockdraft.drafts.heads import HeadDrafter
    from blockdraft.lattice.draw import draw_lattice
    from blockdraft.models.tokenizer import Tokenizer
    from blockdraft.oracle import Oracle, Trace, TraceWriter, simulate
    from blockdraft.rescorers.ngram import NgramLM, NgramRescorer, train_ngram
    from blockdraft.signature import environment, format_signature, human_count

    t_start = time.perf_counter()
    paras = default_corpus() if corpus is None else read_corpus(corpus)
    name = "pydoc_data.topics" if corpus is None else corpus.name
    digest = hashlib.sha256(
        f"v{DEMO_VERSION}|{VOCAB}\n".encode() + "\n".join(paras).encode()
    ).hexdigest()[:12]
    cache = cache_root() / "demo" / digest
    cache.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(paras))
    n_held = max(num_examples * 3, len(paras) // 20)
    held_paras = [paras[i] for i in order[:n_held]]
    train_paras = [paras[i] for i in order[n_held:]]
    if len(train_paras) < 50:
        raise DemoError(f"{name}: {len(paras)} paragraphs is too little text for the demo")

    tok_path = cache / "tokenizer.json"
    if tok_path.is_file():
        tok = Tokenizer.load(tok_path)
    else:
        log(f"training a {VOCAB}-token BPE on {len(train_paras)} paragraphs of {name}")
        tok = Tokenizer.train(train_paras, vocab_size=VOCAB)
        tok.save(cache)
    train_ids = [np.asarray(x, dtype=np.int64) for x in tok.encode_batch(train_paras)]
    meta_path = cache / "lm4.json"
    if meta_path.is_file():
        lm_meta = json.loads(meta_path.read_text())
    else:
        log("training a 4-gram LM with lmplz")
        r = train_ngram(train_ids, cache / "lm4", order=4)
        lm_meta = {"arpa": str(r.arpa), "binary": str(r.binary), "num_ngrams": r.num_ngrams}
        meta_path.write_text(json.dumps(lm_meta))
    lm = NgramLM(lm_meta["binary"])

    counts = np.bincount(np.concatenate(train_ids), minlength=tok.vocab_size).astype(float)
    unigram = counts / counts.sum()
    examples = []
    for ids in tok.encode_batch(held_paras):
        if len(ids) >= PROMPT_LEN + GEN_LEN:
            examples.append(np.asarray(ids[: PROMPT_LEN + GEN_LEN], dtype=np.int64))
        if len(examples) == num_examples:
            break
    if not examples:
        raise DemoError(f"{name}: no held-out paragraph has {PROMPT_LEN + GEN_LEN} tokens")

    sim = SimulatedHeads(h=DEMO_H, k=DEMO_K)
    trace_dir = cache / f"trace-simulated-s{seed}-n{len(examples)}"
    if not (trace_dir / "meta.json").is_file():
        log(f"recording a trace of {len(examples)} held-out passages (SIMULATED heads)")
        sig = {"heads": "SIMULATED", "corpus": name, "tokenizer": f"bpe{VOCAB}", "seed": seed}
        with TraceWriter(trace_dir, h=DEMO_H, K=DEMO_K, V=tok.vocab_size, signature=sig,
                         overwrite=True) as w:
            for ex in examples:
                prompt, greedy = ex[:PROMPT_LEN], ex[PROMPT_LEN:]
                w.add_logits(prompt, greedy, simulate_head_logits(rng, greedy, unigram, sim))
    trace = Trace.open(trace_dir)

    rescorer = NgramRescorer(lm, alpha=1.0)
    strategies: list[tuple[str, Oracle | HeadDrafter]] = [
        ("vanilla BPD", HeadDrafter(k=1, p=1)),
        ("16-best 0-gram", HeadDrafter(k=DEMO_K, p=16)),
        ("4-gram rescored", HeadDrafter(k=DEMO_K, p=1, rescorer=rescorer)),
        ("16-best 4-gram", HeadDrafter(k=DEMO_K, p=16, rescorer=rescorer)),
        (f"oracle (k={DEMO_K})", Oracle(DEMO_K)),
    ]
    rows: list[DemoRow] = []
    base = None
    for label, strategy in strategies:
        b = simulate(trace, strategy).block_efficiency
        base = b if base is None else base
        rows.append(DemoRow(label, float(b), float(b / base - 1.0)))

    out_dir.mkdir(parents=True, exist_ok=True)
    ex0 = trace[0]
    t = 1
    lat = ex0.lattice(t, k=6, certain_first=True)
    reference = np.asarray(ex0.greedy_ids[t:t + DEMO_H])
    if reference.size < DEMO_H:
        reference = None  # type: ignore[assignment]
    png = out_dir / "demo_lattice.png"
    draw_lattice(lat, png, reference=reference, labels=lambda i: tok.decode([i]),
                 title="one step's lattice (SIMULATED heads, top 6), greedy path in red")
    signature = format_signature({
        "heads": "SIMULATED", "corpus": name, "tokenizer": f"bpe{VOCAB}",
        "lm": f"4-gram/{human_count(int(lm_meta['num_ngrams']))}", "h": DEMO_H, "k": DEMO_K,
        "alpha": 1.0, "examples": len(examples), "seed": seed, **environment(),
    })
    return DemoResult(rows=tuple(rows), num_examples=len(examples),
                      generated_tokens=int(sum(len(trace[i].greedy_ids)
                                               for i in range(len(trace)))),
                      lattice_png=png, signature=signature,
                      seconds=time.perf_counter() - t_start)
