"""An EAGLE draft layer on ONNX Runtime (issue 40, item 3: runtimes/onnx_eagle_graph, the
``draft_layer`` graph; onnx_heads.OrtEagle, its backend under the one EagleRule).

- The graph's call equals the PyTorch layer's (an empty cache, a grown one, a tree mask, the
  default mask), and the step's tree lattice on ONNX Runtime is the PyTorch model's.
- After every decode step the layer's cache equals one uncached call over the committed text.
- Decoding with the chain, EAGLE-2's tree, the lattice tree with lookup copies and the default
  is the ONNX Runtime model's own greedy output (a prompt of 150 tokens among them), and the
  deterministic drafters accept what the PyTorch runtime accepts; in int8 and q4 (float32 layer
  on a quantised body) the chain and the default are lossless too, trees being refused there.
- The export holds the graph, sealed and cached: a second load exports nothing, a damaged graph
  is rebuilt with one warning, another shortlist is another export; a layer folder loads by
  name on this runtime.
- A fused layer (EAGLE-3, fusion "layers") is refused by name before anything is exported.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from hf_testlib import EAGLE_SHORTLIST, CacheChecked, V, eagle_layer, eagle_model, tiny_hf_base

pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

from blockdraft.core.errors import BlockdraftWarning  # noqa: E402
from blockdraft.drafts import DraftSpec  # noqa: E402
from blockdraft.drafts.grow import ConditionalTreeDrafter  # noqa: E402
from blockdraft.drafts.protocol import StepView  # noqa: E402
from blockdraft.models import ModelError, greedy_generate, load_model  # noqa: E402
from blockdraft.models.heads import EagleRule  # noqa: E402
from blockdraft.models.heads.eagle_layer import EagleLayer  # noqa: E402
from blockdraft.models.hf import HFBlockwiseModel, MedusaHeads  # noqa: E402
from blockdraft.models.hf.eagle_heads import EagleHeads  # noqa: E402
from blockdraft.models.runtimes import on_runtime, onnx_export  # noqa: E402
from blockdraft.models.runtimes.onnx_eagle_graph import GRAPH, INPUTS, OUTPUTS  # noqa: E402
from blockdraft.models.runtimes.onnx_heads import OrtEagle  # noqa: E402
from blockdraft.models.runtimes.onnx_model import OrtBlockwiseModel  # noqa: E402
from blockdraft.verify import Verifier  # noqa: E402
from blockdraft.verify.decode import decode  # noqa: E402

STEP_TOL = {"atol": 1e-5, "rtol": 1e-5}
PROMPTS = [[5, 9, 14, 3, 5, 9, 14, 3, 5], [2, 2, 7], [60, 1, 33, 33, 8, 4, 12]]
LOOKUP = ConditionalTreeDrafter(k=3, budget=24, lookup=True, copy_length=6)
"""EAGLE-2's tree with prompt-lookup copies merged (no cost curve: deterministic)."""


