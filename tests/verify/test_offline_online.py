"""Cross-check (SPEC sec. 6): the online decode loop and the offline simulator over a trace of
the same model give the same n, winner and token count at every step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from blockdraft.drafts import HeadDrafter
from blockdraft.drafts.iad import CombinedDrafter, InputCopyDrafter
from blockdraft.models import BlockwiseLM, greedy_generate
from blockdraft.oracle import Trace, simulate
from blockdraft.verify import decode


def teacher_forced_logits(model: BlockwiseLM, prompt: list[int], y: list[int]) -> torch.Tensor:
    """``[m, h, V]``: every head's logits at positions ``t = 0 .. m-1`` (prefix ``x, y_<=t``)."""
    with torch.no_grad():
        logits, _ = model.heads_logits(torch.tensor([prompt + y[:-1]]))
    return logits[0, len(prompt) - 1 :]


def compare(model: BlockwiseLM, prompt: list[int], drafter: Any, max_new: int,
            path: Path, eos_id: int | None = None, last_step_slack: bool = False) -> None:
    y = greedy_generate(model, prompt, max_new, eos_id=eos_id)
    online = decode(model, prompt, drafter=drafter, max_new_tokens=max_new, eos_id=eos_id)
    assert online.tokens == y
    trace = Trace.from_head_logits(path, [(prompt, y, teacher_forced_logits(model, prompt, y))],
                                   K=8)
    offline = simulate(trace, drafter)
    steps = offline.steps
    assert [s.position for s in online.steps] == steps.t.tolist()
    n_online, n_offline = online.accept_lengths, steps.n.tolist()
    if last_step_slack:  # the context is full: the last step may accept one token less
        assert n_online[-1] in (n_offline[-1], n_offline[-1] - 1)
        n_online, n_offline = n_online[:-1], n_offline[:-1]
    assert n_online == n_offline
    if not last_step_slack:
        assert [s.winner for s in online.steps] == steps.winner.tolist()
    assert [len(s.tokens) for s in online.steps] == steps.tokens.tolist()
    assert online.calls == int(offline.calls[0])
    assert online.block_efficiency == pytest.approx(offline.block_efficiency)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("k", "p"), [(1, 1), (4, 3)])
@pytest.mark.parametrize("with_eos", [False, True])
def test_online_equals_offline(random_model, tmp_path, seed: int, k: int, p: int,  # type: ignore[no-untyped-def]
                               with_eos: bool) -> None:
    model = random_model(seed=seed, vocab=64, h=4, scale=1.0 if seed == 0 else 10.0,
                         head_scale=0.0 if seed == 2 else 0.5)
    prompt = [3, 1, 4, 1, 5]
    eos = greedy_generate(model, prompt, 40)[-6] if with_eos else None
    compare(model, prompt, HeadDrafter(k=k, p=p), 40, tmp_path / "trace", eos_id=eos)


@pytest.mark.parametrize("max_new", [26, 27, 28, 29])
def test_a_full_context_changes_at_most_the_last_n(random_model, tmp_path,  # type: ignore[no-untyped-def]
                                                   max_new: int) -> None:
    model = random_model(seed=0, vocab=64, h=4, scale=1.0, max_seq_len=32)
    prompt = list(range(33 - max_new))  # len(prompt) + max_new - 1 == max_seq_len
    compare(model, prompt, HeadDrafter(k=1), max_new, tmp_path / "trace",
            last_step_slack=True)


def test_online_equals_offline_with_input_copy(chain_model, tmp_path) -> None:  # type: ignore[no-untyped-def]
    model, order = chain_model(vocab=64, h=4)
    o = order.tolist()
    prompt = o[0:20] + [o[40], o[50], o[3]]
    drafter = CombinedDrafter(HeadDrafter(k=2, p=2), InputCopyDrafter(prompt))
    compare(model, prompt, drafter, 30, tmp_path / "trace")
