"""An EAGLE draft layer on the static runtime (issue 40, item 3): the static forward hands the
layer's rule the base's features (``saw``), the verifier hands it each accepted path, and the
layer runs eagerly through its PyTorch backend on the model's device, in the model's dtype.

- The features a static forward hands the rule are the eager adapter's: the final hidden
  states (fusion "top") and the fused decoder layers' outputs beside them ("layers"), for a
  prefill and a token tree, padded to a bucket or not; a null body stands ``x`` in for them.
- After every decode step the layer's cache equals one uncached call over the committed text
  (the features of an independent eager model), in both fusions and both training contexts.
- Decoding with the chain, EAGLE-2's tree, the tree with lookup copies and the default is the
  static model's own greedy output (a prompt of 150 tokens among them, with and without an
  EOS), and the deterministic drafters make the calls PyTorch makes (float32).
- bfloat16: the layer runs in bfloat16 (its cache, its features), and the chain, the tree and
  the default decode the bfloat16 static model's greedy output, token for token, for these
  prompts (on this CPU; the default on a guard against mixed devices is in
  tests/verify/test_default_on_devices.py, where a near tie may flip a token).
- ``on_runtime`` and ``load_model`` put a draft layer on the static runtime.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from hf_testlib import CacheChecked, V, eagle_model

pytest.importorskip("transformers")

from blockdraft.drafts import DraftSpec  # noqa: E402
from blockdraft.drafts.grow import ConditionalTreeDrafter  # noqa: E402
from blockdraft.drafts.protocol import StepView  # noqa: E402
from blockdraft.models import greedy_generate  # noqa: E402
from blockdraft.models.heads import EagleRule  # noqa: E402
from blockdraft.models.heads.torch_backend import TorchEagle  # noqa: E402
from blockdraft.models.hf import HFBlockwiseModel  # noqa: E402
from blockdraft.models.runtimes import on_runtime  # noqa: E402
from blockdraft.models.runtimes.cuda_graphs import BUCKETS  # noqa: E402
from blockdraft.models.runtimes.static import StaticKVModel  # noqa: E402
from blockdraft.verify.decode import decode  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_grad")

TOL = {"atol": 1e-4, "rtol": 1e-4}
PROMPTS = [[5, 9, 14, 3, 5, 9, 14, 3, 5], [2, 2, 7], [60, 1, 33, 33, 8, 4, 12]]
LOOKUP = ConditionalTreeDrafter(k=3, budget=24, lookup=True, copy_length=6)
"""EAGLE-2's tree with prompt-lookup copies merged (no cost curve: deterministic)."""
CASES = [("top", "answer"), ("layers", "prompt")]
"""(fusion, context): the final hidden state read from the prompt's last position, and the
decoder layers 1 and 2 fused, read from the prompt's first."""


_PAIRS: dict[tuple[str, str, torch.dtype], tuple[HFBlockwiseModel, StaticKVModel]] = {}


def pair(fusion: str = "top", context: str = "answer", dtype: torch.dtype = torch.float32
         ) -> tuple[HFBlockwiseModel, StaticKVModel]:
    """The tiny Llama with a random draft layer (depth 4) on PyTorch and on the static runtime,
    padded to the GPU's buckets (kept for the module; the two share the rule and its state)."""
    key = (fusion, context, dtype)
    if key not in _PAIRS:
        model = eagle_model(fusion, context)
        if dtype != torch.float32:
            model = HFBlockwiseModel(model.base, model.heads, dtype=dtype)
        _PAIRS[key] = model, StaticKVModel(model, capacity=256, buckets=BUCKETS)
    return _PAIRS[key]


def _seen(model: Any, ids: torch.Tensor, past: Any = None, **kw: Any
          ) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """``(past, x, features)``: a forward of ``model`` and what it handed its rule."""
    x, past = model.hidden(ids, past, **kw)
    rule = model.heads_rule
    assert isinstance(rule, EagleRule) and rule.state.forward is not None
    seen_x, features = rule.state.forward
    assert seen_x is x
    return past, x, features


