"""The ONNX graphs of the heads, each kind's, built from their weights (the graphs of the
decoder and the base head: :mod:`.onnx_graph`; the sessions that run these: :mod:`.onnx_heads`).

**Medusa heads** (:func:`medusa_graphs`):

``resblocks``: ``x [M, d] -> states [M, h - 1, d]``, every Medusa head's ResBlocks.
``own`` (heads with their own projections): ``states [M, h - 1, d] -> [M, h - 1, V]``.
``drafts`` (heads that share ``lm_head``): the next step's lattice slots in one run::

    inputs   x float [M, d] (final hidden states), k int64 [1]
    outputs  ids int64 [M, h - 1, k]    each Medusa head's top k, (logit desc, id asc)
             scores float [M, h - 1, k] their log_softmax over the head's vocabulary

the ResBlocks, the projection onto the heads' shortlist (its ``[Vs, d]`` rows of ``lm_head``;
the whole vocabulary without one), ``TopK`` (ties to the lower column: the shortlist ascends,
so to the smaller id), ``ReduceLogSumExp`` and the column -> token id ``Gather``.

**Prefix-conditioned heads** (:func:`prefix_graphs`; :mod:`blockdraft.models.heads.prefix`):
no ``resblocks``; their ``drafts`` is the greedy chain (inputs ``x``, ``e0 [M, d]`` the
embedding of the base's greedy token, ``k``; head ``j`` reads the embedding of head ``j - 1``'s
argmax; it also outputs each head's ``states``), and ``expand{j}`` scores nodes of their tree
lattice by head ``j``, a node a row (inputs ``x``, ``e`` the embedding of the node's last token,
``k`` -> ``ids``/``scores [M, k]``).

**An EAGLE draft layer** (kind ``"draft-layer"``): ``draft_layer``, one call of the layer with
its cache as inputs and outputs (:mod:`.onnx_eagle_graph`).

In ``int8`` the heads' matmuls are 8-bit integer products with per-row activation scales, as
the decoder's (:class:`~.onnx_graph.Builder`); the projections onto the vocabulary stay
float32. Whatever the base's precision, every graph is then put in the heads' own
``draft_precision`` (:mod:`blockdraft.models.heads.draft_precision`): float32 as built, or its
matmuls on constant 2-D weights as int8 or 4-bit ``MatMulNBits`` (:mod:`.onnx_quantize`).

Public surface:
    HEAD_GRAPHS                kind -> its graphs' builder
    head_graphs(spec, model, precision) -> {name: onnx.ModelProto}   the heads' graphs, in
        their draft precision
    medusa_graphs(...), prefix_graphs(...)
    head_blocks(g, y, heads, j), shortlist_topk(g, states, lm_head, rows, out)   shared pieces
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from blockdraft.models.errors import ModelError
from blockdraft.models.heads.draft_precision import check_draft_precision
from blockdraft.models.heads.eagle_config import CAPABILITY_KIND
from blockdraft.models.runtimes.onnx_eagle_graph import eagle_graphs
from blockdraft.models.runtimes.onnx_graph import Builder, GraphSpec, bias_of, numpy_of
from blockdraft.models.runtimes.onnx_quantize import quantized


def head_blocks(g: Builder, y: str, heads: Any, j: int, tag: str = "") -> str:
    """Medusa head ``j``'s ResBlocks on ``y [M, d]`` (``y + SiLU(W y + b)``, ``L`` times)."""
    for layer in range(heads.num_layers):
        block = heads.block(j, layer)
        name = f"h{j}.b{layer}{tag}"
        z = g.linear(y, numpy_of(block.linear.weight), bias_of(block.linear), name)
        silu = g.op("Mul", [z, g.op("Sigmoid", [z], f"{name}.sig")], f"{name}.silu")
        y = g.op("Add", [y, silu], f"{name}.res")
    return y


def _medusa_states(g: Builder, x: str, heads: Any) -> str:
    """Every Medusa head's ResBlocks on ``x [M, d]``: the node ``states [M, h - 1, d]``."""
    states = [g.op("Unsqueeze", [head_blocks(g, x, heads, j),
                                 g.const(f"h{j}.axis", np.array([1], np.int64))],
                   f"h{j}.state") for j in range(heads.num_heads)]  # (M, 1, d) each
    return g.op("Concat", states, "states", axis=1)  # type: ignore[no-any-return]


def _resblocks(spec: GraphSpec, heads: Any, precision: str) -> Any:
    """``resblocks``: ``x [M, d] -> states [M, h - 1, d]``, every Medusa head's ResBlocks."""
    g = Builder(precision)
    f = g.TensorProto.FLOAT
    _medusa_states(g, g.input("x", f, ["M", spec.d_model]), heads)  # (M, h - 1, d)
    g.output("states", f, ["M", spec.h - 1, spec.d_model])
    return g.model("resblocks")


def shortlist_topk(g: Builder, states: str, lm_head: Any, rows: Any, out: str) -> str:
    """``states [..., d]`` projected onto the shortlist's rows of ``lm_head`` (the whole
    vocabulary without one): ``{out}.ids``/``{out}.scores [..., k]`` (top ``k`` by logit,
    ties to the lower column; log-probabilities over the shortlist); returns the logits'
    name ``[..., Vs]``."""
    weight = numpy_of(lm_head.weight if rows is None else lm_head.weight[rows])  # (Vs, d)
    bias = bias_of(lm_head)
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
    """``drafts``: every Medusa head's top ``k`` at ``x [M, d]`` in one run (module
    docstring)."""
    g = Builder(precision)
    f, i64 = g.TensorProto.FLOAT, g.TensorProto.INT64
    g.input("k", i64, [1])
    stacked = _medusa_states(g, g.input("x", f, ["M", spec.d_model]), heads)  # (M, h - 1, d)
    shortlist_topk(g, stacked, lm_head, heads.shortlist, "all")
    g.op("Identity", ["all.ids"], "ids")
    g.op("Identity", ["all.scores"], "scores")
    g.output("ids", i64, ["M", spec.h - 1, "k"])
    g.output("scores", f, ["M", spec.h - 1, "k"])
    return g.model("drafts")


