"""Precision q4 on ONNX Runtime (issue 39): the decoder and the base head built from the GGUF
file's own Q4_1 and Q8_0 blocks (MatMulNBits at accuracy level 4). On a tiny Llama GGUF file of
such blocks: the graph's weights are the reader's values bit for bit (and no float32 copy of
any), a token's numbers do not depend on its forward's length, every drafter decodes exactly
q4's own greedy output (token trees through a confirming chain forward), a file of other
block types, a damaged one or another model's is refused naming the tensor, and the export is
sealed and cached under a key that holds the file's digest."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from gguf_testlib import BLOCK_D, write_block_gguf
from hf_testlib import randomize, tiny_hf_base

pytest.importorskip("gguf")
pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

from blockdraft.core.errors import BlockdraftWarning  # noqa: E402
from blockdraft.drafts import (  # noqa: E402
    CombinedDrafter,
    DraftSpec,
    HeadDrafter,
    LookupDrafter,
)
from blockdraft.models import ModelError, greedy_generate, load_model  # noqa: E402
from blockdraft.models.hf import HFBlockwiseModel, MedusaHeads  # noqa: E402
from blockdraft.models.hf.gguf_blocks import (  # noqa: E402
    Q4_1,
    Q8_0,
    BlockMatrix,
    GGUFBlocks,
    dequantize,
)
from blockdraft.models.hf.prefix_heads import PrefixHeads  # noqa: E402
from blockdraft.models.runtimes import on_runtime, onnx_export  # noqa: E402
from blockdraft.models.runtimes.onnx_blocks import (  # noqa: E402
    ACCURACY_LEVEL,
    block_embedding,
    block_linear,
    q4_1_operands,
)
from blockdraft.models.runtimes.onnx_graph import Builder  # noqa: E402
from blockdraft.models.runtimes.onnx_store import open_session  # noqa: E402
from blockdraft.verify import decode  # noqa: E402

V = 259
PROMPT = [5, 9, 2, 33, 7, 8, 9, 10, 11, 5, 9, 2, 33]


def _medusa(seed: int = 1) -> MedusaHeads:
    heads = MedusaHeads(BLOCK_D, None, 3, 1)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in heads.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return heads


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder with the tiny block GGUF file, and a private cache for the whole module."""
    folder = tmp_path_factory.mktemp("q4")
    write_block_gguf(folder / "tiny.Q4_1.gguf", seed=0)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BLOCKDRAFT_CACHE", str(folder / "cache"))
        yield folder


@pytest.fixture(scope="module")
def gguf_file(root: Path) -> Path:
    return root / "tiny.Q4_1.gguf"


@pytest.fixture(scope="module")
def model(gguf_file: Path) -> Any:
    """The PyTorch model transformers loads from the file (float32), with random Medusa heads."""
    return load_model(gguf_file, heads=_medusa())


@pytest.fixture(scope="module")
def q4(model: Any) -> Any:
    """The model on q4 (its GGUF file found from the folder it was dequantised into)."""
    return on_runtime(model, "onnxruntime", "q4", threads=1)


def _graphs(folder: Path) -> dict[str, Any]:
    import onnx

    return {name: onnx.load(str(folder / f"{name}.onnx")) for name in ("body", "projection")}


def _inits(proto: Any) -> dict[str, np.ndarray]:
    from onnx import numpy_helper

    return {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}


def _unpack4(packed: np.ndarray) -> np.ndarray:
    out = np.empty((*packed.shape[:-1], packed.shape[-1] * 2), np.uint8)
    out[..., 0::2], out[..., 1::2] = packed & 0x0F, packed >> 4
    return out


def _nbits_weights(node: Any, inits: dict[str, np.ndarray]) -> tuple[str, np.ndarray]:
    """(layer name, W [N, K] in float64) of a MatMulNBits node, by ONNX Runtime's definition
    ``(code - zero point) * scale`` per block, plus the Q4_1 residual term's ``r`` a block."""
    a = {x.name: x.i for x in node.attribute}
    codes, scales = inits[node.input[1]], inits[node.input[2]].astype(np.float64)
    codes = _unpack4(codes) if a["bits"] == 4 else codes  # (N, nb, 32)
    zero = np.full(scales.shape, 2.0 ** (a["bits"] - 1))
    if len(node.input) > 3 and node.input[3]:
        zero = _unpack4(inits[node.input[3]])[:, : scales.shape[1]].astype(np.float64)
    w = (codes.astype(np.float64) - zero[..., None]) * scales[..., None]
    name = node.output[0].rsplit(".", 1)[0]
    if f"{name}.residual" in inits:  # (nb, N): each block's r
        w = w + inits[f"{name}.residual"].T.astype(np.float64)[..., None]
    assert a["accuracy_level"] == ACCURACY_LEVEL and a["block_size"] == 32
    return name, w.reshape(a["N"], a["K"])


