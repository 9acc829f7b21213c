"""A token tree on a runtime whose tree rows are not its chain rows bit for bit (ONNX Runtime int8
and q4: ``exact_trees`` False): the verifier confirms the tree's accepted path with a chain
forward, so the output is that runtime's greedy whatever the tree forward's last bits say.

A tree row whose root path lies on the tree's first slots (0, 1, .., d) is a chain row bit for
bit (measured on q4; the verifier trusts those), the others are not. The test makes those others
lie on purpose (each one's base head claims its first child's token): the tree's verdict then
accepts tokens greedy would not; the confirmation cuts the path
where the chain disagrees, and every output still equals the int8 greedy loop's."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

from blockdraft.drafts import CombinedDrafter, DraftSpec, HeadDrafter, LookupDrafter  # noqa: E402
from blockdraft.models import greedy_generate  # noqa: E402
from blockdraft.models.hf import HFBlockwiseModel, MedusaHeads  # noqa: E402
from blockdraft.models.runtimes import on_runtime  # noqa: E402
from blockdraft.verify import decode  # noqa: E402
from blockdraft.verify.verifier import Verifier  # noqa: E402
from hf_testlib import tiny_hf_base  # noqa: E402

pytestmark = pytest.mark.usefixtures("private_cache")


def int8_model(seed: int = 1) -> Any:
    heads = MedusaHeads(64, None, 3, 1)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in heads.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return on_runtime(HFBlockwiseModel(tiny_hf_base("llama", seed, 512), heads),
                      "onnxruntime", "int8")


def lying_trees(model: Any, monkeypatch: Any) -> list[int]:
    """Make a tree forward's rows whose root path is not on the first slots lie: each one's base
    head puts its first child's token on top (and its state gets noise), as if the tree's last
    bits had flipped the argmax; chains and first-slot rows are left alone. Returns the count of
    forwards, chains and trees: ``[chains, trees]``."""
    hidden, project = model.hidden, model.project
    g = torch.Generator().manual_seed(7)
    calls = [0, 0]
    lies: dict[int, int] = {}  # row -> the token its base head will claim, for the next project

    def lying_hidden(input_ids: Any, past: Any = None, position_ids: Any = None,
                     tree_mask: Any = None) -> Any:
        x, cache = hidden(input_ids, past, position_ids=position_ids, tree_mask=tree_mask)
        calls[tree_mask is not None] += 1
        lies.clear()
        if tree_mask is not None:
            n = x.shape[1]
            mask = torch.as_tensor(tree_mask).reshape(n, n).bool()
            off = ~(mask == torch.ones(n, n).tril().bool()).all(-1)  # not on the first slots
            depth = mask.sum(-1) - 1
            tokens = torch.as_tensor(input_ids).reshape(-1)
            for v in range(1, n):  # v's parent: its ancestor one level up
                parent = int(torch.nonzero(mask[v] & (depth == depth[v] - 1))[0])
                if off[parent] and parent not in lies:
                    lies[parent] = int(tokens[v])
            x = x + 0.3 * x.std() * torch.randn(x.shape, generator=g) * off[None, :, None]
        return x, cache

    def lying_project(states: Any) -> Any:
        out = project(states).clone()
        for row, token in lies.items():
            out[row, ..., token] = out[row].max() + 1.0
        lies.clear()
        return out

    monkeypatch.setattr(model, "hidden", lying_hidden)
    monkeypatch.setattr(model, "project", lying_project)
    return calls


def recorded_cuts(monkeypatch: Any) -> list[tuple[int, int]]:
    """``(proposed, confirmed)`` path lengths of every confirmation."""
    confirm = Verifier._confirm
    seen: list[tuple[int, int]] = []

    def recorded(self: Any, tree: Any, path: np.ndarray, *args: Any) -> Any:
        out = confirm(self, tree, path, *args)
        seen.append((int(path.size), int(out[0].size)))
        return out

    monkeypatch.setattr(Verifier, "_confirm", recorded)
    return seen


@pytest.mark.parametrize("drafter", [
    HeadDrafter(k=4, p=3),
    CombinedDrafter(HeadDrafter(k=1, p=1), LookupDrafter(lengths=(9,))),
    DraftSpec("tree", tree="confidence", k=3, budget=10),
], ids=["p-best trie", "heads + lookup", "confidence tree"])
def test_a_wrong_tree_verdict_is_cut_by_the_chain_and_the_output_is_greedy(
        drafter: Any, monkeypatch: Any) -> None:
    model = int8_model()
    assert not model.exact_trees
    prompts = [[5, 9, 2, 33, 5, 9, 2, 33, 5], [40, 41, 42, 40, 41, 42, 40], [7, 3, 88, 12]]
    wants = [greedy_generate(model, p, 30) for p in prompts]  # before the noise: chains anyway
    calls = lying_trees(model, monkeypatch)
    cuts = recorded_cuts(monkeypatch)
    confirmations = 0
    for prompt, want in zip(prompts, wants, strict=True):
        before = len(cuts)
        res = decode(model, prompt, drafter=drafter, max_new_tokens=30)
        assert res.tokens == want
        # a confirmed step is two serial calls: B counts both
        assert res.calls == 1 + len(res.steps) + len(cuts) - before
        assert [s.calls for s in res.steps].count(2) == len(cuts) - before
        confirmations += len(cuts) - before
    assert calls[1] > 0 and confirmations  # trees were verified and their paths confirmed
    assert any(confirmed < proposed for proposed, confirmed in cuts)  # the noise mattered
    assert all(1 <= confirmed <= proposed for proposed, confirmed in cuts)


def test_chains_take_one_forward_and_no_confirmation(monkeypatch: Any) -> None:
    model = int8_model()
    prompt = [5, 9, 2, 33, 5, 9, 2, 33, 5]
    want = greedy_generate(model, prompt, 24)
    calls = lying_trees(model, monkeypatch)
    cuts = recorded_cuts(monkeypatch)
    res = decode(model, prompt, drafter=HeadDrafter(k=1, p=1), max_new_tokens=24)
    assert res.tokens == want and not cuts and calls[1] == 0
    assert calls[0] == res.calls  # the prefill and one forward a step


def test_a_lossy_criterion_takes_the_trees_verdict_as_it_is(monkeypatch: Any) -> None:
    model = int8_model()
    cuts = recorded_cuts(monkeypatch)
    decode(model, [5, 9, 2, 33, 5, 9], k=4, p=3, criterion="topk:k=2", max_new_tokens=16)
    assert not cuts  # only a lossless criterion needs the chain's word
