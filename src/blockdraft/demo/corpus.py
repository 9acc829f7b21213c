"""The demo's text and where its trained models are kept: the corpus (Python's own docs or a
user's file) as paragraphs, repeats dropped, split (seeded) into training and held-out text;
the cache folder and its key."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from blockdraft.demo.config import DEMO_VERSION, MIN_TRAIN_PARAGRAPHS, DemoConfig
from blockdraft.demo.errors import DemoError


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


@dataclass(frozen=True)
class Corpus:
    """The demo's text, ready to train on.

    Attributes:
        name: how signatures and messages call it (``pydoc_data.topics`` or the file name).
        paragraphs: every distinct paragraph, in the text's order (the cache key hashes them).
        train, held_out: the seeded split of :func:`split_corpus`.
    """

    name: str
    paragraphs: list[str]
    train: list[str]
    held_out: list[str]


def load_corpus(corpus: Path | None, config: DemoConfig, seed: int) -> Corpus:
    """The paragraphs of ``corpus`` (None: :func:`default_corpus`), repeats dropped, split.

    Raises:
        DemoError: when the file is missing or leaves fewer than
            :data:`MIN_TRAIN_PARAGRAPHS` paragraphs for training.
    """
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
    return Corpus(name, paras, train_paras, held_paras)
