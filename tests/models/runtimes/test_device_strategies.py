"""The device step's drafting strategies beyond a fixed topology (models/runtimes/
device_drafters.py, issue 41 item 2) on tiny random models, eagerly on the CPU and through
decode's entry point (verify/device_decode.py): the cost-aware tree with N fixed (its topology
rewritten every step; uniform, packaged and random tables), prompt lookup alone (padding nodes
never accepted), the heads' chain and lookup's copy in one trie, and the rated tree with an
n-gram LM's evidence (the LM's table on the device). Each decodes greedy's tokens (float32) and
the host path's steps with the same drafter, a step makes no host synchronisation, and the
routes and refusals are decode's."""

from __future__ import annotations

from pathlib import Path
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

pytest.importorskip("transformers")

from blockdraft.drafts import AcceptanceTables, DraftSpec, LookupDrafter  # noqa: E402
from blockdraft.drafts.calibration import HEAD_EDGES, LM_EDGES  # noqa: E402
from blockdraft.drafts.cut import CostCut  # noqa: E402
from blockdraft.drafts.heads import vanilla  # noqa: E402
from blockdraft.drafts.iad import CombinedDrafter  # noqa: E402
from blockdraft.drafts.pipeline import Pipeline  # noqa: E402
from blockdraft.drafts.rates import TableRates  # noqa: E402
from blockdraft.drafts.trees import MC_SIM_7B_63, RankPaths, sort_choices  # noqa: E402
from blockdraft.models import ModelError, greedy_generate  # noqa: E402
from blockdraft.models.runtimes.device_drafters import DeviceStrategy  # noqa: E402
from blockdraft.models.runtimes.device_step import decoder  # noqa: E402
from blockdraft.models.runtimes.device_tree import StaticTree  # noqa: E402
from blockdraft.rescorers.ngram.lm import NgramLM  # noqa: E402
from blockdraft.rescorers.ngram.path_scorer import NgramPathScorer  # noqa: E402
from blockdraft.rescorers.ngram.table import NgramTable  # noqa: E402
from blockdraft.verify import decode  # noqa: E402

PACKAGED = (Path(__file__).resolve().parents[3] / "src" / "blockdraft" / "models" / "hf"
            / "heads" / "smollm2" / "acceptance.json")
CANDIDATES = tuple(c for c in sort_choices(MC_SIM_7B_63) if len(c) <= 3)
"""Medusa's rank paths a model of 3 heads reaches: 61 candidates below the root."""


def rated(tables: AcceptanceTables, n: int, lm: Any = None) -> Any:
    """The host's cost-aware tree with N fixed: Medusa's candidates rated, the N best."""
    return Pipeline([RankPaths(CANDIDATES)], rates=TableRates(tables, lm), cut=CostCut(None, n),
                    name=f"rated N={n}")


def tables_of(kind: str) -> AcceptanceTables:
    """Uniform stand-ins, the packaged SmolLM2 tables, random rates, or ``sharp`` ones: near 1
    above a head log-probability of -2.5, falling fast below it and slowly with the LM's bins,
    so that the tiny models' flat heads (top-1 log-probability about -2.3) grow deep trees as
    well as wide ones."""
    if kind == "sharp":
        upper = np.array([*HEAD_EDGES, 0.0])  # (HB,)
        head = np.select([upper >= -2.0, upper >= -2.5, upper >= -3.0], [0.97, 0.6, 0.3], 0.1)
        lm = np.exp(np.array([*LM_EDGES, 0.0]) / 40)  # (LB,)
        marginal = np.tile(head, (3, 1))
        return AcceptanceTables(heads=marginal[:, :, None] * lm, marginal=marginal,
                                copy=AcceptanceTables.uniform(4).copy)
    if kind == "packaged":
        return AcceptanceTables.load(PACKAGED)
    if kind == "random":
        rng = np.random.default_rng(5)
        base = AcceptanceTables.uniform(4)
        return AcceptanceTables(heads=rng.random(base.heads.shape),
                                marginal=rng.random(base.marginal.shape), copy=base.copy)
    return AcceptanceTables.uniform(4)