# ---- (1) the mapping -----------------------------------------------------------------------------
def test_every_block_weight_of_the_graphs_is_the_readers_value(q4: Any, model: Any,
                                                               gguf_file: Path) -> None:
    """Each MatMulNBits node (4 layers x 2 + the tied head) defines, from its initialisers,
    exactly the weights transformers loaded from the gguf reader (q/k rows in its order)."""
    import gguf

    reader = {t.name: t for t in gguf.GGUFReader(gguf_file).tensors}

    def read(name: str) -> np.ndarray:  # the gguf package's own dequantisation
        t = reader[name]
        return gguf.quants.dequantize(t.data, t.tensor_type).reshape(int(t.shape[1]),
                                                                     int(t.shape[0]))

    layers = model.base.base_model.layers

    def torch_weights(name: str) -> np.ndarray:
        if name == "lm_head":
            return model.lm_head.weight.detach().numpy()
        i, part = int(name.split(".")[0][1:]), name.split(".")[1]
        att, mlp = layers[i].self_attn, layers[i].mlp
        mods = {"qkv": [att.q_proj, att.k_proj, att.v_proj], "o_proj": [att.o_proj],
                "gate_up": [mlp.gate_proj, mlp.up_proj], "down": [mlp.down_proj]}[part]
        return np.concatenate([m.weight.detach().numpy() for m in mods])

    seen = []
    linear_sizes, float_sizes = [], {}
    for graph in _graphs(q4.export_folder).values():
        inits = _inits(graph)
        for node in graph.graph.node:
            if node.op_type != "MatMulNBits":
                continue
            name, w = _nbits_weights(node, inits)
            want = torch_weights(name)
            assert np.array_equal(w, want.astype(np.float64)), name
            seen.append(name)
            linear_sizes.append(w.size)
        float_sizes.update({k: v.size for k, v in inits.items() if v.dtype == np.float32
                            and k not in ("cos_cache", "sin_cache")})
    assert sorted(seen) == sorted([f"l{i}.{p}" for i in range(2)
                                   for p in ("qkv", "o_proj", "gate_up", "down")] + ["lm_head"])
    # transformers' values are the reader's (a tensor without a row permutation, and the head)
    assert np.array_equal(torch_weights("l1.down"), read("blk.1.ffn_down.weight"))
    assert np.array_equal(torch_weights("lm_head"), read("token_embd.weight"))
    # no float32 copy of any weight: every float32 initialiser is smaller than any matrix
    assert max(float_sizes.values()) < min(linear_sizes), float_sizes


def _subgraph(proto: Any, output: str) -> Any:
    """The nodes and initialisers of ``proto`` that compute ``output`` from ``input_ids``."""
    from onnx import TensorProto, helper

    need, nodes = {output}, []
    for node in reversed(proto.graph.node):
        if need & set(node.output):
            nodes.insert(0, node)
            need |= set(node.input)
    inits = [t for t in proto.graph.initializer if t.name in need]
    graph = helper.make_graph(
        nodes, "sub", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["T"])],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)], inits)
    sub = helper.make_model(graph, opset_imports=list(proto.opset_import))
    sub.ir_version = proto.ir_version
    return sub


