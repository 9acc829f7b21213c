"""Token trees (docs/definitions.md sec. 11): DraftTree validation and helpers, and the
builders (trie, Medusa static and calibrated, confidence, rescored)."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest

from blockdraft.drafts import (
    MC_SIM_7B_63,
    ConfidenceTreeDrafter,
    DraftBatch,
    Drafter,
    DraftError,
    DraftTree,
    HeadDrafter,
    MedusaTreeDrafter,
    RescoredTreeDrafter,
    StepView,
    TrieDrafter,
    calibrated_choices,
    calibrated_tree_drafter,
    confidence_tree,
    medusa_tree,
    rescored_tree,
    trie_tree,
)
from blockdraft.lattice import SausageLattice
from blockdraft.rescorers.base import PathScorer, scores_by_parent
from models_testlib import tiny_rescorer_lm


def small_tree() -> DraftTree:
    #      0(7)
    #     /    \
    #   1(8)   2(9)
    #   /  \
    # 3(10) 4(11)
    #  |
    # 5(12)
    return DraftTree(tokens=np.array([7, 8, 9, 10, 11, 12]),
                     parents=np.array([-1, 0, 0, 1, 1, 3]),
                     scores=np.array([0.0, -1, -2, -3, -4, -5]))


def view(lattice: SausageLattice, context=()) -> StepView:  # type: ignore[no-untyped-def]
    return StepView(lattice=lattice, context=np.asarray(context, dtype=np.int64))


def random_lattice(seed: int, h: int = 4, k: int = 5, vocab: int = 30) -> SausageLattice:
    rng = np.random.default_rng(seed)
    return SausageLattice.from_logits(rng.normal(size=(h, vocab)) * 2, k)


def test_tree_helpers() -> None:
    t = small_tree()
    assert t.num_nodes == 6 and t.max_depth == 3
    assert t.depths.tolist() == [0, 1, 1, 2, 2, 3]
    assert t.position_offsets().tolist() == [0, 1, 1, 2, 2, 3]
    assert t.leaves().tolist() == [2, 4, 5]
    assert t.path(5).tolist() == [0, 1, 3, 5]
    assert t.path_tokens(4).tolist() == [7, 8, 11]
    assert [p.tolist() for p in t.paths()] == [[0, 2], [0, 1, 4], [0, 1, 3, 5]]
    mask = t.ancestor_mask()
    expected = np.zeros((6, 6), dtype=bool)
    for u in range(6):
        expected[u, t.path(u)] = True
    assert (mask == expected).all()
    assert t.children(1) == (3, 4)
    assert t.truncate(1).tokens.tolist() == [7, 8, 9]
    assert t.top(4).parents.tolist() == [-1, 0, 0, 1]
    batch = t.to_drafts()
    assert batch.tokens.tolist() == [[7, 9, -1, -1], [7, 8, 11, -1], [7, 8, 10, 12]]
    assert batch.scores.tolist() == [-2, -4, -5]
    cut = t.to_drafts(width=2)  # [7, 8] twice: kept once
    assert cut.tokens.tolist() == [[7, 9], [7, 8]]


@pytest.mark.parametrize(("tokens", "parents", "match"), [
    ([1, 2], [0, 0], "root"),
    ([1, 2, 3], [-1, 2, 0], "parent"),
    ([1, 2, 3], [-1, -1, 0], "parent"),
    ([1, 2, 2], [-1, 0, 0], "siblings"),
    ([1, -2], [-1, 0], ">= 0"),
])
def test_tree_validation(tokens: list[int], parents: list[int], match: str) -> None:
    with pytest.raises(DraftError, match=match):
        DraftTree(tokens=np.array(tokens), parents=np.array(parents),
                  scores=np.zeros(len(tokens)))


def test_tree_depths_checked() -> None:
    with pytest.raises(DraftError, match="depths"):
        DraftTree(tokens=np.array([1, 2]), parents=np.array([-1, 0]), scores=np.zeros(2),
                  depths=np.array([0, 2]))
    assert DraftTree(tokens=np.array([1, 2]), parents=np.array([-1, 0]), scores=np.zeros(2),
                     depths=np.array([0, 1])).max_depth == 1


def test_trie_round_trip() -> None:
    tokens = np.array([[5, 1, 2, 3], [5, 1, 2, 4], [5, 6, 2, 3], [5, 1, 7, 3]])
    scores = np.array([-1.0, -2.0, -3.0, -4.0])
    batch = DraftBatch(tokens=tokens, scores=scores, head_scores=scores,
                       lm_scores=np.zeros(4))
    tree = DraftTree.from_drafts(batch)
    assert tree.num_nodes == 1 + 3 + 1 + 3 + 2  # shared prefixes merged
    back = tree.to_drafts()
    assert back.tokens.tolist() == tokens.tolist()
    assert back.scores.tolist() == scores.tolist()
    assert trie_tree(batch, budget=5).num_nodes == 5
    with pytest.raises(DraftError, match="certain token"):
        DraftTree.from_drafts(DraftBatch(tokens=np.array([[1, 2], [3, 4]]), scores=np.zeros(2),
                                         head_scores=np.zeros(2), lm_scores=np.zeros(2)))


def test_chain() -> None:
    t = DraftTree.chain([4, 5, 6])
    assert t.parents.tolist() == [-1, 0, 1] and t.leaves().tolist() == [2]
    assert t.to_drafts().tokens.tolist() == [[4, 5, 6]]


def test_mc_sim_7b_63_per_depth() -> None:
    assert len(MC_SIM_7B_63) == 63
    assert Counter(len(c) for c in MC_SIM_7B_63) == {1: 10, 2: 28, 3: 23, 4: 2}
    lat = random_lattice(0, h=5, k=10, vocab=40)
    tree = medusa_tree(lat, MC_SIM_7B_63)
    assert tree.num_nodes == 64 and tree.max_depth == 4
    assert Counter(tree.depths.tolist()) == {0: 1, 1: 10, 2: 28, 3: 23, 4: 2}
    # a node's token depends only on its depth and rank
    for c in MC_SIM_7B_63:
        node = [u for u in range(64) if tree.depths[u] == len(c)
                and tree.path_tokens(u).tolist()
                == [int(lat.tokens[0, 0])] + [int(lat.tokens[d + 1, r]) for d, r in
                                              enumerate(c)]]
        assert len(node) == 1
        expected = sum(float(lat.scores[d + 1, r]) for d, r in enumerate(c))
        assert tree.scores[node[0]] == pytest.approx(float(lat.scores[0, 0]) + expected)
    cut = medusa_tree(lat, MC_SIM_7B_63, budget=11)
    assert cut.tokens.tolist() == tree.top(11).tokens.tolist()
    assert cut.parents.tolist() == tree.top(11).parents.tolist()
    drafter = MedusaTreeDrafter()
    assert isinstance(drafter, Drafter) and drafter.k == 10
    drafted = drafter.draft(view(lat))
    assert drafted.num_nodes == 64
    assert drafted.tokens.tolist() == tree.tokens.tolist()
    assert drafted.parents.tolist() == tree.parents.tolist()


def test_medusa_tree_errors() -> None:
    lat = random_lattice(0, h=3, k=4)
    with pytest.raises(DraftError, match="prefix"):
        medusa_tree(lat, [[0, 1]])
    with pytest.raises(DraftError, match="depth"):
        medusa_tree(lat, [[0], [0, 0], [0, 0, 0]])
    with pytest.raises(DraftError, match="k >= 5"):
        medusa_tree(lat, [[4]])


def test_calibrated_choices_maximise_expected_length() -> None:
    rng = np.random.default_rng(3)
    acc = np.sort(rng.uniform(0, 0.6, size=(3, 3)), axis=1)[:, ::-1]
    budget = 7
    chosen = calibrated_choices(acc, budget)
    assert len(chosen) == budget - 1

    def value(path: tuple[int, ...]) -> float:
        return float(np.prod([acc[d, r] for d, r in enumerate(path)]))

    every = [p for d in (1, 2, 3) for p in itertools.product(range(3), repeat=d)]
    best = 0.0
    for subset in itertools.combinations(every, budget - 1):
        s = set(subset)
        if all(len(p) == 1 or p[:-1] in s for p in subset):
            best = max(best, sum(value(p) for p in subset))
    assert sum(value(p) for p in chosen) == pytest.approx(best)
    drafter = calibrated_tree_drafter(acc, budget)  # was MedusaTreeDrafter.calibrated
    lat = random_lattice(1)
    drafted = drafter.draft(view(lat))
    assert drafted.num_nodes == budget
    assert drafted.tokens.tolist() == medusa_tree(lat, chosen).tokens.tolist()


def brute_force_top(lattice: SausageLattice, budget: int, score) -> set[tuple[int, ...]]:  # type: ignore[no-untyped-def]
    """The ``budget`` best root paths (by ``score(path)``) among all prefixes of lattice paths."""
    paths = []
    for d in range(lattice.h):
        for ranks in itertools.product(range(lattice.k), repeat=d):
            toks = (int(lattice.tokens[0, 0]),) + tuple(int(lattice.tokens[i + 1, r])
                                                       for i, r in enumerate(ranks))
            paths.append(toks)
    paths.sort(key=lambda p: -score(p))
    return set(paths[:budget]), [score(p) for p in paths]


@pytest.mark.parametrize("seed", range(4))
def test_confidence_tree_is_the_top_n(seed: int) -> None:
    lat = random_lattice(seed, h=4, k=3)
    budget = 9

    def head(path: tuple[int, ...]) -> float:
        return sum(float(lat.scores[i][list(lat.tokens[i]).index(t)])
                   for i, t in enumerate(path))

    tree = confidence_tree(lat, budget)
    assert tree.num_nodes == budget
    got = {tuple(tree.path_tokens(u).tolist()) for u in range(budget)}
    want, all_scores = brute_force_top(lat, budget, head)
    kth = sorted(all_scores, reverse=True)[budget - 1]
    assert all(head(p) >= kth - 1e-12 for p in got)
    assert got == want or sorted(head(p) for p in got) == pytest.approx(
        sorted(head(p) for p in want))
    for u in range(budget):
        assert tree.scores[u] == pytest.approx(head(tuple(tree.path_tokens(u).tolist())))
    drafted = ConfidenceTreeDrafter(k=3, budget=budget).draft(view(lat))
    assert drafted.num_nodes == budget and drafted.tokens.tolist() == tree.tokens.tolist()


class BigramLM:
    """A toy LM with ``score(tokens, context)``: ln P(t | prev) from a fixed random table; a
    :class:`PathScorer` (``next_scores``, ``score_tree``, ``check_vocab``)."""

    def __init__(self, vocab: int = 30, seed: int = 0) -> None:
        z = np.random.default_rng(seed).normal(size=(vocab + 1, vocab)) * 2
        self.table = z - np.log(np.exp(z).sum(1, keepdims=True))
        self.vocab = vocab

    def next_scores(self, path, context, candidates):  # type: ignore[no-untyped-def]
        seq = [*np.asarray(context).tolist(), *list(path)]
        prev = seq[-1] if seq else -1
        return self.table[prev, np.asarray(candidates)]

    def score_tree(self, tokens, parents, context):  # type: ignore[no-untyped-def]
        return scores_by_parent(self, tokens, parents, context)

    def check_vocab(self, vocab_size: int) -> None:
        assert vocab_size == self.vocab

    def score(self, tokens, context=()):  # type: ignore[no-untyped-def]
        seq = [*list(np.asarray(context).tolist()), *np.asarray(tokens).tolist()]
        start = len(seq) - len(tokens)
        return np.array([self.table[seq[i - 1] if i > 0 else -1, seq[i]]
                         for i in range(start, len(seq))])


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("alpha", [0.0, 0.7])
def test_rescored_tree_is_the_top_n(seed: int, alpha: float) -> None:
    lat = random_lattice(seed, h=4, k=3)
    lm = BigramLM()
    context = [3, 4]
    budget = 10

    def combined(path: tuple[int, ...]) -> float:
        head = sum(float(lat.scores[i][list(lat.tokens[i]).index(t)])
                   for i, t in enumerate(path))
        return head + alpha * float(lm.score(np.array(path), context).sum())

    assert isinstance(lm, PathScorer)
    tree = rescored_tree(lat, budget, lm, alpha, context)
    got = {tuple(tree.path_tokens(u).tolist()) for u in range(budget)}
    want, _ = brute_force_top(lat, budget, combined)
    assert sorted(combined(p) for p in got) == pytest.approx(sorted(combined(p) for p in want))
    for u in range(budget):
        assert tree.scores[u] == pytest.approx(combined(tuple(tree.path_tokens(u).tolist())))
    drafter = RescoredTreeDrafter(lm, k=3, budget=budget, alpha=alpha)
    assert drafter.draft(view(lat, context)).tokens.tolist() == tree.tokens.tolist()
    if alpha == 0.0:
        assert tree.tokens.tolist() == confidence_tree(lat, budget).tokens.tolist()


def test_rescored_tree_with_ngram_lm(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from blockdraft.rescorers import RescorerError
    from blockdraft.rescorers.ngram import NgramLM
    from blockdraft.training.ngram import find_kenlm_tool, train_ngram

    try:
        find_kenlm_tool("lmplz")
    except RescorerError as e:
        pytest.skip(f"KenLM's lmplz is not built ({e})")
    rng = np.random.default_rng(0)
    seqs = [rng.integers(0, 50, size=20).tolist() for _ in range(200)] + [list(range(50))]
    lm = NgramLM(train_ngram(seqs, tmp_path / "lm3", order=3, memory="64M").arpa)
    lat = random_lattice(5, h=4, k=3, vocab=50)
    context = [1, 2, 3]
    tree = rescored_tree(lat, 12, lm, 1.0, context)
    for u in range(tree.num_nodes):
        path = tree.path_tokens(u)
        head = sum(float(lat.scores[i][list(lat.tokens[i]).index(t)]) for i, t in
                   enumerate(path.tolist()))
        assert tree.scores[u] == pytest.approx(head + float(lm.score(path, context).sum()))


def test_trie_drafter() -> None:
    lat = random_lattice(2, h=4, k=3)
    drafter = TrieDrafter(HeadDrafter(k=3, p=5))
    assert isinstance(drafter, Drafter) and drafter.k == 3
    tree = drafter.draft(view(lat))
    assert tree.to_drafts().tokens.tolist() == lat.best_paths(5).tokens.tolist()
    cut = TrieDrafter(HeadDrafter(k=3, p=5), budget=6).draft(view(lat))
    assert cut.tokens.tolist() == tree.top(6).tokens.tolist()
    assert cut.parents.tolist() == tree.top(6).parents.tolist()


def test_rescored_tree_with_neural_scorer() -> None:
    from blockdraft.rescorers.neural import NeuralPathScorer

    scorer = NeuralPathScorer(tiny_rescorer_lm(), max_depth=4)
    lat = random_lattice(7, h=4, k=3)
    context = [1, 2, 3]
    budget = 10

    def combined(path: tuple[int, ...]) -> float:
        head = sum(float(lat.scores[i][list(lat.tokens[i]).index(t)])
                   for i, t in enumerate(path))
        return head + 0.8 * float(scorer.score(np.array(path), context).sum())

    tree = rescored_tree(lat, budget, scorer, 0.8, context)
    got = {tuple(tree.path_tokens(u).tolist()) for u in range(budget)}
    want, _ = brute_force_top(lat, budget, combined)
    assert sorted(combined(p) for p in got) == pytest.approx(sorted(combined(p) for p in want))
    for u in range(budget):
        assert tree.scores[u] == pytest.approx(combined(tuple(tree.path_tokens(u).tolist())))
