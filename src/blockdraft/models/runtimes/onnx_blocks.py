"""Precision ``q4``: a Llama-family decoder and its base head built from the model's GGUF file's
own blocks, on ONNX Runtime's ``com.microsoft.MatMulNBits`` (no weight re-quantised, no float32
copy of any; the rest of the graph is :mod:`.onnx_graph`'s, the heads' graphs stay float32).

The mappings (:mod:`blockdraft.models.hf.gguf_blocks` reads the blocks). Each is exact: the
weights the graph's operands define, ``(code - zero point) * scale (+ r)``, are the values the
GGUF reader (and so the loaded model) has, bit for bit (checked at every export, tested):

    Q4_1 linear  ``d * q + m`` a block of 32: ``MatMulNBits`` (4 bits, blocks of 32) of the codes
                 ``q`` (re-packed: llama.cpp keeps value ``i`` and ``i + 16`` in byte ``i``, ONNX
                 Runtime values ``2i`` and ``2i + 1``), the scales ``d`` and a uint8 zero point
                 ``z = clip(round(-m / d), 0, 15)`` a block, plus the float32 term
                 ``BlockSum(x) [M, K/32] @ r.T`` with ``r = m + z d``: every weight is
                 ``(q - z) d + r = d q + m``. ``r`` must be exact in float32; a block where it
                 is not takes ``z = 0`` (``r = m``, exact).
    Q8_0 linear  ``d * q``: ``MatMulNBits`` (8 bits) of the codes ``q + 128`` with the default
                 zero point 128 (the tied output head of SmolLM2 is one).
    embedding    a ``Gather`` of the codes and the scales a row: ``float(q) * d`` (Q8_0),
                 ``float(q) * d + m`` (Q4_1), as the reader computes them.

Every ``MatMulNBits`` runs at ``accuracy_level`` 4 (:data:`ACCURACY_LEVEL`): the activations are
quantised to int8 per row and block of 32, and MLAS's kernel is then the same for one row and
for many, so a token's numbers do not depend on the other tokens of its forward (with the
runtime's two-row step for one token: GroupQueryAttention's one-token path is the exception);
levels 0 and 1 take a different kernel for one row, and have no kernel for 8-bit weights (each
call would dequantise the head). The int8 activations round the last-bit differences of a token
tree's attention sums into other tokens now and then, so ``q4`` declares ``exact_trees`` False:
the verifier confirms a tree's accepted path with a chain forward.

Other block types (Q4_0, the K-quants, F16, ...) have no exact mapping here and are refused by
name, every such tensor listed (use precision float32 or int8: the dequantised weights).

Public surface:
    ACCURACY_LEVEL, LINEAR_TYPES, EMBEDDING_TYPES
    Q41Operands (codes, scales, zero_points, residual);  q4_1_operands(matrix)
    q8_0_operands(matrix) -> (codes, scales)
    block_linear(g, x, matrices, name) -> str       x [M, K] @ W.T, W the matrices' rows fused
    block_embedding(g, ids, matrix) -> str          the embeddings of ids [T]: [T, d]
    BlockLinears(base, parts, embed, head, source)  a body's weights from a GGUF file
    gguf_linears(path, spec, model) -> BlockLinears  read, mapped and checked against the model
    block_projection_graph(spec, head, bias) -> onnx.ModelProto   the base head on its blocks
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from blockdraft.models.errors import ModelError
from blockdraft.models.hf.gguf_blocks import (
    BLOCK_VALUES,
    Q4_1,
    Q8_0,
    BlockMatrix,
    GGUFBlocks,
    dequantize,
    llama_row_order,
    q4_1_fields,
    q8_0_fields,
    type_name,
)
from blockdraft.models.runtimes.onnx_graph import Builder, GraphSpec, Linears, numpy_of

ACCURACY_LEVEL = 4
"""``MatMulNBits``' ``accuracy_level``: int8 activations, one kernel for every row count."""
LINEAR_TYPES = (Q4_1, Q8_0)
"""Block types a linear layer (and the base head) maps from exactly."""
EMBEDDING_TYPES = (Q4_1, Q8_0)
"""Block types the embedding gathers from exactly."""
_TENSORS = {"qkv": ("attn_q", "attn_k", "attn_v"), "o_proj": ("attn_output",),
            "gate_up": ("ffn_gate", "ffn_up"), "down": ("ffn_down",)}
