"""greedy_generate: equals naive greedy decoding without a cache; EOS and length handling."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from blockdraft.models import BlockwiseLM, ModelError, RescorerLM, greedy_generate
from models_testlib import tiny_config, tiny_model


@pytest.fixture(name="model")
def _model() -> BlockwiseLM:
    return tiny_model()


def naive_greedy(model: BlockwiseLM, prompt: list[int], n: int, eos: int | None) -> list[int]:
    seq, out = list(prompt), []
    with torch.no_grad():
        for _ in range(n):
            logits, _ = model.heads_logits(torch.tensor([seq]))
            token = int(logits[0, -1, 0].argmax())
            out.append(token)
            seq.append(token)
            if token == eos:
                break
    return out


def test_matches_naive_greedy(model: BlockwiseLM) -> None:
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    out = greedy_generate(model, prompt, 20)
    assert out == naive_greedy(model, prompt, 20, None)
    assert len(out) == 20
    assert greedy_generate(model, np.array(prompt), 20) == out
    assert greedy_generate(model, torch.tensor(prompt), 20) == out
    assert greedy_generate(model, prompt, 0) == []


def test_stops_at_eos(model: BlockwiseLM) -> None:
    prompt = [7, 7, 8]
    free = greedy_generate(model, prompt, 12)
    eos = free[4]
    out = greedy_generate(model, prompt, 12, eos_id=eos)
    assert out == free[: free.index(eos) + 1]  # EOS included, nothing after it


def test_rescorer() -> None:
    torch.manual_seed(1)
    lm = RescorerLM(dataclasses.replace(tiny_config(), h=1))
    assert greedy_generate(lm, [1, 2, 3], 5) == naive_greedy(lm, [1, 2, 3], 5, None)


def test_errors(model: BlockwiseLM) -> None:
    with pytest.raises(ModelError, match="empty"):
        greedy_generate(model, [], 5)
    with pytest.raises(ModelError, match="max_seq_len = 64"):
        greedy_generate(model, list(range(30)), 36)
    assert len(greedy_generate(model, [1] * 30, 35)) == 35  # 64 positions exactly
    with pytest.raises(ModelError, match="max_seq_len"):
        greedy_generate(model, [1] * 65, 1)
    with pytest.raises(ModelError, match="outside the vocabulary"):
        greedy_generate(model, [1, 32], 2)
    with pytest.raises(ModelError, match="max_new_tokens"):
        greedy_generate(model, [1], -1)
    with pytest.raises(ModelError, match="1-D"):
        greedy_generate(model, [[1, 2]], 2)  # type: ignore[list-item]
