"""The ONNX graphs of a Hugging Face model's decoder and base head, built from its weights; the
builder every graph of the export uses (the heads' graphs: :mod:`.onnx_head_graphs`).

Each graph is run by its own ONNX Runtime session (:mod:`.onnx_model`):

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
``attention_bias`` carries a token tree's ancestor mask (and a sliding window: the step's bias,
:meth:`Step.bias <blockdraft.models.step.Step.bias>`). The op's own causal mask is by row,
which a tree in topological order never contradicts.

``projection``: ``states [M, d] -> logits [M, V]``, the base ``lm_head``.

Families: Llama-style decoders (``llama``, ``mistral``, ``qwen2``: RMSNorm, rotary, grouped
query attention, gated SiLU MLP, optional q/k/v biases) and ``gpt2`` (LayerNorm, learned
positions, fused q/k/v, GELU MLP). Anything else is refused with the reason.

Precisions: ``float32`` (every weight as it is: ORT pre-packs constant MatMul weights once), and
``int8``: every decoder and head matmul in 8-bit integers, weights per output channel, the
activations per ROW (each token's own scale ``max |x_row| / 127``) through ``MatMulInteger``, so
a token's numbers never depend on the other tokens of its forward (chunk-invariant); the
vocabulary projections stay float32 (argmax quality). Never per-tensor activation scales.
``q4`` (Llama-family models loaded from a GGUF file): the decoder's linear layers, its
embedding and the base head built from the file's own Q4_1 and Q8_0 blocks
(:mod:`.onnx_blocks`: ONNX Runtime's ``MatMulNBits``, no weight re-quantised and no float32 copy
of any); the heads' graphs stay float32.

Public surface:
    FAMILIES, PRECISIONS, GRAPH_VERSION, OPSET, MASKED, EXTRA_ROWS
    GraphSpec        frozen: the sizes the runtime needs (layers, heads, buffers, ...)
    graph_spec(model) -> GraphSpec         or ModelError naming what is unsupported
    body_graph(spec, base, precision, linears=None), projection_graph(spec, lm_head)
                                           -> onnx.ModelProto
    Linears(base)                          where a Llama body's embedding and linear layers
                                           come from (the model's weights; subclassed for
                                           the GGUF's blocks)
    Builder(precision)                     nodes and initializers of one graph (a float32 or
                                           int8 linear layer, ...); numpy_of, bias_of
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from blockdraft.models.errors import ModelError

FAMILIES = {"llama": "llama", "mistral": "llama", "qwen2": "llama", "gpt2": "gpt2"}
"""``config.model_type`` -> the graph family that builds it."""
PRECISIONS = ("float32", "int8", "q4")
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
        own_projection: the heads project with their own matrices.
        heads: the heads' kind (``"medusa"``, ``"prefix"``: which graphs
            :mod:`.onnx_head_graphs` builds for them).
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
    heads: str = "medusa"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (the export's metadata)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GraphSpec:
        """The spec an export recorded (one of before the heads' kind was recorded names it by
        ``prefix_heads``)."""
        data = dict(data)
        if "prefix_heads" in data:
            data["heads"] = "prefix" if data.pop("prefix_heads") else "medusa"
        return cls(**data)


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
        heads=str(model.heads.kind),
    )


_GELU = {"gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "gelu": "none"}
"""GPT-2 activations and ONNX ``Gelu``'s ``approximate`` attribute for each."""


class Builder:
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


def numpy_of(t: Any) -> np.ndarray:
    """A tensor's values as a float32 numpy array on the host."""
    return t.detach().to("cpu").float().numpy()


def bias_of(linear: Any) -> np.ndarray | None:
    """A linear layer's bias as float32 numpy, or None."""
    return None if getattr(linear, "bias", None) is None else numpy_of(linear.bias)


def _body_inputs(g: Builder, spec: GraphSpec) -> None:
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


def _attention(g: Builder, spec: GraphSpec, qkv: str, i: int, rotary: bool) -> str:
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