"""Each fused linear layer's GGUF tensors (``blk.<i>.<name>.weight``), in the order of
:meth:`Linears.modules`."""


@dataclass(frozen=True)
class Q41Operands:
    """``MatMulNBits``' operands of a Q4_1 matrix ``[N, K]`` (``nb = K / 32``) and its residual.

    Attributes:
        codes: uint8 ``[N, nb, 16]``: value ``2i`` in the low nibble of byte ``i``, ``2i + 1``
            in the high one.
        scales: float32 ``[N, nb]``, each block's ``d``.
        zero_points: uint8 ``[N, ceil(nb / 2)]``: block ``2j``'s in the low nibble of byte
            ``j``, ``2j + 1``'s in the high one.
        residual: float32 ``[N, nb]``, each block's ``r = m + z d`` (exact).
    """

    codes: np.ndarray
    scales: np.ndarray
    zero_points: np.ndarray
    residual: np.ndarray


def q4_1_operands(matrix: BlockMatrix) -> Q41Operands:
    """The operands of a Q4_1 matrix (see the module docstring)."""
    d, m, codes = q4_1_fields(matrix.data)  # (N, nb), (N, nb), (N, nb, 32)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(d != 0, np.clip(np.rint(-m / d), 0, 15), 0).astype(np.uint8)  # (N, nb)
    exact = m.astype(np.float64) + z.astype(np.float64) * d.astype(np.float64)
    residual = exact.astype(np.float32)
    rounded = residual.astype(np.float64) != exact
    z[rounded] = 0  # r = m there: exact by itself
    residual[rounded] = m[rounded]
    n, nb = z.shape
    padded = np.zeros((n, nb + nb % 2), np.uint8)
    padded[:, :nb] = z
    return Q41Operands(
        codes=(codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8),
        scales=d, zero_points=(padded[:, 0::2] | (padded[:, 1::2] << 4)).astype(np.uint8),
        residual=residual)


def q8_0_operands(matrix: BlockMatrix) -> tuple[np.ndarray, np.ndarray]:
    """The 8-bit ``MatMulNBits`` operands of a Q8_0 matrix ``[N, K]``: the codes ``q + 128``
    uint8 ``[N, nb, 32]`` (zero point 128, the operator's default) and the scales float32
    ``[N, nb]``."""
    d, q = q8_0_fields(matrix.data)
    return (q.astype(np.int16) + 128).astype(np.uint8), d


def _stacked(matrices: Sequence[BlockMatrix]) -> list[BlockMatrix]:
    """Consecutive matrices of one type fused into one (their rows one after another)."""
    groups: list[list[BlockMatrix]] = []
    for m in matrices:
        if groups and groups[-1][0].ggml_type == m.ggml_type:
            groups[-1].append(m)
        else:
            groups.append([m])
    return [group[0] if len(group) == 1 else BlockMatrix(
        "+".join(m.name for m in group), group[0].ggml_type,
        np.concatenate([m.data for m in group])) for group in groups]


def _nbits(g: Builder, x: str, matrix: BlockMatrix, name: str) -> str:
    """One ``MatMulNBits`` (plus the Q4_1 residual term): ``x [M, K] -> [M, N]``."""
    attrs = {"K": matrix.cols, "N": matrix.rows, "block_size": BLOCK_VALUES,
             "accuracy_level": ACCURACY_LEVEL}
    if matrix.ggml_type == Q8_0:
        codes, scales = q8_0_operands(matrix)
        return g.op("MatMulNBits", [x, g.const(f"{name}.codes", codes),  # type: ignore[no-any-return]
                                    g.const(f"{name}.scales", scales)],
                    f"{name}.mm", domain="com.microsoft", bits=8, **attrs)
    ops = q4_1_operands(matrix)
    nb = matrix.blocks
    y = g.op("MatMulNBits", [x, g.const(f"{name}.codes", ops.codes),
                             g.const(f"{name}.scales", ops.scales),
                             g.const(f"{name}.zero_points", ops.zero_points)],
             f"{name}.nbits", domain="com.microsoft", bits=4, **attrs)  # (M, N)
    blocked = g.op("Reshape", [x, g.const(f"blocks{nb}.shape", np.array(
        [0, nb, BLOCK_VALUES], np.int64))], f"{name}.xb")  # (M, nb, 32)
    sums = g.op("ReduceSum", [blocked, g.const("blocks.axes", np.array([-1], np.int64))],
                f"{name}.sums", keepdims=0)  # (M, nb)
    rest = g.op("MatMul", [sums, g.const(f"{name}.residual", ops.residual.T)],
                f"{name}.rest")  # (M, N)
    return g.op("Add", [y, rest], f"{name}.mm")  # type: ignore[no-any-return]


