"""The whole step on the device (models/runtimes/device_step.py, issue 41 item 1) on tiny random
models, eagerly on the CPU (graphs=False), and through decode's entry point
(verify/device_decode.py): the tokens equal greedy decoding's and the host path's with the same
drafter (vanilla chain, static Medusa tree) in float32, the records the host's; the accepted
rows moved in the buffer equal a fresh forward of the accepted text; a step makes no host
synchronisation; bfloat16 runs; a tree that no longer fits ends greedy; refusals and routes.
On a GPU the same steps are captured as CUDA graphs (the cuda tests)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from device_testlib import (
    DEVICES,
    N,
    NoHostSync,
    host_and_device,
    prompt_of,
    same_steps,
    static_model,
)
from hf_testlib import V

pytest.importorskip("transformers")

from blockdraft.drafts import DraftSpec  # noqa: E402
from blockdraft.drafts.trees import (  # noqa: E402
    MC_SIM_7B_63,
    calibrated_tree_drafter,
    sort_choices,
)
from blockdraft.models import ModelError, greedy_generate  # noqa: E402
from blockdraft.models.runtimes.device_step import decoder  # noqa: E402
from blockdraft.models.runtimes.device_tree import StaticTree  # noqa: E402
from blockdraft.models.runtimes.static import StaticKVModel  # noqa: E402
from blockdraft.verify import decode  # noqa: E402

CHOICES = tuple(c for c in sort_choices(MC_SIM_7B_63) if len(c) <= 3)
"""Medusa's rank paths a model of 3 heads reaches (depth 3)."""
SPECS = {"chain": DraftSpec("heads"),
         "tree": DraftSpec("tree", tree="medusa", budget=16)}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["llama", "mistral", "gpt2"])