class Linears:
    """Where a Llama-family body's embedding and linear layers come from: the model's own
    float32 weights (quantised by the :class:`Builder` in ``int8``). A graph of other weights
    (the GGUF file's blocks, :mod:`.onnx_blocks`) overrides :meth:`embedding` and
    :meth:`linear`.

    Args:
        base: the transformers model (``base.base_model.layers``, ``embed_tokens``).
    """

    PARTS = ("qkv", "o_proj", "gate_up", "down")
    """The linear layers of a decoder layer: the fused q/k/v projection, the attention's
    output, the fused gate/up projection, the MLP's output."""

    def __init__(self, base: Any) -> None:
        self.body = base.base_model

    def modules(self, part: str, layer: int) -> list[Any]:
        """The ``torch.nn.Linear`` modules fused into ``part`` of layer ``layer``, in order."""
        block = self.body.layers[layer]
        att, mlp = block.self_attn, block.mlp
        return {"qkv": [att.q_proj, att.k_proj, att.v_proj], "o_proj": [att.o_proj],
                "gate_up": [mlp.gate_proj, mlp.up_proj], "down": [mlp.down_proj]}[part]

    def bias(self, part: str, layer: int) -> np.ndarray | None:
        """The fused bias of ``part`` (zeros where one of its modules has none), or None."""
        modules = self.modules(part, layer)
        biases = [bias_of(m) for m in modules]
        if all(b is None for b in biases):
            return None
        return np.concatenate([b if b is not None else np.zeros(m.weight.shape[0], np.float32)
                               for b, m in zip(biases, modules, strict=True)])

    def embedding(self, g: Builder, ids: str) -> str:
        """The token embeddings of ``ids [T]``: ``[T, d]``."""
        return g.op("Gather", [g.const("embed_tokens", numpy_of(self.body.embed_tokens.weight)),
                               ids], "embedded")  # type: ignore[no-any-return]

    def linear(self, g: Builder, x: str, part: str, layer: int, name: str) -> str:
        """``part`` of layer ``layer`` on ``x [M, in]`` (its bias included): ``[M, out]``."""
        weight = np.concatenate([numpy_of(m.weight) for m in self.modules(part, layer)])
        return g.linear(x, weight, self.bias(part, layer), name)


def _llama_body(g: Builder, spec: GraphSpec, base: Any, linears: Linears | None) -> None:
    body = base.base_model
    cfg = base.config
    eps = float(getattr(cfg, "rms_norm_eps", 1e-6))
    weights = linears or Linears(base)
    import torch

    with torch.no_grad():  # the model's own rotary tables (scaling rules included)
        probe = torch.zeros(1, dtype=torch.float32)
        rows = torch.arange(spec.max_positions + EXTRA_ROWS)[None]
        cos, sin = body.rotary_emb(probe, rows)
    half = spec.head_dim // 2
    g.const("cos_cache", numpy_of(cos[0, :, :half]))
    g.const("sin_cache", numpy_of(sin[0, :, :half]))
    resid = weights.embedding(g, "input_ids")  # (T, d)
    layers = body.layers
    h = g.op("SimplifiedLayerNormalization",
             [resid, g.const("l0.input_norm", numpy_of(layers[0].input_layernorm.weight))],
             "l0.h", axis=-1, epsilon=eps)
    for i, layer in enumerate(layers):
        qkv = weights.linear(g, h, "qkv", i, f"l{i}.qkv")
        o = weights.linear(g, _attention(g, spec, qkv, i, rotary=True), "o_proj", i,
                           f"l{i}.o_proj")
        h2, _, _, resid = g.op(
            "SkipSimplifiedLayerNormalization",
            [o, resid, g.const(f"l{i}.post_norm", numpy_of(layer.post_attention_layernorm.weight))],
            [f"l{i}.h2", f"l{i}.mean1", f"l{i}.inv1", f"l{i}.resid1"], domain="com.microsoft",
            epsilon=eps)
        ff = int(layer.mlp.gate_proj.weight.shape[0])
        gu = weights.linear(g, h2, "gate_up", i, f"l{i}.gate_up")
        gate, up = g.op("Split", [gu, g.const(f"l{i}.split", np.array([ff, ff], np.int64))],
                        [f"l{i}.gate", f"l{i}.up"], axis=-1)
        silu = g.op("Mul", [gate, g.op("Sigmoid", [gate], f"l{i}.sig")], f"l{i}.silu")
        down = weights.linear(g, g.op("Mul", [silu, up], f"l{i}.gated"), "down", i, f"l{i}.down")
        last = i + 1 == len(layers)
        norm = body.norm if last else layers[i + 1].input_layernorm
        h, _, _, resid = g.op(
            "SkipSimplifiedLayerNormalization",
            [down, resid, g.const(f"l{i}.next_norm", numpy_of(norm.weight))],
            ["hidden" if last else f"l{i + 1}.h", f"l{i}.mean2", f"l{i}.inv2",
             f"l{i}.resid2"], domain="com.microsoft", epsilon=eps)


