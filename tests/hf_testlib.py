"""Tiny random Hugging Face decoders for the runtimes' tests: one builder for every family the
runtimes take, so each test file states only what differs (its heads, its dtype).

A plain module at the top of ``tests/`` (on every test folder's path, like ``models_testlib``).
"""

from __future__ import annotations

from typing import Any

import torch

V = 96
"""The tiny vocabulary."""
KINDS = ("llama", "mistral", "qwen2", "gpt2")


def tiny_hf_base(kind: str = "llama", seed: int = 0, positions: int = 256,
                 init: float = 0.1) -> Any:
    """A tiny random causal LM in eval mode (V = 96, d = 64, 2 layers, 4 query and 2 key/value
    heads of size 16): ``llama`` (untied embeddings), ``mistral`` (a sliding window of 8,
    shorter than the sequences), ``qwen2`` (biases on q, k, v) or ``gpt2``. ``init`` is the
    weights' standard deviation."""
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
        MistralConfig,
        MistralForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    ids = {"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 0, "initializer_range": init}
    torch.manual_seed(seed)
    common = {"vocab_size": V, "hidden_size": 64, "intermediate_size": 96,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": positions, **ids}
    if kind == "llama":
        base = LlamaForCausalLM(LlamaConfig(tie_word_embeddings=False, **common))
    elif kind == "mistral":
        base = MistralForCausalLM(MistralConfig(sliding_window=8, **common))
    elif kind == "qwen2":
        base = Qwen2ForCausalLM(Qwen2Config(**common))
    elif kind == "gpt2":
        base = GPT2LMHeadModel(GPT2Config(vocab_size=V, n_embd=64, n_layer=2, n_head=4,
                                          n_positions=positions, **ids))
    else:
        raise ValueError(f"unknown kind {kind!r}; one of {KINDS}")
    return base.eval()


def randomize(module: torch.nn.Module, seed: int, scale: float = 0.2) -> Any:
    """Every parameter of ``module`` drawn from N(0, scale^2) (heads that guess something)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * scale)
    return module


EAGLE_SHORTLIST = torch.arange(0, V, 2)
"""The tiny draft layers' shortlist: even ids (the layer never drafts an odd one)."""


def eagle_layer(fusion: str = "top", seed: int = 0, base: Any = None) -> Any:
    """A random EAGLE draft layer for the tiny Llama (``"layers"``: its decoder layers 1 and 2)
    over :data:`EAGLE_SHORTLIST`."""
    from blockdraft.models.heads.eagle_layer import EagleConfig, EagleLayer

    base = tiny_hf_base("llama") if base is None else base
    config = EagleConfig.from_base(base.config, fusion, (1, 2) if fusion == "layers" else None)
    torch.manual_seed(seed)
    return randomize(EagleLayer(config, EAGLE_SHORTLIST), seed + 1, 0.15).eval()


def eagle_model(fusion: str = "top", context: str = "answer", depth: int = 4,
                seed: int = 0) -> Any:
    """The tiny Llama (weights of std 0.1) with a random draft layer of ``depth`` as its heads
    (an :class:`~blockdraft.models.hf.HFBlockwiseModel` on PyTorch)."""
    from blockdraft.models.hf import HFBlockwiseModel
    from blockdraft.models.hf.eagle_heads import EagleHeads

    base = tiny_hf_base("llama", init=0.1)
    return HFBlockwiseModel(base, EagleHeads(eagle_layer(fusion, seed, base), depth, context))


def check_accepted_rows_move(runtime: Any, reference: Any, prompt: list[int],
                             tol: dict[str, float]) -> None:
    """A tree verification on ``runtime`` keeps its accepted path (not a chain prefix of the
    tree: root, a wrong child, then the right one and its child): the next forward continues
    from the moved rows as ``reference``'s fresh prefill of the accepted text does."""
    import numpy as np

    from blockdraft.core.tree import DraftTree
    from blockdraft.models import greedy_generate
    from blockdraft.verify import Verifier

    truth = greedy_generate(reference, prompt, 8)
    assert greedy_generate(runtime, prompt, 8) == truth
    verifier = Verifier(runtime)
    _, past = verifier.prefill(prompt)
    wrong = (truth[1] + 1) % V
    tree = DraftTree(tokens=np.array([truth[0], wrong, truth[1], truth[2]]),
                     parents=np.array([-1, 0, 0, 2]), scores=np.zeros(4))
    out = verifier.verify_tree(past, tree)
    assert out.path == (0, 2, 3) and out.n == 2 and out.past.length == len(prompt) + 3
    nxt, _ = runtime.hidden(torch.tensor([[truth[3]]]), out.past)  # from the moved rows
    ref = reference.hidden(torch.tensor([prompt + truth[:4]]))[0][0, -1]  # a fresh prefill
    torch.testing.assert_close(nxt[0, -1], ref, **tol)


class CacheChecked:
    """A drafter wrapping ``inner`` that, before each step's draft, holds a draft layer's cache
    (``rule.state.kv``, each ``[1, kv_heads, L, head_dim]``) against ``want(view)``, the cache
    one uncached call over the committed text gives (within ``tol``, ``assert_close``'s
    keywords), and counts the steps checked and the steps that accepted several tokens (the
    check has teeth only when paths of several nodes were fed)."""

    def __init__(self, inner: Any, rule: Any, want: Any, **tol: float) -> None:
        self.inner, self.rule, self.want, self.tol = inner, rule, want, tol
        self.checked = self.long_paths = 0

    @property
    def name(self) -> str:
        return str(self.inner.name)

    @property
    def needs(self) -> Any:
        return self.inner.needs

    def draft(self, view: Any) -> Any:
        from blockdraft.models.heads import EagleRule

        rule = self.rule
        assert isinstance(rule, EagleRule) and rule.state.kv is not None
        want = self.want(view)
        assert rule.state.kv[0].shape == want[0].shape  # no draft rows kept
        for a, b in zip(rule.state.kv, want, strict=True):
            torch.testing.assert_close(a, b, **self.tol)
        assert rule.state.position == len(view.text) - 2
        self.checked += 1
        return self.inner.draft(view)

    def observe(self, feedback: Any) -> None:
        self.long_paths += feedback.n >= 2
        self.inner.observe(feedback)
