"""The exact search's fast paths against brute force and the slow paths they replace.

* the native search's batched, prefetched KenLM probes (probing models) and the plain virtual
  lookups (any other KenLM model type: here a trie binary) return the same p best as brute
  force over all ``k^h`` paths scored with the ``kenlm`` module, and the same as each other;
* ``NgramLM.lattice_indices`` (the hot path's vocabulary lookup) equals ``NgramLM.indices`` and
  never checks padding arcs against ``unknown="error"``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import kenlm
import numpy as np
import pytest
from test_ngram_exact import assert_matches_brute, brute_force

from blockdraft.lattice.synthetic import hits_heavy as hits_lattice
from blockdraft.lattice.synthetic import random_tokens
from blockdraft.rescorers.base import RescorerError
from blockdraft.rescorers.ngram import NgramLM, NgramRescorer
from blockdraft.rescorers.ngram import native as native_mod
from blockdraft.training.ngram.train import find_kenlm_tool
from ngram_testlib import WordCorpus

needs_native = pytest.mark.skipif(not native_mod.available(),
                                  reason="native library not built (run `make setup`)")


@pytest.fixture(scope="module")
def trie_binary(arpa_lms: dict[int, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 4-gram as a KenLM trie binary (not a probing model: the virtual-lookup path)."""
    out = tmp_path_factory.mktemp("trie") / "w4.trie.bin"
    subprocess.run([str(find_kenlm_tool("build_binary")), "-s", "trie", str(arpa_lms[4]),
                    str(out)], check=True, capture_output=True)
    return out


@needs_native
@pytest.mark.parametrize("p", [1, 3, 16])
def test_probing_and_trie_searches_equal_brute_force(
    p: int, arpa_lms: dict[int, Path], trie_binary: Path, word_corpus: WordCorpus
) -> None:
    probing = NgramLM(arpa_lms[4])  # an ARPA file loads as KenLM's probing model
    trie = NgramLM(trie_binary, bounds=False)
    model = kenlm.Model(str(arpa_lms[4]))
    rng = np.random.default_rng(50 + p)
    held = word_corpus.held_out
    for case in range(10):
        h, k = [(5, 4), (4, 6), (6, 3)][case % 3]
        pos = int(rng.integers(20, held.size - h))
        lat = hits_lattice(rng, held[pos:pos + h], k, word_corpus.unigram,
                           certain_first=bool(case % 2))
        context = held[pos - 12:pos] if case % 4 else held[:0]
        alpha = [0.5, 1.0, 2.0][case % 3]
        brute = brute_force(lat, model, 4, context, alpha)
        for beam in (0, 2, 8):
            a = NgramRescorer(probing, alpha=alpha, prune_beam=beam).rescore(lat, context, p)
            b = NgramRescorer(trie, alpha=alpha, prune_beam=beam).rescore(lat, context, p)
            assert_matches_brute(a, brute, p)
            assert_matches_brute(b, brute, p)
            np.testing.assert_array_equal(a.tokens, b.tokens)
            np.testing.assert_array_equal(a.lm_scores, b.lm_scores)


@needs_native
def test_batched_probes_on_many_states(arpa_lms: dict[int, Path],
                                       word_corpus: WordCorpus) -> None:
    """Wide lattices (dozens of LM states per slot and more probes per slot than the prefetch
    distance): the bounded search with batched probes equals the exhaustive one and the
    kenlm-module search."""
    lm = NgramLM(arpa_lms[5])
    full = NgramRescorer(lm, alpha=1.0, prune_beam=0)
    fast = NgramRescorer(lm, alpha=1.0)
    py = NgramRescorer(NgramLM(arpa_lms[5], engine="kenlm"), alpha=1.0)
    rng = np.random.default_rng(9)
    held = word_corpus.held_out
    for case in range(6):
        pos = int(rng.integers(20, held.size - 8))
        lat = hits_lattice(rng, held[pos:pos + 7], 14, word_corpus.unigram, certain_first=True)
        for p in (1, 16):
            a = full.rescore(lat, held[:pos], p)
            b = fast.rescore(lat, held[:pos], p)
            np.testing.assert_array_equal(a.tokens, b.tokens)
            np.testing.assert_array_equal(a.scores, b.scores)
            if case < 2:
                c = py.rescore(lat, held[:pos], p)
                np.testing.assert_allclose(a.scores, c.scores, atol=1e-9)
        assert int(np.max(full.last_stats.lookups)) > 32  # batches longer than the lookahead


def test_lattice_indices_equal_indices(arpa_lms: dict[int, Path]) -> None:
    lm = NgramLM(arpa_lms[3])
    rng = np.random.default_rng(1)
    for _ in range(50):
        lat = random_tokens(rng, 5, 7, lm.max_token_id + 40, certain_first=True)
        tokens = lat.tokens
        want = lm.indices(np.where(tokens >= 0, tokens, -1))
        np.testing.assert_array_equal(lm.lattice_indices(tokens), want)
        assert lm.lattice_indices(tokens).dtype == np.uint32


def test_lattice_indices_unknown_error_ignores_padding(arpa_lms: dict[int, Path]) -> None:
    lm = NgramLM(arpa_lms[3], unknown="error")
    known = int(np.flatnonzero(lm.known(np.arange(lm.max_token_id + 1)))[0])
    tokens = np.array([[known, -1, -1], [known, known, -1]])
    assert lm.lattice_indices(tokens)[0, 1] == 0
    with pytest.raises(RescorerError, match="not in the LM"):
        lm.lattice_indices(np.array([[known, lm.max_token_id + 5]]))


def test_start_checked_equals_indices(arpa_lms: dict[int, Path]) -> None:
    """The hot path's context lookup: the last order - 1 ids as ``indices`` maps them (ids the
    LM does not know, and ids beyond its largest, map to 0); ``unknown="error"`` raises."""
    for order in (2, 4):
        lm = NgramLM(arpa_lms[order])
        strict = NgramLM(arpa_lms[order], unknown="error")
        rng = np.random.default_rng(order)
        for n in (0, 1, 2, 5):
            for _ in range(20):
                ctx = rng.integers(0, lm.max_token_id + 30, size=n)
                bos, idx = lm.start_checked(ctx)
                assert bos == (n == 0)
                want = lm.indices(ctx[-(order - 1):]) if n else np.zeros(0, np.uint32)
                np.testing.assert_array_equal(idx, want)
                assert idx.dtype == np.uint32
                if n and (want == 0).any():
                    with pytest.raises(RescorerError, match="not in the LM"):
                        strict.start_checked(ctx)