def test_the_body_gathers_the_readers_embeddings(q4: Any, model: Any) -> None:
    embed = _subgraph(_graphs(q4.export_folder)["body"], "embedded")
    assert {n.op_type for n in embed.graph.node} <= {"Gather", "Cast", "Mul", "Add", "Reshape"}
    got = open_session(embed.SerializeToString(), 1).run(
        None, {"input_ids": np.arange(V, dtype=np.int64)})[0]
    want = model.base.get_input_embeddings().weight.detach().numpy()
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def _q4_1_rows(d: np.ndarray, m: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Q4_1 block bytes of rows: ``d``, ``m`` float16 ``[R, nb]``, codes ``[R, nb, 32]``."""
    packed = codes[..., :16] | (codes[..., 16:] << 4)
    blocks = np.concatenate([d.astype("<f2")[..., None].view(np.uint8),
                             m.astype("<f2")[..., None].view(np.uint8),
                             packed.astype(np.uint8)], axis=-1)
    return blocks.reshape(d.shape[0], -1)


def _quantized(kind: int, rows: int, cols: int, seed: int) -> BlockMatrix:
    import gguf

    values = np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32)
    return BlockMatrix(f"m{seed}", kind, gguf.quants.quantize(
        values, gguf.GGMLQuantizationType(kind)).reshape(rows, -1))


def _run_linear(matrices: list[BlockMatrix], x: np.ndarray) -> np.ndarray:
    g = Builder("q4")
    g.input("x", g.TensorProto.FLOAT, ["M", matrices[0].cols])
    g.op("Identity", [block_linear(g, "x", matrices, "lin")], "y")
    g.output("y", g.TensorProto.FLOAT, ["M", None])
    return open_session(g.model("lin").SerializeToString(), 1).run(None, {"x": x})[0]


def test_block_layers_compute_their_weights_and_rows_do_not_depend_on_the_others() -> None:
    """A fused layer of Q4_1 and Q8_0 matrices (two MatMulNBits, concatenated) computes
    ``x @ W.T`` for the reader's W: exactly enough on one-hot rows (each quantised to int8 without
    loss) to tell every weight, within int8 rounding on random rows, and each row with the
    same bits whether it runs alone or among 64 (accuracy level 4's one kernel for every M).
    A Q4_1 block whose ``m + z d`` is not exact in float32 takes zero point 0 (still exact)."""
    rng = np.random.default_rng(0)
    # rows of a Q4_1 matrix with one block where the nearest zero point's r rounds: m = -1000,
    # d = 1e-4 gives z = 15 and m + 15 d needs more than float32's 24 bits
    d = np.abs(rng.standard_normal((8, 2))).astype(np.float16) * np.float16(0.1)
    m = (-d.astype(np.float32) * 7).astype(np.float16)
    d[3, 1], m[3, 1] = np.float16(1e-4), np.float16(-1000)
    odd = BlockMatrix("odd", Q4_1, _q4_1_rows(d, m, rng.integers(0, 16, (8, 2, 32))))
    ops = q4_1_operands(odd)
    zero = _unpack4(ops.zero_points)[:, :2]
    assert zero[3, 1] == 0 and zero[0, 0] == 7 and ops.residual[3, 1] == np.float32(-1000)
    parts = [odd, _quantized(Q4_1, 24, 64, 1), _quantized(Q8_0, 16, 64, 2)]
    want = np.concatenate([dequantize(p) for p in parts]).astype(np.float64)  # (48, 64)
    eye = _run_linear(parts, np.eye(64, dtype=np.float32))  # (64, 48) = W.T
    np.testing.assert_allclose(eye, want.T, rtol=2e-6, atol=1e-6 * np.abs(want[3:]).max())
    x = rng.standard_normal((64, 64)).astype(np.float32)
    many = _run_linear(parts[1:], x)  # (64, 40)
    exact = x.astype(np.float64) @ want[8:].T
    assert np.abs(many - exact).max() < 0.02 * np.abs(exact).max()
    for row in (0, 17, 63):
        assert np.array_equal(_run_linear(parts[1:], x[row:row + 1])[0], many[row])


@pytest.mark.parametrize("kind", [Q8_0, Q4_1])
def test_the_block_embedding_is_the_readers_rows(kind: int) -> None:
    table = _quantized(kind, 40, 96, 3)
    g = Builder("q4")
    g.input("ids", g.TensorProto.INT64, ["T"])
    g.op("Identity", [block_embedding(g, "ids", table)], "e")
    g.output("e", g.TensorProto.FLOAT, ["T", 96])
    ids = np.array([3, 0, 39, 3, 17], dtype=np.int64)
    got = open_session(g.model("e").SerializeToString(), 1).run(None, {"ids": ids})[0]
    assert np.array_equal(got.view(np.uint32), dequantize(table)[ids].view(np.uint32))


# ---- (2) chunk invariance ------------------------------------------------------------------------
def test_q4_chunks_are_bit_identical_to_single_tokens(q4: Any) -> None:
    """A token's hidden state and logits are the same bits in a forward of 1 (the two-row
    step), 2, 3, 6 or 23 tokens, and the head gives a row the same bits alone or among many."""
    rng = np.random.default_rng(0)
    prompt, text = rng.integers(0, V, 7).tolist(), rng.integers(0, V, 23).tolist()

    def in_chunks(size: int) -> tuple[torch.Tensor, torch.Tensor]:
        _, past = q4.hidden(torch.tensor([prompt]))
        states, logits = [], []
        for s in range(0, len(text), size):
            x, past = q4.hidden(torch.tensor([text[s:s + size]]), past)
            states.append(x[0])
            logits.append(q4.project(q4.head_states(x[0], heads=1))[:, 0])
        return torch.cat(states), torch.cat(logits)

    states, logits = in_chunks(1)
    for size in (2, 3, 6, 23):
        other_states, other_logits = in_chunks(size)
        assert torch.equal(other_states, states) and torch.equal(other_logits, logits), size
    one_by_one = torch.cat([q4.project(q4.head_states(states[t:t + 1], heads=1))[:, 0]
                            for t in range(len(text))])
    assert torch.equal(one_by_one, logits)


# ---- (3) lossless against its own greedy, trees confirmed ---------------------------------------
def test_every_chain_drafter_on_q4_is_its_own_greedy(q4: Any) -> None:
    assert q4.precision == "q4" and not q4.exact_trees and q4.chunk_invariant
    prompts = [PROMPT, [40, 41, 42, 40, 41, 42, 40, 41], [200, 3, 77]]
    accepted = 0
    for prompt in prompts:
        want = greedy_generate(q4, prompt, 30, eos_id=None)
        for drafter in (None, HeadDrafter(k=1, p=1), HeadDrafter(k=4, p=1), LookupDrafter(),
                        DraftSpec("cost-aware", k=4, p=2, budget=8), DraftSpec("lookup")):
            res = decode(q4, prompt, drafter=drafter, max_new_tokens=30, eos_id=None)
            assert res.tokens == want, (prompt, drafter)
            accepted += sum(res.accept_lengths)
    assert accepted > 0  # some drafts were right: the test saw acceptances, not only rejections


def test_token_trees_on_q4_decode_q4s_greedy_through_a_confirming_chain(q4: Any) -> None:
    """Every tree strategy (tries of p drafts, lookup beside the heads, a confidence tree, a
    Medusa tree) outputs q4's greedy: the verifier confirms each tree's path with a chain
    forward (tests/verify/test_confirm.py shows the confirmation at work)."""
    for prompt in (PROMPT, [40, 41, 42, 40, 41, 42, 40, 41]):
        want = greedy_generate(q4, prompt, 24, eos_id=None)
        for drafter in (HeadDrafter(k=4, p=3), CombinedDrafter(HeadDrafter(k=1, p=1),
                                                               LookupDrafter(lengths=(9,))),
                        DraftSpec("tree", tree="confidence", k=3, budget=10),
                        DraftSpec("tree", tree="medusa", budget=8)):
            res = decode(q4, prompt, drafter=drafter, max_new_tokens=24, eos_id=None)
            assert res.tokens == want, (prompt, drafter)
    lossy = decode(q4, PROMPT, k=4, p=3, criterion="topk:k=2", max_new_tokens=12)
    assert len(lossy.tokens) == 12  # a lossy criterion on trees stays the user's choice


def test_prefix_heads_on_q4_decode_their_greedy_with_a_chain_of_their_lattice(
        gguf_file: Path) -> None:
    heads = randomize(PrefixHeads(BLOCK_D, 3, 1), 2, scale=0.3)
    q4 = load_model(gguf_file, heads=heads, runtime="onnxruntime", precision="q4", threads=1)
    for prompt in (PROMPT, [40, 41, 42, 40, 41, 42]):
        want = greedy_generate(q4, prompt, 24, eos_id=None)
        for drafter in (None, DraftSpec("tree-lattice", k=4, p=1)):
            assert decode(q4, prompt, drafter=drafter, max_new_tokens=24,
                          eos_id=None).tokens == want, drafter


# ---- (4) what is refused -------------------------------------------------------------------------
def test_blocks_without_an_exact_mapping_are_refused_by_name(root: Path) -> None:
    path = write_block_gguf(root / "mixed.gguf", seed=0, types={
        "blk.0.attn_v.weight": "F16", "blk.1.ffn_down.weight": "Q4_0"})
    with pytest.raises(ModelError) as e:
        load_model(path, heads=_medusa(), runtime="onnxruntime", precision="q4")
    text = str(e.value)
    assert "blk.0.attn_v.weight (F16)" in text and "blk.1.ffn_down.weight (Q4_0)" in text
    assert "no exact mapping" in text and "'int8'" in text


def test_a_damaged_or_foreign_gguf_file_is_refused_naming_the_tensor(
        root: Path, gguf_file: Path, model: Any) -> None:
    blocks = GGUFBlocks(gguf_file)
    info = next(t for t in blocks.header.tensors if t.name == "blk.1.ffn_up.weight")
    damaged = root / "damaged.gguf"
    data = bytearray(gguf_file.read_bytes())
    at = blocks.header.data_offset + info.offset + 20 * 5  # block 5 (row 2, block 1): d = inf
    data[at:at + 2] = np.array([np.inf], "<f2").tobytes()
    damaged.write_bytes(bytes(data))
    with pytest.raises(ModelError, match=r"tensor 'blk.1.ffn_up.weight' \(Q4_1\) .* not a finite "
                                         r"number \(row 2, block 1; 1 blocks in all\)"):
        on_runtime(model, "onnxruntime", "q4", gguf=damaged)
    cut = root / "cut.gguf"
    cut.write_bytes(gguf_file.read_bytes()[: blocks.header.data_offset + info.offset + 7])
    with pytest.raises(ModelError, match=r"cut.gguf: the data of tensor .* runs past the end"):
        on_runtime(model, "onnxruntime", "q4", gguf=cut)
    other = write_block_gguf(root / "other.gguf", seed=5)
    with pytest.raises(ModelError, match=r"tensor 'blk.0.attn_q.weight' of GGUF file .* "
                                         "dequantises to other values than the model's weight"):
        on_runtime(model, "onnxruntime", "q4", gguf=other)


def test_q4_needs_a_model_loaded_from_a_gguf_file(root: Path, model: Any) -> None:
    plain = HFBlockwiseModel(tiny_hf_base("llama"), MedusaHeads(64, None, 2, 1))
    with pytest.raises(ModelError, match="was not loaded from a GGUF file .* pass gguf=PATH"):
        on_runtime(plain, "onnxruntime", "q4")
    folder = root / "hf-folder"
    if not folder.exists():
        shutil.copytree(Path(model.config.name), folder)
    with pytest.raises(ModelError, match="precision 'q4' verifies on a GGUF file's own 4-bit "
                                         "blocks; the base model .* is not a GGUF file"):
        load_model(folder, heads=_medusa(), runtime="onnxruntime", precision="q4")
    gpt2 = HFBlockwiseModel(tiny_hf_base("gpt2"), MedusaHeads(64, None, 2, 1))
    with pytest.raises(ModelError, match="Llama-family decoders .* 'gpt2'"):
        on_runtime(gpt2, "onnxruntime", "q4", gguf=root / "tiny.Q4_1.gguf")
    with pytest.raises(ModelError, match=r"not 'q4' \(precision 'q4' needs runtime "
                                         r"'onnxruntime'\)"):
        load_model(root / "tiny.Q4_1.gguf", heads=_medusa(), precision="q4")


# ---- (5) the sealed cache ------------------------------------------------------------------------
def test_the_q4_export_is_sealed_cached_and_keyed_by_the_files_digest(
        root: Path, model: Any, q4: Any, gguf_file: Path) -> None:
    import json

    folder = q4.export_folder
    record = json.loads((folder / "export.json").read_text())
    assert record["precision"] == "q4" and record["gguf"] == str(gguf_file)
    assert onnx_export.export_problem(folder, deep=True) is None
    lines: list[str] = []
    again = on_runtime(model, "onnxruntime", "q4", log=lines.append)
    assert lines == [] and again.export_folder == folder  # served from the cache
    assert on_runtime(model, "onnxruntime", "float32").export_folder != folder
    # the same tensors in another file: another key
    copy = root / "copy.gguf"
    shutil.copy(gguf_file, copy)
    with open(copy, "ab") as f:
        f.write(b"\0")  # past the last tensor: the same blocks, other bytes
    assert onnx_export.export_key(model, "q4", copy) != onnx_export.export_key(model, "q4",
                                                                                gguf_file)
    ids = torch.tensor([[3, 4, 5, 6]])
    want = again.heads_logits(ids)[0]
    del again
    data = folder / "body.onnx.data"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2: len(raw) // 2 + 4096] = bytes(4096)
    data.write_bytes(bytes(raw))
    with pytest.warns(BlockdraftWarning, match=rf"{data} is not the file the ONNX export was "
                                               r"built with .*exporting the model to ONNX "
                                               "again") as caught:
        healed = on_runtime(model, "onnxruntime", "q4", log=lines.append)
    assert len([w for w in caught if issubclass(w.category, BlockdraftWarning)]) == 1
    assert any("exporting" in line for line in lines)
    assert torch.equal(healed.heads_logits(ids)[0], want)
