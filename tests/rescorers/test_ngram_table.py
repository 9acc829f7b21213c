"""The n-gram LM as sorted arrays (rescorers/ngram/table.py): every node of a tree scored in a
few gathers equals the LM's own score of that node's path (KenLM's native search and the kenlm
module), on numpy and on torch tensors; histories restart after an unknown token and start at
<s> on an empty context; what the table cannot hold is refused by name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from blockdraft.rescorers.base import RescorerError
from blockdraft.rescorers.ngram.lm import NgramLM
from blockdraft.rescorers.ngram.native import available as native_available
from blockdraft.rescorers.ngram.table import NONE, NgramTable


def _random_tree(rng: np.random.Generator, n: int, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """``(tokens [n], parents [n])``: a random tree, each parent before its child (-1: a node
    hanging off the context)."""
    parents = np.array([-1] + [int(rng.integers(-1, u)) for u in range(1, n)], dtype=np.int64)
    return rng.integers(0, vocab, size=n).astype(np.int64), parents


def _path(tokens: np.ndarray, parents: np.ndarray, u: int) -> list[int]:
    """The tokens from the context to node ``u``, ``u``'s own last."""
    out = []
    while u >= 0:
        out.append(int(tokens[u]))
        u = int(parents[u])
    return out[::-1]


def _engines() -> list[str]:
    return ["native", "kenlm"] if native_available() else ["kenlm"]


@pytest.mark.parametrize("order", [2, 3, 4])
@pytest.mark.parametrize("engine", _engines())
def test_every_node_scores_as_the_lm_scores_its_path(order: int, engine: str,
                                                     arpa_lms: dict[int, Path]) -> None:
    lm = NgramLM(arpa_lms[order], engine=engine)
    table = NgramTable.from_lm(lm)
    rng = np.random.default_rng(order)
    vocab = lm.max_token_id + 6  # a few ids the LM does not know
    for trial in range(12):
        context = rng.integers(0, vocab, size=int(rng.integers(0, 7)))  # empty: starts at <s>
        tokens, parents = _random_tree(rng, int(rng.integers(1, 24)), vocab)
        got = table.score_tree(context, tokens, parents)
        want = np.array([lm.score(_path(tokens, parents, u), context)[-1]
                         for u in range(tokens.size)])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-4, err_msg=f"trial {trial}")


@pytest.mark.parametrize("unknown", ["unk", -7.5])
def test_the_torch_table_equals_the_numpy_one(unknown: str | float,
                                              arpa_lms: dict[int, Path]) -> None:
    lm = NgramLM(arpa_lms[4], unknown=unknown)
    host = NgramTable.from_lm(lm)
    device = host.to("cpu")
    assert device.nbytes == host.nbytes > 0
    rng = np.random.default_rng(1)
    for _ in range(6):
        context = rng.integers(0, lm.max_token_id + 3, size=int(rng.integers(0, 5)))
        tokens, parents = _random_tree(rng, 20, lm.max_token_id + 3)
        a = host.score_tree(context, tokens, parents)
        b = device.score_tree(context, torch.as_tensor(tokens), torch.as_tensor(parents))
        assert isinstance(b, torch.Tensor) and b.dtype == torch.float32
        np.testing.assert_array_equal(b.numpy(), a)
        want = np.array([lm.score(_path(tokens, parents, u), context)[-1]
                         for u in range(tokens.size)])
        np.testing.assert_allclose(a, want, rtol=1e-5, atol=2e-4)


def test_histories_start_at_bos_and_restart_after_an_unknown(arpa_lms: dict[int, Path]) -> None:
    lm = NgramLM(arpa_lms[4])
    table = NgramTable.from_lm(lm)
    unknown = lm.max_token_id + 1
    known = [int(t) for t in np.flatnonzero(lm.known(np.arange(lm.max_token_id + 1)))[:3]]
    w = [int(x) for x in lm.indices(known)]
    tokens = np.array([known[0], unknown, known[1], known[2]])
    chain = np.array([-1, 0, 1, 2])
    hist = table.histories([], tokens, chain)
    assert hist[0].tolist() == [NONE, NONE, table.bos]
    assert hist[1].tolist() == [NONE, table.bos, w[0]]
    assert hist[2].tolist() == [NONE, NONE, NONE]  # after the unknown token: restarted
    assert hist[3].tolist() == [NONE, NONE, w[1]]
    ctx = table.histories(known[:2], tokens[:1], chain[:1])
    assert ctx[0].tolist() == [NONE, w[0], w[1]]  # a short context: no <s> before it


def test_a_brute_force_backoff_agrees(arpa_lms: dict[int, Path]) -> None:
    """The textbook recursion, written directly from the ARPA file's dictionaries."""
    from blockdraft.rescorers.ngram.arpa import read_arpa

    lm = NgramLM(arpa_lms[3])
    table = NgramTable.from_lm(lm)
    prob, bo = {}, {}
    for g in read_arpa(arpa_lms[3]):
        prob[g.words], bo[g.words] = g.log10_prob * np.log(10), g.log10_backoff * np.log(10)

    def ln_p(hist: tuple[str, ...], w: str) -> float:
        if hist + (w,) in prob:
            return prob[hist + (w,)]
        return bo.get(hist, 0.0) + ln_p(hist[1:], w) if hist else prob[(w,)]

    words = lm.words
    rng = np.random.default_rng(3)
    for _ in range(200):
        h = [int(i) for i in rng.integers(1, len(words), size=2)]
        w = int(rng.integers(1, len(words)))
        if words[w] in ("<s>", "</s>") or any(words[i] == "</s>" for i in h):
            continue
        got = table.score_next(np.array([h]), np.array([w]))[0]
        assert got == pytest.approx(ln_p(tuple(words[i] for i in h), words[w]), abs=1e-5)


def test_what_the_table_cannot_hold_is_refused(arpa_lms: dict[int, Path], tmp_path: Path
                                               ) -> None:
    lm = NgramLM(arpa_lms[4])
    table = NgramTable.from_lm(lm)
    with pytest.raises(RescorerError, match="parent 3 does not come before"):
        table.score_tree([1], np.array([1, 2, 3, 4]), np.array([-1, 3, 0, 1]))
    binary = tmp_path / "lone.bin"
    binary.write_bytes(arpa_lms[4].with_suffix(".bin").read_bytes())
    fingerprint = arpa_lms[4].with_suffix(".fingerprint.json")
    if fingerprint.is_file():
        (tmp_path / "lone.fingerprint.json").write_text(fingerprint.read_text())
    if not native_available():
        pytest.skip("a lone binary lists its words only through the native library")
    with pytest.raises(RescorerError, match="without its ARPA file"):
        NgramTable.from_lm(NgramLM(binary))
