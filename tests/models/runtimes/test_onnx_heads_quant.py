"""Medusa and prefix heads in a draft precision on ONNX Runtime (``heads.draft_precision``: int8
or 4-bit weights through ONNX Runtime's MatMulNBits, runtimes/onnx_quantize), as the draft
layer's (test_onnx_eagle_quant).

- Every matmul on a constant 2-D weight of every heads graph (ResBlocks, prefix projections,
  the shortlist projection) became a MatMulNBits of the precision's bits, one for one; the
  base's graphs are untouched; the heads' digest (what a trace records) tells each apart.
- The quantized heads' top-k is close to float32's (most rows' top-1 the same) and not equal.
- Decoding with them (the heads' chain, a tree, the default) is the base's own greedy on ONNX
  Runtime, on a float32 and an int8 base (chains: an int8 base refuses token trees).
- Each precision is an export of its own; a Medusa folder's recipe sets it, ``load_model``
  overrides it, another runtime refuses it, a bad value is refused naming it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from hf_testlib import V, randomize, tiny_hf_base

pytest.importorskip("transformers")
pytest.importorskip("onnxruntime", reason="the heads' ONNX graphs need onnxruntime")

import onnx  # noqa: E402

from blockdraft.drafts import ConfidenceTreeDrafter, DraftSpec  # noqa: E402
from blockdraft.models import ModelError, greedy_generate, load_model  # noqa: E402
from blockdraft.models.hf import HFBlockwiseModel, MedusaHeads  # noqa: E402
from blockdraft.models.hf.drafting import CONFIG_KEY  # noqa: E402
from blockdraft.models.hf.formats import read_heads, write_heads  # noqa: E402
from blockdraft.models.hf.prefix_heads import PrefixHeads  # noqa: E402
from blockdraft.models.runtimes import on_runtime  # noqa: E402
from blockdraft.models.runtimes.onnx_quantize import BITS  # noqa: E402
from blockdraft.verify.decode import decode  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_grad", "private_cache")

PROMPTS = [[5, 9, 14, 3, 5, 9, 14, 3, 5], [2, 2, 7], [60, 1, 33, 33, 8, 4, 12]]
BASE_GRAPHS = ("body", "projection")
CLOSE = {"int8": (0.9, 0.02), "q4": (0.6, 0.15)}
"""Per precision: the smallest share of rows x heads whose top-1 is float32's, and the largest
median gap of the top-1 probability, on these random heads (measured: 0.98-0.99 and 0.005-0.006
in int8; 0.71-0.79 and 0.046-0.073 in q4)."""


def _heads(kind: str, draft_precision: str, seed: int = 1) -> MedusaHeads:
    """3 random heads of ``kind`` (``medusa``, ``prefix``) over a 40-token shortlist."""
    heads: MedusaHeads = randomize(PrefixHeads(64, 3, 1) if kind == "prefix"
                                   else MedusaHeads(64, None, 3, 1), seed, scale=0.3)
    heads.set_shortlist(torch.randperm(V, generator=torch.Generator().manual_seed(seed + 1))
                        [:40], vocab_size=V)
    heads.draft_precision = draft_precision
    return heads


_MODELS: dict[tuple[str, str, str], Any] = {}


def on_ort(kind: str, draft_precision: str, precision: str = "float32") -> Any:
    """The tiny Llama with ``kind`` heads in ``draft_precision`` on ONNX Runtime (kept)."""
    key = (kind, draft_precision, precision)
    if key not in _MODELS:
        model = HFBlockwiseModel(tiny_hf_base("llama", 0, init=0.3),
                                 _heads(kind, draft_precision))
        _MODELS[key] = on_runtime(model, "onnxruntime", precision, threads=1)
    return _MODELS[key]


def _matmuls(folder: Path) -> dict[str, tuple[int, list[int]]]:
    """Per graph of an export: its MatMuls on a constant 2-D weight, and the bits of its
    MatMulNBits."""
    out = {}
    for path in sorted(folder.glob("*.onnx")):
        proto = onnx.load(str(path), load_external_data=False)
        weights = {t.name for t in proto.graph.initializer if len(t.dims) == 2}
        plain = sum(n.op_type == "MatMul" and n.input[1] in weights for n in proto.graph.node)
        bits = [next(a.i for a in n.attribute if a.name == "bits")
                for n in proto.graph.node if n.op_type == "MatMulNBits"]
        out[path.stem] = (plain, bits)
    return out


@pytest.mark.parametrize("kind", ["medusa", "prefix"])
@pytest.mark.parametrize("precision", ["int8", "q4"])
def test_every_heads_matmul_becomes_matmulnbits(kind: str, precision: str) -> None:
    exact = _matmuls(on_ort(kind, "float32").export_folder)
    quant = _matmuls(on_ort(kind, precision).export_folder)
    assert set(exact) == set(quant)
    for name, (plain, bits) in exact.items():
        assert bits == []
        if name in BASE_GRAPHS:
            assert quant[name] == (plain, [])  # the base verifies in its own precision
        else:
            assert plain > 0, name  # every head graph multiplies by a weight
            assert quant[name] == (0, [BITS[precision]] * plain), name
    assert on_ort(kind, precision).export_folder != on_ort(kind, "float32").export_folder
    # other weights draft other lattices: a trace's heads digest tells them apart
    digests = {p: on_ort(kind, p).heads_digest for p in ("float32", "int8", "q4")}
    assert len(set(digests.values())) == 3


@pytest.mark.parametrize("kind", ["medusa", "prefix"])
@pytest.mark.parametrize("precision", ["int8", "q4"])
def test_the_quantized_top_k_is_close_to_float32s(kind: str, precision: str) -> None:
    exact, quant = on_ort(kind, "float32"), on_ort(kind, precision)
    ids = torch.randint(2, V, (1, 40), generator=torch.Generator().manual_seed(3))
    x, _ = exact.hidden(ids)
    want_ids, want_scores = exact.head_topk(x[0], 4)
    got_ids, got_scores = quant.head_topk(x[0], 4)
    assert got_ids.shape == want_ids.shape == (40, 3, 4)
    same = float((got_ids[..., 0] == want_ids[..., 0]).mean())
    gaps = np.abs(np.exp(got_scores[..., 0]) - np.exp(want_scores[..., 0]))  # top-1 probability
    share, bound = CLOSE[precision]
    assert same >= share, same
    assert 0 < float(np.median(gaps)) < bound, gaps  # close, and not float32's own numbers


@pytest.mark.parametrize("kind", ["medusa", "prefix"])
@pytest.mark.parametrize(("precision", "base"), [("q4", "float32"), ("int8", "float32"),
                                                 ("q4", "int8")])
def test_decoding_with_quantized_heads_is_the_bases_greedy(kind: str, precision: str,
                                                           base: str) -> None:
    ort = on_ort(kind, precision, base)
    want = [greedy_generate(on_ort(kind, "float32", base), p, 24) for p in PROMPTS]
    assert [greedy_generate(ort, p, 24) for p in PROMPTS] == want
    trees = [ConfidenceTreeDrafter(k=4, budget=12)] if base == "float32" else []  # int8: chains
    for drafter in (DraftSpec("heads"), *trees, DraftSpec("default")):
        outs = decode(ort, PROMPTS, drafter=drafter, max_new_tokens=24)
        assert [o.tokens for o in outs] == want, drafter


def _medusa_folder(tmp_path: Path, recipe: dict[str, Any]) -> Path:
    """A Medusa heads folder (random heads over a shortlist, base saved beside it) whose
    recipe is ``recipe``."""
    base = tiny_hf_base("llama", init=0.3)
    base.save_pretrained(tmp_path / "base")
    folder = write_heads(_heads("medusa", "float32"), tmp_path / "heads",
                         base_model=str(tmp_path / "base"))
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config[CONFIG_KEY] = recipe
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def test_the_recipe_sets_the_precision_and_load_model_overrides_it(tmp_path: Path) -> None:
    folder = _medusa_folder(tmp_path, {"k": 4, "draft_precision": "q4"})
    heads = read_heads(folder)
    assert heads.draft_precision == "q4" and "draft_precision=q4" in heads.extra_repr()
    loaded = load_model(folder, runtime="onnxruntime", threads=1)
    assert {b for _, bits in _matmuls(loaded.export_folder).values() for b in bits} == {4}
    assert decode(loaded, PROMPTS[0], max_new_tokens=12).tokens == greedy_generate(
        loaded, PROMPTS[0], 12)
    plain = load_model(folder, runtime="onnxruntime", threads=1, draft_precision="float32")
    assert all(bits == [] for _, bits in _matmuls(plain.export_folder).values())
    assert plain.export_folder != loaded.export_folder
    on_torch = load_model(folder)  # the recipe's precision is ONNX Runtime's: torch ignores it
    assert decode(on_torch, PROMPTS[0], max_new_tokens=12).tokens == greedy_generate(
        on_torch, PROMPTS[0], 12)
    with pytest.raises(ModelError, match=r"draft_precision='int8' sets the heads' weights on "
                                         r"runtime 'onnxruntime'; runtime 'torch'"):
        load_model(folder, draft_precision="int8")


def test_a_bad_draft_precision_is_refused(tmp_path: Path) -> None:
    folder = _medusa_folder(tmp_path, {"draft_precision": "int4"})
    with pytest.raises(ModelError, match=rf"config.json: {CONFIG_KEY}.draft_precision must be "
                                         r"one of float32, int8, q4 \(the heads' weights on "
                                         r"ONNX Runtime\), got 'int4'"):
        read_heads(folder)
    heads = _heads("medusa", "fp16")
    with pytest.raises(ModelError, match=r"^draft_precision must be one of float32, int8, q4 "
                                         r"\(the heads' weights on ONNX Runtime\), got 'fp16'$"):
        on_runtime(HFBlockwiseModel(tiny_hf_base("llama"), heads), "onnxruntime", "float32")