@pytest.mark.parametrize("fusion", ["top", "layers"])
def test_the_static_forward_hands_the_rule_the_eager_adapters_features(fusion: str) -> None:
    model, static = pair(fusion)
    plain = StaticKVModel(model, capacity=256)  # no buckets: unpadded
    assert static.heads_rule is model.heads_rule is plain.heads_rule
    width = 64 * (2 if fusion == "layers" else 1)
    prompt = torch.tensor([PROMPTS[0]])
    tree = {"position_ids": torch.tensor([9, 10, 10, 11]),  # root, two children, a grandchild
            "tree_mask": torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 0, 1, 1]],
                                      dtype=torch.bool)}
    nodes = torch.tensor([[7, 3, 4, 5]])
    past_e, x_e, want = _seen(model, prompt)
    _, _, want_tree = _seen(model, nodes, past_e, **tree)
    for m in (static, plain):
        past, x, got = _seen(m, prompt)
        assert got.shape == (1, 9, width) and x.shape == (1, 9, 64) and x.is_contiguous()
        torch.testing.assert_close(x, x_e, **TOL)
        torch.testing.assert_close(got, want, **TOL)
        if fusion == "top":
            assert got is x
        _, _, got_tree = _seen(m, nodes, past, **tree)
        torch.testing.assert_close(got_tree, want_tree, **TOL)
    # a null body runs no decoder layer: x stands in for each fused one
    static.use_body(lambda ids, positions, bias, start: model.base.get_input_embeddings()(ids))
    try:
        _, x, got = _seen(static, prompt)
        torch.testing.assert_close(got, x.repeat(1, 1, width // 64), rtol=0, atol=0)
    finally:
        static.use_body(None)


def uncached(static: StaticKVModel, probe: HFBlockwiseModel) -> Any:
    """The layer's cache after one uncached call over the committed text (the features of
    ``probe``, an eager model with the same weights and a rule of its own)."""

    def want(view: StepView) -> Any:
        text = view.text.tolist()
        backend = static.heads_rule.backend
        assert isinstance(backend, TorchEagle)
        start = view.prompt_length - 1 if backend.context == "answer" else 0
        _, _, features = _seen(probe, torch.tensor([text[:-1]]))  # (1, L', F), uncached
        return backend.step(features[:, start:], torch.tensor([text[start + 1:]]),
                            torch.arange(start, len(text) - 1)[None], None, None).kv
    return want


@pytest.mark.parametrize(("fusion", "context"), CASES)
def test_the_layers_cache_after_each_step_equals_an_uncached_call(fusion: str,
                                                                  context: str) -> None:
    _, static = pair(fusion, context)
    probe = eagle_model(fusion, context)
    drafter = CacheChecked(LOOKUP, static.heads_rule, uncached(static, probe), **TOL)
    outs = decode(static, PROMPTS, drafter=drafter, max_new_tokens=40)
    assert [o.tokens for o in outs] == [greedy_generate(static, p, 40) for p in PROMPTS]
    assert drafter.checked == sum(len(o.steps) for o in outs) > 15
    assert drafter.long_paths > 0  # paths of several nodes were fed: the check has teeth


def _long_prompt() -> list[int]:
    g = torch.Generator().manual_seed(5)
    return torch.randint(2, V, (50,), generator=g).tolist() * 3  # 150 tokens, repeats


@pytest.mark.parametrize(("fusion", "context"), CASES)
def test_decoding_is_the_static_models_greedy_and_makes_the_calls_torch_makes(
        fusion: str, context: str) -> None:
    model, static = pair(fusion, context)
    caps = static.capabilities
    assert (caps.heads, caps.h, caps.runtime, caps.tree_lattice, caps.stateful_heads,
            caps.exact_trees) == ("draft-layer", 5, "static", True, True, True)
    prompts = [*PROMPTS, _long_prompt()]
    for eos in (None, 4):
        want = [greedy_generate(static, p, 32, eos_id=eos) for p in prompts]
        assert want == [greedy_generate(model, p, 32, eos_id=eos) for p in prompts]
        for drafter in (DraftSpec("heads"), ConditionalTreeDrafter(k=4, budget=16), LOOKUP):
            calls = {}
            for name, m in (("torch", model), ("static", static)):
                outs = decode(m, prompts, drafter=drafter, max_new_tokens=32, eos_id=eos)
                assert [o.tokens for o in outs] == want, (name, drafter)
                calls[name] = [o.calls for o in outs]
            assert calls["static"] == calls["torch"], drafter
        # the default (a measured cost curve: its trees depend on timings, only the output
        # is held)
        assert [decode(static, p, max_new_tokens=32, eos_id=eos).tokens
                for p in prompts] == want
    lookup = decode(static, prompts, drafter=LOOKUP, max_new_tokens=32)
    assert sum(len(o.tokens) for o in lookup) > sum(o.calls for o in lookup)  # accepted runs


@pytest.mark.parametrize(("fusion", "context"), CASES)
def test_bfloat16_runs_the_layer_in_bfloat16_and_decodes_its_own_greedy(
        fusion: str, context: str) -> None:
    _, static = pair(fusion, context, torch.bfloat16)
    assert static.precision == "bfloat16"
    prompts = [*PROMPTS, _long_prompt()]
    want = [greedy_generate(static, p, 24) for p in prompts]
    for drafter in (DraftSpec("heads"), ConditionalTreeDrafter(k=4, budget=16), LOOKUP,
                    DraftSpec("default")):
        outs = decode(static, prompts, drafter=drafter, max_new_tokens=24)
        assert [o.tokens for o in outs] == want, drafter
    state = static.heads_rule.state  # type: ignore[attr-defined]
    assert state.kv[0].dtype == state.kv[1].dtype == torch.bfloat16
    assert state.tree is not None and state.anchor.dtype == torch.bfloat16
    # a cost curve's float32 probe state enters the layer in its dtype (both fusions)
    ids, _ = static.head_topk(torch.zeros(1, 64), 3)
    assert ids.shape == (1, 4, 3)


def test_on_runtime_puts_a_draft_layer_on_the_static_runtime() -> None:
    model = eagle_model(seed=2)
    static = on_runtime(model, "static", "float32")
    assert isinstance(static, StaticKVModel) and static.heads_rule is model.heads_rule
    prompt = PROMPTS[0]
    assert decode(static, prompt, drafter=ConditionalTreeDrafter(k=3, budget=12),
                  max_new_tokens=16).tokens == greedy_generate(model, prompt, 16)
