"""An EAGLE draft layer's ONNX graph with quantized weights (runtimes/onnx_quantize: the
heads' ``draft_precision``, int8 or q4 blocks through ONNX Runtime's MatMulNBits).

- The quantized graph's call is close to float32's (logits within a relative error, most rows'
  top-1 the same; not equal: the weights did change) with the cache of the right shapes, and
  every linear layer and the head became a MatMulNBits of the precision's bits.
- Decoding with a quantized layer (the chain, EAGLE-2's tree, the default) is the base's own
  greedy output on ONNX Runtime.
- Each precision is an export of its own, sealed and cached (a second load exports nothing);
  a float32 layer's key is what it was before precisions existed.
- The setting flows from a folder's recipe (``blockdraft_drafting.draft_precision``), an
  argument of ``load_model`` overrides it, and a bad value is refused, naming it and the
  choices; so is one for another runtime (other heads take it: test_onnx_heads_quant).
  Building a quantized graph leaves the root logger as it was.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from hf_testlib import EAGLE_SHORTLIST, V, eagle_layer, eagle_model, tiny_hf_base

pytest.importorskip("transformers")
pytest.importorskip("onnxruntime", reason="the draft layer's ONNX graph needs onnxruntime")

import onnx  # noqa: E402

from blockdraft.drafts import DraftSpec  # noqa: E402
from blockdraft.drafts.grow import ConditionalTreeDrafter  # noqa: E402
from blockdraft.models import ModelError, greedy_generate, load_model  # noqa: E402
from blockdraft.models.heads.draft_precision import DRAFT_PRECISIONS  # noqa: E402
from blockdraft.models.hf import HFBlockwiseModel  # noqa: E402
from blockdraft.models.hf.drafting import CONFIG_KEY, read_drafting  # noqa: E402
from blockdraft.models.hf.eagle_heads import EagleHeads, read_eagle_heads  # noqa: E402
from blockdraft.models.runtimes import on_runtime, onnx_export  # noqa: E402
from blockdraft.models.runtimes.onnx_eagle_graph import GRAPH  # noqa: E402
from blockdraft.models.runtimes.onnx_model import OrtBlockwiseModel  # noqa: E402
from blockdraft.models.runtimes.onnx_quantize import BITS  # noqa: E402
from blockdraft.verify.decode import decode  # noqa: E402

PROMPTS = [[5, 9, 14, 3, 5, 9, 14, 3, 5], [2, 2, 7], [60, 1, 33, 33, 8, 4, 12]]
LINEARS = 9
"""The layer's matmuls on constant weights: fc, q, k, v, o, gate, up, down and the head."""
CLOSE = {"int8": (0.05, 0.85), "q4": (0.3, 0.6)}
"""Per precision: the largest relative error of the logits (Frobenius) and the smallest share of
rows whose top-1 is float32's, on random inputs (measured here: 0.012 and 0.975 in int8, 0.128
and 0.775 in q4)."""


