"""The ONNX graphs of the rescoring LM: one incremental forward over a fixed-size key/value
buffer (the step graph), and the vocabulary projection (the head graph).

Public surface:
    step_graph(model, opset, stamp) -> onnx.ModelProto    the step graph below, checked
    head_graph(output_embedding) -> bytes                 ``hidden [N, d] -> logits [N, V]``
    rope_rows(model) -> (cos_rows, sin_rows)              the rotary tables the graph gathers
    GRAPH_FORMAT, CONFIG_KEYS, FINGERPRINT_KEY            the metadata stamped into a step graph

:mod:`.onnx_export` writes the step graph to a file (reusing an up-to-date one);
:mod:`.onnx_runtime` runs it under ONNX Runtime.

The step graph (one call = ``T`` new tokens on ``B`` rows after ``T_past`` cached positions):

    inputs   input_ids       int64   [B, T]
             positions       int64   [T]               position ids of the new tokens
             attn_bias       float32 [T, P + T]        0 = may attend, -inf = may not
             split_sizes     int64   [2]               (P, T)
             past_keys_i     float32 [B, n_head, head_dim, P]   layer i's keys, transposed
             past_values_i   float32 [B, n_head, P, head_dim]   layer i's values  (i < L)
    outputs  hidden          float32 [B, T, d]         final (normed) hidden states
             new_keys_i      float32 [1, B, n_head, head_dim, T]   the new positions' keys
             new_values_i    float32 [1, B, n_head, T, head_dim]

``P`` is the capacity of a preallocated buffer, not the cache's length: ``attn_bias`` masks the
buffer's positions ``>= T_past`` (and the new tokens' future), so the cache never has to be
sliced or concatenated (see :class:`~.onnx_runtime.OnnxStepRunner`). Keys are stored after the
rotary embedding, as in :class:`~blockdraft.models.KVCache`. The graph carries no padding:
every cached position is a real token (the rescorer never left-pads). The metadata holds the
export's stamp (:data:`FINGERPRINT_KEY`), :data:`GRAPH_FORMAT` and the model's
:data:`CONFIG_KEYS`, which the runner reads back.

Why a graph built here and not traced from torch: a rescoring step is ``h - 1`` single-token
forwards, where a traced graph (~100 nodes of shape arithmetic, a growing cache concatenated and
copied in and out every call) spends most of its time in per-node and copying overhead. This
graph is ~35 nodes for one layer: the rotary embedding is ``x * cos_rows + swap(x) *
sin_rows`` on the fused qkv projection (tables gathered by position, the attention scale folded
into q's rows), attention runs over the buffer and the new tokens with one softmax, and there
is no vocabulary projection: the rescorer needs only a few arcs' logits per slot and the
log-softmax normalisers, which it batches (:meth:`~.onnx_runtime.OnnxStepRunner.logits`, a
separate one-node session: :func:`head_graph`). The weights are the model's own (read from its
``state_dict``); the tests check the graph against ``RescorerLM.hidden`` position by position
and cache entry by cache entry. onnx imports lazily.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from blockdraft.core.extras import install_hint
from blockdraft.models.blockwise import RescorerLM
from blockdraft.rescorers.base import RescorerError

DEFAULT_OPSET = 18  # onnxruntime >= 1.17 runs it; its erf GELU is fused into one Gelu kernel
MIN_OPSET = 18  # Split(num_outputs) and LayerNormalization; opset >= 20 writes a Gelu node
GRAPH_FORMAT = "kvbuffer-1"
"""Version of the step graph's interface, stamped into every export (a change re-exports)."""

FINGERPRINT_KEY = "blockdraft_fingerprint"
"""Metadata key of the export's stamp (weights' fingerprint, opset, graph format)."""

CONFIG_KEYS = ("n_layer", "n_head", "head_dim", "d_model", "vocab_size", "max_seq_len")
"""Model config fields stamped into the step graph's metadata (the runner's shapes)."""

INSTALL_HINT = install_hint("onnx")


def rope_rows(model: RescorerLM) -> tuple[np.ndarray, np.ndarray]:
    """The rotary embedding as multipliers of ``qkv`` and of its half-swapped copy.

    Returns float32 ``(cos_rows, sin_rows)``, each ``[max_seq_len, 3, 1, 2, head_dim / 2]``
    (position; q, k, v; broadcast over heads; the two halves of a head): with ``x = [x1, x2]``
    and ``swap(x) = [x2, x1]``, :func:`~blockdraft.models.blockwise.apply_rope` is
    ``x * [cos, cos] + swap(x) * [-sin, sin]``. The q rows carry the attention scale
    ``1/sqrt(head_dim)``; the v rows are ``1`` and ``0`` (v passes unchanged).
    """
    cos = model.rope_cos.detach().cpu().numpy()  # (S, hs/2)
    sin = model.rope_sin.detach().cpu().numpy()  # (S, hs/2)
    scale = np.float32(1.0 / math.sqrt(model.config.head_dim))
    c = np.stack((cos, cos), axis=1)  # (S, 2, hs/2)
    s = np.stack((-sin, sin), axis=1)  # (S, 2, hs/2)
    cos_rows = np.stack((c * scale, c, np.ones_like(c)), axis=1)[:, :, None]  # (S, 3, 1, 2, hs/2)
    sin_rows = np.stack((s * scale, s, np.zeros_like(s)), axis=1)[:, :, None]
    return (np.ascontiguousarray(cos_rows, dtype=np.float32),
            np.ascontiguousarray(sin_rows, dtype=np.float32))


