"""A GGUF file's weight matrices as llama.cpp stores them: quantisation blocks read as they are
(no value dequantised, none re-quantised), decoded field by field, and dequantised the way the
``gguf`` package (and so transformers) does.

Two block types are read, each of 32 values along a row (the fastest axis), a row's blocks
contiguous:

    Q4_1  20 bytes: float16 ``d``, float16 ``m``, 16 bytes of 4-bit codes ``q``: byte ``i``
          holds value ``i`` in its low nibble and value ``i + 16`` in its high one;
          value = ``d * q + m`` (``q`` in 0 .. 15)
    Q8_0  34 bytes: float16 ``d``, 32 int8 codes ``q``; value = ``d * q``

A matrix ``[out, in]`` (GGUF shape ``(in, out)``) is ``out`` rows of ``in / 32`` blocks, so its
data is a ``uint8 [out, in / 32 * block bytes]`` array, and a permutation of its rows moves
whole block rows. transformers reads a Llama GGUF's ``attn_q`` and ``attn_k`` rows in another
order than llama.cpp writes them (llama.cpp interleaves the two halves of each head's rotary
dimensions); :func:`llama_row_order` is that order as a row index.

Public surface:
    Q4_1, Q8_0, BLOCK_VALUES, BLOCK_BYTES, type_name(ggml_type) -> str
    BlockMatrix(name, ggml_type, data)    frozen: rows, cols, blocks; reordered(order)
    GGUFBlocks(path)                      a file's header and tensor data (read-only map);
                                          type_of(name), matrix(name) -> BlockMatrix
    q4_1_fields(data) -> (d, m, codes);  q8_0_fields(data) -> (d, q)
    dequantize(matrix) -> float32 [rows, cols]    the gguf package's values, bit for bit
    llama_row_order(rows, heads) -> int64 [rows]  transformers' q/k row order
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from blockdraft.models.errors import ModelError
from blockdraft.models.hf.gguf import GGUFHeader, GGUFTensor, read_gguf_header

Q4_1 = 3
"""``GGMLQuantizationType.Q4_1``."""
Q8_0 = 8
"""``GGMLQuantizationType.Q8_0``."""
BLOCK_VALUES = 32
"""Values per block of both types."""
BLOCK_BYTES = {Q4_1: 20, Q8_0: 34}
"""Bytes per block of each type read here."""


def type_name(ggml_type: int) -> str:
    """The name of a GGML type number (``3`` -> ``"Q4_1"``)."""
    from gguf import GGMLQuantizationType

    try:
        return GGMLQuantizationType(ggml_type).name
    except ValueError:
        return f"type {ggml_type}"


@dataclass(frozen=True)
class BlockMatrix:
    """A weight matrix ``[rows, cols]`` as its blocks.

    Attributes:
        name: the GGUF tensor's name.
        ggml_type: :data:`Q4_1` or :data:`Q8_0`.
        data: uint8 ``[rows, cols / 32 * BLOCK_BYTES[ggml_type]]``, a row's blocks in order.
    """

    name: str
    ggml_type: int
    data: np.ndarray

    @property
    def rows(self) -> int:
        """Output features (``N``)."""
        return int(self.data.shape[0])

    @property
    def blocks(self) -> int:
        """Blocks per row (``cols / 32``)."""
        return int(self.data.shape[1]) // BLOCK_BYTES[self.ggml_type]

    @property
    def cols(self) -> int:
        """Input features (``K``)."""
        return self.blocks * BLOCK_VALUES

    @property
    def type_name(self) -> str:
        """``"Q4_1"`` or ``"Q8_0"``."""
        return type_name(self.ggml_type)

    def reordered(self, order: np.ndarray) -> BlockMatrix:
        """The matrix whose row ``j`` is this one's row ``order[j]`` (whole block rows move)."""
        return BlockMatrix(self.name, self.ggml_type, np.ascontiguousarray(self.data[order]))


def _half(raw: np.ndarray) -> np.ndarray:
    """Little-endian float16 from ``raw uint8 [..., 2]`` as float32 ``[...]``."""
    return np.ascontiguousarray(raw).view("<f2")[..., 0].astype(np.float32)


