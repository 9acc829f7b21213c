"""ONNX export of the rescoring LM for one incremental forward over a fixed-size key/value buffer,
and its ONNX Runtime runner.

Public surface:
    export_rescorer_onnx(model, path, opset=18, force=False) -> Path
        write (or reuse) ``path``: the :class:`~blockdraft.models.RescorerLM`'s incremental
        forward as an ONNX graph (the step graph below)
    export_rescorer_bytes(model, opset=18, fingerprint=None) -> bytes   the same, in memory
    OnnxStepRunner(path_or_bytes, device="cpu", intra_op_threads=1, output_embedding=None)
        .new_cache(batch_size=1) -> OnnxCache               an empty cache
        .step(input_ids, cache) -> (hidden, cache)          one incremental forward
        .logits(hidden) -> logits                           the vocabulary projection
    OnnxCache(keys, values, length)    the key/value buffers; .crop(n), .rows(index), .grown(c)
    onnx_fingerprint(model) -> str     the weights' SHA-256 stamped into every exported file
    read_fingerprint(path) -> str | None

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
sliced or concatenated. :class:`OnnxStepRunner` builds the bias, the positions and the split,
and writes the new keys and values into the buffers in place (``O(T)`` copying per call; the
buffers grow, copied once, when a call would overflow them). Keys are stored after the rotary
embedding, as in :class:`~blockdraft.models.KVCache`. The graph carries no padding: every
cached position is a real token (the rescorer never left-pads).

Why a graph built here and not traced from torch: a rescoring step is ``h - 1`` single-token
forwards, where a traced graph (~100 nodes of shape arithmetic, a growing cache concatenated and
copied in and out every call) spends most of its time in per-node and copying overhead. This
graph is ~35 nodes for one layer: the rotary embedding is ``x * cos_rows + swap(x) *
sin_rows`` on the fused qkv projection (tables gathered by position, the attention scale folded
into q's rows), attention runs over the buffer and the new tokens with one softmax, and there
is no vocabulary projection: the rescorer needs only a few arcs' logits per slot and the
log-softmax normalisers, which it batches (:meth:`OnnxStepRunner.logits`, a separate one-node
session). The weights are the model's own (read from its ``state_dict``); the tests check the
graph against ``RescorerLM.hidden`` position by position and cache entry by cache entry. onnx
and onnxruntime import lazily.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from blockdraft.models.blockwise import RescorerLM
from blockdraft.rescorers.base import RescorerError

ONNX_FILE = "rescorer.onnx"
"""File name of the exported graph inside a model directory."""

DEFAULT_OPSET = 18  # onnxruntime >= 1.17 runs it; its erf GELU is fused into one Gelu kernel
MIN_OPSET = 18  # Split(num_outputs) and LayerNormalization; opset >= 20 writes a Gelu node
GRAPH_FORMAT = "kvbuffer-1"
"""Version of the step graph's interface, stamped into every export (a change re-exports)."""

_FINGERPRINT_KEY = "blockdraft_fingerprint"
_CONFIG_KEYS = ("n_layer", "n_head", "head_dim", "d_model", "vocab_size", "max_seq_len")
_INSTALL_HINT = "pip install onnxruntime onnx (or: pip install blockdraft, which requires them)"
_MIN_CAPACITY = 64  # buffer positions allocated at least, and the granule of growth


def onnx_fingerprint(model: RescorerLM) -> str:
    """Hex SHA-256 of the model's config and weights (stamped into the exported file's
    metadata, so a stale export of other weights is detected and redone)."""
    digest = hashlib.sha256(repr(sorted(model.config.to_dict().items())).encode())
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return digest.hexdigest()


def _stamp_of(model: RescorerLM, opset: int) -> str:
    return f"{onnx_fingerprint(model)}/opset{opset}/{GRAPH_FORMAT}"


# ---- the graph ---------------------------------------------------------------------------------


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


def _step_graph(model: RescorerLM, opset: int, stamp: str) -> Any:
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
    meta = {_FINGERPRINT_KEY: stamp, "graph_format": GRAPH_FORMAT,
            **{key: str(getattr(cfg, key)) for key in _CONFIG_KEYS}}
    helper.set_model_props(proto, meta)
    onnx.checker.check_model(proto)
    return proto


def _head_graph(output_embedding: np.ndarray) -> bytes:
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


# ---- files -------------------------------------------------------------------------------------