def block_linear(g: Builder, x: str, matrices: Sequence[BlockMatrix], name: str) -> str:
    """``x [M, K] @ W.T`` with ``W`` the rows of ``matrices`` one after another (a fused
    projection; matrices of one type in one ``MatMulNBits``): ``[M, sum of rows]``."""
    groups = _stacked(matrices)
    if len(groups) == 1:
        return _nbits(g, x, groups[0], name)
    return g.op("Concat", [_nbits(g, x, m, f"{name}.g{j}") for j, m in  # type: ignore[no-any-return]
                           enumerate(groups)], f"{name}.mm", axis=-1)


def block_embedding(g: Builder, ids: str, matrix: BlockMatrix) -> str:
    """The embeddings of ``ids [T]`` gathered from the blocks of ``matrix [V, d]``, computed as
    the reader computes them: ``"embedded" [T, d]``."""
    if matrix.ggml_type == Q8_0:
        d, q = q8_0_fields(matrix.data)  # (V, nb), (V, nb, 32) int8
        mins = None
    else:
        d, mins, q = q4_1_fields(matrix.data)  # q: uint8 0..15
    codes = g.op("Cast", [g.op("Gather", [g.const("embed.codes", q), ids], "embed.q")],
                 "embed.qf", to=g.TensorProto.FLOAT)  # (T, nb, 32)
    values = g.op("Mul", [g.op("Gather", [g.const("embed.scales", d[..., None]), ids],
                               "embed.d"), codes], "embed.dq")  # (T, nb, 32)
    if mins is not None:
        values = g.op("Add", [values, g.op("Gather", [g.const("embed.mins", mins[..., None]),
                                                      ids], "embed.m")], "embed.dqm")
    return g.op("Reshape", [values, g.const("embed.shape", np.array(  # type: ignore[no-any-return]
        [0, matrix.cols], np.int64))], "embedded")


class BlockLinears(Linears):
    """A Llama-family body's embedding and linear layers from a GGUF file's blocks (the biases,
    when the model has any, from its own float32 weights).

    Args:
        base: the transformers model the file was loaded into.
        parts: ``(part, layer) ->`` its matrices in the order of :meth:`Linears.modules` (q/k
            rows in the model's order).
        embed: the token embedding matrix ``[V, d]``.
        head: the base head's matrix ``[V, d]`` (``embed`` when tied).
        source: the GGUF file.
    """

    def __init__(self, base: Any, parts: dict[tuple[str, int], tuple[BlockMatrix, ...]],
                 embed: BlockMatrix, head: BlockMatrix, source: Path) -> None:
        super().__init__(base)
        self.parts, self.embed, self.head, self.source = parts, embed, head, source

    def embedding(self, g: Builder, ids: str) -> str:
        return block_embedding(g, ids, self.embed)

    def linear(self, g: Builder, x: str, part: str, layer: int, name: str) -> str:
        y = block_linear(g, x, self.parts[part, layer], name)
        bias = self.bias(part, layer)
        if bias is None:
            return y
        return g.op("Add", [y, g.const(f"{name}.bias", bias)],  # type: ignore[no-any-return]
                    f"{name}.out")


