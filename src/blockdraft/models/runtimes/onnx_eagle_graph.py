"""The ONNX graph of an EAGLE draft layer's one call, built from its weights (the layer:
:class:`~blockdraft.models.heads.eagle_layer.EagleLayer`; the session that runs it:
:class:`~.onnx_heads.OrtEagle`).

``draft_layer``: ``T`` new positions of the layer after ``L`` cached ones, what
:meth:`EagleLayer.forward <blockdraft.models.heads.eagle_layer.EagleLayer.forward>` computes
for a batch of one, with the cache as inputs and outputs::

    inputs   features float [1, T, d]      the base's final hidden states (fusion "top"), or
                                           the layer's own output features when it drafts on
             tokens int64 [1, T]           the token after each position (base ids)
             positions int64 [1, T]        their positions (RoPE)
             past_key, past_value float [1, kv_heads, L, head_dim]   the cache (keys after
                                           RoPE; L may be 0: an empty tensor)
             mask float [1, T, L + T]      additive: 0 where a new position attends (a cached
                                           or a new column), MASKED elsewhere
    outputs  logits float [1, T, Vs]       raw, over the layer's shortlist (V without one)
             states float [1, T, d]        the output features (the next draft position's input)
             present_key, present_value float [1, kv_heads, L + T, head_dim]
                                           the cache grown by the call's positions

The base's input embedding (``[V, d]``: the tokens' rows are gathered here) and the shortlist's
rows of its output projection (the head) are constants of the graph, as the layer holds them
(:meth:`EagleLayer.attach <blockdraft.models.heads.eagle_layer.EagleLayer.attach>`). Attention
is plain ONNX operators (grouped: each key/value head serves its group of query heads without
being copied), RoPE's angles computed in float64 from the positions and rounded to float32, as
the layer computes them.

**Precision**: the graph is built in float32 as the layer holds its weights; the heads'
``draft_precision`` (int8 or 4-bit blocks, :mod:`.onnx_quantize`) is applied to it with the
other heads' graphs (:func:`~.onnx_head_graphs.head_graphs`). On the trained SmolLM2
layer (356 answer positions of four chat prompts) the top-1 draft agreed with float32's at
depth 1 at 98.6% (``int8``) and 87.4% (``q4``), at depth 6 of each one's own chain at 89%
and 43%, while the share of drafts equal to the greedy text stayed within 1.5 points of
float32's at every depth and the tokens accepted per call (the chain, EAGLE-2's tree of 32)
moved by at most 2% (its speed: measured by the benchmarks, not here).

Fusion ``"layers"`` (EAGLE-3) reads outputs of the base's decoder layers that the ONNX Runtime
body does not return: refused by name (:func:`eagle_refusal`), as is a base head with a bias
(the layer's head has none).

Public surface:
    GRAPH          the graph's name in the export (``draft_layer``)
    INPUTS, OUTPUTS
    eagle_refusal(model) -> str | None     why this runtime cannot run the model's draft layer
    eagle_graphs(spec, model, precision) -> {GRAPH: onnx.ModelProto}   float32
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from blockdraft.models.errors import ModelError
from blockdraft.models.runtimes.onnx_graph import Builder, GraphSpec, numpy_of

GRAPH = "draft_layer"
"""The graph's name (``draft_layer.onnx`` in the export folder)."""
INPUTS = ("features", "tokens", "positions", "past_key", "past_value", "mask")
OUTPUTS = ("logits", "states", "present_key", "present_value")
def eagle_refusal(model: Any) -> str | None:
    """Why the ONNX Runtime model cannot run ``model``'s draft layer (an
    :class:`~blockdraft.models.hf.HFBlockwiseModel` with
    :class:`~blockdraft.models.hf.eagle_heads.EagleHeads`), or None when it can."""
    config = model.heads.layer.config
    if config.fusion != "top" or config.head_norm:
        return (f"this EAGLE draft layer fuses the base's decoder layers (fusion "
                f"{config.fusion!r}, layers {list(config.fuse_layers)}), whose outputs the "
                "ONNX Runtime body does not return; runtime 'onnxruntime' runs layers of "
                "fusion 'top' (EAGLE-1): load this one with runtime='torch'")
    if getattr(model.lm_head, "bias", None) is not None:
        return ("the base's lm_head has a bias, which this EAGLE draft layer's head does not "
                "add: load the model with runtime='torch'")
    return None