@pytest.fixture(scope="module", autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("eagle-quant-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BLOCKDRAFT_CACHE", str(folder))
        yield folder


@pytest.fixture(autouse=True)
def _no_grad() -> Any:
    with torch.no_grad():
        yield


def _on_ort(model: HFBlockwiseModel, draft_precision: str, **kw: Any) -> OrtBlockwiseModel:
    """``model``'s base and draft layer, the layer in ``draft_precision``, on ONNX Runtime."""
    heads = EagleHeads(model.heads.layer, model.heads.num_heads,
                       draft_precision=draft_precision)
    return on_runtime(HFBlockwiseModel(model.base, heads), "onnxruntime", "float32", threads=1,
                      **kw)


@pytest.fixture(scope="module")
def models() -> dict[str, OrtBlockwiseModel]:
    """The tiny Llama with a random draft layer (depth 4) in every draft precision."""
    model = eagle_model()
    return {p: _on_ort(model, p) for p in DRAFT_PRECISIONS}


def _nbits(folder: Path) -> list[int]:
    """The ``bits`` of every MatMulNBits of an export's draft layer graph."""
    proto = onnx.load(str(folder / f"{GRAPH}.onnx"))
    return [next(a.i for a in node.attribute if a.name == "bits")
            for node in proto.graph.node if node.op_type == "MatMulNBits"]


@pytest.mark.parametrize("precision", ["int8", "q4"])
def test_a_quantized_call_is_close_to_float32s(models: dict[str, Any], precision: str) -> None:
    assert _nbits(models["float32"].export_folder) == []
    assert _nbits(models[precision].export_folder) == [BITS[precision]] * LINEARS
    exact, quant = (models[p].heads_rule.backend for p in ("float32", precision))
    g = torch.Generator().manual_seed(0)
    first = [torch.randn(1, 6, 64, generator=g), torch.randint(0, V, (1, 6), generator=g),
             torch.arange(6)[None]]
    more = [torch.randn(1, 40, 64, generator=g), torch.randint(0, V, (1, 40), generator=g),
            torch.arange(6, 46)[None]]
    want = exact.step(*more, exact.step(*first, None, None).kv, None)
    past = quant.step(*first, None, None)
    got = quant.step(*more, past.kv, None)  # on its own grown cache
    assert got.logits.shape == (1, 40, EAGLE_SHORTLIST.numel())
    assert got.features.shape == (1, 40, 64) and got.logits.dtype == torch.float32
    assert [t.shape for t in got.kv] == [(1, 2, 46, 16)] * 2
    torch.testing.assert_close(got.kv[0][:, :, :6], past.kv[0])  # the cache is kept
    error = float((got.logits - want.logits).norm() / want.logits.norm())
    same = float((got.logits.argmax(-1) == want.logits.argmax(-1)).float().mean())
    bound, share = CLOSE[precision]
    assert 1e-4 < error < bound, error  # close, and not float32's own numbers
    assert same >= share, same


@pytest.mark.parametrize("precision", ["int8", "q4"])
def test_decoding_with_a_quantized_layer_is_the_bases_greedy(models: dict[str, Any],
                                                              precision: str) -> None:
    ort = models[precision]
    g = torch.Generator().manual_seed(5)
    prompts = [*PROMPTS, torch.randint(2, V, (40,), generator=g).tolist() * 3]
    want = [greedy_generate(models["float32"], p, 32) for p in prompts]
    assert [greedy_generate(ort, p, 32) for p in prompts] == want
    for drafter in (DraftSpec("heads"), ConditionalTreeDrafter(k=4, budget=16),
                    DraftSpec("default")):
        outs = decode(ort, prompts, drafter=drafter, max_new_tokens=32)
        assert [o.tokens for o in outs] == want, drafter
    # the default's lookup copies are accepted in runs: the layer read multi-token paths
    assert sum(len(o.tokens) for o in outs) > 1.2 * sum(o.calls for o in outs)


def test_each_draft_precision_is_an_export_of_its_own(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BLOCKDRAFT_CACHE", str(tmp_path / "cache"))
    model = eagle_model(seed=3)
    assert "draft_precision" not in model.heads.extra_repr()  # float32: the key of before
    folders = {}
    for precision in ("float32", "int8", "float32", "int8"):
        lines: list[str] = []
        ort = _on_ort(model, precision, log=lines.append)
        again = precision in folders
        assert (lines == []) == again, (precision, lines)  # exported once, then served
        assert folders.setdefault(precision, ort.export_folder) == ort.export_folder
        assert onnx_export.export_problem(ort.export_folder, deep=True) is None  # sealed
    assert folders["float32"] != folders["int8"]
    assert len(list((tmp_path / "cache" / "onnx").iterdir())) == 2
    graphs = [(folders[p] / f"{GRAPH}.onnx").read_bytes() for p in ("float32", "int8")]
    assert graphs[0] != graphs[1]


def _layer_folder(tmp_path: Path, recipe: dict[str, Any]) -> Path:
    """A draft layer's folder (its base saved beside it) whose recipe is ``recipe``."""
    from blockdraft.models.heads.eagle_files import write_eagle

    base = tiny_hf_base("llama", init=0.1)
    base.save_pretrained(tmp_path / "base")
    folder = write_eagle(eagle_layer("top", 0, base), tmp_path / "eagle",
                         base_model=str(tmp_path / "base"), record={"context": "answer"})
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config[CONFIG_KEY] = recipe
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def test_the_recipe_sets_the_precision_and_load_model_overrides_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BLOCKDRAFT_CACHE", str(tmp_path / "cache"))
    folder = _layer_folder(tmp_path, {"k": 4, "depth": 3, "draft_precision": "q4"})
    recipe = read_drafting(folder)
    assert recipe is not None and recipe.draft_precision == "q4"
    assert "draft_precision" not in recipe.info
    assert read_eagle_heads(folder).draft_precision == "q4"
    assert read_eagle_heads(folder, draft_precision="int8").draft_precision == "int8"
    loaded = load_model(folder, runtime="onnxruntime", threads=1)
    assert _nbits(loaded.export_folder) == [4] * LINEARS
    assert decode(loaded, PROMPTS[0], max_new_tokens=12).tokens == greedy_generate(
        loaded, PROMPTS[0], 12)
    plain = load_model(folder, runtime="onnxruntime", threads=1, draft_precision="float32")
    assert _nbits(plain.export_folder) == [] and plain.export_folder != loaded.export_folder
    on_torch = load_model(folder)  # the recipe's precision is ONNX Runtime's: torch ignores it
    assert decode(on_torch, PROMPTS[0], max_new_tokens=12).tokens == greedy_generate(
        on_torch, PROMPTS[0], 12)


def test_a_bad_draft_precision_is_refused(tmp_path: Path) -> None:
    choices = r"must be one of float32, int8, q4 \(the heads' weights on ONNX Runtime\), got "
    layer = eagle_layer()
    with pytest.raises(ModelError, match=rf"^draft_precision {choices}'int4'$"):
        EagleHeads(layer, 4, draft_precision="int4")
    with pytest.raises(ModelError, match=rf"^draft_precision {choices}'fp16'$"):
        load_model("smollm2", runtime="onnxruntime", draft_precision="fp16")
    folder = _layer_folder(tmp_path, {"draft_precision": "int4"})
    with pytest.raises(ModelError, match=rf"config.json: {CONFIG_KEY}.draft_precision "
                                         rf"{choices}'int4'"):
        read_drafting(folder)
    with pytest.raises(ModelError, match=r"draft_precision='int8' sets the heads' weights on "
                                         r"runtime 'onnxruntime'; runtime 'torch'"):
        load_model("smollm2", draft_precision="int8")


def test_quantizing_leaves_the_root_logger_as_it_was() -> None:
    """ONNX Runtime's quantizer module calls ``logging.basicConfig`` when first imported: a
    fresh process (where it is not imported yet) keeps its root logger bare."""
    script = (
        "import logging, numpy as np\n"
        "from blockdraft.models.runtimes.onnx_quantize import quantized\n"
        "from blockdraft.models.runtimes.onnx_graph import Builder\n"
        "g = Builder('float32'); f = g.TensorProto.FLOAT\n"
        "g.input('x', f, [1, 64])\n"
        "g.op('MatMul', ['x', g.const('w', np.ones((64, 8), np.float32))], 'y')\n"
        "g.output('y', f, [1, 8])\n"
        "proto = quantized(g.model('t'), 'q4')\n"
        "print([n.op_type for n in proto.graph.node], logging.root.handlers,\n"
        "      logging.getLevelName(logging.root.level))\n")
    import blockdraft

    env = {**os.environ, "PYTHONPATH": str(Path(blockdraft.__file__).parents[1])}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, timeout=120, env=env)
    assert out.stdout.strip() == "['MatMulNBits'] [] WARNING" and out.stderr == ""
