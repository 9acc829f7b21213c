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
    if not last_step_slack:  # the same accepted path (node numbers differ where the last
        # steps' trees were cut to different depths: online to max_new_tokens, offline to y)
        assert [s.tree.path_tokens(s.winner).tolist() for s in online.steps] == [
            row[: n + 1].tolist() for row, n in zip(steps.drafts, steps.n, strict=True)]
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


# ------------------------------------------------------------------------------ every kind
PROMPTS = [[3, 1, 4, 1, 5, 9, 2, 6], [7, 7, 2, 8, 7, 7, 2], [11, 5, 11, 5, 11, 30, 12]]
MAX_NEW = 36


@pytest.fixture(scope="module")
def every_kind(random_model, tiny_ngram, tmp_path_factory):  # type: ignore[no-untyped-def]
    """A tiny model, its trace of PROMPTS and one sweep setting of every strategy kind."""
    from blockdraft.oracle.sweep import Setting

    model = random_model(seed=3, vocab=64, h=4, scale=3.0, head_scale=0.8)
    rows = []
    for prompt in PROMPTS:
        y = greedy_generate(model, prompt, MAX_NEW)
        rows.append((prompt, y, teacher_forced_logits(model, prompt, y)))
    path = tmp_path_factory.mktemp("kinds") / "trace"
    Trace.from_head_logits(path, rows, K=8)
    lm = str(tiny_ngram)
    settings = {
        "vanilla": Setting("heads"),
        "1-best": Setting("heads", k=4, rescorer="ngram", lm=lm, alpha=1.0),
        "p-best trie": Setting("heads", k=4, p=3),
        "p-best rescored trie": Setting("heads", k=4, p=3, rescorer="ngram", lm=lm),
        "confidence tree": Setting("tree", k=4, tree="confidence", budget=8),
        "medusa tree": Setting("tree", tree="medusa", budget=8),
        "rescored tree": Setting("tree", k=4, tree="rescored", budget=8, rescorer="ngram",
                                 lm=lm, alpha=0.5),
        "lookup": Setting("lookup"),
        "combined": Setting("combined", k=4, p=2, rescorer="ngram", lm=lm),
    }
    return model, path, settings


@pytest.mark.parametrize("kind", ["vanilla", "1-best", "p-best trie", "p-best rescored trie",
                                  "confidence tree", "medusa tree", "rescored tree", "lookup",
                                  "combined"])
def test_a_swept_strategy_equals_its_online_decode(every_kind, kind: str) -> None:  # type: ignore[no-untyped-def]
    """Issue 31: for every strategy kind the sweep simulates, its B over the trace equals a
    real decode's B on the same prompts, and every step accepts as many tokens."""
    from blockdraft.oracle.sweep import Resources, sweep

    model, path, settings = every_kind
    setting = settings[kind]
    row = sweep(path, [setting]).rows[0]
    tokens = calls = 0
    offline = simulate(Trace.open(path), setting.build(Resources()))
    for e, prompt in enumerate(PROMPTS):
        online = decode(model, prompt, drafter=setting.build(Resources()),
                        max_new_tokens=MAX_NEW)
        assert online.tokens == greedy_generate(model, prompt, MAX_NEW)
        assert online.accept_lengths == offline.steps.n[offline.steps.example == e].tolist()
        tokens += len(online.tokens)
        calls += online.calls
    assert row.block_efficiency == tokens / calls
    assert row.calls == calls and row.tokens == tokens
    assert row.block_efficiency > 1.0  # it accepted drafted tokens: the check has teeth


def test_the_kinds_draft_differently(every_kind) -> None:  # type: ignore[no-untyped-def]
    """The kinds above are not one strategy under many names: their steps differ."""
    from blockdraft.oracle.sweep import sweep

    _, path, settings = every_kind
    rows = sweep(path, list(settings.values())).rows
    assert len({r.steps_sha256 for r in rows}) >= len(rows) - 1
