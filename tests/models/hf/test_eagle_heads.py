"""An EAGLE draft layer as a Hugging Face model's heads (models/heads/eagle, eagle_tree,
models/hf/eagle_heads; the verifier's accepted path): decoding is greedy's with every drafter
of the pipeline, the layer's KV state after every step equals a recompute over the committed
text (no draft rows left), the step's tree lattice equals brute force and EAGLE-2's tree grown
over it the brute-force best nodes, a depth is one forward, a folder loads by name or path (on
PyTorch and the static runtime) and a layer of another base is refused by name.

(Decoding with a trained layer, and its online chain B against the offline measure, is in
tests/training/heads/test_eagle_decode.py.)"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from blockdraft.drafts import DraftSpec  # noqa: E402
from blockdraft.drafts.grow import ConditionalTreeDrafter  # noqa: E402
from blockdraft.lattice.conditional import TreeLattice  # noqa: E402
from blockdraft.lattice.search import grow  # noqa: E402
from blockdraft.models import ModelError, greedy_generate, load_model  # noqa: E402
from blockdraft.models.heads import EagleRule  # noqa: E402
from blockdraft.models.heads.eagle_files import write_eagle  # noqa: E402
from blockdraft.models.heads.eagle_layer import EagleConfig, EagleLayer  # noqa: E402
from blockdraft.models.hf import HFBlockwiseModel, MedusaHeads  # noqa: E402
from blockdraft.models.hf.eagle_heads import EagleHeads, read_eagle_heads  # noqa: E402
from blockdraft.models.runtimes.static import StaticKVModel  # noqa: E402
from blockdraft.models.topk import topk_logprobs  # noqa: E402
from blockdraft.verify import Verifier  # noqa: E402
from blockdraft.verify.decode import decode  # noqa: E402
from hf_testlib import (  # noqa: E402
    EAGLE_SHORTLIST,
    CacheChecked,
    V,
    eagle_layer,
    eagle_model,
    tiny_hf_base,
)


def base_features(model: HFBlockwiseModel, text: list[int]) -> torch.Tensor:
    """The layer's base features along ``text`` from one uncached forward: ``[T, F]`` (the
    final norm's output, or decoder layers 1 and 2's outputs concatenated), by hooks of their
    own (as training makes them)."""
    from blockdraft.models.hf.eagle_heads import decoder_layers
    from blockdraft.training.heads.generation import final_norm
    from blockdraft.training.heads.labels import forward_states

    layer = model.heads.layer
    modules = ([final_norm(model.base)] if layer.config.fusion == "top"
               else [decoder_layers(model.base)[i - 1] for i in layer.config.fuse_layers])
    return torch.cat(forward_states(model.base, [text], modules), dim=-1)[0]


def recomputed_kv(model: HFBlockwiseModel, text: list[int], prompt_length: int) -> Any:
    """The layer's cache over the committed ``text`` (the certain token last) recomputed in one
    call: every position whose next token is committed, from the prompt's last (``"answer"``)
    or first (``"prompt"``)."""
    start = prompt_length - 1 if model.heads.context == "answer" else 0
    features = base_features(model, text[:-1])[start:]
    tokens = torch.tensor(text[start + 1:])
    positions = torch.arange(start, len(text) - 1)
    with torch.no_grad():
        return model.heads.layer(features[None], tokens[None], positions[None]).kv


@pytest.mark.parametrize(("fusion", "context"), [("top", "answer"), ("layers", "prompt")])
def test_the_layers_state_after_each_step_equals_a_recompute(fusion: str, context: str) -> None:
    """Trees with lookup copies merged accept paths that are not the tree's first nodes (their
    rows gathered): after every verdict the layer's cache holds exactly the committed text's
    positions, as one call over that text computes them."""
    model = eagle_model(fusion, context)
    prompts = [[5, 9, 14, 3, 5, 9, 14, 3, 5], [1, 5, 9], [7, 7, 2]]
    # no cost curve: the trees do not depend on timings
    def want(view: Any) -> Any:
        return recomputed_kv(model, view.text.tolist(), view.prompt_length)

    drafter = CacheChecked(ConditionalTreeDrafter(k=3, budget=24, lookup=True, copy_length=6),
                           model.heads_rule, want, rtol=1e-4, atol=1e-4)
    outs = decode(model, prompts, drafter=drafter, max_new_tokens=40)
    assert [o.tokens for o in outs] == [greedy_generate(model, p, 40) for p in prompts]
    assert drafter.checked == sum(len(o.steps) for o in outs) > 15
    assert drafter.long_paths > 0  # paths of several nodes were fed: the check has teeth


def _specs(lm: Any) -> list[DraftSpec]:
    specs = [DraftSpec("heads"), DraftSpec("heads", k=3, p=3),
             DraftSpec("tree-lattice", k=1, p=1), DraftSpec("tree-lattice", k=3, p=3),
             DraftSpec("tree-lattice", k=3, p=0, budget=12),
             DraftSpec("tree-lattice", k=4, p=0, budget=16, lookup=True),
             DraftSpec("cost-aware", k=4, p=2, lookup=True), DraftSpec("default")]
    if lm is not None:
        specs += [DraftSpec("tree-lattice", k=3, p=0, budget=12, rescorer="given", given=lm,
                            alpha=0.5),
                  DraftSpec("tree", tree="rescored", k=3, budget=10, rescorer="given",
                            given=lm)]
    return specs


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A 3-gram LM over the tiny model's ids, on its greedy continuations."""
    from blockdraft.rescorers.ngram import NgramLM
    from blockdraft.training.ngram import train_ngram

    model = eagle_model()
    seqs = [[*p, *greedy_generate(model, p, 30)] for p in ([1, 5, 9], [7, 7, 2], [40, 3])]
    r = train_ngram(seqs, tmp_path_factory.mktemp("eagle-lm") / "lm3", order=3, binary=False)
    return NgramLM(r.arpa)