def read_fingerprint(path: str | Path) -> str | None:
    """The fingerprint stamped into an exported file, or None (missing, unreadable, unstamped)."""
    try:
        import onnx

        proto = onnx.load(str(path), load_external_data=False)
    except ImportError as e:
        raise RescorerError(f"the ONNX backend needs the onnx package: {_INSTALL_HINT}") from e
    except Exception:  # noqa: BLE001 - any unreadable file is simply re-exported
        return None
    for entry in proto.metadata_props:
        if entry.key == _FINGERPRINT_KEY:
            return str(entry.value)
    return None


def export_rescorer_onnx(
    model: RescorerLM,
    path: str | Path,
    opset: int = DEFAULT_OPSET,
    force: bool = False,
) -> Path:
    """Export ``model``'s incremental forward to ONNX (the step graph of the module docstring).

    Args:
        model: the rescoring LM (``h = 1``).
        path: the ``.onnx`` file to write, or a directory (then ``directory/rescorer.onnx``;
            a model directory of :func:`~blockdraft.models.save_model` is the natural place).
        opset: ONNX opset version (>= 18; >= 20 writes GELU as one Gelu node, which needs
            onnxruntime >= 1.18).
        force: export even when ``path`` already holds an export of the same weights.

    Returns:
        The file written, or reused when it already holds an export of the same weights, opset
        and graph format (its stamp matches).

    Raises:
        RescorerError: when ``model`` is not a RescorerLM, onnx is not installed, the export
            fails, or ``path`` cannot be written.
    """
    _check_export(model, opset)
    target = Path(path)
    if target.is_dir() or (not target.suffix and not target.exists()):
        target = target / ONNX_FILE
    stamp = _stamp_of(model, opset)
    if target.is_file() and not force and read_fingerprint(target) == stamp:
        return target
    data = export_rescorer_bytes(model, opset, stamp)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(target)
    except OSError as e:
        raise RescorerError(
            f"cannot write the ONNX export to {target}: {e}; pass a writable onnx_path"
        ) from e
    return target


def export_rescorer_bytes(
    model: RescorerLM, opset: int = DEFAULT_OPSET, fingerprint: str | None = None
) -> bytes:
    """The serialized ONNX model of :func:`export_rescorer_onnx`, in memory (no file).

    ``fingerprint`` is the stamp to write into its metadata (default: the weights' SHA-256,
    the opset and the graph format).

    Raises:
        RescorerError: when ``model`` is not a RescorerLM, a bad opset, onnx is missing or
            the export fails.
    """
    _check_export(model, opset)
    try:
        import onnx  # noqa: F401 - fail early with the hint
    except ImportError as e:
        raise RescorerError(f"the ONNX backend needs the onnx package: {_INSTALL_HINT}") from e
    try:
        proto = _step_graph(model, opset, fingerprint or _stamp_of(model, opset))
    except RescorerError:
        raise
    except Exception as e:  # noqa: BLE001 - onnx raises many kinds; chain them
        raise RescorerError(f"exporting the rescorer to ONNX failed: {e}") from e
    return proto.SerializeToString()  # type: ignore[no-any-return]


def _check_export(model: object, opset: object) -> None:
    if not isinstance(model, RescorerLM):
        raise RescorerError(
            f"the ONNX export expects a RescorerLM (h = 1), got {type(model).__name__}"
        )
    if isinstance(opset, bool) or not isinstance(opset, int) or opset < MIN_OPSET:
        raise RescorerError(f"opset must be an integer >= {MIN_OPSET}, got {opset!r}")


