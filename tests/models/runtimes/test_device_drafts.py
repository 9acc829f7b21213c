"""Drafts made on the device (models/runtimes/device_drafts.py) equal the host drafters' trees
on CPU tensors: the heads' chain (vanilla BPD, with and without a shortlist, ties included, in
float32 and bfloat16), prompt lookup (every match length, setting and text end) and the two
merged in one trie (with the topology's tensors made on the device)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from blockdraft.drafts import CombinedDrafter, LookupDrafter, StepView, vanilla
from blockdraft.lattice import SausageLattice
from blockdraft.lattice.step import step_lattice
from blockdraft.models import ModelError
from blockdraft.models.runtimes.device_drafts import chain_draft, lookup_draft, merge_copy
from blockdraft.models.runtimes.device_tree import tensors_of
from blockdraft.models.topk import topk_logprobs


def host_tree(drafter, lattice: SausageLattice, context: np.ndarray):  # type: ignore[no-untyped-def]
    return drafter.draft(StepView(lattice=lattice, context=context))


def same_chain(device_tree, host) -> None:  # type: ignore[no-untyped-def]
    np.testing.assert_array_equal(device_tree.tokens, host.tokens)
    np.testing.assert_array_equal(device_tree.parents, host.parents)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**16), h=st.integers(2, 6), vocab=st.sampled_from([5, 40]),
       bf16=st.booleans())
def test_the_chain_is_vanillas(seed: int, h: int, vocab: int, bf16: bool) -> None:
    """Integer logits of a small range: ties everywhere, resolved to the smaller id by both."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randint(-3, 3, (h, vocab), generator=g).float()
    if bf16:
        logits = logits + torch.randn(h, vocab, generator=g) * 0.01
        logits = logits.to(torch.bfloat16)
    context = np.array([1, 2, 3])
    want = host_tree(vanilla(), step_lattice(logits, None, 1), context)
    got = chain_draft(logits[0], logits[1:])
    same_chain(got.tree(), want)
    assert int(got.count) == h


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16), h=st.integers(2, 5))
def test_the_chain_over_a_shortlist_is_vanillas(seed: int, h: int) -> None:
    g = torch.Generator().manual_seed(seed)
    vocab = 50
    ids = torch.sort(torch.randperm(vocab, generator=g)[:12]).values  # ascending, like a
    base = torch.randint(-3, 3, (vocab,), generator=g).float()  # shortlist
    heads = torch.randint(-3, 3, (h - 1, ids.numel()), generator=g).float()
    top = topk_logprobs(heads, 1, ids)  # what the runtime hands the host lattice
    want = host_tree(vanilla(), step_lattice(base[None], top, 1), np.array([7]))
    same_chain(chain_draft(base, heads, ids).tree(), want)


def _lattice_of(certain: int) -> SausageLattice:
    return SausageLattice.from_topk(np.array([[certain], [0]]), np.zeros((2, 1)))


@settings(max_examples=200, deadline=None)
@given(text=st.lists(st.integers(0, 4), min_size=1, max_size=40),
       min_match=st.integers(1, 3), extra=st.integers(0, 3),
       lengths=st.lists(st.integers(1, 7), min_size=1, max_size=4), pad=st.integers(0, 5))
def test_lookup_is_prompt_lookups(text: list[int], min_match: int, extra: int,
                                  lengths: list[int], pad: int) -> None:
    """Random texts of a 5-token vocabulary (matches of every length), any settings, the text
    in a buffer longer than it (garbage past its end is never read)."""
    max_match = min_match + extra
    arr = np.array(text, dtype=np.int64)
    want = host_tree(LookupDrafter(min_match, max_match, tuple(lengths)),
                     _lattice_of(int(arr[-1])), arr[:-1])
    buffer = torch.cat((torch.as_tensor(arr), torch.full((pad,), 3, dtype=torch.int64)))
    got = lookup_draft(buffer, torch.tensor(len(text)), min_match, max_match, lengths)
    same_chain(got.tree(), want)
    assert got.tokens.shape == (1 + max(lengths),)


