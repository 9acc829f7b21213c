"""Fixtures of the Medusa-heads training tests (helpers live in ``heads_testlib``)."""

from __future__ import annotations

from typing import Any

import pytest
from heads_testlib import EOS, settings, tiny_llama, tiny_prompts

from blockdraft.training.heads import build_distill_set, hash_prompts


@pytest.fixture(scope="session")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A distillation set of 120 tiny prompts (24 held out) on the tiny Llama, answers of at
    most 32 tokens: built once, read by the trainer's and the data curve's tests."""
    pytest.importorskip("transformers")
    prompts = tiny_prompts(120, seed=5)
    folder = tmp_path_factory.mktemp("distill") / "d"
    s = settings(prompts=hash_prompts(prompts), shard_size=32, batch_size=16,
                 heldout_fraction=0.2, max_new_tokens=32)
    return build_distill_set(tiny_llama(init=0.1), prompts, folder, s, eos_id=EOS, log=None,
                             progress=False)
