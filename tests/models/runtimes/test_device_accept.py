"""The device step's pieces without a model: the verdict on a static tree (and on the same
topology made on the device) equals verify/acceptance.py's on random trees (brute force: every
node, winner, path, n per leaf, EOS),
a static Medusa tree drafted on the device equals the host's medusa_tree over the host lattice
(ties, shortlists, bfloat16), and the device top-k keeps the host's order exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from blockdraft.core.tree import DraftTree
from blockdraft.drafts.trees import MC_SIM_7B_63, medusa_tree, sort_choices
from blockdraft.lattice.step import step_lattice
from blockdraft.models import ModelError
from blockdraft.models.runtimes.device_accept import tree_verdict
from blockdraft.models.runtimes.device_drafts import topk_columns, tree_draft
from blockdraft.models.runtimes.device_tree import StaticTree, tensors_of
from blockdraft.models.topk import topk_logprobs
from blockdraft.verify.acceptance import accepted_from, leaf_lengths, tree_winner


@st.composite
def trees(draw: st.DrawFn) -> tuple[DraftTree, np.ndarray, int | None]:
    """A random tree (at most 5 children a node, distinct sibling tokens over a 5-token
    vocabulary, so matches are frequent), the base head's argmax at every node, and an EOS id
    or None."""
    size = draw(st.integers(1, 14))
    parents, kids = [-1], [0] * size
    for u in range(1, size):
        free = [v for v in range(u) if kids[v] < 5]
        parents.append(free[draw(st.integers(0, len(free) - 1))])
        kids[parents[-1]] += 1
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    tokens = np.zeros(size, dtype=np.int64)
    tokens[0] = rng.integers(0, 5)
    for parent in range(size):
        below = [u for u in range(1, size) if parents[u] == parent]
        tokens[below] = rng.permutation(5)[: len(below)]
    tree = DraftTree(tokens=tokens, parents=np.array(parents), scores=np.zeros(size))
    eos = draw(st.one_of(st.none(), st.integers(0, 4)))
    return tree, rng.integers(0, 5, size), eos


@settings(max_examples=200, deadline=None)
@given(case=trees())
def test_the_device_verdict_is_the_host_walks(case: tuple[DraftTree, np.ndarray, int | None]
                                              ) -> None:
    tree, greedy, eos = case
    static = StaticTree(tree.parents, np.zeros(tree.num_nodes, dtype=np.int64))
    got = tree_verdict(static.on(torch.device("cpu")), torch.tensor(tree.tokens),
                       torch.tensor(greedy), torch.tensor(-1 if eos is None else eos))
    match = tree.tokens[1:] == greedy[tree.parents[1:]]
    accepted = accepted_from(tree, match, eos_id=eos)
    winner = tree_winner(tree, accepted)
    path = tree.path(winner)
    n = path.size - 1
    assert got.accepted.tolist() == accepted.tolist()
    assert (int(got.winner), int(got.n)) == (winner, n)
    assert got.path[: n + 1].tolist() == path.tolist()
    want = [*tree.tokens[path[1:]].tolist(), int(greedy[winner])]
    assert got.tokens.tolist() == want + [-1] * (tree.max_depth - n)
    assert tuple(got.leaf_lengths.tolist()) == leaf_lengths(tree, accepted)
    # the same topology made on the device (a step's own, as a rated tree's or a merged
    # copy's): the same verdict, n of every node's root path in place of the leaves'
    parents = torch.tensor(np.maximum(tree.parents, 0))
    made = tensors_of(parents, torch.tensor(tree.depths), tree.max_depth + 1)
    again = tree_verdict(made, torch.tensor(tree.tokens), torch.tensor(greedy),
                         torch.tensor(-1 if eos is None else eos))
    assert again.accepted.tolist() == accepted.tolist()
    assert (int(again.winner), int(again.n)) == (winner, n)
    assert again.path[: n + 1].tolist() == path.tolist()
    assert again.tokens[: n + 1].tolist() == want
    assert again.leaf_lengths[tree.leaves()].tolist() == list(leaf_lengths(tree, accepted))


def test_a_static_tree_refuses_what_is_not_one() -> None:
    with pytest.raises(ModelError, match="node order"):
        StaticTree.from_choices([(0, 0)])  # its prefix (0,) missing
    with pytest.raises(ModelError, match="before their children"):
        StaticTree(np.array([-1, 2, 0]), np.zeros(3))
    tree = StaticTree.from_choices(sort_choices(MC_SIM_7B_63)[:20])
    assert (tree.size, tree.max_depth, tree.k, tree.is_chain) == (21, 2, 10, False)
    assert StaticTree.chain(4).is_chain and StaticTree.greedy().size == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_the_device_topk_keeps_the_hosts_order(dtype: torch.dtype) -> None:
    """Ties everywhere, -0.0 beside +0.0, masked columns: the columns of topk_logprobs."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randint(-3, 3, (40, 30), generator=g).to(dtype)
    logits[::3, 5] = -0.0
    logits[::4, 7] = float("-inf")
    want, _ = topk_logprobs(logits, 12)
    assert topk_columns(logits, 12).tolist() == want.tolist()


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**16), budget=st.integers(2, 40), bf16=st.booleans(),
       shortlist=st.booleans())
def test_the_static_tree_is_medusas(seed: int, budget: int, bf16: bool,
                                    shortlist: bool) -> None:
    """Integer logits of a small range (ties at every rank), Medusa's rank paths cut to the
    budget, the heads over a shortlist or the vocabulary: the host's tree, node for node."""
    g = torch.Generator().manual_seed(seed)
    choices = [c for c in sort_choices(MC_SIM_7B_63) if len(c) <= 3][: budget - 1]
    vocab, depth = 60, max(len(c) for c in choices)
    ids = torch.sort(torch.randperm(vocab, generator=g)[:24]).values if shortlist else None
    base = torch.randint(-3, 3, (vocab,), generator=g).float()
    heads = torch.randint(-4, 4, (depth, vocab if ids is None else 24), generator=g).float()
    if bf16:
        base, heads = base.bfloat16(), heads.bfloat16()
    static = StaticTree.from_choices(choices)
    lattice = step_lattice(base[None], topk_logprobs(heads, static.k, ids), static.k)
    want = medusa_tree(lattice, choices)
    got = tree_draft(static.on(torch.device("cpu")), base.argmax(-1, keepdim=True), heads, ids)
    assert got.tolist() == want.tokens.tolist()
    assert want.parents.tolist() == static.parents.tolist()
