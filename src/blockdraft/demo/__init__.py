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
    run_demo(corpus=None, out_dir="demo-output", *, config=DemoConfig(), ...) -> DemoResult
    DemoConfig      sizes and training steps of what the demo trains (all in the cache key)
    DemoResult, DemoRow, DemoError
    default_corpus(), read_corpus(path), split_corpus(...), cache_root(), cache_key(...)

Modules: ``config`` (settings and results), ``corpus`` (the text, the cache key), ``prepare``
(training and caching the models), ``decode`` (the measurements), ``run`` (:func:`run_demo`).
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
    DemoConfig,
    DemoError,
    DemoResult,
    DemoRow,
)
from blockdraft.demo.corpus import cache_key, cache_root, default_corpus, read_corpus, split_corpus
from blockdraft.demo.run import pick_threads, run_demo

__all__ = [
    "DEMO_K",
    "DEMO_P",
    "DEMO_VERSION",
    "DRAW_K",
    "MIN_TRAIN_PARAGRAPHS",
    "NEURAL_ALPHA",
    "NGRAM_ALPHA",
    "DemoConfig",
    "DemoError",
    "DemoResult",
    "DemoRow",
    "cache_key",
    "cache_root",
    "default_corpus",
    "pick_threads",
    "read_corpus",
    "run_demo",
    "split_corpus",
]
