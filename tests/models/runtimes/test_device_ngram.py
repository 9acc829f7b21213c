"""An n-gram LM's score of every node of a candidate tree on the device
(models/runtimes/device_ngram.py): the histories built from the text buffer on the device and a
static topology equal the table's own (rescorers/ngram/table.py), so the scores equal its
``score_tree`` exactly and KenLM's to float32 rounding; empty and short texts, unknown tokens,
orders 2 to 4; no host synchronisation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from blockdraft.models.runtimes.device_ngram import HistoryIndex, node_histories, node_scores
from blockdraft.models.runtimes.device_tree import StaticTree
from blockdraft.rescorers.ngram.lm import NgramLM
from blockdraft.rescorers.ngram.table import NgramTable
from device_testlib import NoHostSync


def random_tree(rng: np.random.Generator, n: int) -> StaticTree:
    parents = np.array([-1] + [int(rng.integers(0, u)) for u in range(1, n)])
    return StaticTree(parents, np.zeros(n, dtype=np.int64))


def path_of(tokens: np.ndarray, parents: np.ndarray, u: int) -> list[int]:
    out = []
    while u >= 0:
        out.append(int(tokens[u]))
        u = int(parents[u])
    return out[::-1]


@pytest.mark.parametrize("order", [2, 3, 4])
def test_every_node_scores_as_the_table_and_kenlm(order: int,
                                                  arpa_lms: dict[int, Path]) -> None:
    lm = NgramLM(arpa_lms[order])
    host = NgramTable.from_lm(lm)
    table = host.to("cpu")
    rng = np.random.default_rng(order)
    vocab = lm.max_token_id + 4  # a few ids the LM does not know
    common = min(vocab, 60)  # frequent words: n-grams the LM stores
    for trial in range(10):
        tree = random_tree(rng, int(rng.integers(1, 20)))
        where = HistoryIndex.of(tree, order, "cpu")
        length = int(rng.integers(0, 8))  # 0: the text starts at <s>
        pick = vocab if trial % 3 == 0 else common
        text = rng.integers(0, pick, size=length)
        tokens = rng.integers(0, pick, size=tree.size)
        buffer = torch.cat((torch.as_tensor(text), torch.full((5,), 7)))  # garbage after it
        got = node_scores(table, where, buffer, torch.tensor(length), torch.as_tensor(tokens))
        hist = node_histories(table, where, buffer, torch.tensor(length),
                              torch.as_tensor(tokens))
        np.testing.assert_array_equal(
            hist.numpy(), host.histories(text, tokens, tree.parents))
        np.testing.assert_array_equal(got.numpy(), host.score_tree(text, tokens, tree.parents))
        want = [lm.score(path_of(tokens, tree.parents, u), text)[-1] for u in range(tree.size)]
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=2e-4)


def test_scoring_makes_no_host_synchronisation(arpa_lms: dict[int, Path]) -> None:
    lm = NgramLM(arpa_lms[4])
    table = NgramTable.from_lm(lm).to("cpu")
    tree = random_tree(np.random.default_rng(0), 12)
    where = HistoryIndex.of(tree, 4, "cpu")
    text = torch.arange(30)
    with NoHostSync():
        node_scores(table, where, text, torch.tensor(9), torch.arange(12))