@pytest.mark.parametrize("fusion", ["top", "layers"])
def test_decoding_with_every_drafter_is_greedys(fusion: str, tiny_lm: Any) -> None:
    """The chain, p-best paths, EAGLE-2's tree, the cost-aware tree with lookup copies, the
    default (on the model's measured cost curve) and the n-gram rescored trees all give the
    base's greedy tokens (EOS included)."""
    model = eagle_model(fusion, "prompt" if fusion == "layers" else "answer")
    prompts = [[5, 9, 14, 3, 5, 9], [2, 2, 7], [60, 1, 33, 33, 8, 4, 12]]
    for eos in (None, 4):
        want = [greedy_generate(model, p, 24, eos_id=eos) for p in prompts]
        for spec in _specs(tiny_lm):
            got = decode(model, prompts, drafter=spec, max_new_tokens=24, eos_id=eos)
            assert [o.tokens for o in got] == want, spec.label


def test_the_tree_lattice_equals_brute_force_and_a_depth_is_one_forward() -> None:
    """After a prefill, every node's arcs equal the layer's own chain run along that node's
    path from the context (teacher-forced), EAGLE-2's tree grown over them is the brute-force
    ``N`` best nodes, the greedy chain needs one forward per depth, and computing each node
    alone (width 1) gives the same arcs."""
    model = eagle_model()
    layer, rule = model.heads.layer, model.heads_rule
    assert isinstance(rule, EagleRule)
    prompt, k, depth = [5, 9, 14, 3, 5, 9], 3, model.heads.num_heads
    verifier = Verifier(model)
    logits, topk, _, expand = verifier.prefill_heads(prompt, None, k)
    certain = int(logits[0].argmax())
    tree = rule.state.tree
    assert tree is not None and tree.forwards == depth - 1  # the chain, a depth a forward
    assert tree.computed > depth  # each forward computed its depth's frontier too
    features = base_features(model, prompt)[-1:]  # context "answer": the last position
    tokens = torch.tensor([[certain]])
    position = torch.tensor([[len(prompt) - 1]])

    def brute(path: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        chain = layer.draft_chain(features[None], tokens, position, len(path),
                                  forced=torch.tensor([path[1:]], dtype=torch.int64))
        ids, scores = topk_logprobs(chain.logits[0, -1][None], k, EAGLE_SHORTLIST)
        return ids[0], scores[0]

    nodes: dict[tuple[int, ...], float] = {(certain,): 0.0}
    frontier = [(certain,)]
    for _ in range(depth):
        below = []
        for path in frontier:
            ids, scores = brute(path)
            got = expand(path)
            assert got[0].tolist() == ids.tolist(), path
            np.testing.assert_allclose(got[1], scores, rtol=1e-5, atol=1e-5)
            for token, score in zip(ids.tolist(), scores.tolist(), strict=True):
                nodes[(*path, token)] = nodes[path] + score
                below.append((*path, token))
        frontier = below
    # the chain's top-k is the tree along each node's best arc
    path = (certain,)
    for row in range(depth):
        assert topk is not None and topk[0][row].tolist() == expand(path)[0].tolist()
        path = (*path, int(topk[0][row][0]))
    for budget in (5, 12, 30):
        grown = grow(TreeLattice(1 + depth, expand), budget)
        paths = {tuple(int(t) for t in grown.tokens[grown.path(u)])
                 for u in range(grown.num_nodes)}
        best = sorted(nodes, key=lambda p: -nodes[p])[:budget]
        assert paths == set(best)
    rule.width = 1  # one node a forward
    _, _, _, alone = verifier.prefill_heads(prompt, None, k)
    for path in itertools.islice(nodes, 40):
        if len(path) <= depth:
            assert alone(path)[0].tolist() == expand(path)[0].tolist()
            np.testing.assert_allclose(alone(path)[1], expand(path)[1], rtol=1e-5, atol=1e-5)


def test_heads_at_other_states_are_a_stand_in_and_several_positions_are_refused() -> None:
    """``head_topk`` at the state the last accepted path ended on drafts from the layer's
    cache; at any other single state (a cost curve's zeros) from that state alone; at several
    positions at once (a trace's heads) it is refused by name."""
    model = eagle_model()
    verifier = Verifier(model)
    _, topk, _, _ = verifier.prefill_heads([5, 9, 14, 3, 5, 9], None, 3)
    anchor = model.heads_rule.state.anchor  # type: ignore[attr-defined]
    again = model.head_topk(anchor[None], 3)
    assert topk is not None and again[0][0].tolist() == topk[0].tolist()
    other = model.head_topk(torch.zeros(1, 64), 3)
    assert other[0].shape == (1, model.h - 1, 3)
    assert model.project(model.head_states(anchor)).shape == (model.h, V)
    with pytest.raises(ModelError, match="after the committed text only"):
        model.head_topk(torch.zeros(2, 64), 3)
    with pytest.raises(ModelError, match="after the committed text only"):
        model.heads_logits(torch.tensor([[5, 9, 14]]))


def test_a_layer_folder_loads_by_path_on_torch_and_static_and_another_base_is_refused(
        tmp_path: Path) -> None:
    base = tiny_hf_base("llama", init=0.1)
    base.save_pretrained(tmp_path / "base")
    layer = eagle_layer("top", 0, base)
    folder = write_eagle(layer, tmp_path / "eagle", base_model=str(tmp_path / "base"),
                         record={"context": "prompt"})
    for model in (load_model(tmp_path / "base", heads=folder), load_model(folder)):
        assert isinstance(model, HFBlockwiseModel) and isinstance(model.heads, EagleHeads)
        caps = model.capabilities
        assert (caps.heads, caps.h, caps.tree_lattice, caps.stateful_heads) == (
            "draft-layer", 7, True, True)
        assert model.heads.context == "prompt"
        prompt = [5, 9, 14, 3, 5, 9]
        assert decode(model, prompt, drafter=DraftSpec("tree-lattice", k=2, p=0, budget=8),
                      max_new_tokens=16).tokens == greedy_generate(model, prompt, 16)
    assert read_eagle_heads(folder, depth=3).num_heads == 3
    # ONNX Runtime (tests/models/runtimes/test_onnx_eagle.py) and the static cache run it
    # (tests/models/runtimes/test_static_eagle.py)
    static = load_model(folder, runtime="static")
    assert isinstance(static, StaticKVModel) and static.h == 7
    assert static.capabilities.stateful_heads and static.heads_rule.backend.context == "prompt"
    assert decode(static, prompt, drafter=DraftSpec("tree-lattice", k=2, p=0, budget=8),
                  max_new_tokens=16).tokens == greedy_generate(static, prompt, 16)
    with pytest.raises(ModelError, match="EAGLE draft layer's folder"):
        load_model(folder, heads=folder)
    # a layer made for another base: the differing size is named
    other = EagleConfig.from_base(tiny_hf_base("llama").config)
    wider = EagleLayer(EagleConfig(**{**other.to_dict(), "intermediate_size": 128,
                                      "fuse_layers": ()}))
    write_eagle(wider, tmp_path / "wide", base_model="elsewhere")
    with pytest.raises(ModelError, match="made for 'elsewhere'.*intermediate_size is 128, "
                                         "the base's is 96"):
        load_model(tmp_path / "base", heads=tmp_path / "wide")
    with pytest.raises(ModelError, match="depth must be an integer in"):
        EagleHeads(layer, depth=0)


def test_heads_without_a_state_along_the_text_refuse_a_path() -> None:
    base = tiny_hf_base("llama")
    medusa = HFBlockwiseModel(base, MedusaHeads(64, None, 2))
    assert not medusa.capabilities.stateful_heads
    with pytest.raises(ModelError, match="keep no state along the text"):
        medusa.accept_path([0], [3], 0, True)
    model = eagle_model()
    with pytest.raises(ModelError, match="call the model's hidden"):
        model.accept_path([0], [3], 0, True)
    model.hidden(torch.tensor([[5, 9, 14]]))
    model.accept_path([0, 1, 2], [9, 14, 3], 0, True)
    model.hidden(torch.tensor([[3, 7]]), None)
    with pytest.raises(ModelError, match="starts at position 7"):
        model.accept_path([0], [7], 7)