# ---- the cache and the runner ------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class OnnxCache:
    """Key/value buffers of the step graph holding ``length`` positions (of ``capacity``).

    Attributes:
        keys: one array per layer, float32 ``[B, n_head, head_dim, capacity]`` (transposed,
            rotary-embedded).
        values: one array per layer, float32 ``[B, n_head, capacity, head_dim]``.
        length: positions held; the buffers' later positions are scratch space.

    A cache is a view of its buffers: :meth:`OnnxStepRunner.step` writes the new positions into
    them in place, so a cache that holds positions ``>= length`` of the same buffers (the one
    this was cropped from) no longer does after a step on this one.
    """

    keys: tuple[np.ndarray, ...]
    values: tuple[np.ndarray, ...]
    length: int

    @property
    def batch_size(self) -> int:
        """Rows ``B``."""
        return int(self.keys[0].shape[0])

    @property
    def capacity(self) -> int:
        """Positions the buffers can hold."""
        return int(self.keys[0].shape[3])

    def crop(self, length: int) -> OnnxCache:
        """The first ``length`` positions (``0 <= length <= self.length``), same buffers.

        Raises:
            RescorerError: when ``length`` is out of range.
        """
        if not 0 <= length <= self.length:
            raise RescorerError(f"crop length must lie in [0, {self.length}], got {length}")
        return self if length == self.length else OnnxCache(self.keys, self.values, length)

    def rows(self, index: np.ndarray) -> OnnxCache:
        """Rows ``index`` in order (repeats allowed), in new buffers of the same capacity (the
        same cache when it is already exactly those rows)."""
        index = np.asarray(index, dtype=np.int64).reshape(-1)
        if index.size == self.batch_size and np.array_equal(index, np.arange(index.size)):
            return self
        n = self.length

        def gather(buf: np.ndarray, axis: int) -> np.ndarray:
            out = np.zeros((index.size, *buf.shape[1:]), np.float32)
            if axis == 3:
                out[..., :n] = buf[index, :, :, :n]
            else:
                out[:, :, :n] = buf[index, :, :n]
            return out

        return OnnxCache(tuple(gather(k, 3) for k in self.keys),
                         tuple(gather(v, 2) for v in self.values), n)

    def grown(self, capacity: int) -> OnnxCache:
        """The same positions in new buffers of ``capacity >= length`` positions."""
        n = self.length
        keys, values = [], []
        for k, v in zip(self.keys, self.values, strict=True):
            k2 = np.zeros((*k.shape[:3], capacity), np.float32)
            v2 = np.zeros((v.shape[0], v.shape[1], capacity, v.shape[3]), np.float32)
            k2[..., :n] = k[..., :n]
            v2[:, :, :n] = v[:, :, :n]
            keys.append(k2)
            values.append(v2)
        return OnnxCache(tuple(keys), tuple(values), n)


