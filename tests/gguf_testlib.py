"""A tiny GGUF file that transformers loads: a 1-block Llama (d = 16, V = 259) with a
byte-level BPE tokenizer (256 byte tokens, two merges, an end-of-text token), float32
tensors, about 31 KB; written with the ``gguf`` package's own writer. And its quantised
sibling (:func:`write_block_gguf`): d = 64, 4 query and 2 key/value heads of 16, its linear
layers in Q4_1 blocks and its tied embedding in Q8_0 (as SmolLM2's file), for precision q4.

A plain module, not a conftest.py (imported by name; see ``tests/models/models_testlib.py``):
the GGUF reader's tests, the model cache's tests and the fuzzing harness share it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

D, HEADS, KV_HEADS, FF = 16, 2, 1, 32
VOCAB = 259
"""256 byte tokens, two merges, the end-of-text token."""


def _byte_symbols() -> list[str]:
    """GPT-2's byte -> printable character table (byte-level BPE symbols), in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def _writer(path: Path, d: int, layers: int, ff: int, heads: int, kv_heads: int,
            context: int) -> Any:
    """A GGUF writer with the tiny Llama's metadata and tokenizer written (tensors to add)."""
    import gguf

    symbols = _byte_symbols()
    a, b, c = (symbols[ord(x)] for x in "abc")
    tokens = [*symbols, a + b, a + b + c, "<|endoftext|>"]
    vocab = len(tokens)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny")
    w.add_context_length(context)
    w.add_embedding_length(d)
    w.add_block_count(layers)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(d // heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([1] * (vocab - 1) + [3])
    w.add_token_merges([f"{a} {b}", f"{a + b} {c}"])
    w.add_bos_token_id(vocab - 1)
    w.add_eos_token_id(vocab - 1)
    return w


def _shapes(vocab: int, d: int, layers: int, ff: int, heads: int,
            kv_heads: int) -> dict[str, tuple[int, ...]]:
    """Every tensor of the tiny Llama, numpy ``[out, in]`` (GGUF stores ``(in, out)``)."""
    head = d // heads
    shapes: dict[str, tuple[int, ...]] = {"token_embd.weight": (vocab, d),
                                          "output_norm.weight": (d,)}
    for i in range(layers):
        shapes.update({
            f"blk.{i}.attn_norm.weight": (d,), f"blk.{i}.attn_q.weight": (d, d),
            f"blk.{i}.attn_k.weight": (kv_heads * head, d),
            f"blk.{i}.attn_v.weight": (kv_heads * head, d),
            f"blk.{i}.attn_output.weight": (d, d), f"blk.{i}.ffn_norm.weight": (d,),
            f"blk.{i}.ffn_gate.weight": (ff, d), f"blk.{i}.ffn_up.weight": (ff, d),
            f"blk.{i}.ffn_down.weight": (d, ff)})
    return shapes


def _finish(w: Any, path: Path) -> Path:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_tiny_gguf(path: Path, seed: int = 0, layers: int = 1) -> Path:
    """Write the tiny Llama GGUF file to ``path`` (random weights from ``seed``)."""
    rng = np.random.default_rng(seed)
    w = _writer(path, D, layers, FF, HEADS, KV_HEADS, 64)
    for name, shape in _shapes(VOCAB, D, layers, FF, HEADS, KV_HEADS).items():
        w.add_tensor(name, (rng.standard_normal(shape) * 0.1).astype(np.float32))
    return _finish(w, path)


BLOCK_D, BLOCK_FF, BLOCK_HEADS, BLOCK_KV_HEADS = 64, 96, 4, 2
"""The quantised sibling's sizes (every row a whole number of 32-value blocks, heads of 16)."""


def write_block_gguf(path: Path, seed: int = 0, layers: int = 2,
                     types: dict[str, str] | None = None, output: str | None = None) -> Path:
    """Write the tiny Llama with its linear layers in Q4_1 blocks and its (tied) embedding in
    Q8_0 blocks, the norms float32, to ``path`` (random weights from ``seed``).

    Args:
        types: tensor name -> another GGML type name (``"F16"``, ``"Q4_0"``, ...) for it.
        output: a type name for an untied ``output.weight`` (None: the head is the embedding).
    """
    import gguf

    rng = np.random.default_rng(seed)
    w = _writer(path, BLOCK_D, layers, BLOCK_FF, BLOCK_HEADS, BLOCK_KV_HEADS, 256)
    shapes = _shapes(VOCAB, BLOCK_D, layers, BLOCK_FF, BLOCK_HEADS, BLOCK_KV_HEADS)
    if output is not None:
        shapes["output.weight"] = (VOCAB, BLOCK_D)
    chosen = {"token_embd.weight": "Q8_0", "output.weight": output or "Q8_0", **(types or {})}
    for name, shape in shapes.items():
        values = (rng.standard_normal(shape) * 0.3).astype(np.float32)
        if len(shape) == 1:  # a norm: around 1, float32
            w.add_tensor(name, 1 + values / 3)
            continue
        kind = gguf.GGMLQuantizationType[chosen.get(name, "Q4_1")]
        if kind == gguf.GGMLQuantizationType.F32:
            w.add_tensor(name, values)
        elif kind == gguf.GGMLQuantizationType.F16:
            w.add_tensor(name, values.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(values, kind), raw_dtype=kind)
    return _finish(w, path)