def _gpt2_body(g: Builder, spec: GraphSpec, base: Any) -> None:
    body = base.base_model
    eps = float(base.config.layer_norm_epsilon)
    approximate = _GELU[str(getattr(base.config, "activation_function", "gelu_new"))]
    pos = g.op("Squeeze", ["position_ids", g.const("axis0", np.array([0], np.int64))],
               "positions")  # (T,)
    resid = g.op("Add", [
        g.op("Gather", [g.const("wte", numpy_of(body.wte.weight)), "input_ids"], "tok_emb"),
        g.op("Gather", [g.const("wpe", numpy_of(body.wpe.weight)), pos], "pos_emb")],
        "embedded")  # (T, d)
    blocks = body.h
    h = g.op("LayerNormalization", [resid, g.const("l0.ln_1.w", numpy_of(blocks[0].ln_1.weight)),
                                    g.const("l0.ln_1.b", numpy_of(blocks[0].ln_1.bias))],
             "l0.h", axis=-1, epsilon=eps)
    for i, block in enumerate(blocks):
        att = block.attn  # Conv1D weights are [in, out]: transposed to torch's Linear layout
        qkv = g.linear(h, numpy_of(att.c_attn.weight).T, bias_of(att.c_attn), f"l{i}.c_attn")
        o = g.linear(_attention(g, spec, qkv, i, rotary=False), numpy_of(att.c_proj.weight).T,
                     bias_of(att.c_proj), f"l{i}.attn_proj")
        h2, _, _, resid = g.op(
            "SkipLayerNormalization",
            [o, resid, g.const(f"l{i}.ln_2.w", numpy_of(block.ln_2.weight)),
             g.const(f"l{i}.ln_2.b", numpy_of(block.ln_2.bias))],
            [f"l{i}.h2", f"l{i}.mean1", f"l{i}.inv1", f"l{i}.resid1"], domain="com.microsoft",
            epsilon=eps)
        mlp = block.mlp
        up = g.linear(h2, numpy_of(mlp.c_fc.weight).T, bias_of(mlp.c_fc), f"l{i}.c_fc")
        act = g.op("Gelu", [up], f"l{i}.gelu", approximate=approximate)
        down = g.linear(act, numpy_of(mlp.c_proj.weight).T, bias_of(mlp.c_proj), f"l{i}.mlp_proj")
        last = i + 1 == len(blocks)
        norm = body.ln_f if last else blocks[i + 1].ln_1
        h, _, _, resid = g.op(
            "SkipLayerNormalization",
            [down, resid, g.const(f"l{i}.next_ln.w", numpy_of(norm.weight)),
             g.const(f"l{i}.next_ln.b", numpy_of(norm.bias))],
            ["hidden" if last else f"l{i + 1}.h", f"l{i}.mean2", f"l{i}.inv2",
             f"l{i}.resid2"], domain="com.microsoft", epsilon=eps)


def projection_graph(spec: GraphSpec, lm_head: Any) -> Any:
    """``projection``: ``states [M, d] -> logits [M, V]``, the base ``lm_head`` in float32
    (head 1, and every head that shares it)."""
    g = Builder("float32")
    f = g.TensorProto.FLOAT
    g.input("states", f, ["M", spec.d_model])
    g.op("Identity", [g.linear("states", numpy_of(lm_head.weight), bias_of(lm_head), "lm_head")],
         "logits")
    g.output("logits", f, ["M", spec.vocab_size])
    return g.model("projection")


def body_graph(spec: GraphSpec, base: Any, precision: str,
               linears: Linears | None = None) -> Any:
    """``body``: the decoder of ``base`` (the module docstring), in ``precision``; a
    Llama-family body's embedding and linear layers from ``linears`` (default: ``base``'s own
    weights; precision ``q4``: the GGUF file's blocks, :mod:`.onnx_blocks`)."""
    g = Builder(precision)
    _body_inputs(g, spec)
    if spec.family == "llama":
        _llama_body(g, spec, base, linears)
    else:
        _gpt2_body(g, spec, base)
    g.output("hidden", g.TensorProto.FLOAT, ["T", spec.d_model])
    return g.model("body")