def eagle_graphs(spec: GraphSpec, model: Any, precision: str) -> dict[str, Any]:
    """The draft layer's graph (``{GRAPH: proto}``), float32 whatever the base's ``precision``
    (the heads' ``draft_precision`` is applied by :func:`~.onnx_head_graphs.head_graphs`).

    Raises:
        ModelError: a layer this runtime does not run (:func:`eagle_refusal`), or one without
            the base's tensors.
    """
    problem = eagle_refusal(model)
    if problem is not None:
        raise ModelError(problem)
    layer = model.heads.layer
    if not layer.attached:
        raise ModelError("the EAGLE layer has no base embedding yet: bind it to its base "
                         "(EagleHeads.bind) before exporting it")
    return {GRAPH: _layer_graph(layer)}


def _layer_graph(layer: Any) -> Any:
    """``draft_layer`` (the module docstring) of an attached :class:`EagleLayer` of fusion
    ``"top"``."""
    c = layer.config
    d, heads, kv_heads, hd = c.d_model, c.num_heads, c.num_kv_heads, c.head_dim
    g = Builder("float32")
    f, i64 = g.TensorProto.FLOAT, g.TensorProto.INT64
    g.input("features", f, [1, "T", d])
    g.input("tokens", i64, [1, "T"])
    g.input("positions", i64, [1, "T"])
    kv_shape = [1, kv_heads, "L", hd]
    g.input("past_key", f, kv_shape)
    g.input("past_value", f, kv_shape)
    g.input("mask", f, [1, "T", "S"])

    def norm(x: str, module: Any, name: str) -> str:
        return g.op("SimplifiedLayerNormalization",  # type: ignore[no-any-return]
                    [x, g.const(f"{name}.weight", numpy_of(module.weight))], name, axis=-1,
                    epsilon=float(c.rms_norm_eps))

    def linear(x: str, module: Any, name: str) -> str:
        return g.linear(x, numpy_of(module.weight), None, name)

    embedded = g.op("Gather", [g.const("embed", numpy_of(layer.embed)), "tokens"], "embedded")
    joined = g.op("Concat", [norm("features", layer.feature_norm, "feature_norm"),
                             norm(embedded, layer.embed_norm, "embed_norm")], "joined", axis=-1)
    x = linear(joined, layer.fc, "fc")  # (1, T, d)
    h = norm(x, layer.input_norm, "input_norm")
    cos, sin = _rope(g, layer)
    q = _rotate(g, _split_heads(g, linear(h, layer.q_proj, "q"), heads, hd, "q"), cos, sin, "q")
    k = _rotate(g, _split_heads(g, linear(h, layer.k_proj, "k"), kv_heads, hd, "k"), cos, sin,
                "k")
    v = _split_heads(g, linear(h, layer.v_proj, "v"), kv_heads, hd, "v")
    keys = g.op("Concat", ["past_key", k], "present_key", axis=2)  # (1, Hkv, S, hd)
    values = g.op("Concat", ["past_value", v], "present_value", axis=2)
    attended = _attention(g, q, keys, values, heads, kv_heads, hd)  # (1, T, H hd)
    h2 = g.op("Add", [x, linear(attended, layer.o_proj, "o")], "h2")
    m = norm(h2, layer.post_norm, "post_norm")
    gate = linear(m, layer.gate_proj, "gate")
    silu = g.op("Mul", [gate, g.op("Sigmoid", [gate], "gate.sig")], "gate.silu")
    gated = g.op("Mul", [silu, linear(m, layer.up_proj, "up")], "gated")
    states = g.op("Add", [h2, linear(gated, layer.down_proj, "down")], "states")  # (1, T, d)
    head_in = norm(states, layer.out_norm, "out_norm") if c.head_norm else states
    assert layer.head is not None
    g.op("MatMul", [head_in, g.const("head", numpy_of(layer.head).T)], "logits")
    g.output("logits", f, [1, "T", int(layer.head.shape[0])])
    g.output("states", f, [1, "T", d])
    g.output("present_key", f, [1, kv_heads, "S", hd])
    g.output("present_value", f, [1, kv_heads, "S", hd])
    return g.model(GRAPH)


