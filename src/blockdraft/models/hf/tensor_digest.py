"""The digest that seals the tensor files blockdraft writes.

The safetensors files blockdraft writes beside heads (Medusa heads in the ``"medusa-v2"`` and
``"vllm"`` layouts, prefix heads, a shortlist) carry in their metadata, which Medusa, TGI and
vLLM ignore, the SHA-256 of their tensors, names, dtypes and shapes included, under
:data:`DIGEST_KEY`; their readers check it when it is there. Files written by other tools have
none and are read as they are.

Public surface:
    DIGEST_KEY                       the safetensors metadata key of that digest
    tensors_digest(state) -> hex     the digest of a dict of tensors
"""

from __future__ import annotations

import torch

from blockdraft.core.digest import sha256_arrays

DIGEST_KEY = "blockdraft.tensors_sha256"
"""The safetensors metadata key of the SHA-256 of the file's tensors (:func:`tensors_digest`),
written by :func:`~blockdraft.models.hf.formats.write_heads` and checked by
:func:`~blockdraft.models.hf.formats.read_heads` when present."""


def tensors_digest(state: dict[str, torch.Tensor]) -> str:
    """The SHA-256 of named tensors: every name, dtype, shape and byte (as stored on the CPU,
    C order); any dtype, ``bfloat16`` included. The order of ``state`` does not matter."""
    records = []
    for name, tensor in state.items():
        t = tensor.detach().cpu().contiguous()
        raw = t.reshape(-1).view(torch.uint8).numpy()  # the bytes of any dtype
        records.append((name, str(t.dtype), tuple(t.shape), raw))
    return sha256_arrays(records)
