"""A tiny GGUF file that transformers loads: a 1-block Llama (d = 16, V = 259) with a
byte-level BPE tokenizer (256 byte tokens, two merges, an end-of-text token), float32
tensors, about 31 KB; written with the ``gguf`` package's own writer.

A plain module, not a conftest.py (imported by name; see ``tests/models/models_testlib.py``):
the GGUF reader's tests, the model cache's tests and the fuzzing harness share it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

D, HEADS, KV_HEADS, FF = 16, 2, 1, 32


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


def write_tiny_gguf(path: Path, seed: int = 0, layers: int = 1) -> Path:
    """Write the tiny Llama GGUF file to ``path`` (random weights from ``seed``)."""
    import gguf

    rng = np.random.default_rng(seed)
    symbols = _byte_symbols()
    a, b, c = (symbols[ord(x)] for x in "abc")
    tokens = [*symbols, a + b, a + b + c, "<|endoftext|>"]
    vocab = len(tokens)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny")
    w.add_context_length(64)
    w.add_embedding_length(D)
    w.add_block_count(layers)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_dimension_count(D // HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([1] * (vocab - 1) + [3])
    w.add_token_merges([f"{a} {b}", f"{a + b} {c}"])
    w.add_bos_token_id(vocab - 1)
    w.add_eos_token_id(vocab - 1)
    head = D // HEADS
    shapes = {"token_embd.weight": (vocab, D), "output_norm.weight": (D,)}
    for i in range(layers):
        shapes.update({
            f"blk.{i}.attn_norm.weight": (D,), f"blk.{i}.attn_q.weight": (D, D),
            f"blk.{i}.attn_k.weight": (KV_HEADS * head, D),
            f"blk.{i}.attn_v.weight": (KV_HEADS * head, D),
            f"blk.{i}.attn_output.weight": (D, D), f"blk.{i}.ffn_norm.weight": (D,),
            f"blk.{i}.ffn_gate.weight": (FF, D), f"blk.{i}.ffn_up.weight": (FF, D),
            f"blk.{i}.ffn_down.weight": (D, FF)})
    for name, shape in shapes.items():  # numpy [out, in]: GGUF stores (in, out)
        w.add_tensor(name, (rng.standard_normal(shape) * 0.1).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