def step_graph(model: RescorerLM, opset: int, stamp: str) -> Any:
    """The step graph of the module docstring as an ``onnx.ModelProto``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    cfg = model.config
    d, nh, hs, n_layer = cfg.d_model, cfg.n_head, cfg.head_dim, cfg.n_layer
    weights = {k: v.detach().to("cpu", torch.float32).numpy() for k, v in
               model.state_dict().items()}
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and module.bias is not None \
                and not name.startswith("extra_heads"):
            raise RescorerError(f"the ONNX export has no biases for linear layers; {name} has one")
    inits: list[Any] = []
    nodes: list[Any] = []

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def node(op: str, inputs: list[str], outputs: list[str], **attrs: Any) -> str:
        nodes.append(helper.make_node(op, inputs, outputs, **attrs))
        return outputs[0]

    def layer_norm(x: str, prefix: str, out: str) -> str:
        norm = model.get_submodule(prefix)
        assert isinstance(norm, torch.nn.LayerNorm)
        eps = float(norm.eps)
        scale = const(f"{prefix}.weight", weights[f"{prefix}.weight"])
        shift = const(f"{prefix}.bias", weights[f"{prefix}.bias"])
        return node("LayerNormalization", [x, scale, shift], [out], axis=-1, epsilon=eps)

    def gelu(x: str, out: str) -> str:  # exact (erf) GELU, as F.gelu
        if opset >= 20:
            return node("Gelu", [x], [out])
        y = node("Div", [x, "c.sqrt2"], [f"{out}.div"])
        y = node("Erf", [y], [f"{out}.erf"])
        y = node("Add", [y, "c.one"], [f"{out}.add"])
        y = node("Mul", [x, y], [f"{out}.mul"])
        return node("Mul", [y, "c.half"], [out])

    cos_rows, sin_rows = rope_rows(model)
    const("c.cos", cos_rows)  # (S, 3, 1, 2, hs/2)
    const("c.sin", sin_rows)
    const("c.shape_halves", np.array([0, 0, 3, nh, 2, hs // 2], np.int64))
    const("c.swap", np.array([1, 0], np.int64))
    const("c.shape_heads", np.array([0, 0, 3, nh, hs], np.int64))
    const("c.shape_d", np.array([0, 0, d], np.int64))
    const("c.axis0", np.array([0], np.int64))
    if opset < 20:
        const("c.sqrt2", np.array(math.sqrt(2.0), np.float32))
        const("c.one", np.array(1.0, np.float32))
        const("c.half", np.array(0.5, np.float32))

    cos = node("Gather", ["c.cos", "positions"], ["cos"], axis=0)  # (T, 3, 1, 2, hs/2)
    sin = node("Gather", ["c.sin", "positions"], ["sin"], axis=0)
    x = node("Gather", [const("wte", weights["transformer.wte.weight"]), "input_ids"], ["x"],
             axis=0)  # (B, T, d)
    for i in range(n_layer):
        p = f"transformer.blocks.{i}"
        a = layer_norm(x, f"{p}.ln_1", f"l{i}.ln1")  # (B, T, d)
        w_qkv = weights[f"{p}.attn.qkv.weight"].T  # (d, 3d)
        a = node("MatMul", [a, const(f"l{i}.w_qkv", w_qkv)], [f"l{i}.qkv"])  # (B, T, 3d)
        a = node("Reshape", [a, "c.shape_halves"], [f"l{i}.halves"])  # (B, T, 3, nh, 2, hs/2)
        swapped = node("Gather", [a, "c.swap"], [f"l{i}.swapped"], axis=4)
        a = node("Mul", [a, cos], [f"l{i}.xcos"])
        swapped = node("Mul", [swapped, sin], [f"l{i}.xsin"])
        a = node("Add", [a, swapped], [f"l{i}.rope"])  # rotary q (scaled) and k, v unchanged
        a = node("Reshape", [a, "c.shape_heads"], [f"l{i}.qkvh"])  # (B, T, 3, nh, hs)
        a = node("Transpose", [a], [f"l{i}.qkvt"], perm=[2, 0, 3, 1, 4])  # (3, B, nh, T, hs)
        q, k, v = f"l{i}.q", f"l{i}.k", f"new_values_{i}"
        nodes.append(helper.make_node("Split", [a], [q, k, v], axis=0, num_outputs=3))
        # q, k, v: (1, B, nh, T, hs)
        kt = node("Transpose", [k], [f"new_keys_{i}"], perm=[0, 1, 2, 4, 3])  # (1, B, nh, hs, T)
        s_past = node("MatMul", [q, f"past_keys_{i}"], [f"l{i}.s_past"])  # (1, B, nh, T, P)
        s_new = node("MatMul", [q, kt], [f"l{i}.s_new"])  # (1, B, nh, T, T)
        s = node("Concat", [s_past, s_new], [f"l{i}.s"], axis=-1)  # (1, B, nh, T, P + T)
        s = node("Add", [s, "attn_bias"], [f"l{i}.sb"])
        s = node("Softmax", [s], [f"l{i}.pr"], axis=-1)
        pr_past, pr_new = f"l{i}.pr_past", f"l{i}.pr_new"
        nodes.append(helper.make_node("Split", [s, "split_sizes"], [pr_past, pr_new], axis=-1))
        y_past = node("MatMul", [pr_past, f"past_values_{i}"], [f"l{i}.y_past"])  # (1,B,nh,T,hs)
        y_new = node("MatMul", [pr_new, v], [f"l{i}.y_new"])  # (1, B, nh, T, hs)
        y = node("Add", [y_past, y_new], [f"l{i}.y"])
        y = node("Transpose", [y], [f"l{i}.yt"], perm=[0, 1, 3, 2, 4])  # (1, B, T, nh, hs)
        y = node("Squeeze", [y, "c.axis0"], [f"l{i}.ys"])  # (B, T, nh, hs)
        y = node("Reshape", [y, "c.shape_d"], [f"l{i}.yd"])  # (B, T, d)
        y = node("MatMul", [y, const(f"l{i}.wo", weights[f"{p}.attn.proj.weight"].T)],
                 [f"l{i}.attn"])  # (B, T, d)
        x = node("Add", [x, y], [f"l{i}.x_attn"])
        m = layer_norm(x, f"{p}.ln_2", f"l{i}.ln2")
        m = node("MatMul", [m, const(f"l{i}.wfc", weights[f"{p}.mlp.fc.weight"].T)],
                 [f"l{i}.fc"])  # (B, T, d_ff)
        m = gelu(m, f"l{i}.gelu")
        m = node("MatMul", [m, const(f"l{i}.wpr", weights[f"{p}.mlp.proj.weight"].T)],
                 [f"l{i}.mlp"])  # (B, T, d)
        x = node("Add", [x, m], [f"l{i}.x"])
    layer_norm(x, "transformer.ln_f", "hidden")  # (B, T, d)

    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    inputs = [helper.make_tensor_value_info("input_ids", i64, ["B", "T"]),
              helper.make_tensor_value_info("positions", i64, ["T"]),
              helper.make_tensor_value_info("attn_bias", f32, ["T", "P_plus_T"]),
              helper.make_tensor_value_info("split_sizes", i64, [2])]
    outputs = [helper.make_tensor_value_info("hidden", f32, ["B", "T", d])]
    for i in range(n_layer):
        inputs += [helper.make_tensor_value_info(f"past_keys_{i}", f32, ["B", nh, hs, "P"]),
                   helper.make_tensor_value_info(f"past_values_{i}", f32, ["B", nh, "P", hs])]
        outputs += [helper.make_tensor_value_info(f"new_keys_{i}", f32, [1, "B", nh, hs, "T"]),
                    helper.make_tensor_value_info(f"new_values_{i}", f32, [1, "B", nh, "T", hs])]
    graph = helper.make_graph(nodes, "rescorer_step", inputs, outputs, inits)
    opsets = [helper.make_opsetid("", opset)]
    proto = helper.make_model(graph, opset_imports=opsets, producer_name="blockdraft",
                              ir_version=helper.find_min_ir_version_for(opsets))
    meta = {FINGERPRINT_KEY: stamp, "graph_format": GRAPH_FORMAT,
            **{key: str(getattr(cfg, key)) for key in CONFIG_KEYS}}
    helper.set_model_props(proto, meta)
    onnx.checker.check_model(proto)
    return proto


def head_graph(output_embedding: np.ndarray) -> bytes:
    """``hidden [N, d] -> logits [N, V]`` (``logits = hidden @ E.T``), serialized."""
    from onnx import TensorProto, helper, numpy_helper

    e_t = np.ascontiguousarray(np.asarray(output_embedding, dtype=np.float32).T)  # (d, V)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["hidden", "output_embedding_t"], ["logits"])],
        "rescorer_head",
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["N", e_t.shape[0]])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", e_t.shape[1]])],
        [numpy_helper.from_array(e_t, "output_embedding_t")],
    )
    opsets = [helper.make_opsetid("", DEFAULT_OPSET)]
    proto = helper.make_model(graph, opset_imports=opsets,
                              ir_version=helper.find_min_ir_version_for(opsets))
    return proto.SerializeToString()  # type: ignore[no-any-return]