def check(model: Any, drafter: Any, seeds: tuple[int, ...] = (2, 3), accepted: int = 2,
          **kwargs: Any) -> list[Any]:
    """Device and host decode each seed's prompt alike, greedy's tokens, and a step accepts
    ``accepted`` draft tokens at least; the device's steps."""
    steps: list[Any] = []
    for seed in seeds:
        prompt = prompt_of(seed)
        want = greedy_generate(model, prompt, N)
        eos = want[N // 2] if seed == 3 else None
        host, dev = host_and_device(model, prompt, drafter, eos_id=eos, **kwargs)
        assert dev.drafter.endswith("(device)") and not host.drafter.endswith("(device)")
        assert dev.tokens == host.tokens == (want if eos is None else
                                             want[: want.index(eos) + 1])
        assert (dev.calls, dev.stopped) == (host.calls, host.stopped)
        same_steps(dev, host)
        steps.extend(dev.steps)
    assert max(s.n for s in steps) >= accepted  # drafts were accepted
    return steps


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["llama", "mistral"])
@pytest.mark.parametrize("tables", ["sharp", "uniform", "packaged", "random"])
def test_the_rated_tree_is_the_hosts(tables: str, kind: str, device: str) -> None:
    """N = 8 of 62 candidates: the host's trees, greedy's tokens. Sharp rates grow trees of
    changing shape (not Medusa's first 8 nodes) whose accepted paths move rows; the others
    rate the tiny heads' flat guesses low: wide trees of depth 1."""
    model = static_model(kind, device=device, capacity=160)
    sharp = tables == "sharp"
    steps = check(model, rated(tables_of(tables), 8), accepted=2 if sharp else 1)
    assert {s.tree.num_nodes for s in steps[:5]} == {8}
    if sharp:
        shapes = {tuple(s.tree.parents.tolist()) for s in steps if s.tree.num_nodes == 8}
        assert len(shapes) > 1  # the topology follows the rates
        assert any(s.winner != s.n for s in steps)


def test_the_rated_spec_runs_on_the_device() -> None:
    """DraftSpec("tree", tree="rated"): Medusa's candidates the heads reach, the packaged
    tables; its label names the device."""
    model = static_model(capacity=160)
    spec = DraftSpec("tree", tree="rated", budget=12, tables=str(PACKAGED))
    steps = check(model, spec, seeds=(2,), accepted=1)
    assert steps[0].tree.num_nodes == 12
    prompt = prompt_of(2)
    result = decode(model, prompt, drafter=spec, max_new_tokens=8)
    assert result.drafter == f"{spec.label} (device)"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("drafter", ["lookup", "lookup settings", "combined"])
def test_lookup_and_chain_plus_lookup_are_the_hosts(drafter: str, device: str) -> None:
    """Prompt lookup alone (its padded chain: only the copy's nodes are records), with its
    own settings, and merged with the heads' chain: the host's trees, greedy's tokens."""
    model = static_model(device=device, capacity=160)
    spec = {"lookup": DraftSpec("lookup"),
            "lookup settings": LookupDrafter(min_match=2, max_match=3, lengths=(3, 5)),
            "combined": CombinedDrafter(vanilla(), LookupDrafter())}[drafter]
    steps = check(model, spec, accepted=1 if drafter == "lookup settings" else 2)
    sizes = {s.tree.num_nodes for s in steps}
    assert len(sizes) > 1  # the copy's length varies (no match: the root alone)
    if drafter == "combined":
        assert any(s.tree.num_nodes > 4 for s in steps)  # a copy beside the chain
        assert any(s.winner != s.n for s in steps)  # an accepted copy branch


def test_lookup_runs_on_the_device_with_prefix_heads() -> None:
    """Prompt lookup reads no heads: prefix heads' models draft it on the device too."""
    model = static_model(heads="prefix", capacity=160)
    check(model, DraftSpec("lookup"))


@pytest.fixture(scope="module")
def tiny_lm(arpa_lms: dict[int, Path]) -> NgramLM:
    """A 3-gram LM over the test corpus's word ids (the tiny models' ids 0..95 among them)."""
    return NgramLM(arpa_lms[3])


@pytest.mark.parametrize("device", DEVICES)
def test_the_rated_tree_with_an_ngram_lm_is_the_hosts(tiny_lm: NgramLM, device: str) -> None:
    """The LM's evidence (KenLM's scores on the host, the table's on the device) picks the same
    trees, greedy's tokens; as a spec too."""
    model = static_model(device=device, capacity=160)
    check(model, rated(tables_of("sharp"), 10, NgramPathScorer(tiny_lm)))
    spec = DraftSpec("tree", tree="rated", budget=10, tables=str(PACKAGED), rescorer="ngram",
                     lm=str(tiny_lm.path))
    check(model, spec, seeds=(2,), accepted=1)


