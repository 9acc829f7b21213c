"""``make demo``: draft refinement end to end, on a real pretrained model by default, or on a
small blockwise model trained on the spot (``--blockwise``).

**The real model** (``blockdraft demo``, :func:`run_real_demo`):

1. load SmolLM2-135M-Instruct and its packaged Medusa heads (``load_model("smollm2")``, h = 1
   + the heads; float32 by default: exact, and on a CPU without bfloat16 units faster than
   bfloat16 for the multi-token forwards of verification), or a user's model and heads
   (``--model PATH --heads PATH``);
2. train, or load from the cache (``$BLOCKDRAFT_CACHE/demo-ngram/<key>``), a 4-gram LM over
   the model's own token ids of the CPython documentation that ships with Python
   (``pydoc_data.topics``, repeated paragraphs dropped) or a user's text (``--corpus``); the
   tokenizer is recorded beside it and checked on load (:mod:`blockdraft.demo.ngram`);
3. decode a few chat prompts (:data:`REAL_PROMPTS`: short questions about Python, written for
   the demo and never trained on; one user turn each in the model's chat template, at most
   :data:`REAL_MAX_NEW_TOKENS` new tokens, EOS honoured) with greedy decoding
   (:func:`~blockdraft.models.greedy_generate`, the reference), vanilla heads, 4-gram
   rescoring (k = 16, p = 1) and 4-best 4-gram drafts, all with the exact criterion; each
   prompt visits the strategies in a rotated order after one short untimed warm-up decode per
   strategy, and every call is timed in this run; beside them, on a model loaded from a GGUF
   file (SmolLM2 is), the same runtime on the file's own 4-bit blocks (``q4``): its greedy
   loop, the default and prompt lookup, each held against q4's own greedy
   (``also_precision``, ``--also-precision``);
4. report per strategy ``B`` (tokens per serial model call, greedy = 1), tokens/s, speedup
   over greedy and whether every output equals greedy decoding's; the first prompt's answer;
   and the lattice of the step in the middle of that answer (top 6 of each head, greedy path
   highlighted) as a table and as a drawing (``<out>/demo_lattice.png``, Kim et al. Fig. 4);
   ``<out>/demo.json`` holds it all with signatures.

Neural rescoring is left out of the real-model demo: it needs a RescorerLM over the model's
49,152-token vocabulary, trained in the first run. One training step of the blockwise demo's
rescorer (2 layers, d = 64; 16 x 128 tokens) took 9.4 s at V = 49,152 against 0.5 s at
V = 1,024 (one thread of this 2-core CPU while another job loaded it): its 600 steps would take
well over the first run's 10-minute budget, and fewer steps would not train its 3.1M embedding
and output weights on the ~81k tokens of the text. Train one with ``blockdraft train
--rescorer --tokenizer smollm2`` and decode with ``blockdraft decode --model smollm2
--rescorer-model DIR``.

**The small blockwise model** (``blockdraft demo --blockwise``, :func:`run_demo`), a
model-free quick look, on ``pydoc_data.topics`` or ``--corpus PATH``:

1. drop repeated paragraphs and split the rest (seeded) into training and held-out text;
2. train on the training part, or load from the cache: a byte-level BPE tokenizer, a
   :class:`~blockdraft.models.BlockwiseLM` (base LM, then its extra heads on the frozen base),
   a small :class:`~blockdraft.models.RescorerLM` for local neural rescoring (exported to ONNX)
   and a 4-gram LM over token ids (modified Kneser-Ney);
3. decode a handful of held-out prompts (the first 24 tokens of held-out paragraphs; 48 new
   tokens each, EOS decoded as the paragraph separator it is in training unless
   ``stop_at_eos``) with the online pipeline
   (:func:`blockdraft.verify.decode`, exact criterion): vanilla BPD, neural rescoring,
   16-best 0-gram, 4-gram rescoring and 16-best 4-gram drafts; every output is checked
   against greedy decoding token for token (:class:`DemoError` otherwise);
4. record a trace of the same prompts (``<out>/trace``), get the oracle at k = 16 from it and
   re-simulate every strategy offline, which must agree with the online decode
   (docs/definitions.md sec. 6);
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
    run_real_demo(model="smollm2", out_dir="demo-output", *, heads=None, dtype="float32",
                  corpus=None, prompts=REAL_PROMPTS, ...) -> RealDemoResult
    RealDemoResult, RealDemoRow, LatticeView, REAL_PROMPTS and the real demo's settings
    run_demo(corpus=None, out_dir="demo-output", *, config=DemoConfig(), ...) -> DemoResult
    DemoConfig      sizes and training steps of what the demo trains (all in the cache key)
    DemoResult, DemoRow, DemoError
    default_corpus(), read_corpus(path), split_corpus(...), cache_root(), cache_key(...)

Modules: ``config`` (settings), ``results`` (what the demos report), ``errors``
(:class:`DemoError`), ``corpus`` (the text, the cache key), ``prepare``
(training and caching the models), ``decode`` (the measurements), ``run`` (:func:`run_demo`),
``ngram`` (the real demo's cached n-gram LM), ``real`` (:func:`run_real_demo`).
The tables are printed by the CLI (``blockdraft.cli.demo``).
"""

from blockdraft.demo.config import (
    DEMO_K,
    DEMO_P,
    DEMO_VERSION,
    DRAW_K,
    MIN_TRAIN_PARAGRAPHS,
    NEURAL_ALPHA,
    NGRAM_ALPHA,
    REAL_ALSO_PRECISION,
    REAL_DTYPE,
    REAL_K,
    REAL_MAX_NEW_TOKENS,
    REAL_MODEL,
    REAL_ORDER,
    REAL_P,
    REAL_PRECISION,
    REAL_PROMPTS,
    REAL_RUNTIME,
    DemoConfig,
)
from blockdraft.demo.corpus import cache_key, cache_root, default_corpus, read_corpus, split_corpus
from blockdraft.demo.errors import DemoError
from blockdraft.demo.ngram import DemoNgram, prepare_ngram
from blockdraft.demo.real import run_real_demo
from blockdraft.demo.results import (
    DemoResult,
    DemoRow,
    LatticeView,
    RealDemoResult,
    RealDemoRow,
)
from blockdraft.demo.run import pick_threads, run_demo

__all__ = [
    "DEMO_K",
    "DEMO_P",
    "DEMO_VERSION",
    "DRAW_K",
    "MIN_TRAIN_PARAGRAPHS",
    "NEURAL_ALPHA",
    "NGRAM_ALPHA",
    "REAL_ALSO_PRECISION",
    "REAL_DTYPE",
    "REAL_K",
    "REAL_MAX_NEW_TOKENS",
    "REAL_MODEL",
    "REAL_ORDER",
    "REAL_P",
    "REAL_PRECISION",
    "REAL_PROMPTS",
    "REAL_RUNTIME",
    "DemoConfig",
    "DemoError",
    "DemoNgram",
    "DemoResult",
    "DemoRow",
    "LatticeView",
    "RealDemoResult",
    "RealDemoRow",
    "cache_key",
    "cache_root",
    "default_corpus",
    "pick_threads",
    "prepare_ngram",
    "read_corpus",
    "run_demo",
    "run_real_demo",
    "split_corpus",
]
