"""The real-model demo's n-gram LM: a 4-gram over a model's own token ids, trained once on the
demo's text (``pydoc_data.topics`` or ``--corpus``) and cached.

The cache folder is ``$BLOCKDRAFT_CACHE/demo-ngram/<key>`` (default ``~/.cache/blockdraft``);
the key hashes :data:`~blockdraft.demo.config.DEMO_VERSION`, the order, the tokenizer's
vocabulary fingerprint and the text, so another model's tokenizer or another text trains its
own LM. The LM is trained as ``blockdraft ngram train --tokenizer MODEL`` trains it: the
tokenizer is recorded beside it (``lm4.vocab.json``) and checked against the model's when
it is loaded. ``lm4.json``, written last, marks it done.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from blockdraft.demo.config import DEMO_VERSION
from blockdraft.demo.corpus import cache_root, default_corpus, read_corpus
from blockdraft.demo.errors import DemoError
from blockdraft.demo.prepare import read_json, write_json

Progress = Callable[[str], Callable[[Iterable[Any]], Iterable[Any]]]
"""A progress-bar factory: ``progress("what") (items) -> items``
(e.g. :func:`blockdraft.cli.common.progress_bar`)."""

ENCODE_CHUNK = 256  # paragraphs per tokenizer call (one progress-bar tick)


@dataclass(frozen=True)
class DemoNgram:
    """The demo's n-gram LM, loaded.

    Attributes:
        lm: the :class:`~blockdraft.rescorers.ngram.NgramLM` (checked against the tokenizer).
        path: its KenLM binary (or ARPA file).
        counts: n-grams per order.
        tokens: training tokens.
        corpus: the text's name (``pydoc_data.topics`` or the file name).
        trained: whether this call trained it (False: it came from the cache).
        seconds: wall seconds of this call (tokenising and training, or loading).
    """

    lm: Any
    path: Path
    counts: tuple[int, ...]
    tokens: int
    corpus: str
    trained: bool
    seconds: float


def corpus_paragraphs(corpus: Path | None) -> tuple[str, list[str]]:
    """``(name, paragraphs)`` of ``corpus`` (None: ``pydoc_data.topics``), repeats dropped.

    Raises:
        DemoError: a missing file, or one without text.
    """
    paras = default_corpus() if corpus is None else read_corpus(corpus)
    paras = list(dict.fromkeys(p for p in paras if p))
    name = "pydoc_data.topics" if corpus is None else corpus.name
    if not paras:
        raise DemoError(f"{name}: the text is empty; the n-gram LM needs some text")
    return name, paras


def ngram_key(paras: Sequence[str], fingerprint: str, order: int) -> str:
    """The cache folder's name: a hash of :data:`DEMO_VERSION`, the order, the tokenizer's
    fingerprint and the text."""
    fields = {"version": DEMO_VERSION, "order": order, "tokenizer": fingerprint,
              "corpus": hashlib.sha256("\n".join(paras).encode()).hexdigest()}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def prepare_ngram(
    tok: Any,
    tokenizer_name: str,
    corpus: Path | None,
    order: int,
    log: Callable[[str], None],
    progress: Progress | None = None,
) -> DemoNgram:
    """The order-``order`` n-gram LM over ``tok``'s ids of the demo's text: from the cache,
    else trained (:func:`~blockdraft.training.ngram.train_ngram`) and cached.

    Args:
        tok: the model's tokenizer (any blockdraft tokenizer: ``encode_batch``, ``info``).
        tokenizer_name: where the tokenizer came from (recorded beside the LM).
        corpus: a text file (paragraphs separated by blank lines, else lines); None: the
            CPython documentation topics.
        order: 2 to 5.
        log: hears one line per step; the one about training starts with ``"training"``.
        progress: wraps the tokenising loop in a progress bar.

    Raises:
        DemoError: a missing or empty text.
        RescorerError: training failed, or the cached LM does not fit the tokenizer.
    """
    from blockdraft.rescorers.ngram import NgramLM
    from blockdraft.training.ngram import train_ngram

    t0 = time.perf_counter()
    name, paras = corpus_paragraphs(corpus)
    info = tok.info(tokenizer_name)
    cache = cache_root() / "demo-ngram" / ngram_key(paras, info.fingerprint, order)
    marker = cache / f"lm{order}.json"
    meta = read_json(marker)
    trained = meta is None
    if meta is None:
        log(f"training a {order}-gram LM over the model's token ids of {name} "
            f"({len(paras):,} paragraphs); cached in {cache}")
        chunks = [paras[i:i + ENCODE_CHUNK] for i in range(0, len(paras), ENCODE_CHUNK)]
        items: Iterable[list[str]] = chunks if progress is None else progress("tokenising")(
            chunks)
        seqs: list[np.ndarray] = []
        for chunk in items:
            seqs += [np.asarray(ids, dtype=np.int64) for ids in tok.encode_batch(chunk) if ids]
        cache.mkdir(parents=True, exist_ok=True)
        r = train_ngram(seqs, cache / f"lm{order}", order=order, tokenizer=info)
        meta = {"file": (r.binary or r.arpa).name, "counts": list(r.counts),
                "tokens": r.tokens, "corpus": name, "paragraphs": len(paras),
                "tokenizer": info.to_dict(), "lmplz_s": r.seconds}
        write_json(marker, meta)
    path = cache / str(meta["file"])
    lm = NgramLM(path)
    lm.check_vocab(int(tok.vocab_size), tok)
    return DemoNgram(lm=lm, path=path, counts=tuple(int(c) for c in meta["counts"]),
                     tokens=int(meta["tokens"]), corpus=name, trained=trained,
                     seconds=time.perf_counter() - t0)