@pytest.mark.parametrize("strategy", list(SPECS))
def test_device_steps_equal_greedy_and_the_host_path(strategy: str, kind: str,
                                                     device: str) -> None:
    """float32: greedy's tokens; the host's steps (tree, winner, n, n per leaf, tokens), but
    where the host cut its tree to the tokens still wanted; an EOS stops both alike."""
    model = static_model(kind, device=device, capacity=160)
    steps: list[Any] = []
    for seed in (2, 3):
        prompt = prompt_of(seed)
        want = greedy_generate(model, prompt, N)
        eos = want[N // 2] if seed == 3 else None
        host, dev = host_and_device(model, prompt, SPECS[strategy], eos_id=eos)
        assert dev.drafter.endswith("(device)") and not host.drafter.endswith("(device)")
        assert dev.tokens == host.tokens == (want if eos is None else
                                             want[: want.index(eos) + 1])
        assert (dev.calls, dev.stopped) == (host.calls, host.stopped)
        steps.extend(dev.steps)
        same_steps(dev, host)
    assert max(s.n for s in steps) > 1  # drafts were accepted
    if strategy == "tree":  # accepted paths whose rows moved
        assert any(s.winner != s.n for s in steps)
    if device == "cuda":
        stepper = decoder(model, StaticTree.chain(3) if strategy == "chain" else
                                       StaticTree.from_choices(CHOICES[:15]))
        assert stepper.graphs and stepper.captured  # one graph per (topology, rows)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("strategy", list(SPECS))
def test_bfloat16_device_steps_run(strategy: str, device: str) -> None:
    """bfloat16: the device decodes, and its tokens are the host path's (the same forwards of
    the same shapes on this CPU)."""
    model = static_model(dtype=torch.bfloat16, device=device, capacity=160)
    prompt = prompt_of(4)
    host, dev = host_and_device(model, prompt, SPECS[strategy])
    assert len(dev.tokens) == N and dev.block_efficiency > 1.0
    if device == "cpu":
        assert dev.tokens == host.tokens


def test_a_calibrated_tree_runs_on_the_device() -> None:
    """Medusa's calibrated tree (rank paths from per-depth, per-rank accuracies, best first)
    as a drafter object: the device steps verify its topology, with the host path's tokens and
    verdicts."""
    model = static_model(capacity=160)
    accuracies = np.array([[0.6, 0.2, 0.1, 0.05], [0.5, 0.2, 0.1, 0.05], [0.4, 0.2, 0.1, 0.1]])
    drafter = calibrated_tree_drafter(accuracies, 12)
    host, dev = host_and_device(model, prompt_of(2), drafter)
    assert dev.drafter == "calibrated tree (N=12) (device)"
    assert dev.tokens == host.tokens == greedy_generate(model, prompt_of(2), N)
    assert [s.tree.num_nodes for s in dev.steps[:3]] == [12] * 3
    assert [(s.winner, s.n) for s in dev.steps[:-2]] == [(s.winner, s.n) for s in host.steps[:-2]]


def test_greedy_is_the_one_node_tree() -> None:
    model = static_model(capacity=160)
    prompt = prompt_of(5)
    run = decoder(model, StaticTree.greedy()).decode(prompt, N)
    assert run.tokens == greedy_generate(model, prompt, N)
    assert len(run.steps) == N - 1 and {s.n for s in run.steps} == {0}


def test_the_accepted_rows_move_as_a_fresh_forward_writes_them() -> None:
    """A tree step whose accepted path skips nodes (root, a wrong child, then the right one and
    two below it): the buffer's rows after the prompt are the keys and values of a fresh
    forward over the prompt and the accepted tokens, in every layer."""
    model = static_model(capacity=160)
    fresh = StaticKVModel(model.model, capacity=160)
    prompt = prompt_of(6)
    truth = greedy_generate(model, prompt, 6)
    tree = StaticTree(np.array([-1, 0, 0, 2, 3, 2]), np.array([0, 0, 1, 0, 0, 1]))
    stepper = decoder(model, tree)
    stepper.prefill(prompt)
    wrong = (truth[1] + 1) % V
    stepper.draft.copy_(torch.tensor([truth[0], wrong, truth[1], truth[2], truth[3], wrong]))
    row = stepper.step()
    assert row[:2] == [3, 4]  # n = 3, at node 4: the path 0, 2, 3, 4
    assert row[2:6] == truth[1:5]
    kept = len(prompt) + 4
    assert int(stepper.length) == kept
    fresh.hidden(torch.tensor([prompt + truth[:4]]))
    got = model.buffer.storage[:, :, :, :, :kept]
    torch.testing.assert_close(got, fresh.buffer.storage[:, :, :, :, :kept],
                               atol=1e-5, rtol=1e-5)
    assert stepper.step()[2] == truth[5]  # and the next step reads them


def test_a_tree_that_no_longer_fits_ends_greedy() -> None:
    """The context (GPT-2's learned positions) and the buffer end where the prompt and the
    tokens do: the last steps run the root alone, as exact."""
    prompt = prompt_of(7)
    for kwargs in ({"kind": "gpt2", "positions": len(prompt) + N},
                   {"capacity": len(prompt) + N}):
        model = static_model(**kwargs)
        result = decode(model, prompt, drafter=SPECS["tree"], max_new_tokens=N)
        assert result.tokens == greedy_generate(model, prompt, N)
        sizes = [s.tree.num_nodes for s in result.steps]
        assert sizes[0] == 16 and sizes[-1] == 1


@pytest.mark.parametrize("kind", ["llama", "mistral", "gpt2"])
def test_a_step_makes_no_host_synchronisation(kind: str) -> None:
    """The whole step (bias, forward, base head, verdict, rows moved, heads, next draft, output
    row) under a guard, for a chain and a tree: what a CUDA graph can capture."""
    model = static_model(kind, capacity=160)
    for tree in (StaticTree.chain(3), StaticTree.from_choices(CHOICES[:12])):
        stepper = decoder(model, tree)
        stepper.prefill(prompt_of(8))
        rows = model.attended(len(prompt_of(8)) + tree.size)
        with torch.no_grad(), NoHostSync():
            stepper._launch("main", rows)
            stepper._launch("greedy", rows)


def test_the_guard_is_not_vacuous() -> None:
    x = torch.arange(4)
    for read in (lambda: x[1].item(), lambda: bool(x[1]), lambda: x[x > 1],
                 lambda: [0, 1, 2][x[1]], lambda: x.nonzero()):
        with NoHostSync(), pytest.raises(RuntimeError, match="host synchronisation"):
            read()


def test_what_the_device_does_not_draft_takes_the_host_path() -> None:
    """Prefix heads with a drafter that reads heads, input copies, p-best paths, a lossy
    criterion, the old keywords: decode's host path (its drafter's own name), greedy's tokens
    where lossless; the decoder refuses what it cannot draft."""
    prefix = static_model(heads="prefix", capacity=160)
    prompt = prompt_of(9)
    result = decode(prefix, prompt, drafter=SPECS["chain"], max_new_tokens=16)
    assert result.drafter == "vanilla" and result.tokens == greedy_generate(prefix, prompt, 16)
    combined = decode(prefix, prompt, drafter=DraftSpec("combined"), max_new_tokens=16)
    assert not combined.drafter.endswith("(device)")
    with pytest.raises(ModelError, match="Medusa heads"):
        decoder(prefix, StaticTree.chain(3))
    model = static_model(capacity=160)
    for kwargs in ({"drafter": DraftSpec("iad")}, {"drafter": DraftSpec("combined", k=4, p=2)},
                   {"k": 4, "p": 2}, {"drafter": SPECS["chain"], "criterion": "topk:k=2"}):
        assert not decode(model, prompt, max_new_tokens=8, **kwargs).drafter.endswith(
            "(device)")
    with pytest.raises(ModelError, match="depth 4"):
        decoder(model, StaticTree.chain(4))
    with pytest.raises(ModelError, match="rank 59"):
        decoder(model, StaticTree.from_choices([(r,) for r in range(60)]))
