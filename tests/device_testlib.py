"""The device step's test fixtures (imported by module name, like ``hf_testlib``): tiny static
models with device steps, prompts, decode on the host path and on the device, and the guard
against host synchronisation."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from hf_testlib import V, randomize, tiny_hf_base

N = 40
"""Tokens a test decodes."""
DEVICES = ["cpu", pytest.param("cuda", marks=[
    pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")])]


def static_model(kind: str = "llama", dtype: torch.dtype = torch.float32, seed: int = 0,
                 heads: str = "medusa", device: str = "cpu", **kwargs: Any) -> Any:
    """A tiny random model (weights of scale 0.1: its greedy text repeats itself) with 3 heads
    over a shortlist of every other id, on the static runtime with device steps (on CUDA its
    graphs captured). Medusa heads are identities (their ResBlocks zero: each guesses the
    base's next token again, right where the text repeats); prefix heads random."""
    from blockdraft.models.hf import HFBlockwiseModel, MedusaHeads
    from blockdraft.models.hf.prefix_heads import PrefixHeads
    from blockdraft.models.runtimes.static import StaticKVModel

    if heads == "medusa":
        module = MedusaHeads(64, None, 3, 1)
        with torch.no_grad():
            for weight in module.parameters():
                weight.zero_()
    else:
        module = randomize(PrefixHeads(64, 3, 1), seed + 1)
    module.set_shortlist(torch.arange(0, V, 2))
    positions = kwargs.pop("positions", 256)
    model = HFBlockwiseModel(tiny_hf_base(kind, seed, positions=positions, init=0.1), module,
                             dtype=dtype, device=device)
    return StaticKVModel(model, device_steps=True, **kwargs)


def prompt_of(seed: int, n: int = 12) -> list[int]:
    return np.random.default_rng(seed).integers(2, V, n).tolist()


def host_and_device(model: Any, prompt: list[int], spec: Any, max_new_tokens: int = N,
                    **kwargs: Any) -> tuple[Any, Any]:
    """decode's result on the host path and on the device, the same spec."""
    from blockdraft.verify import decode

    model.device_steps = False
    host = decode(model, prompt, drafter=spec, max_new_tokens=max_new_tokens, **kwargs)
    model.device_steps = True
    return host, decode(model, prompt, drafter=spec, max_new_tokens=max_new_tokens, **kwargs)


def same_steps(dev: Any, host: Any) -> None:
    """The device's steps are the host's: positions and tokens yielded, and where the host did
    not cut its tree to the tokens still wanted, the tree (tokens, parents), winner, ``n`` and
    ``n`` of every leaf."""
    for a, b in zip(dev.steps, host.steps, strict=True):
        assert (a.position, a.tokens) == (b.position, b.tokens)
        if a.tree.num_nodes == b.tree.num_nodes:  # not cut at the end by the host
            assert a.tree.tokens.tolist() == b.tree.tokens.tolist()
            assert a.tree.parents.tolist() == b.tree.parents.tolist()
            assert (a.winner, a.n, a.accept_lengths) == (b.winner, b.n, b.accept_lengths)


class NoHostSync(TorchFunctionMode):
    """Refuses what makes the host wait for the device: a value read back (``.item()``,
    ``.tolist()``, ``.cpu()``, ``.numpy()``, ``bool``/``int``/``float``/index of a tensor) and
    a shape that depends on values (``nonzero``, ``masked_select``, ``unique``, a boolean
    mask's indexing)."""

    SYNCS = frozenset({
        torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.numpy, torch.Tensor.cpu,
        torch.Tensor.__bool__, torch.Tensor.__int__, torch.Tensor.__float__,
        torch.Tensor.__index__, torch.Tensor.nonzero, torch.nonzero, torch.Tensor.masked_select,
        torch.masked_select, torch.unique, torch.Tensor.unique})

    def __torch_function__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        if func in self.SYNCS:
            raise RuntimeError(f"host synchronisation: {getattr(func, '__name__', func)}")
        if func in (torch.Tensor.__getitem__, torch.Tensor.__setitem__) and any(
                isinstance(i, torch.Tensor) and i.dtype == torch.bool
                for i in tree_flatten(args[1])[0]):
            raise RuntimeError("host synchronisation: a boolean mask's indexing")
        return func(*args, **(kwargs or {}))
