"""The ONNX graphs of a Hugging Face model with Medusa heads, built from its weights.

Three graphs, each run by its own ONNX Runtime session (:mod:`.onnx_model`):

``body``: the decoder, ``T`` new tokens on a key/value cache held in buffers the caller owns::

    inputs   input_ids int64 [T], position_ids int64 [1, T],
             attention_bias float [1, 1, T, S]   (S = P + T: 0 where a token attends, the
                                                  float32 minimum elsewhere)
             seqlens_k int32 [1] (= S - 1), total_sequence_length int32 [] (= S),
             past_key.<i>, past_value.<i> float [1, n_kv, C, head_dim] (C >= S: the buffers)
    outputs  hidden float [T, d]                  (the final norm's output)
             present_key.<i>, present_value.<i>  (bound to the same buffers: the new keys and
                                                  values land in rows P .. S - 1)

Attention is ONNX Runtime's ``GroupQueryAttention`` with the past and present buffers shared,
so a forward copies nothing of the cache; rows are addressed by ``seqlens_k``, positions (the
rotary embedding, computed inside the op from ``position_ids``) need not be contiguous, and
``attention_bias`` carries a token tree's ancestor mask (and a sliding window). The op's own
causal mask is by row, which a tree in topological order never contradicts.

``resblocks``: ``x [M, d] -> states [M, h - 1, d]``, every Medusa head's ResBlocks.
``projection``: ``states [M, d] -> logits [M, V]``, the base ``lm_head`` (and, for heads with
their own projections, ``own [M, h - 1, d] -> [M, h - 1, V]``).
``drafts`` (heads that share ``lm_head``): the next step's lattice slots in one run::

    inputs   x float [M, d] (final hidden states), k int64 [1]
    outputs  ids int64 [M, h - 1, k]    each Medusa head's top k, (logit desc, id asc)
             scores float [M, h - 1, k] their log_softmax over the head's vocabulary

the ResBlocks, the projection onto the heads' shortlist (its ``[Vs, d]`` rows of ``lm_head``;
the whole vocabulary without one), ``TopK`` (ties to the lower column: the shortlist ascends,
so to the smaller id), ``ReduceLogSumExp`` and the column -> token id ``Gather``.

Prefix-conditioned heads (:mod:`blockdraft.models.hf.prefix_heads`) have no ``resblocks``: their
``drafts`` is the greedy chain (inputs ``x``, ``e0 [M, d]`` the embedding of the base's greedy
token, ``k``; head ``j`` reads the embedding of head ``j - 1``'s argmax; it also outputs each
head's ``states``), and ``expand{j}`` scores nodes of their tree lattice by head ``j``, a node a
row (inputs ``x``, ``e`` the embedding of the node's last token, ``k`` -> ``ids``/``scores
[M, k]``).

Families: Llama-style decoders (``llama``, ``mistral``, ``qwen2``: RMSNorm, rotary, grouped
query attention, gated SiLU MLP, optional q/k/v biases) and ``gpt2`` (LayerNorm, learned
positions, fused q/k/v, GELU MLP). Anything else is refused with the reason.

Precisions: ``float32`` (every weight as it is: ORT pre-packs constant MatMul weights once), and
``int8``: every decoder and head matmul in 8-bit integers, weights per output channel, the
activations per ROW (each token's own scale ``max |x_row| / 127``) through ``MatMulInteger``, so
a token's numbers never depend on the other tokens of its forward (chunk-invariant); the
vocabulary projections stay float32 (argmax quality). Never per-tensor activation scales.

Public surface:
    FAMILIES, PRECISIONS
    GraphSpec        frozen: the sizes the runtime needs (layers, heads, buffers, ...)
    graph_spec(model) -> GraphSpec         or ModelError naming what is unsupported
    build_graphs(model, precision) -> dict[name, onnx.ModelProto]   "body", "resblocks",
                                        "projection", "drafts" or "own" (prefix heads: "body",
                                        "projection", "drafts", "expand0".."expand{n-1}")
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from blockdraft.models.errors import ModelError

FAMILIES = {"llama": "llama", "mistral": "llama", "qwen2": "llama", "gpt2": "gpt2"}
"""``config.model_type`` -> the graph family that builds it."""
PRECISIONS = ("float32", "int8")
GRAPH_VERSION = 3
"""The graphs' format; a change re-exports every cached model."""
OPSET = 21
"""The default-domain opset (ONNX Runtime >= 1.17 runs it); contrib ops are com.microsoft v1."""
MASKED = float(np.finfo(np.float32).min)
"""The attention bias of a key a token must not attend to."""
EXTRA_ROWS = 1024
"""Rows a forward may hold beyond the model's context: a token tree near the end of the context
sits at rows up to ``P + N`` while its positions stay below the context (GroupQueryAttention
wants its rotary table to cover the rows)."""