def q4_1_fields(data: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The fields of Q4_1 rows ``data uint8 [R, nb * 20]``: ``d`` and ``m`` float32
    ``[R, nb]`` and the codes uint8 ``[R, nb, 32]`` in value order (0 .. 15)."""
    blocks = data.reshape(data.shape[0], -1, BLOCK_BYTES[Q4_1])  # (R, nb, 20)
    packed = blocks[..., 4:]  # (R, nb, 16): value i low, value i + 16 high
    codes = np.concatenate([packed & 0x0F, packed >> 4], axis=-1)  # (R, nb, 32)
    return _half(blocks[..., 0:2]), _half(blocks[..., 2:4]), codes


def q8_0_fields(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The fields of Q8_0 rows ``data uint8 [R, nb * 34]``: ``d`` float32 ``[R, nb]`` and the
    codes int8 ``[R, nb, 32]``."""
    blocks = data.reshape(data.shape[0], -1, BLOCK_BYTES[Q8_0])  # (R, nb, 34)
    return _half(blocks[..., 0:2]), np.ascontiguousarray(blocks[..., 2:]).view(np.int8)


def dequantize(matrix: BlockMatrix) -> np.ndarray:
    """The matrix's values, float32 ``[rows, cols]``: ``d * q + m`` (Q4_1) or ``d * q`` (Q8_0)
    computed in float32 as the ``gguf`` package computes them (the values transformers loads)."""
    if matrix.ggml_type == Q4_1:
        d, m, codes = q4_1_fields(matrix.data)
        values = d[..., None] * codes.astype(np.float32) + m[..., None]
    else:
        d, q = q8_0_fields(matrix.data)
        values = d[..., None] * q.astype(np.float32)
    return values.reshape(matrix.rows, matrix.cols)  # type: ignore[no-any-return]


def llama_row_order(rows: int, heads: int) -> np.ndarray:
    """transformers' order of a Llama GGUF's ``attn_q`` (``heads`` query heads) or ``attn_k``
    (``heads`` key/value heads) rows: row ``j`` of the model's matrix is row ``order[j]`` of
    the file's (each head's rows ``0, 2, 4, .., 1, 3, 5, ..``)."""
    per_head = rows // heads // 2
    return np.arange(rows).reshape(heads, per_head, 2).swapaxes(1, 2).reshape(rows)


class GGUFBlocks:
    """The tensors of a GGUF file as blocks (the header checked first,
    :func:`~blockdraft.models.hf.gguf.read_gguf_header`; the data mapped read-only).

    Args:
        path: the ``.gguf`` file.

    Raises:
        ModelError: the file is missing, damaged or truncated (naming it), or big-endian.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.header: GGUFHeader = read_gguf_header(self.path)
        if self.header.byte_order != "<":
            raise ModelError(f"GGUF file {self.path} is big-endian; its blocks are read in "
                             "llama.cpp's little-endian layout only: convert it on a "
                             "little-endian machine")
        self._tensors: dict[str, GGUFTensor] = {t.name: t for t in self.header.tensors}

    def __contains__(self, name: object) -> bool:
        return name in self._tensors

    def type_of(self, name: str) -> int:
        """The GGML type of the tensor ``name`` (KeyError when the file has none)."""
        return self._tensors[name].ggml_type

    def matrix(self, name: str) -> BlockMatrix:
        """The matrix ``name`` (a Q4_1 or Q8_0 tensor of two axes) as its blocks, its scales
        checked.

        Raises:
            ModelError: the file has no such tensor, it is of another type or shape (naming
                both), or a block's scale is not a finite number (a damaged file).
        """
        info = self._tensors.get(name)
        if info is None:
            raise ModelError(f"GGUF file {self.path} has no tensor {name!r}")
        if info.ggml_type not in BLOCK_BYTES:
            raise ModelError(f"tensor {name!r} of {self.path} is {type_name(info.ggml_type)}; "
                             "blocks are read from Q4_1 and Q8_0 tensors only")
        if len(info.shape) != 2:
            raise ModelError(f"tensor {name!r} of {self.path} has shape {info.shape}, not a "
                             "matrix")
        cols, rows = info.shape
        data = np.memmap(self.path, dtype=np.uint8, mode="r",
                         offset=self.header.data_offset + info.offset, shape=(info.nbytes,))
        matrix = BlockMatrix(name, info.ggml_type, np.asarray(data).reshape(rows, -1))
        _check_scales(matrix, self.path)
        return matrix


def _check_scales(matrix: BlockMatrix, path: Path) -> None:
    """Refuse a matrix with a scale (or Q4_1 minimum) that is infinite or NaN: no GGUF writer
    makes one; a damaged byte does."""
    if matrix.ggml_type == Q4_1:
        d, m, _ = q4_1_fields(matrix.data)
        bad = ~(np.isfinite(d) & np.isfinite(m))
    else:
        bad = ~np.isfinite(q8_0_fields(matrix.data)[0])
    if bad.any():
        row, block = (int(i) for i in np.argwhere(bad)[0])
        raise ModelError(
            f"tensor {matrix.name!r} ({matrix.type_name}) of {path} has a scale that is not a "
            f"finite number (row {row}, block {block}; {int(bad.sum())} blocks in all): the "
            "file is damaged: download or copy it again")