def _prefix_input(g: Builder, x: str, previous: str, heads: Any, j: int, tag: str) -> str:
    """Prefix head ``j``'s input ``x + P_j e`` (``e [M, d]``: the embedding of the token
    before its target)."""
    shifted = g.linear(previous, numpy_of(heads.prefix[j].weight), None, f"p{j}{tag}")
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
    g = Builder(precision)
    f, i64 = g.TensorProto.FLOAT, g.TensorProto.INT64
    g.input("k", i64, [1])
    x = g.input("x", f, ["M", spec.d_model])
    previous = g.input("e0", f, ["M", spec.d_model])
    rows = heads.shortlist
    table = g.const("short.embed", numpy_of(embed if rows is None else embed[rows]))  # (Vs, d)
    axis = g.const("axis1", np.array([1], np.int64))
    states, ids, scores = [], [], []
    for j in range(heads.num_heads):
        state = head_blocks(g, _prefix_input(g, x, previous, heads, j, ""), heads, j)
        logits = shortlist_topk(g, state, lm_head, rows, f"c{j}")  # (M, Vs)
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
    g = Builder(precision)
    f, i64 = g.TensorProto.FLOAT, g.TensorProto.INT64
    g.input("k", i64, [1])
    x = g.input("x", f, ["M", spec.d_model])
    e = g.input("e", f, ["M", spec.d_model])
    state = head_blocks(g, _prefix_input(g, x, e, heads, j, ""), heads, j)  # (M, d)
    shortlist_topk(g, state, lm_head, heads.shortlist, "x")
    g.op("Identity", ["x.ids"], "ids")
    g.op("Identity", ["x.scores"], "scores")
    g.output("ids", i64, ["M", "k"])
    g.output("scores", f, ["M", "k"])
    return g.model(f"expand{j}")


def _own_projection(spec: GraphSpec, heads: Any) -> Any:
    """``own``: ``states [M, h - 1, d] -> logits [M, h - 1, V]``, each head's own matrix."""
    g = Builder("float32")
    f = g.TensorProto.FLOAT
    g.input("states", f, ["M", spec.h - 1, spec.d_model])
    weights = np.stack([numpy_of(heads.projection(j).weight).T for j in range(heads.num_heads)])
    by_head = g.op("Transpose", ["states"], "by_head", perm=[1, 0, 2])  # (h - 1, M, d)
    logits = g.op("MatMul", [by_head, g.const("own.weight", weights)], "own.mm")  # (h-1, M, V)
    g.op("Transpose", [logits], "logits", perm=[1, 0, 2])  # (M, h - 1, V)
    g.output("logits", f, ["M", spec.h - 1, spec.vocab_size])
    return g.model("own_projection")


def medusa_graphs(spec: GraphSpec, model: Any, precision: str) -> dict[str, Any]:
    """Medusa heads' graphs: ``resblocks``, and ``own`` (their own projections) or ``drafts``."""
    graphs = {"resblocks": _resblocks(spec, model.heads, precision)}
    if spec.own_projection:
        graphs["own"] = _own_projection(spec, model.heads)
    else:
        graphs["drafts"] = _drafts(spec, model.heads, model.lm_head, precision)
    return graphs


def prefix_graphs(spec: GraphSpec, model: Any, precision: str) -> dict[str, Any]:
    """Prefix heads' graphs: ``drafts`` (their greedy chain) and ``expand0 .. expand{n-1}``."""
    embed = model.base.get_input_embeddings().weight
    graphs = {"drafts": _prefix_drafts(spec, model.heads, model.lm_head, embed, precision)}
    graphs.update({f"expand{j}": _prefix_expand(spec, model.heads, model.lm_head, precision, j)
                   for j in range(model.heads.num_heads)})
    return graphs


HEAD_GRAPHS: dict[str, Callable[[GraphSpec, Any, str], dict[str, Any]]] = {
    "medusa": medusa_graphs, "prefix": prefix_graphs, CAPABILITY_KIND: eagle_graphs}
"""Each kind's graphs (``spec, model, precision -> {name: onnx.ModelProto}``)."""


def head_graphs(spec: GraphSpec, model: Any, precision: str) -> dict[str, Any]:
    """The graphs of ``model``'s heads, by their kind (``spec.heads``), in the heads'
    ``draft_precision`` (the module docstring).

    Raises:
        ModelError: heads of a kind this runtime builds no graphs for, or an unknown draft
            precision.
    """
    build = HEAD_GRAPHS.get(spec.heads)
    if build is None:
        raise ModelError(f"the ONNX Runtime model builds the graphs of {', '.join(HEAD_GRAPHS)} "
                         f"heads, not {spec.heads!r}: use runtime='torch'")
    draft = check_draft_precision(model.heads.draft_precision, "draft_precision")
    return {name: quantized(proto, draft)
            for name, proto in build(spec, model, precision).items()}