class OnnxStepRunner:
    """ONNX Runtime sessions over an exported step graph (and the vocabulary projection).

    Args:
        model: the exported file (path) or its bytes.
        device: ``"cpu"``, or ``"cuda"``/``"cuda:N"`` for the CUDA execution provider when
            onnxruntime has it (else a RescorerError). Inputs and outputs are numpy arrays on
            the host either way.
        intra_op_threads: ONNX Runtime's intra-op thread count (0: its default, all cores).
            A step is many tiny kernels: 1 (no thread pool) is usually the fastest.
        output_embedding: float32 ``[V, d]``, the LM's output embedding (its tied ``wte`` or
            its ``lm_head``), for :meth:`logits`; None: no projection.

    Raises:
        RescorerError: when onnxruntime is missing, the device is unavailable, the file cannot
            be loaded or is not a step graph of this format.

    Not thread-safe: single-token steps share one I/O binding (use one runner per stream).
    """

    def __init__(
        self,
        model: str | Path | bytes,
        device: str = "cpu",
        intra_op_threads: int = 1,
        output_embedding: np.ndarray | None = None,
    ) -> None:
        try:
            import onnxruntime as ort
        except ImportError as e:
            raise RescorerError(f"the ONNX backend needs onnxruntime: {_INSTALL_HINT}") from e
        if isinstance(intra_op_threads, bool) or not isinstance(intra_op_threads, int) \
                or intra_op_threads < 0:
            raise RescorerError(
                f"intra_op_threads must be an integer >= 0, got {intra_op_threads!r}"
            )
        options = ort.SessionOptions()
        options.intra_op_num_threads = intra_op_threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self._providers = self._pick_providers(ort, device)
        source = model if isinstance(model, bytes) else str(model)
        where = "<bytes>" if isinstance(model, bytes) else str(model)
        try:
            self.session = ort.InferenceSession(source, options, providers=self._providers)
        except Exception as e:  # noqa: BLE001 - onnxruntime raises its own exception types
            raise RescorerError(
                f"onnxruntime cannot load {where}: {e}; re-export it with export_rescorer_onnx"
            ) from e
        meta = self.session.get_modelmeta().custom_metadata_map
        if meta.get("graph_format") != GRAPH_FORMAT:
            raise RescorerError(
                f"{where} is not a rescorer step graph of format {GRAPH_FORMAT!r} (found "
                f"{meta.get('graph_format')!r}); re-export it with export_rescorer_onnx"
            )
        self.n_layer, self.n_head, self.head_dim, self.d_model, self.vocab_size, \
            self.max_seq_len = (int(meta[key]) for key in _CONFIG_KEYS)
        self._outputs = ["hidden"] + [f"new_{kind}_{i}" for i in range(self.n_layer)
                                      for kind in ("keys", "values")]
        self._head: Any = None
        self._bound: _Binding | None = None
        if output_embedding is not None:
            if tuple(output_embedding.shape) != (self.vocab_size, self.d_model):
                raise RescorerError(
                    f"output_embedding must be [V, d] = [{self.vocab_size}, {self.d_model}], got "
                    f"{tuple(output_embedding.shape)}"
                )
            self._head = ort.InferenceSession(_head_graph(output_embedding), options,
                                              providers=self._providers)

    @staticmethod
    def _pick_providers(ort: Any, device: str) -> list[Any]:
        dev = torch.device(device)
        if dev.type == "cuda":
            if "CUDAExecutionProvider" not in ort.get_available_providers():
                raise RescorerError(
                    f"device {device!r} asks for ONNX Runtime's CUDAExecutionProvider, but this "
                    f"onnxruntime has only {ort.get_available_providers()}; install "
                    "onnxruntime-gpu or use device='cpu'"
                )
            return [("CUDAExecutionProvider", {"device_id": dev.index or 0}),
                    "CPUExecutionProvider"]
        if dev.type == "cpu":
            return ["CPUExecutionProvider"]
        raise RescorerError(f"the onnx backend runs on 'cpu' or 'cuda', got {device!r}")

    @property
    def providers(self) -> list[str]:
        """The execution providers the step session uses, preferred first."""
        return list(self.session.get_providers())

    def new_cache(self, batch_size: int = 1, capacity: int = 0) -> OnnxCache:
        """An empty cache of ``batch_size`` rows (``capacity``: positions to allocate now;
        :meth:`step` grows the buffers as needed)."""
        nh, hs = self.n_head, self.head_dim
        return OnnxCache(
            tuple(np.zeros((batch_size, nh, hs, capacity), np.float32)
                  for _ in range(self.n_layer)),
            tuple(np.zeros((batch_size, nh, capacity, hs), np.float32)
                  for _ in range(self.n_layer)),
            0,
        )

    def capacity_for(self, length: int) -> int:
        """The buffer size allocated for ``length`` positions: ``length + 32`` rounded up to a
        multiple of 64, at most ``max_seq_len`` (attention runs over the whole buffer, so it
        stays tight; growing copies it once per 32 to 96 positions)."""
        want = length + _MIN_CAPACITY // 2
        return min(self.max_seq_len, -(-want // _MIN_CAPACITY) * _MIN_CAPACITY)

    def step(self, input_ids: np.ndarray, cache: OnnxCache) -> tuple[np.ndarray, OnnxCache]:
        """One incremental forward of ``input_ids`` after ``cache``.

        Args:
            input_ids: int64 ``[B, T]``, ``T >= 1``.
            cache: ``B`` rows (from :meth:`new_cache`, an earlier step, ``crop`` or ``rows``).

        Returns:
            ``hidden`` float32 ``[B, T, d]`` (the final normed hidden states; ``logits`` gives
            the next-token logits) and the cache of ``length + T`` positions: the same buffers
            written in place, or grown ones.

        Raises:
            RescorerError: on a batch mismatch, or when ``length + T`` exceeds ``max_seq_len``.

        A single token on a single row (the greedy search's every call) runs through an
        I/O binding of fixed arrays, updated in place; other calls pass numpy feeds.
        """
        ids = np.ascontiguousarray(input_ids, dtype=np.int64)
        b, t = ids.shape
        past = cache.length
        total = past + t
        if cache.batch_size != b:
            raise RescorerError(f"the cache has {cache.batch_size} rows, input_ids {b}; "
                                "select rows first (cache.rows)")
        if total > self.max_seq_len:
            raise RescorerError(
                f"{past} cached + {t} new positions exceed the model's max_seq_len = "
                f"{self.max_seq_len}"
            )
        if total > cache.capacity:
            cache = cache.grown(self.capacity_for(total))
        if b == 1 and t == 1:
            hidden, new_keys, new_values = self._step_bound(int(ids[0, 0]), cache)
        else:
            hidden, new_keys, new_values = self._step_fed(ids, cache)
        for i in range(self.n_layer):
            cache.keys[i][..., past:total] = new_keys[i][0]  # (B, nh, hs, T)
            cache.values[i][:, :, past:total] = new_values[i][0]  # (B, nh, T, hs)
        return hidden, OnnxCache(cache.keys, cache.values, total)

    def _step_fed(self, ids: np.ndarray, cache: OnnxCache) -> tuple[np.ndarray, list[Any],
                                                                     list[Any]]:
        t, past, cap = ids.shape[1], cache.length, cache.capacity
        bias = np.full((t, cap + t), -np.inf, np.float32)  # (T, P + T)
        bias[:, :past] = 0.0
        bias[:, cap:][np.tri(t, dtype=bool)] = 0.0  # causal among the new tokens
        feeds: dict[str, np.ndarray] = {
            "input_ids": ids,
            "positions": np.arange(past, past + t, dtype=np.int64),
            "attn_bias": bias,
            "split_sizes": np.array([cap, t], np.int64),
        }
        for i in range(self.n_layer):
            feeds[f"past_keys_{i}"] = cache.keys[i]
            feeds[f"past_values_{i}"] = cache.values[i]
        out = self.session.run(self._outputs, feeds)
        return out[0], out[1::2], out[2::2]

    def _step_bound(self, token: int, cache: OnnxCache) -> tuple[np.ndarray, list[Any],
                                                                  list[Any]]:
        bound = self._bound
        if bound is None or bound.keys is not cache.keys:
            bound = self._bound = _Binding(self, cache)
        bound.ids[0, 0] = token
        bound.positions[0] = cache.length
        bound.set_length(cache.length)
        self.session.run_with_iobinding(bound.io)
        return bound.hidden.copy(), bound.new_keys, bound.new_values

    def logits(self, hidden: np.ndarray) -> np.ndarray:
        """float32 ``[N, V]`` raw next-token logits of hidden states ``[N, d]``.

        Raises:
            RescorerError: when the runner was made without ``output_embedding``.
        """
        if self._head is None:
            raise RescorerError("this runner has no output_embedding: pass it to project")
        h = np.ascontiguousarray(hidden, dtype=np.float32).reshape(-1, self.d_model)
        return self._head.run(None, {"hidden": h})[0]  # type: ignore[no-any-return]


class _Binding:
    """The step session's inputs and outputs for one token on one row, bound once to arrays
    that each call updates in place (ids, position, the bias row) or reads (outputs), over the
    buffers of one cache (rebound when they change: a new cache, or grown buffers)."""

    def __init__(self, runner: OnnxStepRunner, cache: OnnxCache) -> None:
        from onnxruntime import OrtValue

        nh, hs, cap = runner.n_head, runner.head_dim, cache.capacity
        self.keys = cache.keys
        self.ids = np.zeros((1, 1), np.int64)
        self.positions = np.zeros(1, np.int64)
        self.bias = np.full((1, cap + 1), -np.inf, np.float32)  # (1, P + 1)
        self.bias[0, cap] = 0.0  # the new token sees itself
        self.length = 0  # bias[0, :length] = 0
        self.hidden = np.zeros((1, 1, runner.d_model), np.float32)
        self.new_keys = [np.zeros((1, 1, nh, hs, 1), np.float32) for _ in range(runner.n_layer)]
        self.new_values = [np.zeros((1, 1, nh, 1, hs), np.float32)
                           for _ in range(runner.n_layer)]
        arrays = {"input_ids": self.ids, "positions": self.positions, "attn_bias": self.bias,
                  "split_sizes": np.array([cap, 1], np.int64)}
        for i in range(runner.n_layer):
            arrays[f"past_keys_{i}"] = cache.keys[i]
            arrays[f"past_values_{i}"] = cache.values[i]
        self._values = {name: OrtValue.ortvalue_from_numpy(arr) for name, arr in arrays.items()}
        outputs = [self.hidden] + [a for i in range(runner.n_layer)
                                   for a in (self.new_keys[i], self.new_values[i])]
        self.io = runner.session.io_binding()
        for name, value in self._values.items():
            self.io.bind_ortvalue_input(name, value)
        for name, arr in zip(runner._outputs, outputs, strict=True):
            value = OrtValue.ortvalue_from_numpy(arr)  # written in place by the session
            self._values[name] = value
            self.io.bind_ortvalue_output(name, value)

    def set_length(self, length: int) -> None:
        """Unmask the buffer's first ``length`` positions, mask the rest."""
        if length > self.length:
            self.bias[0, self.length : length] = 0.0
        elif length < self.length:
            self.bias[0, length : self.length] = -np.inf
        self.length = length
