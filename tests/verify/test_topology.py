"""Tree topologies compiled once per parents array (issue 41, item 3): the verifier reuses a
topology's depths and mask on the device, with the same verdict as a fresh one."""

from __future__ import annotations

import numpy as np
import torch

from blockdraft.core.tree import DraftTree
from blockdraft.models import greedy_generate
from blockdraft.verify import Verifier
from blockdraft.verify.topology import TreeTopologies

PARENTS = np.array([-1, 0, 0, 1, 1, 2, 3])


def _tree(tokens: list[int], parents: np.ndarray = PARENTS) -> DraftTree:
    return DraftTree(tokens=np.array(tokens), parents=parents, scores=np.zeros(len(tokens)))


def test_one_topology_is_compiled_once_and_reused() -> None:
    cache = TreeTopologies(torch.device("cpu"), size=2)
    a = cache.of(_tree([1, 2, 3, 4, 5, 6, 7]))
    b = cache.of(_tree([9, 8, 7, 6, 5, 4, 3]))  # other tokens, the same parents
    assert b is a and (cache.hits, cache.misses) == (1, 1)
    tree = _tree([1, 2, 3, 4, 5, 6, 7])
    assert torch.equal(a.depths, torch.tensor(tree.depths))
    assert torch.equal(a.mask, torch.as_tensor(tree.ancestor_mask()))
    chain = np.arange(-1, 6)
    cache.of(_tree([1] * 7, chain))
    cache.of(_tree([1, 2, 3, 4], np.array([-1, 0, 0, 0])))  # a third: the oldest goes
    assert len(cache) == 2 and cache.misses == 3
    assert cache.of(_tree([1] * 7, chain)) is not None and cache.hits == 2  # kept: newer
    cache.of(_tree([1, 2, 3, 4, 5, 6, 7]))
    assert cache.misses == 4  # the first was evicted, made again


def test_the_verdict_of_a_repeated_topology_is_a_fresh_verifiers(random_model) -> None:  # type: ignore[no-untyped-def]
    """Steps that repeat a topology hit the cache and decide as a verifier that compiles the
    tree anew every time (a new verifier per step)."""
    model = random_model(seed=3, vocab=64, h=4)
    prompt = [5, 9, 2, 33, 7]
    truth = greedy_generate(model, prompt, 12)
    kept = Verifier(model)
    _, past = kept.prefill(prompt)
    _, past_fresh = Verifier(model).prefill(prompt)
    for step in range(4):
        wrong = (truth[step + 1] + 1) % 64
        tokens = [truth[step], truth[step + 1], wrong, truth[step + 2], wrong, wrong, wrong]
        tree = _tree(tokens)
        out = kept.verify_tree(past, tree)
        ref = Verifier(model).verify_tree(past_fresh, tree)
        assert (out.path, out.tokens, out.accepted) == (ref.path, ref.tokens, ref.accepted)
        torch.testing.assert_close(out.next_logits, ref.next_logits)
        assert out.path == (0, 1, 3) and out.tokens == tuple(truth[step:step + 3])
        # continue from the accepted path's cache: the next root is truth[step + 3], the tree
        # re-rooted one token on: keep both caches aligned by one token each step
        past = out.past.crop(past.length + 1)
        past_fresh = ref.past.crop(past_fresh.length + 1)
    assert (kept.topologies.hits, kept.topologies.misses) == (3, 1)


def test_decode_reuses_the_topologies_of_a_static_tree(random_model) -> None:  # type: ignore[no-untyped-def]
    """A decode with Medusa's static tree compiles each topology it meets once (the tree cut
    near the end of the output is another one) and stays greedy's."""
    from blockdraft.drafts import MedusaTreeDrafter
    from blockdraft.drafts.trees import MC_SIM_7B_63, sort_choices
    from blockdraft.verify.engine import run
    from blockdraft.verify.model_steps import ModelSteps
    from blockdraft.verify.verifier import is_chain

    model = random_model(seed=4, vocab=64, h=4)
    prompt = [3, 1, 4, 1, 5]
    drafter = MedusaTreeDrafter(choices=tuple(sort_choices(MC_SIM_7B_63)[:15]), budget=16)
    verifier = Verifier(model)
    with torch.no_grad():
        out = run(drafter, ModelSteps(verifier, drafter.needs), prompt, 24, None, 64)
    assert out.tokens == greedy_generate(model, prompt, 24)
    trees = [step.tree for step in out.steps if not is_chain(step.tree)]  # chains: causal
    seen = {tree.parents.tobytes() for tree in trees}
    assert verifier.topologies.misses == len(seen) < len(trees)
    assert verifier.topologies.hits == len(trees) - len(seen)