def gguf_linears(path: str | Path, spec: GraphSpec, model: Any) -> BlockLinears:
    """The blocks of ``model``'s GGUF file ``path`` for its ``q4`` body and head, each checked
    to dequantise to the model's own weight bit for bit.

    Args:
        path: the ``.gguf`` file the model was loaded from.
        spec: the model's :class:`~.onnx_graph.GraphSpec` (a Llama-family one).
        model: the :class:`~blockdraft.models.hf.HFBlockwiseModel`.

    Raises:
        ModelError: a family other than Llama's; a damaged file, or one without a tensor the
            model needs (naming it); tensors of a type with no exact mapping (every one named,
            with its type); a tensor whose values are not the model's weight (the model was
            loaded from another file).
    """
    if spec.family != "llama":
        raise ModelError(f"precision 'q4' builds Llama-family decoders (llama, mistral, qwen2) "
                         f"from their GGUF blocks; this model is {spec.family!r}: use precision "
                         "'float32' or 'int8'")
    blocks = GGUFBlocks(path)
    names = {(part, i): tuple(f"blk.{i}.{t}.weight" for t in tensors)
             for i in range(spec.n_layer) for part, tensors in _TENSORS.items()}
    head_name = "output.weight" if "output.weight" in blocks else "token_embd.weight"
    wanted = [*(n for group in names.values() for n in group), head_name, "token_embd.weight"]
    missing = [n for n in wanted if n not in blocks]
    if missing:
        raise ModelError(f"GGUF file {blocks.path} has no tensor {missing[0]!r} (of "
                         f"{len(missing)} missing): it is not a Llama-family model file")
    refused = [(n, blocks.type_of(n)) for n in dict.fromkeys(wanted)
               if blocks.type_of(n) not in (EMBEDDING_TYPES if n == "token_embd.weight"
                                            else LINEAR_TYPES)]
    if refused:
        shown = ", ".join(f"{n} ({type_name(t)})" for n, t in refused[:6])
        more = f" and {len(refused) - 6} more" if len(refused) > 6 else ""
        raise ModelError(
            f"precision 'q4' maps Q4_1 and Q8_0 blocks onto ONNX Runtime exactly; GGUF file "
            f"{blocks.path} holds {shown}{more}, which have no exact mapping: use precision "
            "'float32' or 'int8' (the dequantised weights)")
    order = {"attn_q": spec.n_head, "attn_k": spec.n_kv_head}  # transformers' q/k rows
    permute = blocks.header.architecture == "llama"
    torch_weights = Linears(model.base)
    parts: dict[tuple[str, int], tuple[BlockMatrix, ...]] = {}
    for (part, i), group in names.items():
        mats = []
        for name, module in zip(group, torch_weights.modules(part, i), strict=True):
            matrix = blocks.matrix(name)
            heads = order.get(name.split(".")[2])
            if permute and heads is not None:
                matrix = matrix.reordered(llama_row_order(matrix.rows, heads))
            _check_same(matrix, module.weight, blocks.path)
            mats.append(matrix)
        parts[part, i] = tuple(mats)
    embed = blocks.matrix("token_embd.weight")
    _check_same(embed, model.base.get_input_embeddings().weight, blocks.path)
    head = embed if head_name == "token_embd.weight" else blocks.matrix(head_name)
    _check_same(head, model.lm_head.weight, blocks.path)
    return BlockLinears(model.base, parts, embed, head, blocks.path)


def _check_same(matrix: BlockMatrix, weight: Any, path: Path) -> None:
    """Refuse blocks whose values are not ``weight``'s (float32 bit for bit)."""
    want = numpy_of(weight)
    got = dequantize(matrix)
    if got.shape != want.shape:
        raise ModelError(f"tensor {matrix.name!r} of GGUF file {path} is {got.shape[0]} x "
                         f"{got.shape[1]}, the model's weight {want.shape[0]} x {want.shape[1]}: "
                         "the model was not loaded from this file; pass the one it was")
    differ = int(np.count_nonzero(got.view(np.uint32) != want.view(np.uint32)))
    if differ:
        raise ModelError(f"tensor {matrix.name!r} of GGUF file {path} dequantises to other "
                         f"values than the model's weight ({differ:,} of {got.size:,} differ): "
                         "the model was not loaded from this file; pass the one it was")


def block_projection_graph(spec: GraphSpec, head: BlockMatrix, bias: np.ndarray | None) -> Any:
    """``projection`` in ``q4``: ``states [M, d] -> logits [M, V]``, the base head on its
    blocks (``bias``: the head's float32 bias, or None)."""
    g = Builder("q4")
    f = g.TensorProto.FLOAT
    g.input("states", f, ["M", spec.d_model])
    logits = block_linear(g, "states", [head], "lm_head")
    if bias is not None:
        logits = g.op("Add", [logits, g.const("lm_head.bias", bias)], "lm_head.out")
    g.op("Identity", [logits], "logits")
    g.output("logits", f, ["M", spec.vocab_size])
    return g.model("projection")
