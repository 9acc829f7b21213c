"""The digest that seals the tensor files blockdraft writes.

The safetensors files blockdraft writes beside heads (Medusa heads in the ``"medusa-v2"`` and
``"vllm"`` layouts, prefix heads, a shortlist) carry in their metadata, which Medusa, TGI and
vLLM ignore, the SHA-256 of their tensors, names, dtypes and shapes included, under
:data:`DIGEST_KEY`; their readers check it when it is there. Files written by other tools have
none and are read as they are.

Public surface:
    DIGEST_KEY                       the safetensors metadata key of that digest
    tensors_digest(state) -> hex     the digest of a dict of tensors
    save_sealed(state, path)         a safetensors file sealed by that digest
    read_sealed(path) -> state       such a file, its digest checked (it must have one)
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from blockdraft.core.digest import sha256_arrays
from blockdraft.models.errors import ModelError

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


def save_sealed(state: dict[str, torch.Tensor], path: str | os.PathLike[str]) -> None:
    """Write ``state`` (CPU tensors) as a safetensors file whose metadata holds its digest."""
    from safetensors.torch import save_file

    save_file(state, str(path), metadata={"format": "pt", DIGEST_KEY: tensors_digest(state)})


def read_sealed(path: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """The tensors of a file :func:`save_sealed` wrote, on the CPU.

    Raises:
        ModelError: a file that cannot be read, or whose tensors do not match its digest (a
            file without one included).
    """
    from safetensors import safe_open

    file = Path(path)
    try:
        with safe_open(str(file), framework="pt") as f:
            meta = f.metadata() or {}
            state = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    except Exception as e:  # safetensors raises its own error types
        raise ModelError(f"cannot read {file}: {e}") from e
    if meta.get(DIGEST_KEY) != tensors_digest(state):
        raise ModelError(f"{file} is damaged (its tensors do not match the digest it was "
                         "written with)")
    return state
