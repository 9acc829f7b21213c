"""The cache argument of a decoder body, whatever the transformers release calls it.

transformers up to 5.23 names it ``past_key_values`` (and returns the cache in the output field
of that name); 5.24 renamed both to ``cache``. Two tiny Llama bodies, one with each convention
(wrappers around the installed body, so both run on any release), must give the adapter, the
batched generation and greedy decoding the same numbers as the installed model itself.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import torch

pytest.importorskip("transformers")

from transformers import LlamaConfig, LlamaForCausalLM, LlamaModel  # noqa: E402
from transformers.cache_utils import Cache  # noqa: E402

from blockdraft.models import ModelError, greedy_generate  # noqa: E402
from blockdraft.models.hf import HFBlockwiseModel  # noqa: E402
from blockdraft.models.hf.body import cache_argument, returned_cache  # noqa: E402
from blockdraft.training.heads.generation import greedy_batch  # noqa: E402
from blockdraft.verify import decode  # noqa: E402

INSTALLED = "cache" if "cache" in inspect.signature(LlamaModel.forward).parameters else (
    "past_key_values")
"""The installed release's name for the argument (the test's own knowledge of both)."""


class Output(dict):  # type: ignore[type-arg]
    """A model output as old and new releases return it: a mapping with attribute access.
    (Not a transformers ``ModelOutput``: 5.24 renames a ``past_key_values`` field on those.)"""

    def __getattr__(self, name: str) -> Any:
        return self[name]


class OldBody(LlamaModel):
    """A Llama body whose forward takes ``past_key_values`` (transformers <= 5.23)."""

    def forward(  # type: ignore[override]
        self, input_ids: torch.Tensor | None = None, attention_mask: Any = None,
        position_ids: torch.Tensor | None = None, past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None, use_cache: bool | None = None,
        **kwargs: Any,
    ) -> Output:
        out = super().forward(input_ids=input_ids, attention_mask=attention_mask,
                              position_ids=position_ids, inputs_embeds=inputs_embeds,
                              use_cache=use_cache, **{INSTALLED: past_key_values}, **kwargs)
        return Output(last_hidden_state=out.last_hidden_state, past_key_values=out[1])


class NewBody(LlamaModel):
    """A Llama body whose forward takes ``cache`` (transformers >= 5.24)."""

    def forward(  # type: ignore[override]
        self, input_ids: torch.Tensor | None = None, attention_mask: Any = None,
        position_ids: torch.Tensor | None = None, cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None, use_cache: bool | None = None,
        **kwargs: Any,
    ) -> Output:
        out = super().forward(input_ids=input_ids, attention_mask=attention_mask,
                              position_ids=position_ids, inputs_embeds=inputs_embeds,
                              use_cache=use_cache, **{INSTALLED: cache}, **kwargs)
        return Output(last_hidden_state=out.last_hidden_state, cache=out[1])


class OldLM(LlamaForCausalLM):
    """A Llama causal LM whose forward takes ``past_key_values`` (transformers <= 5.23)."""

    def forward(self, past_key_values: Cache | None = None, **kwargs: Any) -> Output:  # type: ignore[override]
        out = super().forward(**{INSTALLED: past_key_values}, **kwargs)
        return Output(logits=out.logits, past_key_values=out[INSTALLED])


class NewLM(LlamaForCausalLM):
    """A Llama causal LM whose forward takes ``cache`` (transformers >= 5.24)."""

    def forward(self, cache: Cache | None = None, **kwargs: Any) -> Output:  # type: ignore[override]
        out = super().forward(**{INSTALLED: cache}, **kwargs)
        return Output(logits=out.logits, cache=out[INSTALLED])


def _base(body: type[LlamaModel] | None) -> LlamaForCausalLM:
    """A tiny seeded Llama; ``body`` replaces its decoder body (same weights)."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=64, bos_token_id=0, eos_token_id=1,
                         pad_token_id=0, initializer_range=0.3)
    base = LlamaForCausalLM(config).eval()
    if body is not None:
        swapped = body(config).eval()
        swapped.load_state_dict(base.model.state_dict())
        base.model = swapped
    return base


@pytest.mark.parametrize(("body", "name"), [(OldBody, "past_key_values"), (NewBody, "cache")])
def test_the_cache_argument_is_found_by_its_annotation(body: type, name: str) -> None:
    assert cache_argument(body(_base(None).config)) == name
    assert cache_argument(_base(None).model) == INSTALLED


def test_an_unannotated_forward_falls_back_to_the_known_names() -> None:
    class Plain(torch.nn.Module):
        def forward(self, input_ids, past_key_values=None, position_ids=None):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN202
            return input_ids

    class NoCache(torch.nn.Module):
        def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
            return input_ids

    assert cache_argument(Plain()) == "past_key_values"
    assert cache_argument(NoCache()) is None


def test_two_cache_arguments_are_ambiguous() -> None:
    class Two(torch.nn.Module):
        def forward(self, a: Cache | None = None, b: Cache | None = None) -> None:
            return None

    with pytest.raises(ModelError, match="several cache arguments"):
        cache_argument(Two())


def test_an_output_without_a_cache_is_refused() -> None:
    with pytest.raises(ModelError, match="no key/value cache"):
        returned_cache(Output(last_hidden_state=torch.zeros(1)))


@pytest.mark.parametrize(("body", "lm"), [(OldBody, OldLM), (NewBody, NewLM)])
def test_both_conventions_give_the_installed_models_numbers(
    body: type, lm: type, hf_heads: Any
) -> None:
    reference, swapped = _base(None), _base(body)
    heads = hf_heads(32, 96, num_heads=3)
    ref_model = HFBlockwiseModel(reference, heads)
    model = HFBlockwiseModel(swapped, hf_heads(32, 96, num_heads=3))
    ids = torch.tensor([[5, 9, 2, 33, 7, 21]])
    want, want_past = ref_model.heads_logits(ids)
    got, past = model.heads_logits(ids)
    torch.testing.assert_close(got, want)
    more = torch.tensor([[4, 8]])  # incremental, on the cache of the first call
    torch.testing.assert_close(model.heads_logits(more, past)[0],
                               ref_model.heads_logits(more, want_past)[0])
    # tree verification (4-D mask) and greedy decoding go through the same call
    prompt = [5, 9, 2, 33]
    greedy = greedy_generate(model, prompt, 12)
    assert greedy == greedy_generate(ref_model, prompt, 12)
    assert decode(model, prompt, k=4, p=3, max_new_tokens=12).tokens == greedy
    assert decode(model, prompt, k=4, p=3, max_new_tokens=12, tree=True).tokens == greedy
    # batched generation (distillation) calls the whole causal LM with the cache
    whole = lm(reference.config).eval()
    whole.load_state_dict(reference.state_dict())
    answers, hidden = greedy_batch(whole, [prompt, [7, 3]], 6, eos_id=None)
    ref_answers, ref_hidden = greedy_batch(reference, [prompt, [7, 3]], 6, eos_id=None)
    assert answers == ref_answers
    for a, b in zip(hidden, ref_hidden, strict=True):
        torch.testing.assert_close(a, b)