def test_lookup_copies_the_latest_longest_match() -> None:
    text = torch.tensor([9, 1, 2, 3, 4, 1, 2, 5, 6, 7, 8, 1, 2])
    draft = lookup_draft(text, 13, lengths=(2, 6, 10))  # "1 2" last seen before "5 6 7 8 1 2"
    assert draft.tree().tokens.tolist() == [2, 5, 6, 7, 8, 1, 2]  # 6 tokens, cut at the end
    assert lookup_draft(text, 13, min_match=3).tree().tokens.tolist() == [2]  # no 3-gram
    assert lookup_draft(torch.tensor([4]), 1).tree().tokens.tolist() == [4]
    with pytest.raises(ModelError, match="min_match"):
        lookup_draft(text, 13, min_match=3, max_match=2)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_device_drafts_capture_in_a_cuda_graph() -> None:
    """No host synchronisation inside: both capture once and replay for other texts."""
    text = torch.zeros(64, dtype=torch.int64, device="cuda")
    size = torch.zeros((), dtype=torch.int64, device="cuda")
    logits = torch.zeros(4, 96, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        lookup_draft(text, size.fill_(1))
        chain_draft(logits[0], logits[1:])
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        copy = lookup_draft(text, size)
        chain = chain_draft(logits[0], logits[1:])
    rng = np.random.default_rng(0)
    for n in (5, 30, 64):
        row = torch.as_tensor(rng.integers(0, 4, n), device="cuda")
        text[:n] = row
        size.fill_(n)
        logits.copy_(torch.randn(4, 96, device="cuda"))
        graph.replay()
        want = lookup_draft(row.cpu(), n)
        assert copy.tree().tokens.tolist() == want.tree().tokens.tolist()
        assert chain.tree().tokens.tolist() == chain_draft(
            logits[0].cpu(), logits[1:].cpu()).tree().tokens.tolist()


@settings(max_examples=150, deadline=None)
@given(text=st.lists(st.integers(0, 4), min_size=1, max_size=40),
       chain=st.lists(st.integers(0, 4), min_size=0, max_size=5),
       lengths=st.lists(st.integers(1, 7), min_size=1, max_size=3))
def test_chain_plus_lookup_is_the_hosts_trie(text: list[int], chain: list[int],
                                             lengths: list[int]) -> None:
    """The heads' chain and the lookup copy merged on the device: the host's trie of vanilla +
    prompt lookup (CombinedDrafter), its real nodes first in the host's order, padding after
    (token -1 under the root); the topology's tensors are the tree's."""
    arr = np.array(text, dtype=np.int64)
    certain = int(arr[-1])
    lattice = SausageLattice.from_topk(np.array([[certain], *[[c] for c in chain]]),
                                       np.zeros((1 + len(chain), 1)))
    drafter = CombinedDrafter(vanilla(), LookupDrafter(lengths=tuple(lengths)))
    want = host_tree(drafter, lattice, arr[:-1])
    copy = lookup_draft(torch.as_tensor(arr), len(text), lengths=tuple(lengths))
    tokens, parents, depths = merge_copy(torch.tensor([certain, *chain]), copy)
    assert tokens.shape == (1 + len(chain) + max(lengths),)
    real = int((tokens >= 0).sum())
    assert (tokens[real:] == -1).all() and (parents[real:] == 0).all()
    got_parents = parents[:real].numpy().copy()
    got_parents[0] = -1
    np.testing.assert_array_equal(tokens[:real].numpy(), want.tokens)
    np.testing.assert_array_equal(got_parents, want.parents)
    np.testing.assert_array_equal(depths[:real].numpy(), want.depths)
    tensors = tensors_of(parents, depths, max(len(chain), max(lengths)))
    np.testing.assert_array_equal(tensors.mask[:real, :real].numpy(), want.ancestor_mask())