def test_the_lm_changes_the_tree(tiny_lm: NgramLM) -> None:
    """With the LM's evidence the trees differ from the marginals' (the evidence is read)."""
    model = static_model(capacity=160)
    prompt = prompt_of(2)
    plain = decoder(model, DeviceStrategy.rated(StaticTree.from_choices(CANDIDATES), 10,
                                                tables_of("sharp"))).decode(prompt, N)
    table = NgramTable.from_lm(tiny_lm)
    scored = decoder(model, DeviceStrategy.rated(
        StaticTree.from_choices(CANDIDATES), 10, tables_of("sharp"), lm=lambda: table,
        origin=(tiny_lm,))).decode(prompt, N)
    assert plain.tokens == scored.tokens
    assert [s.parents.tolist() for s in plain.steps] != [s.parents.tolist()
                                                         for s in scored.steps]


def strategies(lm: NgramLM | None) -> list[DeviceStrategy]:
    tree = StaticTree.from_choices(CANDIDATES)
    out = [DeviceStrategy.rated(tree, 8, tables_of("packaged")),
           DeviceStrategy.lookup(), DeviceStrategy.chain_lookup(3)]
    if lm is not None:
        table = NgramTable.from_lm(lm)
        out.append(DeviceStrategy.rated(tree, 8, tables_of("packaged"), lm=lambda: table,
                                        origin=(lm,)))
    return out


@pytest.mark.parametrize("kind", ["llama", "mistral", "gpt2"])
def test_every_strategy_steps_without_a_host_synchronisation(kind: str,
                                                             tiny_lm: NgramLM) -> None:
    """The rated tree (with and without the LM), lookup, chain + lookup: a whole step (and a
    greedy one after it) under the guard, after a few steps of text."""
    model = static_model(kind, capacity=160)
    prompt = prompt_of(8)
    for strategy in strategies(tiny_lm):
        stepper = decoder(model, strategy)
        stepper.prefill(prompt)
        stepper.step()
        rows = model.attended(len(prompt) + 20)
        with torch.no_grad(), NoHostSync():
            stepper._launch("main", rows)
            stepper._launch("greedy", rows)


def test_refusals() -> None:
    """Settings the device cannot draft are refused by name; a rated tree's candidates must
    fit the heads."""
    tree = StaticTree.from_choices(CANDIDATES)
    with pytest.raises(ModelError, match="N = 80"):
        DeviceStrategy.rated(tree, 80, tables_of("uniform"))
    with pytest.raises(ModelError, match="acceptance tables"):
        DeviceStrategy.rated(tree, 8, None)
    with pytest.raises(ModelError, match="min_match"):
        DeviceStrategy.lookup(min_match=3, max_match=2)
    with pytest.raises(ModelError, match="unknown device strategy"):
        DeviceStrategy("beam", tree)
    model = static_model(capacity=160)
    deep = StaticTree.from_choices([c for c in sort_choices(MC_SIM_7B_63) if len(c) <= 4])
    with pytest.raises(ModelError, match="depth 4"):
        decoder(model, DeviceStrategy.rated(deep, 8, tables_of("uniform")))
    with pytest.raises(ModelError, match="Medusa heads"):
        decoder(static_model(heads="prefix", capacity=160), DeviceStrategy.chain_lookup(3))


@pytest.mark.parametrize("drafter", ["rated", "lookup", "combined"])
def test_bfloat16_device_drafters_are_the_hosts(drafter: str) -> None:
    """bfloat16 on this CPU: the device's tokens are the host path's (the same forwards of the
    same shapes; the rated tree's log-probabilities from bfloat16 logits alike)."""
    model = static_model(dtype=torch.bfloat16, capacity=160)
    spec = {"rated": rated(tables_of("sharp"), 8), "lookup": DraftSpec("lookup"),
            "combined": DraftSpec("combined")}[drafter]
    host, dev = host_and_device(model, prompt_of(4), spec)
    assert dev.drafter.endswith("(device)") and len(dev.tokens) == N
    assert dev.tokens == host.tokens
    same_steps(dev, host)


def test_an_lm_without_its_arpa_file_takes_the_host_path(tiny_lm: NgramLM,
                                                        tmp_path: Path) -> None:
    """A KenLM binary alone cannot become the device's table: decode drafts on the host, with
    the same tokens."""
    binary = tiny_lm.path.with_suffix(".bin")
    lone = tmp_path / "lone.bin"
    lone.write_bytes(binary.read_bytes())
    lm = NgramLM(lone)
    assert lm.arpa_path() is None
    model = static_model(capacity=160)
    prompt = prompt_of(2)
    result = decode(model, prompt, drafter=rated(tables_of("sharp"), 10, NgramPathScorer(lm)),
                    max_new_tokens=16)
    assert not result.drafter.endswith("(device)")
    assert result.tokens == greedy_generate(model, prompt, 16)
