"""The step record (`blockdraft.models.step`): one check of a forward's inputs and one rule of
what a new token attends to, read by every runtime. Its mask equals the ancestor mask a token
tree states (prefix rows, the tree, nothing past the new rows, a sliding window), its bias is
that mask in any dtype, and the reference BlockwiseLM's tree forward through it equals running
each root-to-node path as a plain chain."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from blockdraft.models import BlockwiseConfig, BlockwiseLM, KVCache, ModelError
from blockdraft.models.step import Step, check_step
from models_testlib import ancestors

V = 50




def step_of(t_past: int, tokens: int, positions=None, tree_mask=None, one_row=None) -> Step:
    past = None
    if t_past:
        empty = (torch.zeros(1, 1, t_past, 2),)
        past = KVCache(keys=empty, values=empty)
    return check_step(torch.zeros(1, tokens, dtype=torch.long), past, positions, tree_mask,
                      cache=KVCache, vocab_size=V, device=torch.device("cpu"), max_seq_len=32,
                      one_row=one_row)


def test_a_chain_reads_the_prefix_and_the_new_tokens_causally() -> None:
    step = step_of(3, 4)
    assert step.t_past == 3 and step.length == 4 and step.span == 7
    assert step.positions.tolist() == [[3, 4, 5, 6]]
    want = np.zeros((4, 9), dtype=bool)
    want[:, :3] = True
    want[:, 3:7] = np.tri(4, dtype=bool)  # causal; never a row past the new ones
    np.testing.assert_array_equal(step.allowed(columns=9).numpy(), want)
    np.testing.assert_array_equal(step.allowed().numpy(), want[:, :7])


def test_a_tree_reads_its_ancestors_and_its_bias_is_the_mask_in_any_dtype() -> None:
    mask, depths = ancestors([-1, 0, 0, 1, 2, 2])
    step = step_of(5, 6, positions=torch.tensor(5 + depths), tree_mask=torch.tensor(mask))
    assert step.span == 5 + depths.max() + 1  # the deepest position, not T_past + T
    allowed = step.allowed().numpy()
    np.testing.assert_array_equal(allowed[:, :5], np.ones((6, 5), dtype=bool))
    np.testing.assert_array_equal(allowed[:, 5:], mask)
    for dtype in (torch.float32, torch.bfloat16):
        bias = step.bias(dtype, columns=16)
        assert bias.shape == (1, 1, 6, 16) and bias.dtype == dtype
        expect = step.allowed(columns=16)
        assert bool((bias[0, 0][expect] == 0).all())
        assert bool((bias[0, 0][~expect] == torch.finfo(dtype).min).all())


def test_a_sliding_window_hides_keys_too_far_back_once_the_step_reaches_past_it() -> None:
    step = step_of(6, 3)  # positions 6, 7, 8
    window = 4
    allowed = step.allowed(window=window).numpy()
    keys = np.arange(9)
    queries = np.arange(6, 9)
    np.testing.assert_array_equal(
        allowed, (queries[:, None] - keys[None, :] < window) & (keys[None, :] <= queries[:, None]))
    np.testing.assert_array_equal(step.allowed(window=9).numpy(),  # the step stays within it
                                  step.allowed().numpy())


def test_the_one_check_refuses_what_every_runtime_refused() -> None:
    with pytest.raises(ModelError, match=r"position_ids must hold T = 3"):
        step_of(2, 3, positions=torch.tensor([2, 3]))
    with pytest.raises(ModelError, match=r"position_ids must be >= 0"):
        step_of(0, 2, positions=torch.tensor([-1, 0]))
    with pytest.raises(ModelError, match=r"tree_mask must be bool \[T, T\] = \[3, 3\]"):
        step_of(2, 3, tree_mask=torch.ones(2, 2, dtype=torch.bool))
    with pytest.raises(ModelError, match="the static runtime runs one row at a time"):
        check_step(torch.zeros(2, 1, dtype=torch.long), None, None, None, cache=KVCache,
                   vocab_size=V, device=torch.device("cpu"), max_seq_len=None,
                   one_row="the static runtime")
    with pytest.raises(ModelError, match="past must be this model's KVCache or None, got"):
        check_step(torch.zeros(1, 1, dtype=torch.long), object(), None, None, cache=KVCache,
                   vocab_size=V, device=torch.device("cpu"), max_seq_len=None)
    with pytest.raises(ModelError, match=r"30 cached \+ 3 new = 33 positions exceed"):
        step_of(30, 3)
    # a tree is checked on its deepest position: 30 cached + 3 nodes of depth <= 1 fit
    step = step_of(30, 3, positions=torch.tensor([30, 31, 31]),
                   tree_mask=torch.tensor(ancestors([-1, 0, 0])[0]))
    assert step.span == 32
    with pytest.raises(ModelError, match="exceed"):
        step_of(30, 3, positions=torch.tensor([30, 31, 32]))


def test_a_batch_one_cache_is_expanded_to_the_rows_once() -> None:
    model = BlockwiseLM(BlockwiseConfig.tiny(vocab_size=V)).eval()
    with torch.no_grad():
        _, past = model.hidden(torch.tensor([[1, 2, 3]]))
    step = check_step(torch.zeros(3, 2, dtype=torch.long), past, None, None, cache=KVCache,
                      vocab_size=V, device=model.device, max_seq_len=model.config.max_seq_len)
    assert step.past.batch_size == 3 and step.t_past == 3


def test_the_reference_model_verifies_a_tree_through_the_record_as_chains() -> None:
    """BlockwiseLM's tree forward (the step's mask) gives each node what a plain causal
    forward of its root-to-node path gives it."""
    torch.manual_seed(0)
    model = BlockwiseLM(BlockwiseConfig.tiny(vocab_size=V)).eval()
    parents = [-1, 0, 0, 1, 1, 2, 4]
    mask, depths = ancestors(parents)
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, V, (1, 5), generator=g)
    tokens = torch.randint(0, V, (1, len(parents)), generator=g)
    with torch.no_grad():
        _, past = model.hidden(prompt)
        tree, _ = model.hidden(tokens, past, position_ids=torch.tensor(5 + depths),
                               tree_mask=torch.tensor(mask))
        for u in range(len(parents)):
            path = np.flatnonzero(mask[u])  # u's ancestors, root first, u last
            chain, _ = model.hidden(tokens[:, path], past)
            torch.testing.assert_close(tree[0, u], chain[0, -1], atol=1e-5, rtol=1e-5)
