"""The cost-aware tree with N fixed on the device (models/runtimes/device_rates.py) equals the
host's (a static candidate tree rated by the acceptance tables, cut to its N best by reach:
``Pipeline([RankPaths], TableRates, CostCut(None, N))``) on CPU tensors: tokens, topology and
reach, for uniform tables (ties of rates everywhere), the packaged SmolLM2 tables and random
ones, logits with ties, with and without a shortlist and an LM's evidence."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from blockdraft.drafts import AcceptanceTables, StepView
from blockdraft.drafts.cut import CostCut
from blockdraft.drafts.pipeline import Pipeline
from blockdraft.drafts.rates import TableRates
from blockdraft.drafts.trees import MC_SIM_7B_63, RankPaths, sort_choices
from blockdraft.lattice.step import step_lattice
from blockdraft.models import ModelError
from blockdraft.models.runtimes.device_rates import (
    RateTensors,
    best_nodes,
    rated_draft,
    reach,
)
from blockdraft.models.runtimes.device_tree import StaticTree
from blockdraft.models.topk import topk_logprobs

PACKAGED = (Path(__file__).resolve().parents[3] / "src" / "blockdraft" / "models" / "hf"
            / "heads" / "smollm2" / "acceptance.json")


def choices(depth: int) -> list[tuple[int, ...]]:
    return [c for c in sort_choices(MC_SIM_7B_63) if len(c) <= depth]


def random_tables(h: int, seed: int) -> AcceptanceTables:
    rng = np.random.default_rng(seed)
    base = AcceptanceTables.uniform(h)
    return AcceptanceTables(heads=rng.random(base.heads.shape),
                            marginal=rng.random(base.marginal.shape), copy=base.copy)


class TableLM:
    """A stand-in LM for the rates' evidence: ``ln P`` of a node is ``scores[token]``, so
    both sides read the same numbers."""

    def __init__(self, scores: np.ndarray) -> None:
        self.scores = scores

    def score_tree(self, tokens: np.ndarray, parents: np.ndarray, context: np.ndarray
                   ) -> np.ndarray:
        return self.scores[np.asarray(tokens)]


def host_tree(tables: AcceptanceTables, paths: list[tuple[int, ...]], n: int,
              base: torch.Tensor, heads: torch.Tensor, ids: torch.Tensor | None,
              lm: TableLM | None = None):  # type: ignore[no-untyped-def]
    k = 1 + max(max(c) for c in paths)
    drafter = Pipeline([RankPaths(paths)], rates=TableRates(tables, lm),  # type: ignore[arg-type]
                       cut=CostCut(None, n))
    lattice = step_lattice(base[None], topk_logprobs(heads, k, ids), k)
    return drafter.draft(StepView(lattice=lattice, context=np.array([3, 4])))


def device_tree(tables: AcceptanceTables, paths: list[tuple[int, ...]], n: int,
                base: torch.Tensor, heads: torch.Tensor, ids: torch.Tensor | None,
                lm: TableLM | None = None):  # type: ignore[no-untyped-def]
    candidates = StaticTree.from_choices(paths).on(torch.device("cpu"))
    scores = None if lm is None else torch.as_tensor(lm.scores)
    return rated_draft(candidates, RateTensors.of(tables, "cpu"), base.argmax(-1, keepdim=True),
                       heads, n, ids, None if scores is None else (lambda t: scores[t]))


def same(got, want) -> None:  # type: ignore[no-untyped-def]
    np.testing.assert_array_equal(got.tokens.numpy(), want.tokens)
    parents = got.tree.parents.numpy().copy()
    parents[0] = -1
    np.testing.assert_array_equal(parents, want.parents)
    np.testing.assert_array_equal(got.tree.depths.numpy(), want.depths)
    np.testing.assert_array_equal(np.maximum(np.log(got.reach.numpy()), -1e30), want.scores)
    mask = got.tree.mask.numpy()
    np.testing.assert_array_equal(mask, want.ancestor_mask())


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**16), depth=st.integers(1, 4), n=st.integers(1, 40),
       kind=st.sampled_from(["uniform", "packaged", "random"]), shortlist=st.booleans(),
       ties=st.booleans(), with_lm=st.booleans())
def test_the_n_best_by_reach_are_the_hosts(seed: int, depth: int, n: int, kind: str,
                                           shortlist: bool, ties: bool, with_lm: bool) -> None:
    g = torch.Generator().manual_seed(seed)
    vocab, h = 60, depth + 1
    paths = choices(depth)
    n = min(n, 1 + len(paths))
    tables = {"uniform": lambda: AcceptanceTables.uniform(h),
              "packaged": lambda: AcceptanceTables.load(PACKAGED),
              "random": lambda: random_tables(h, seed)}[kind]()
    ids = torch.sort(torch.randperm(vocab, generator=g)[:24]).values if shortlist else None
    columns = vocab if ids is None else 24
    scale = float(torch.empty(()).uniform_(0.5, 8.0, generator=g))
    heads = torch.randn(depth, columns, generator=g) * scale
    if ties:
        heads = heads.round()
    base = torch.randn(vocab, generator=g)
    lm = None
    if with_lm:
        lm = TableLM(np.log(np.random.default_rng(seed).dirichlet(np.ones(vocab))).astype(
            np.float32))
    same(device_tree(tables, paths, n, base, heads, ids, lm),
         host_tree(tables, paths, n, base, heads, ids, lm))


def test_ties_of_reach_keep_the_shallower_then_the_earlier() -> None:
    """Node 3 (depth 2, its rate 1) ties the depth-1 nodes 1, 2 and 4: the shallower go first,
    then the earlier (the host's rule), and the kept nodes come back in node order."""
    a = torch.tensor([1.0, 0.5, 0.5, 0.5, 0.5, 0.25], dtype=torch.float64)
    depths = torch.tensor([0, 1, 1, 2, 1, 2])
    assert best_nodes(a, depths, 4).tolist() == [0, 1, 2, 4]
    assert best_nodes(a, depths, 5).tolist() == [0, 1, 2, 3, 4]
    assert best_nodes(a, depths, 1).tolist() == [0]


def test_reach_is_the_product_along_the_path() -> None:
    tree = StaticTree(np.array([-1, 0, 1, 0, 2]), np.array([0, 0, 0, 1, 0])).on(
        torch.device("cpu"))
    q = torch.tensor([1.0, 0.5, 0.25, 0.8, 0.5], dtype=torch.float64)
    assert reach(q, tree).tolist() == [1.0, 0.5, 0.125, 0.8, 0.0625]


def test_a_tree_larger_than_its_candidates_is_refused() -> None:
    candidates = StaticTree.chain(2).on(torch.device("cpu"))
    rates = RateTensors.of(AcceptanceTables.uniform(3), "cpu")
    with pytest.raises(ModelError, match="N = 4"):
        rated_draft(candidates, rates, torch.tensor([1]), torch.zeros(2, 5), 4)