@pytest.fixture(scope="module", autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One export cache for the module (its module-scoped models are exported there)."""
    folder = tmp_path_factory.mktemp("eagle-ort-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BLOCKDRAFT_CACHE", str(folder))
        yield folder


@pytest.fixture(autouse=True)
def _no_grad() -> Any:
    with torch.no_grad():
        yield


@pytest.fixture(scope="module")
def pair() -> tuple[HFBlockwiseModel, OrtBlockwiseModel]:
    """The tiny Llama with a random draft layer (depth 4, context "answer"), on PyTorch and on
    ONNX Runtime in float32."""
    model = eagle_model()
    return model, on_runtime(model, "onnxruntime", "float32", threads=1)


def _backend(ort: OrtBlockwiseModel) -> OrtEagle:
    backend = ort.heads_rule.backend
    assert isinstance(ort.heads_rule, EagleRule) and isinstance(backend, OrtEagle)
    return backend


def _close(got: Any, want: Any) -> None:
    """Two EagleStep records equal within float rounding (logits, features, the cache)."""
    for a, b in zip((got.logits, got.features, *got.kv), (want.logits, want.features, *want.kv),
                    strict=True):
        assert a.shape == b.shape and a.dtype == torch.float32
        torch.testing.assert_close(a, b, **STEP_TOL)


def test_the_graphs_call_equals_the_torch_layers(pair: Any) -> None:
    model, ort = pair
    layer, backend = model.heads.layer, _backend(ort)
    import onnx

    proto = onnx.load(str(ort.export_folder / f"{GRAPH}.onnx"))
    assert tuple(i.name for i in proto.graph.input) == INPUTS
    assert tuple(o.name for o in proto.graph.output) == OUTPUTS
    g = torch.Generator().manual_seed(0)
    features = torch.randn(1, 5, 64, generator=g)
    tokens = torch.randint(0, V, (1, 5), generator=g)
    positions = torch.arange(3, 8)[None]
    first = backend.step(features, tokens, positions, None, None)  # an empty cache
    want = layer(features, tokens, positions)
    _close(first, want)
    assert first.logits.shape == (1, 5, EAGLE_SHORTLIST.numel())
    # three tree rows on the grown cache: each its own ancestors (random) and itself
    mask = torch.rand(1, 3, 8, generator=g) > 0.4
    mask[0, torch.arange(3), 5 + torch.arange(3)] = True
    more = (torch.randn(1, 3, 64, generator=g), torch.randint(0, V, (1, 3), generator=g),
            torch.tensor([[8, 9, 9]]))
    for given in (mask, None):  # None: every cached position and the call's causal ones
        got = backend.step(*more, first.kv, given)
        _close(got, layer(*more, want.kv, given))
        torch.testing.assert_close(got.kv[0][:, :, :5], first.kv[0])  # the cache is kept
    with pytest.raises(ModelError, match=r"takes features \[1, T, 64\]"):
        backend.step(features.repeat(2, 1, 1), tokens.repeat(2, 1), positions.repeat(2, 1),
                     None, None)
    with pytest.raises(ModelError, match=r"mask must be bool \[1, T, L \+ T\] = \[1, 3, 8\]"):
        backend.step(*more, first.kv, mask[..., 1:])
    with pytest.raises(ModelError, match=r"token ids must lie in \[0, 96\)"):
        backend.step(features, tokens + V, positions, None, None)


def test_the_steps_tree_lattice_is_the_torch_models(pair: Any) -> None:
    """The one rule over either backend: after a prefill the greedy chain's top-k and every
    node's arcs (ids exactly, log-probabilities within rounding) are PyTorch's; the runtime
    declares a stateful tree lattice, lossless trees in float32, and the heads' digest."""
    model, ort = pair
    caps = ort.capabilities
    assert (caps.heads, caps.h, caps.runtime, caps.tree_lattice, caps.stateful_heads,
            caps.exact_trees) == ("draft-layer", 5, "onnxruntime", True, True, True)
    assert ort.heads_digest == model.heads_digest and ort.conditional_heads
    for prompt in PROMPTS:
        results = [Verifier(m).prefill_heads(prompt, None, 3) for m in (model, ort)]
        (_, want_topk, _, want), (_, got_topk, _, got) = results
        assert got_topk is not None and want_topk is not None
        np.testing.assert_array_equal(got_topk[0], want_topk[0])
        np.testing.assert_allclose(got_topk[1], want_topk[1], rtol=1e-4, atol=1e-4)
        certain = int(ort.heads_rule.state.tree.certain)  # type: ignore[attr-defined]
        frontier = [(certain,)]
        for _ in range(3):
            below = []
            for path in frontier:
                (gi, gs), (wi, ws) = got(path), want(path)
                np.testing.assert_array_equal(gi, wi)
                np.testing.assert_allclose(gs, ws, rtol=1e-4, atol=1e-4)
                below += [(*path, int(t)) for t in gi[:2]]
            frontier = below


def uncached(probe: OrtBlockwiseModel) -> Any:
    """The layer's cache after one uncached call over the committed text on ``probe`` (another
    instance of the same export, whose body features are bit-identical per token)."""

    def want(view: StepView) -> Any:
        text = view.text.tolist()
        start = view.prompt_length - 1  # context "answer": from the prompt's last position
        x, _ = probe.hidden(torch.tensor([text[:-1]]))  # (1, L', d), uncached
        return _backend(probe).step(x[:, start:], torch.tensor([text[start + 1:]]),
                                    torch.arange(start, len(text) - 1)[None], None, None).kv
    return want


def test_the_layers_cache_after_each_step_equals_an_uncached_call(pair: Any) -> None:
    model, ort = pair
    probe = on_runtime(model, "onnxruntime", "float32", threads=1)
    drafter = CacheChecked(LOOKUP, ort.heads_rule, uncached(probe), **STEP_TOL)
    outs = decode(ort, PROMPTS, drafter=drafter, max_new_tokens=40)
    assert [o.tokens for o in outs] == [greedy_generate(ort, p, 40) for p in PROMPTS]
    assert drafter.checked == sum(len(o.steps) for o in outs) > 15
    assert drafter.long_paths > 0  # paths of several nodes were fed: the check has teeth


def test_decoding_is_the_ort_models_greedy_and_accepts_what_torch_accepts(pair: Any) -> None:
    model, ort = pair
    g = torch.Generator().manual_seed(5)
    long = (torch.randint(2, V, (50,), generator=g).tolist() * 3)  # 150 tokens, repeats
    prompts = [*PROMPTS, long]
    for eos in (None, 4):
        want = [greedy_generate(ort, p, 32, eos_id=eos) for p in prompts]
        assert want == [greedy_generate(model, p, 32, eos_id=eos) for p in prompts]
        for drafter in (DraftSpec("heads"), ConditionalTreeDrafter(k=4, budget=16), LOOKUP):
            calls = {}
            for name, m in (("torch", model), ("ort", ort)):
                outs = decode(m, prompts, drafter=drafter, max_new_tokens=32, eos_id=eos)
                assert [o.tokens for o in outs] == want, (name, drafter)
                calls[name] = [o.calls for o in outs]
            assert calls["ort"] == calls["torch"], drafter
        # the default (a measured cost curve: its trees depend on timings, only the output
        # is held)
        assert [decode(ort, p, max_new_tokens=32, eos_id=eos).tokens for p in prompts] == want
    lookup = decode(ort, prompts, drafter=LOOKUP, max_new_tokens=32)
    assert sum(len(o.tokens) for o in lookup) > sum(o.calls for o in lookup)  # accepted runs


def test_quantised_bodies_decode_their_own_greedy_with_the_float32_layer(
        pair: Any, tmp_path: Path) -> None:
    """int8 and q4 bodies with the float32 layer: the chain and the default decode each
    precision's own greedy output (trees are not lossless there: refused, as for every head
    kind)."""
    model, _ = pair
    int8 = on_runtime(model, "onnxruntime", "int8", threads=1)
    assert int8.capabilities.exact_trees is False
    cases: list[tuple[Any, list[list[int]]]] = [(int8, PROMPTS)]
    if _has("gguf"):
        from gguf_testlib import write_block_gguf

        path = write_block_gguf(tmp_path / "tiny.Q4_1.gguf", seed=0)
        base = load_model(path, heads=MedusaHeads(64, None, 1)).base  # the file's Llama
        heads = EagleHeads(eagle_layer("top", 3, base), 3)
        q4 = on_runtime(HFBlockwiseModel(base, heads), "onnxruntime", "q4", threads=1,
                        gguf=path)
        cases.append((q4, [[5, 9, 2, 33, 7, 8, 9, 10, 11, 5, 9, 2, 33], [3, 4]]))
    for m, prompts in cases:
        want = [greedy_generate(m, p, 24) for p in prompts]
        for drafter in (DraftSpec("heads"), DraftSpec("default")):
            outs = decode(m, prompts, drafter=drafter, max_new_tokens=24)
            assert [o.tokens for o in outs] == want, (m.precision, drafter)


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def test_the_export_is_cached_sealed_and_rebuilt_when_its_graph_is_damaged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BLOCKDRAFT_CACHE", str(tmp_path / "cache"))
    model = eagle_model(seed=4)
    lines: list[str] = []
    first = on_runtime(model, "onnxruntime", "float32", threads=1, log=lines.append)
    assert any("exporting" in line for line in lines)
    graph = first.export_folder / f"{GRAPH}.onnx"
    assert graph.is_file() and onnx_export.export_problem(first.export_folder) is None
    prompt, want = PROMPTS[0], decode(first, PROMPTS[0], max_new_tokens=16).tokens
    lines.clear()
    again = on_runtime(model, "onnxruntime", "float32", threads=1, log=lines.append)
    assert lines == [] and again.export_folder == first.export_folder  # not exported again
    # another shortlist with the same weights: another graph, another export
    odd = EagleLayer(model.heads.layer.config, EAGLE_SHORTLIST + 1)
    odd.load_state_dict(model.heads.layer.state_dict())
    other = HFBlockwiseModel(model.base, EagleHeads(odd, 4))
    assert other.heads_digest != model.heads_digest
    assert on_runtime(other, "onnxruntime", "float32").export_folder != first.export_folder
    del first, again
    st = graph.stat()
    data = bytearray(graph.read_bytes())
    data[len(data) // 2:len(data) // 2 + 4096] = bytes(4096)  # damage of the same size
    graph.write_bytes(bytes(data))
    os.utime(graph, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the same time (bit rot)
    with pytest.warns(BlockdraftWarning, match=rf"{GRAPH}.onnx is not the file the ONNX "
                                               "export was built with .*exporting the model "
                                               "to ONNX again"):
        healed = on_runtime(model, "onnxruntime", "float32", threads=1)
    assert onnx_export.export_problem(healed.export_folder, deep=True) is None
    assert decode(healed, prompt, max_new_tokens=16).tokens == want


def test_a_layer_folder_loads_by_name_on_onnx_runtime(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from blockdraft.models.heads.eagle_files import write_eagle

    monkeypatch.setenv("BLOCKDRAFT_CACHE", str(tmp_path / "cache"))
    base = tiny_hf_base("llama", init=0.1)
    base.save_pretrained(tmp_path / "base")
    folder = write_eagle(eagle_layer("top", 0, base), tmp_path / "eagle",
                         base_model=str(tmp_path / "base"), record={"context": "prompt"})
    for loaded in (load_model(tmp_path / "base", heads=folder, runtime="onnxruntime"),
                   load_model(folder, runtime="onnxruntime", threads=1)):
        assert isinstance(loaded, OrtBlockwiseModel) and loaded.h == 7
        assert _backend(loaded).context == "prompt"
        for prompt in PROMPTS:
            assert decode(loaded, prompt, drafter=ConditionalTreeDrafter(k=3, budget=12),
                          max_new_tokens=16).tokens == greedy_generate(loaded, prompt, 16)


def test_a_fused_layer_is_refused_by_name(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BLOCKDRAFT_CACHE", str(tmp_path / "cache"))
    fused = eagle_model("layers", "prompt")
    with pytest.raises(ModelError, match=r"fuses the base's decoder layers \(fusion 'layers', "
                                         r"layers \[1, 2\]\).*load this one with "
                                         "runtime='torch'"):
        on_runtime(fused, "onnxruntime", "float32")
    assert not (tmp_path / "cache" / "onnx").exists()  # refused before anything was built