def _rope(g: Builder, layer: Any) -> tuple[str, str]:
    """``cos``, ``sin`` float ``[1, 1, T, head_dim / 2]`` at ``positions``: the angles in
    float64 (``positions * inv_freq``), their cosine and sine rounded to float32."""
    inv = np.asarray(layer.inv_freq.detach().cpu().numpy(), dtype=np.float64)  # (hd / 2,)
    dbl = g.op("Cast", ["positions"], "rope.positions", to=g.TensorProto.DOUBLE)
    angles = g.op("Mul", [g.op("Unsqueeze", [dbl, g.const("axis_last", np.array([-1], np.int64))],
                               "rope.column"), g.const("rope.inv_freq", inv)], "rope.angles")
    axis1 = g.const("axis1", np.array([1], np.int64))
    out = []
    for fn in ("Cos", "Sin"):
        value = g.op("Cast", [g.op(fn, [angles], f"rope.{fn}64")], f"rope.{fn}32",
                     to=g.TensorProto.FLOAT)  # (1, T, hd / 2)
        out.append(g.op("Unsqueeze", [value, axis1], f"rope.{fn}"))  # (1, 1, T, hd / 2)
    return out[0], out[1]


def _split_heads(g: Builder, x: str, n: int, hd: int, name: str) -> str:
    """``[1, T, n hd] -> [1, n, T, hd]``."""
    shaped = g.op("Reshape", [x, g.const(f"{name}.shape", np.array([0, 0, n, hd], np.int64))],
                  f"{name}.heads")
    return g.op("Transpose", [shaped], f"{name}.bhtd", perm=[0, 2, 1, 3])  # type: ignore[no-any-return]


def _rotate(g: Builder, x: str, cos: str, sin: str, name: str) -> str:
    """RoPE on ``x [1, n, T, hd]`` (pairs ``(j, j + hd / 2)``, GPT-NeoX layout, as
    :func:`~blockdraft.models.blockwise.apply_rope`)."""
    x1, x2 = g.op("Split", [x], [f"{name}.x1", f"{name}.x2"], axis=-1, num_outputs=2)
    first = g.op("Sub", [g.op("Mul", [x1, cos], f"{name}.x1c"),
                         g.op("Mul", [x2, sin], f"{name}.x2s")], f"{name}.r1")
    second = g.op("Add", [g.op("Mul", [x1, sin], f"{name}.x1s"),
                          g.op("Mul", [x2, cos], f"{name}.x2c")], f"{name}.r2")
    return g.op("Concat", [first, second], f"{name}.rot", axis=-1)  # type: ignore[no-any-return]


def _attention(g: Builder, q: str, keys: str, values: str, heads: int, kv_heads: int,
               hd: int) -> str:
    """Grouped attention of ``q [1, H, T, hd]`` over ``keys``, ``values [1, Hkv, S, hd]``
    under the additive ``mask [1, T, S]``: ``[1, T, H hd]`` (query head ``i`` reads key/value
    head ``i // (H / Hkv)``)."""
    group = heads // kv_heads
    grouped = g.op("Reshape", [q, g.const("q.groups", np.array([0, kv_heads, group, -1, hd],
                                                               np.int64))], "q.grouped")
    axis2 = g.const("axis2", np.array([2], np.int64))
    keys_t = g.op("Unsqueeze", [g.op("Transpose", [keys], "k.t", perm=[0, 1, 3, 2]), axis2],
                  "k.t5")  # (1, Hkv, 1, hd, S)
    scores = g.op("Div", [g.op("MatMul", [grouped, keys_t], "att.qk"),
                          g.const("att.scale", np.array(math.sqrt(hd), np.float32))],
                  "att.scores")  # (1, Hkv, G, T, S)
    bias = g.op("Unsqueeze", ["mask", g.const("axes12", np.array([1, 2], np.int64))],
                "att.bias")  # (1, 1, 1, T, S)
    probs = g.op("Softmax", [g.op("Add", [scores, bias], "att.masked")], "att.probs", axis=-1)
    out = g.op("MatMul", [probs, g.op("Unsqueeze", [values, axis2], "v.t5")],
               "att.out")  # (1, Hkv, G, T, hd)
    by_head = g.op("Reshape", [out, g.const("att.heads", np.array([0, heads, -1, hd],
                                                                  np.int64))], "att.bhtd")
    rows = g.op("Transpose", [by_head], "att.bthd", perm=[0, 2, 1, 3])  # (1, T, H, hd)
    return g.op("Reshape", [rows, g.const("att.rows", np.array([0, 0, heads * hd], np.int64))],
                "att.rows_out")  # type: ignore[no-any-return]
