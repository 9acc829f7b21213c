"""Shared fixtures: a small corpus that ships with Python, and n-gram LMs trained on it; and two
a module opts into (``pytestmark = pytest.mark.usefixtures("no_grad", "private_cache")``): no
autograd in its tests, and blockdraft's cache in the run's own temporary folder.

The corpus is CPython's own documentation text (``pydoc_data.topics``), split on whitespace
and mapped to word ids by first occurrence, so tests need nothing outside the repository.
The last ``HELD_OUT`` tokens are held out of LM training for lattices built from unseen text.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ngram_testlib import WordCorpus

HELD_OUT = 5000
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def word_corpus() -> WordCorpus:
    from pydoc_data.topics import topics

    vocab: dict[str, int] = {}
    lines: list[np.ndarray] = []
    for name in sorted(topics):
        for para in topics[name].split("\n\n"):
            words = para.split()
            if words:
                lines.append(np.array([vocab.setdefault(w, len(vocab)) for w in words]))
    flat = np.concatenate(lines)
    train_flat = flat[:-HELD_OUT]
    held = flat[-HELD_OUT:]
    train, n = [], 0
    for line in lines:
        if n + line.size > train_flat.size:
            break
        train.append(line)
        n += line.size
    counts = np.bincount(np.concatenate(train), minlength=len(vocab)).astype(np.float64)
    return WordCorpus(train=train, held_out=held, vocab_size=len(vocab),
                      unigram=counts / counts.sum())


@pytest.fixture(scope="session")
def lm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("lms")


@pytest.fixture(scope="session")
def arpa_lms(word_corpus: WordCorpus, lm_dir: Path) -> dict[int, Path]:
    """ARPA files of orders 2 to 5 over the pydoc word ids (binaries beside them as .bin)."""
    from blockdraft.rescorers.base import RescorerError
    from blockdraft.training.ngram.train import find_kenlm_tool, train_ngram

    try:
        find_kenlm_tool("lmplz")
    except RescorerError as e:
        pytest.skip(f"KenLM's lmplz is not built ({e}); run `make setup`")
    return {o: train_ngram(word_corpus.train, lm_dir / f"w{o}", order=o).arpa for o in (2, 3, 4, 5)}


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread() -> Iterator[None]:
    """Tiny models run fastest on one intra-op thread, and far faster than on two threads
    fighting other processes for the same two cores."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def no_grad() -> Iterator[None]:
    """The test runs without autograd (opt in: ``pytest.mark.usefixtures("no_grad")``)."""
    import torch

    with torch.no_grad():
        yield


@pytest.fixture
def private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: Any) -> None:
    """``BLOCKDRAFT_CACHE`` in the run's temporary folder, shared by the run's tests (exports
    made once per run, never in the user's cache; opt in as ``no_grad``)."""
    monkeypatch.setenv("BLOCKDRAFT_CACHE", str(tmp_path_factory.getbasetemp() / "bd-cache"))