@dataclass(frozen=True)
class GraphSpec:
    """What the runtime needs to know about the graphs of one model.

    Attributes:
        family: ``"llama"`` or ``"gpt2"``.
        n_layer: decoder layers (each has a key and a value buffer).
        n_head: query heads; ``n_kv_head``: key/value heads; ``head_dim``: their size.
        d_model: ``d``; ``vocab_size``: ``V``; ``h``: heads with the base (1 + Medusa heads).
        max_positions: positions the rotary / position table covers (the model's context).
        sliding_window: every layer's attention window, or None (full attention).
        own_projection: the Medusa heads project with their own matrices.
        prefix_heads: the heads read the token before their target (prefix-conditioned,
            :mod:`blockdraft.models.hf.prefix_heads`): ``drafts`` is their greedy chain and
            ``expand{j}`` head ``j``'s expansion of a node of their tree lattice; there is no
            ``resblocks``.
    """

    family: str
    n_layer: int
    n_head: int
    n_kv_head: int
    head_dim: int
    d_model: int
    vocab_size: int
    h: int
    max_positions: int
    sliding_window: int | None
    own_projection: bool
    prefix_heads: bool = False

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (the export's metadata)."""
        return dataclasses.asdict(self)


def graph_spec(model: Any) -> GraphSpec:
    """The :class:`GraphSpec` of an :class:`~blockdraft.models.hf.HFBlockwiseModel`.

    Raises:
        ModelError: an architecture this runtime does not build (the message says which ones it
            does), or a feature of a supported one it does not (partial rotary, attention scaled
            by layer, ...).
    """
    base = model.base
    config = base.config
    kind = str(getattr(config, "model_type", ""))
    family = FAMILIES.get(kind)
    if family is None:
        raise ModelError(
            f"the ONNX Runtime model builds {', '.join(sorted(FAMILIES))} decoders; "
            f"{type(base).__name__} (model_type {kind!r}) is not one: use runtime='torch'"
        )
    window = getattr(config, "sliding_window", None)
    use_window = getattr(config, "use_sliding_window", True)
    if family == "llama":
        n_head = int(config.num_attention_heads)
        n_kv = int(getattr(config, "num_key_value_heads", None) or n_head)
        head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // n_head)
        act = str(getattr(config, "hidden_act", "silu"))
        if act != "silu":
            raise ModelError(f"the ONNX Runtime model builds SiLU MLPs; this one has {act!r}")
        rope = getattr(config, "rope_parameters", None) or {}
        factor = float(rope.get("partial_rotary_factor", 1.0) if isinstance(rope, dict) else 1.0)
        if factor != 1.0:
            raise ModelError(f"partial rotary embeddings (factor {factor}) are not built; use "
                             "runtime='torch'")
        positions = int(config.max_position_embeddings)
    else:
        n_head = n_kv = int(config.n_head)
        head_dim = int(config.n_embd) // n_head
        if getattr(config, "scale_attn_by_inverse_layer_idx", False):
            raise ModelError("GPT-2 attention scaled by the inverse layer index is not built; "
                             "use runtime='torch'")
        if not getattr(config, "scale_attn_weights", True):
            raise ModelError("GPT-2 attention without the 1/sqrt(head_dim) scale is not built")
        act = str(getattr(config, "activation_function", "gelu_new"))
        if act not in _GELU:
            raise ModelError(f"GPT-2 with activation {act!r} is not built; use runtime='torch'")
        positions = int(config.n_positions)
    if head_dim % 16:
        raise ModelError(
            f"ONNX Runtime's GroupQueryAttention needs a head size that is a multiple of 16; "
            f"{type(base).__name__} has {head_dim}: use runtime='torch'")
    return GraphSpec(
        family=family,
        n_layer=int(model.config.n_layer),
        n_head=n_head,
        n_kv_head=n_kv,
        head_dim=head_dim,
        d_model=int(model.config.d_model),
        vocab_size=int(model.config.vocab_size),
        h=int(model.h),
        max_positions=positions,
        sliding_window=int(window) if isinstance(window, int) and window > 0 and use_window
        else None,
        own_projection=bool(model.heads.own_projection),
        prefix_heads=bool(getattr(model, "conditional_heads", False)),
    )


_GELU = {"gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "gelu": "none"}
"""GPT-2 activations and ONNX ``Gelu``'s ``approximate`` attribute for each."""


class _Builder:
    """Nodes and initializers of one graph, named by a prefix (a thin layer over onnx.helper)."""

    def __init__(self, precision: str) -> None:
        from onnx import TensorProto, helper, numpy_helper

        self.helper, self.numpy_helper, self.TensorProto = helper, numpy_helper, TensorProto
        self.precision = precision
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self.inputs: list[Any] = []
        self.outputs: list[Any] = []
        self.names: set[str] = set()

    def const(self, name: str, array: np.ndarray) -> str:
        """An initializer (once: a name already held is returned as it is)."""
        if name in self.names:
            return name
        self.names.add(name)
        self.initializers.append(
            self.numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def op(self, op: str, inputs: list[str], outputs: list[str] | str, domain: str = "",
           **attrs: Any) -> Any:
        outs = [outputs] if isinstance(outputs, str) else outputs
        self.nodes.append(self.helper.make_node(op, inputs, outs, domain=domain, **attrs))
        return outs[0] if len(outs) == 1 else outs

    def input(self, name: str, elem: int, shape: list[Any]) -> str:
        self.inputs.append(self.helper.make_tensor_value_info(name, elem, shape))
        return name

    def output(self, name: str, elem: int, shape: list[Any]) -> str:
        self.outputs.append(self.helper.make_tensor_value_info(name, elem, shape))
        return name

    def linear(self, x: str, weight: np.ndarray, bias: np.ndarray | None, name: str,
               quantize: bool = True) -> str:
        """``x [M, in] @ weight.T + bias``; ``weight`` is ``[out, in]`` (torch's layout).

        In ``int8`` (and ``quantize``): per-output-channel int8 weights, each row of ``x``
        quantized with its own scale, an exact integer product, then both scales.
        """
        w = np.asarray(weight, dtype=np.float32)
        if self.precision == "int8" and quantize:
            y = self._int8_linear(x, w, name)
        else:
            y = self.op("MatMul", [x, self.const(f"{name}.weight", w.T)], f"{name}.mm")
        if bias is not None:
            y = self.op("Add", [y, self.const(f"{name}.bias", np.asarray(bias, np.float32))],
                        f"{name}.out")
        return y

    def _int8_linear(self, x: str, w: np.ndarray, name: str) -> str:
        w_scale = np.abs(w).max(axis=1) / 127.0  # (out,)
        w_scale[w_scale == 0] = 1.0
        w_q = np.clip(np.rint(w / w_scale[:, None]), -127, 127).astype(np.int8)  # (out, in)
        one = self.const(f"{name}.axes", np.array([-1], dtype=np.int64))
        row_max = self.op("ReduceMax", [self.op("Abs", [x], f"{name}.abs"), one],
                          f"{name}.rowmax", keepdims=1)  # (M, 1)
        scale = self.op("Div", [self.op("Max", [row_max, self.const(
            f"{name}.tiny", np.array(1e-30, np.float32))], f"{name}.rowmax+"),
            self.const(f"{name}.127", np.array(127.0, np.float32))], f"{name}.xscale")
        x_q = self.op("Round", [self.op("Div", [x, scale], f"{name}.xs")], f"{name}.xr")
        x_u8 = self.op("Cast", [self.op("Add", [x_q, self.const(
            f"{name}.128", np.array(128.0, np.float32))], f"{name}.xr128")], f"{name}.xu8",
            to=self.TensorProto.UINT8)  # |x_q| <= 127: exact in uint8 after the shift
        acc = self.op("MatMulInteger", [x_u8, self.const(f"{name}.wq", w_q.T), self.const(
            f"{name}.zp", np.array(128, np.uint8))], f"{name}.acc")  # (M, out) int32, exact
        y = self.op("Mul", [self.op("Cast", [acc], f"{name}.accf", to=self.TensorProto.FLOAT),
                            scale], f"{name}.y1")
        return self.op("Mul", [y, self.const(f"{name}.wscale", w_scale.astype(np.float32))],
                       f"{name}.mm")

    def model(self, name: str) -> Any:
        graph = self.helper.make_graph(self.nodes, name, self.inputs, self.outputs,
                                       self.initializers)
        proto = self.helper.make_model(graph, opset_imports=[
            self.helper.make_opsetid("", OPSET), self.helper.make_opsetid("com.microsoft", 1)],
            producer_name="blockdraft")
        proto.ir_version = 10
        return proto


def _numpy(t: Any) -> np.ndarray:
    return t.detach().to("cpu").float().numpy()


def _bias(linear: Any) -> np.ndarray | None:
    return None if getattr(linear, "bias", None) is None else _numpy(linear.bias)


def _body_inputs(g: _Builder, spec: GraphSpec) -> None:
    f, i64, i32 = g.TensorProto.FLOAT, g.TensorProto.INT64, g.TensorProto.INT32
    g.input("input_ids", i64, ["T"])
    g.input("position_ids", i64, [1, "T"])
    g.input("attention_bias", f, [1, 1, "T", "S"])
    g.input("seqlens_k", i32, [1])
    g.input("total_sequence_length", i32, [])
    kv_shape = [1, spec.n_kv_head, "C", spec.head_dim]
    for i in range(spec.n_layer):
        g.input(f"past_key.{i}", f, kv_shape)
        g.input(f"past_value.{i}", f, kv_shape)
        g.output(f"present_key.{i}", f, kv_shape)
        g.output(f"present_value.{i}", f, kv_shape)


def _attention(g: _Builder, spec: GraphSpec, qkv: str, i: int, rotary: bool) -> str:
    """``GroupQueryAttention`` on the shared buffers: ``qkv [T, (n + 2 n_kv) hd] -> [T, n hd]``."""
    packed = g.op("Unsqueeze", [qkv, g.const(f"l{i}.axis0", np.array([0], np.int64))],
                  f"l{i}.qkv3")  # (1, T, ...)
    extra = ["cos_cache", "sin_cache", "position_ids"] if rotary else ["", "", ""]
    out = g.op("GroupQueryAttention",
               [packed, "", "", f"past_key.{i}", f"past_value.{i}", "seqlens_k",
                "total_sequence_length", *extra, "attention_bias"],
               [f"l{i}.att3", f"present_key.{i}", f"present_value.{i}"], domain="com.microsoft",
               num_heads=spec.n_head, kv_num_heads=spec.n_kv_head, do_rotary=int(rotary))[0]
    return g.op("Squeeze", [out, f"l{i}.axis0"], f"l{i}.att")  # (T, n hd)


def _llama_body(g: _Builder, spec: GraphSpec, base: Any) -> None:
    body = base.base_model
    cfg = base.config
    eps = float(getattr(cfg, "rms_norm_eps", 1e-6))
    import torch

    with torch.no_grad():  # the model's own rotary tables (scaling rules included)
        probe = torch.zeros(1, dtype=torch.float32)
        rows = torch.arange(spec.max_positions + EXTRA_ROWS)[None]
        cos, sin = body.rotary_emb(probe, rows)
    half = spec.head_dim // 2
    g.const("cos_cache", _numpy(cos[0, :, :half]))
    g.const("sin_cache", _numpy(sin[0, :, :half]))
    resid = g.op("Gather", [g.const("embed_tokens", _numpy(body.embed_tokens.weight)),
                            "input_ids"], "embedded")  # (T, d)
    layers = body.layers
    h = g.op("SimplifiedLayerNormalization",
             [resid, g.const("l0.input_norm", _numpy(layers[0].input_layernorm.weight))],
             "l0.h", axis=-1, epsilon=eps)
    for i, layer in enumerate(layers):
        att = layer.self_attn
        weights = [att.q_proj, att.k_proj, att.v_proj]
        w_qkv = np.concatenate([_numpy(m.weight) for m in weights])
        biases = [_bias(m) for m in weights]
        b_qkv = None if all(b is None for b in biases) else np.concatenate([
            b if b is not None else np.zeros(m.weight.shape[0], np.float32)
            for b, m in zip(biases, weights, strict=True)])
        qkv = g.linear(h, w_qkv, b_qkv, f"l{i}.qkv")
        o = g.linear(_attention(g, spec, qkv, i, rotary=True), _numpy(att.o_proj.weight),
                     _bias(att.o_proj), f"l{i}.o_proj")
        h2, _, _, resid = g.op(
            "SkipSimplifiedLayerNormalization",
            [o, resid, g.const(f"l{i}.post_norm", _numpy(layer.post_attention_layernorm.weight))],
            [f"l{i}.h2", f"l{i}.mean1", f"l{i}.inv1", f"l{i}.resid1"], domain="com.microsoft",
            epsilon=eps)
        mlp = layer.mlp
        ff = int(mlp.gate_proj.weight.shape[0])
        gb, ub = _bias(mlp.gate_proj), _bias(mlp.up_proj)
        gu = g.linear(h2, np.concatenate([_numpy(mlp.gate_proj.weight),
                                          _numpy(mlp.up_proj.weight)]),
                      None if gb is None else np.concatenate([gb, ub]), f"l{i}.gate_up")
        gate, up = g.op("Split", [gu, g.const(f"l{i}.split", np.array([ff, ff], np.int64))],
                        [f"l{i}.gate", f"l{i}.up"], axis=-1)
        silu = g.op("Mul", [gate, g.op("Sigmoid", [gate], f"l{i}.sig")], f"l{i}.silu")
        down = g.linear(g.op("Mul", [silu, up], f"l{i}.gated"), _numpy(mlp.down_proj.weight),
                        _bias(mlp.down_proj), f"l{i}.down")
        last = i + 1 == len(layers)
        norm = body.norm if last else layers[i + 1].input_layernorm
        h, _, _, resid = g.op(
            "SkipSimplifiedLayerNormalization",
            [down, resid, g.const(f"l{i}.next_norm", _numpy(norm.weight))],
            ["hidden" if last else f"l{i + 1}.h", f"l{i}.mean2", f"l{i}.inv2",
             f"l{i}.resid2"], domain="com.microsoft", epsilon=eps)


def _gpt2_body(g: _Builder, spec: GraphSpec, base: Any) -> None:
    body = base.base_model
    eps = float(base.config.layer_norm_epsilon)
    approximate = _GELU[str(getattr(base.config, "activation_function", "gelu_new"))]
    pos = g.op("Squeeze", ["position_ids", g.const("axis0", np.array([0], np.int64))],
               "positions")  # (T,)
    resid = g.op("Add", [
        g.op("Gather", [g.const("wte", _numpy(body.wte.weight)), "input_ids"], "tok_emb"),
        g.op("Gather", [g.const("wpe", _numpy(body.wpe.weight)), pos], "pos_emb")],
        "embedded")  # (T, d)
    blocks = body.h
    h = g.op("LayerNormalization", [resid, g.const("l0.ln_1.w", _numpy(blocks[0].ln_1.weight)),
                                    g.const("l0.ln_1.b", _numpy(blocks[0].ln_1.bias))],
             "l0.h", axis=-1, epsilon=eps)
    for i, block in enumerate(blocks):
        att = block.attn  # Conv1D weights are [in, out]: transposed to torch's Linear layout
        qkv = g.linear(h, _numpy(att.c_attn.weight).T, _bias(att.c_attn), f"l{i}.c_attn")
        o = g.linear(_attention(g, spec, qkv, i, rotary=False), _numpy(att.c_proj.weight).T,
                     _bias(att.c_proj), f"l{i}.attn_proj")
        h2, _, _, resid = g.op(
            "SkipLayerNormalization",
            [o, resid, g.const(f"l{i}.ln_2.w", _numpy(block.ln_2.weight)),
             g.const(f"l{i}.ln_2.b", _numpy(block.ln_2.bias))],
            [f"l{i}.h2", f"l{i}.mean1", f"l{i}.inv1", f"l{i}.resid1"], domain="com.microsoft",
            epsilon=eps)
        mlp = block.mlp
        up = g.linear(h2, _numpy(mlp.c_fc.weight).T, _bias(mlp.c_fc), f"l{i}.c_fc")
        act = g.op("Gelu", [up], f"l{i}.gelu", approximate=approximate)
        down = g.linear(act, _numpy(mlp.c_proj.weight).T, _bias(mlp.c_proj), f"l{i}.mlp_proj")
        last = i + 1 == len(blocks)
        norm = body.ln_f if last else blocks[i + 1].ln_1
        h, _, _, resid = g.op(
            "SkipLayerNormalization",
            [down, resid, g.const(f"l{i}.next_ln.w", _numpy(norm.weight)),
             g.const(f"l{i}.next_ln.b", _numpy(norm.bias))],
            ["hidden" if last else f"l{i + 1}.h", f"l{i}.mean2", f"l{i}.inv2",
             f"l{i}.resid2"], domain="com.microsoft", epsilon=eps)


def _head_blocks(g: _Builder, y: str, heads: Any, j: int, tag: str = "") -> str:
    """Medusa head ``j``'s ResBlocks on ``y [M, d]`` (``y + SiLU(W y + b)``, ``L`` times)."""
    for layer in range(heads.num_layers):
        block = heads.block(j, layer)
        name = f"h{j}.b{layer}{tag}"
        z = g.linear(y, _numpy(block.linear.weight), _bias(block.linear), name)
        silu = g.op("Mul", [z, g.op("Sigmoid", [z], f"{name}.sig")], f"{name}.silu")
        y = g.op("Add", [y, silu], f"{name}.res")
    return y


def _medusa_states(g: _Builder, x: str, heads: Any) -> str:
    """Every Medusa head's ResBlocks on ``x [M, d]``: the node ``states [M, h - 1, d]``."""
    states = [g.op("Unsqueeze", [_head_blocks(g, x, heads, j),
                                 g.const(f"h{j}.axis", np.array([1], np.int64))],
                   f"h{j}.state") for j in range(heads.num_heads)]  # (M, 1, d) each
    return g.op("Concat", states, "states", axis=1)  # type: ignore[no-any-return]


def _resblocks(spec: GraphSpec, heads: Any, precision: str) -> Any:
    g = _Builder(precision)
    f = g.TensorProto.FLOAT
    _medusa_states(g, g.input("x", f, ["M", spec.d_model]), heads)  # (M, h - 1, d)
    g.output("states", f, ["M", spec.h - 1, spec.d_model])
    return g.model("resblocks")


def _shortlist_topk(g: _Builder, states: str, lm_head: Any, rows: Any, out: str) -> str:
    """``states [..., d]`` projected onto the shortlist's rows of ``lm_head`` (the whole
    vocabulary without one): ``{out}.ids``/``{out}.scores [..., k]`` (top ``k`` by logit,
    ties to the lower column; log-probabilities over the shortlist); returns the logits'
    name ``[..., Vs]``."""
    weight = _numpy(lm_head.weight if rows is None else lm_head.weight[rows])  # (Vs, d)
    bias = _bias(lm_head)
    logits = g.op("MatMul", [states, g.const("short.weight", weight.T)], f"{out}.mm")
    if bias is not None:
        keep = bias if rows is None else bias[rows.numpy()]
        logits = g.op("Add", [logits, g.const("short.bias", keep)], f"{out}.logits")
    values, cols = g.op("TopK", [logits, "k"], [f"{out}.values", f"{out}.cols"], axis=-1,
                        largest=1, sorted=1)
    log_z = g.op("ReduceLogSumExp", [logits, g.const("short.axes", np.array([-1], np.int64))],
                 f"{out}.logz", keepdims=1)
    g.op("Sub", [values, log_z], f"{out}.scores")
    if rows is None:
        g.op("Identity", [cols], f"{out}.ids")
    else:
        g.op("Gather", [g.const("short.ids", rows.numpy().astype(np.int64)), cols],
             f"{out}.ids")
    return logits  # type: ignore[no-any-return]


def _drafts(spec: GraphSpec, heads: Any, lm_head: Any, precision: str) -> Any:
    g = _Builder(precision)
    f, i64 = g.TensorProto.FLOAT, g.TensorProto.INT64
    g.input("k", i64, [1])
    stacked = _medusa_states(g, g.input("x", f, ["M", spec.d_model]), heads)  # (M, h - 1, d)
    _shortlist_topk(g, stacked, lm_head, heads.shortlist, "all")
    g.op("Identity", ["all.ids"], "ids")
    g.op("Identity", ["all.scores"], "scores")
    g.output("ids", i64, ["M", spec.h - 1, "k"])
    g.output("scores", f, ["M", spec.h - 1, "k"])
    return g.model("drafts")


def _prefix_input(g: _Builder, x: str, previous: str, heads: Any, j: int, tag: str) -> str:
    """Prefix head ``j``'s input ``x + P_j e`` (``e [M, d]``: the embedding of the token
    before its target)."""
    shifted = g.linear(previous, _numpy(heads.prefix[j].weight), None, f"p{j}{tag}")
    return g.op("Add", [x, shifted], f"p{j}{tag}.in")  # type: ignore[no-any-return]


def _prefix_drafts(spec: GraphSpec, heads: Any, lm_head: Any, embed: Any,
                   precision: str) -> Any:
    """The prefix heads' greedy chain (:mod:`blockdraft.models.hf.prefix_heads`)::

        inputs   x float [M, d], e0 float [M, d] (the embedding of the base's greedy token at
                 x), k int64 [1]
        outputs  ids int64 [M, h - 1, k], scores float [M, h - 1, k]   as ``drafts``
                 states float [M, h - 1, d]                             each head's state

    head ``j`` reads the embedding of head ``j - 1``'s argmax (over the shortlist; ties to
    the lower column, as torch's ``argmax``), held as the shortlist's rows of the input
    embeddings."""
    g = _Builder(precision)
    f, i64 = g.TensorProto.FLOAT, g.TensorProto.INT64
    g.input("k", i64, [1])
    x = g.input("x", f, ["M", spec.d_model])
    previous = g.input("e0", f, ["M", spec.d_model])
    rows = heads.shortlist
    table = g.const("short.embed", _numpy(embed if rows is None else embed[rows]))  # (Vs, d)
    axis = g.const("axis1", np.array([1], np.int64))
    states, ids, scores = [], [], []
    for j in range(heads.num_heads):
        state = _head_blocks(g, _prefix_input(g, x, previous, heads, j, ""), heads, j)
        logits = _shortlist_topk(g, state, lm_head, rows, f"c{j}")  # (M, Vs)
        states.append(g.op("Unsqueeze", [state, axis], f"c{j}.state"))
        ids.append(g.op("Unsqueeze", [f"c{j}.ids", axis], f"c{j}.ids1"))
        scores.append(g.op("Unsqueeze", [f"c{j}.scores", axis], f"c{j}.scores1"))
        if j + 1 < heads.num_heads:
            best = g.op("ArgMax", [logits], f"c{j}.best", axis=-1, keepdims=0)  # (M,)
            previous = g.op("Gather", [table, best], f"c{j}.next")  # (M, d)
    for name, parts in (("states", states), ("ids", ids), ("scores", scores)):
        g.op("Concat", parts, name, axis=1)
    g.output("ids", i64, ["M", spec.h - 1, "k"])
    g.output("scores", f, ["M", spec.h - 1, "k"])
    g.output("states", f, ["M", spec.h - 1, spec.d_model])
    return g.model("drafts")


def _prefix_expand(spec: GraphSpec, heads: Any, lm_head: Any, precision: str, j: int) -> Any:
    """Head ``j``'s expansion of nodes of the prefix heads' tree lattice, a node a row::

        inputs   x float [M, d], e float [M, d] (the embedding of the node's last token),
                 k int64 [1]
        outputs  ids int64 [M, k], scores float [M, k]   head j's top k, log-probabilities

    One graph per head (``expand{j}``), so a node costs its own head's weights and the
    shortlist projection, not every head's."""
    g = _Builder(precision)
    f, i64 = g.TensorProto.FLOAT, g.TensorProto.INT64
    g.input("k", i64, [1])
    x = g.input("x", f, ["M", spec.d_model])
    e = g.input("e", f, ["M", spec.d_model])
    state = _head_blocks(g, _prefix_input(g, x, e, heads, j, ""), heads, j)  # (M, d)
    _shortlist_topk(g, state, lm_head, heads.shortlist, "x")
    g.op("Identity", ["x.ids"], "ids")
    g.op("Identity", ["x.scores"], "scores")
    g.output("ids", i64, ["M", "k"])
    g.output("scores", f, ["M", "k"])
    return g.model(f"expand{j}")


def _projection(spec: GraphSpec, lm_head: Any) -> Any:
    g = _Builder("float32")
    f = g.TensorProto.FLOAT
    g.input("states", f, ["M", spec.d_model])
    g.op("Identity", [g.linear("states", _numpy(lm_head.weight), _bias(lm_head), "lm_head")],
         "logits")
    g.output("logits", f, ["M", spec.vocab_size])
    return g.model("projection")


def _own_projection(spec: GraphSpec, heads: Any) -> Any:
    g = _Builder("float32")
    f = g.TensorProto.FLOAT
    g.input("states", f, ["M", spec.h - 1, spec.d_model])
    weights = np.stack([_numpy(heads.projection(j).weight).T for j in range(heads.num_heads)])
    by_head = g.op("Transpose", ["states"], "by_head", perm=[1, 0, 2])  # (h - 1, M, d)
    logits = g.op("MatMul", [by_head, g.const("own.weight", weights)], "own.mm")  # (h-1, M, V)
    g.op("Transpose", [logits], "logits", perm=[1, 0, 2])  # (M, h - 1, V)
    g.output("logits", f, ["M", spec.h - 1, spec.vocab_size])
    return g.model("own_projection")


def build_graphs(model: Any, precision: str = "float32") -> dict[str, Any]:
    """The graphs of an :class:`~blockdraft.models.hf.HFBlockwiseModel` (module docstring).

    Args:
        model: the model, float32 or any float dtype (weights are read as float32).
        precision: ``"float32"`` or ``"int8"``.

    Returns:
        ``{"body", "resblocks", "projection"}`` and ``"drafts"`` (``"own"`` instead, for heads
        with their own projections) -> ``onnx.ModelProto``.

    Raises:
        ModelError: an unsupported architecture or precision.
    """
    if precision not in PRECISIONS:
        raise ModelError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    spec = graph_spec(model)
    g = _Builder(precision)
    _body_inputs(g, spec)
    (_llama_body if spec.family == "llama" else _gpt2_body)(g, spec, model.base)
    g.output("hidden", g.TensorProto.FLOAT, ["T", spec.d_model])
    graphs = {"body": g.model("body"), "projection": _projection(spec, model.lm_head)}
    if spec.prefix_heads:
        embed = model.base.get_input_embeddings().weight
        graphs["drafts"] = _prefix_drafts(spec, model.heads, model.lm_head, embed, precision)
        graphs.update({f"expand{j}": _prefix_expand(spec, model.heads, model.lm_head,
                                                    precision, j)
                       for j in range(model.heads.num_heads)})
        return graphs
    graphs["resblocks"] = _resblocks(spec, model.heads, precision)
    if spec.own_projection:
        graphs["own"] = _own_projection(spec, model.heads)
    else:
        graphs["drafts"] = _drafts(spec, model.heads, model.lm_head, precision)
    return graphs
