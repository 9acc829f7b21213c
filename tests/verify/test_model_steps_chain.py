"""A draft layer's step computes no greedy chain for a drafter that reads its tree lattice alone
(``Needs.sausage`` False): the same drafts, outputs and calls, fewer calls of the layer; prefix
heads and drafters that read the sausage keep the chain."""

from __future__ import annotations

from typing import Any

import pytest
import torch

pytest.importorskip("transformers")

from blockdraft.drafts import DraftSpec  # noqa: E402
from blockdraft.drafts.grow import ConditionalTreeDrafter  # noqa: E402
from blockdraft.drafts.heads import ConditionalDrafter  # noqa: E402
from blockdraft.drafts.pipeline import Pipeline  # noqa: E402
from blockdraft.drafts.protocol import Needs  # noqa: E402
from blockdraft.models import greedy_generate  # noqa: E402
from blockdraft.models.hf import HFBlockwiseModel  # noqa: E402
from blockdraft.models.hf.prefix_heads import PrefixHeads  # noqa: E402
from blockdraft.verify import Verifier, decode  # noqa: E402
from blockdraft.verify.model_steps import ModelSteps  # noqa: E402
from hf_testlib import eagle_model, randomize, tiny_hf_base  # noqa: E402

PROMPTS = ([5, 9, 14, 3, 5, 9, 14, 3], [7, 7, 2, 11, 40, 2, 11], [60, 3, 3, 3, 12])


def counted(model: Any) -> list[int]:
    """Count the calls of the model's draft layer (its backend's ``step``)."""
    backend = model.heads_rule.backend
    calls = [0]
    step = backend.step

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return step(*args, **kwargs)

    backend.step = counting
    return calls


def with_sausage(drafter: Pipeline) -> Pipeline:
    """The same drafter declaring that it reads the sausage (the step computes the chain)."""
    return Pipeline(drafter.sources, rates=drafter.rates, cut=drafter.cut,
                    needs=Needs(k=drafter.needs.k, tree_lattice=True))


@pytest.mark.parametrize("make", [lambda: ConditionalTreeDrafter(k=2, budget=8),
                                  lambda: ConditionalTreeDrafter(k=3, budget=12, lookup=True)],
                         ids=["tree", "tree+lookup"])
def test_a_tree_alone_skips_the_chain_with_the_same_outputs_and_calls(make: Any) -> None:
    model = eagle_model("top", depth=4)
    layer_calls = counted(model)
    drafter = make()
    assert not drafter.needs.sausage and with_sausage(make()).needs.sausage
    for prompt in PROMPTS:
        greedy = greedy_generate(model, prompt, 24)
        layer_calls[0] = 0
        lean = decode(model, prompt, drafter=drafter, max_new_tokens=24)
        lean_layer = layer_calls[0]
        layer_calls[0] = 0
        full = decode(model, prompt, drafter=with_sausage(make()), max_new_tokens=24)
        assert lean.tokens == full.tokens == greedy
        assert lean.calls == full.calls
        assert [s.tree.tokens.tolist() for s in lean.steps] == [
            s.tree.tokens.tolist() for s in full.steps]
        assert lean_layer < layer_calls[0]  # the chain's calls the tree did not need


def test_who_keeps_the_chain() -> None:
    eagle = Verifier(eagle_model("top", depth=4))
    torch.manual_seed(0)
    prefix = Verifier(HFBlockwiseModel(tiny_hf_base("llama", init=0.1),
                                       randomize(PrefixHeads(64, 3, 1), 1)))
    tree = ConditionalTreeDrafter(k=2, budget=8).needs
    assert ModelSteps(eagle, tree).heads == 1  # the layer: its tree alone
    assert ModelSteps(eagle, ConditionalDrafter(k=2, p=2).needs).heads == 1
    assert ModelSteps(prefix, tree).heads is None  # prefix heads: the chain seeds their tree
    chain = DraftSpec("heads").build().needs  # the chain reads the sausage
    assert chain.sausage and ModelSteps(eagle, chain).heads is None
    assert tree.joined(chain).sausage
