"""GGUF files: the header read and checked, every length against the bytes left, before
anything else reads the file.

``transformers`` reads GGUF files through the ``gguf`` package, which trusts the header: a file
cut short, or a flipped bit in a length, gives whatever its ``struct`` and numpy calls raise
(``struct.error: unpack_from requires a buffer of at least 2008 bytes``, IndexError), a loop
over a length of 2**60, or a model of absurd size. :func:`read_gguf_header` reads the header
itself (GGUF versions 2 and 3, either byte order): the metadata and the tensor infos, each
length checked against what the file holds, each tensor's data against the file's size, and
the sizes the metadata states (hidden size, layers, heads, feed-forward width, vocabulary)
against the tensors that have them. A damaged or truncated file is one :class:`ModelError`
naming it; the tensor data is not read (a flipped bit there is a different weight, which no
GGUF file could tell: the format has no checksum).

Public surface:
    GGUFTensor(name, shape, ggml_type, offset, nbytes)   one tensor info (``shape`` in GGUF
                                                         order: the fastest axis first)
    GGUFArray(item_type, length)                         a metadata array (its items unread)
    GGUFHeader(version, metadata, tensors, alignment, data_offset, size, byte_order)
    read_gguf_header(path) -> GGUFHeader
"""

from __future__ import annotations

import mmap
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blockdraft.models.errors import ModelError

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
"""The GGUF versions read (those of the ``gguf`` package transformers uses)."""
DEFAULT_ALIGNMENT = 32
"""Tensor data alignment when ``general.alignment`` is absent."""
MAX_DIMS = 4
"""The most axes a GGUF tensor has (llama.cpp's ``GGML_MAX_DIMS``)."""
MAX_NESTING = 8
"""The deepest array of arrays read (the format allows nesting; real files do not use it)."""

# Value types: (struct format, size) of the fixed-size ones; 8 = string, 9 = array.
_SCALARS: dict[int, tuple[str, int]] = {
    0: ("B", 1), 1: ("b", 1), 2: ("H", 2), 3: ("h", 2), 4: ("I", 4), 5: ("i", 4),
    6: ("f", 4), 7: ("?", 1), 10: ("Q", 8), 11: ("q", 8), 12: ("d", 8),
}
_STRING, _ARRAY = 8, 9
_UINT32 = 4
_INTEGER_TYPES = frozenset({0, 1, 2, 3, 4, 5, 10, 11})


@dataclass(frozen=True)
class GGUFTensor:
    """One tensor info of a GGUF header.

    Attributes:
        name: the tensor's GGUF name (``blk.0.attn_q.weight``).
        shape: its axes in GGUF order, the fastest first (a ``[out, in]`` matrix is
            ``(in, out)``).
        ggml_type: the ``GGMLQuantizationType`` number.
        offset: where its data starts, in bytes from the data section's start.
        nbytes: the bytes of its data.
    """

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int
    nbytes: int


@dataclass(frozen=True)
class GGUFArray:
    """A metadata array of a GGUF header: its item type and length (the items are checked,
    not kept)."""

    item_type: int
    length: int


@dataclass(frozen=True)
class GGUFHeader:
    """What a GGUF file's header says.

    Attributes:
        version: the GGUF version (2 or 3).
        metadata: key -> value (int, float, bool, str, or :class:`GGUFArray`), in file order.
        tensors: the tensor infos, in file order.
        alignment: the data alignment (``general.alignment``, default 32).
        data_offset: where the tensor data starts in the file.
        size: the file's size in bytes.
        byte_order: ``"<"`` (little-endian, as llama.cpp writes) or ``">"`` (a file written
            on a big-endian machine): the byte order of its numbers, tensor data included.
    """

    version: int
    metadata: dict[str, Any]
    tensors: tuple[GGUFTensor, ...]
    alignment: int
    data_offset: int
    size: int
    byte_order: str = "<"

    @property
    def architecture(self) -> str:
        """``general.architecture`` (``"llama"``)."""
        return str(self.metadata["general.architecture"])


class _Damaged(Exception):
    """A defect of the file; :func:`read_gguf_header` adds its name and the remedy."""


class _Reader:
    """Bounds-checked reads from the file's bytes."""

    def __init__(self, data: Any, size: int) -> None:
        self.data, self.size, self.pos, self.endian = data, size, 0, "<"

    def take(self, n: int, what: str) -> int:
        """The offset of the next ``n`` bytes (``what`` they hold), which must be there."""
        start, end = self.pos, self.pos + n
        if end > self.size:
            raise _Damaged(f"{what} runs past the end of the file (to byte {end:,} of "
                           f"{self.size:,})")
        self.pos = end
        return start

    def scalar(self, kind: int, what: str) -> Any:
        fmt, n = _SCALARS[kind]
        return struct.unpack_from(self.endian + fmt, self.data, self.take(n, what))[0]

    def string(self, what: str) -> str:
        n = self.scalar(10, f"the length of {what}")
        at = self.take(n, what)
        try:
            return bytes(self.data[at:at + n]).decode("utf-8")
        except UnicodeDecodeError as e:
            raise _Damaged(f"{what} is not UTF-8 ({e.reason} at byte {at + e.start:,})") from None

    def value(self, kind: int, what: str, depth: int = 0) -> Any:
        """A metadata value of type ``kind``; arrays are checked item by item (strings,
        arrays) or by their total size (fixed-size items) and returned as :class:`GGUFArray`."""
        if kind in _SCALARS:
            return self.scalar(kind, what)
        if kind == _STRING:
            return self.string(what)
        if kind != _ARRAY:
            raise _Damaged(f"{what} has unknown value type {kind}")
        if depth >= MAX_NESTING:
            raise _Damaged(f"{what} nests arrays more than {MAX_NESTING} deep")
        item = self.scalar(4, f"the item type of {what}")
        length = self.scalar(10, f"the length of {what}")
        if item in _SCALARS:
            self.take(length * _SCALARS[item][1], f"{what} ({length:,} items)")
        elif item in (_STRING, _ARRAY):
            for i in range(length):  # each item takes 8 bytes or more: bounded by the size
                self.value(item, f"item {i} of {what}", depth + 1)
        else:
            raise _Damaged(f"{what} has items of unknown value type {item}")
        return GGUFArray(item, length)


def read_gguf_header(path: str | os.PathLike[str]) -> GGUFHeader:
    """The header of a GGUF file, checked against the file.

    Raises:
        ModelError: the file is missing or unreadable, is not a GGUF file, has a version other
            than 2 or 3, or a header that is damaged or truncated (naming the file, what in it
            is wrong, and what to do).
    """
    from gguf import GGML_QUANT_SIZES  # the block sizes of every quantisation type

    file = Path(path)
    fix = "the file is damaged or truncated: download or copy it again"
    try:
        with open(file, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                raise ModelError(f"GGUF file {file} is empty; {fix}")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return _read(data, size, file, GGML_QUANT_SIZES)
    except _Damaged as e:
        raise ModelError(f"GGUF file {file}: {e}; {fix}") from None
    except OSError as e:
        raise ModelError(f"cannot read the GGUF file {file}: {e.strerror or e}") from e


def _read(data: Any, size: int, file: Path, quant_sizes: Any) -> GGUFHeader:
    r = _Reader(data, size)
    at = r.take(4, "the magic number")
    magic = bytes(data[at:at + 4])
    if magic != GGUF_MAGIC:
        raise ModelError(f"{file} is not a GGUF file (it starts with {magic!r}, not b'GGUF'): it "
                         "is damaged or in another format")
    version = r.scalar(4, "the version")
    if version & 0xFFFF == 0:  # written on a machine of the other byte order
        r.endian = ">"
        version = struct.unpack("<I", struct.pack(">I", version))[0]
    if version not in SUPPORTED_VERSIONS:
        raise ModelError(
            f"GGUF file {file} has version {version}; blockdraft reads versions "
            f"{', '.join(map(str, SUPPORTED_VERSIONS))} (convert it with a recent llama.cpp), "
            "or the file is damaged"
        )
    n_tensors = r.scalar(10, "the tensor count")
    n_keys = r.scalar(10, "the metadata count")
    metadata: dict[str, Any] = {}
    types: dict[str, int] = {}
    for i in range(n_keys):  # each entry takes 13 bytes or more: bounded by the size
        key = r.string(f"metadata key {i}")
        kind = r.scalar(4, f"the value type of {key!r}")
        if key in metadata:
            raise _Damaged(f"metadata key {key!r} appears twice")
        metadata[key], types[key] = r.value(kind, f"metadata {key!r}"), kind
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if "general.alignment" in metadata and (types["general.alignment"] != _UINT32
                                            or alignment < 1 or alignment & (alignment - 1)):
        raise _Damaged(f"general.alignment = {alignment!r} is not a power of two (uint32)")
    infos = []
    for i in range(n_tensors):  # each info takes 24 bytes or more: bounded by the size
        name = r.string(f"the name of tensor {i}")
        n_dims = r.scalar(4, f"the axis count of {name!r}")
        if not 1 <= n_dims <= MAX_DIMS:
            raise _Damaged(f"tensor {name!r} has {n_dims} axes (1 to {MAX_DIMS} expected)")
        shape = tuple(r.scalar(10, f"the shape of {name!r}") for _ in range(n_dims))
        infos.append((name, shape, r.scalar(4, f"the type of {name!r}"),
                      r.scalar(10, f"the data offset of {name!r}")))
    data_offset = -(-r.pos // alignment) * alignment
    tensors = []
    for name, shape, ggml_type, offset in infos:
        if ggml_type not in quant_sizes:  # an IntEnum-keyed dict: plain ints look up
            raise _Damaged(f"tensor {name!r} has unknown type {ggml_type}")
        block, block_bytes = quant_sizes[ggml_type]
        if shape[0] % block:
            raise _Damaged(f"tensor {name!r} of shape {shape} does not fill whole blocks of "
                           f"{block} values")
        count = 1
        for axis in shape:
            count *= axis
        nbytes = count // block * block_bytes
        end = data_offset + offset + nbytes
        if offset % alignment:
            raise _Damaged(f"the data of tensor {name!r} starts at offset {offset:,}, not a "
                           f"multiple of the alignment {alignment}")
        if end > size:
            raise _Damaged(f"the data of tensor {name!r} runs past the end of the file (to "
                           f"byte {end:,} of {size:,})")
        tensors.append(GGUFTensor(name, shape, ggml_type, offset, nbytes))
    if len({t.name for t in tensors}) != len(tensors):
        raise _Damaged("two tensors have the same name")
    if not isinstance(metadata.get("general.architecture"), str):
        raise _Damaged("it names no architecture (general.architecture)")
    header = GGUFHeader(version, metadata, tuple(tensors), alignment, data_offset, size,
                        r.endian)
    _check_stated_sizes(header, types)
    return header


_BLOCK = re.compile(r"(?:^|\.)blk\.(\d+)\.")
_HEAD_DIM_FROM_ROPE = ("llama", "mistral")
"""The architectures whose head size transformers takes from ``rope.dimension_count``."""


def _check_stated_sizes(header: GGUFHeader, types: dict[str, int]) -> None:
    """Refuse metadata whose sizes its tensors contradict: a model is built from them before
    any tensor is read, so a flipped bit in ``block_count`` or ``embedding_length`` would
    otherwise build a model of billions of parameters.

    The llama.cpp names (``token_embd``, ``blk.N.ffn_up``, ``blk.N.attn_q``) pin the sizes
    exactly where the file has those tensors (the attention's, for the architectures whose head
    size transformers takes from ``rope.dimension_count``); every stated size is at most the
    largest axis of any tensor (the layer count: the tensors' count) in any case."""
    arch = header.architecture
    shapes = {t.name: t.shape for t in header.tensors}

    def stated(key: str) -> int | None:
        full = f"{arch}.{key}"
        if full not in header.metadata or types[full] == _ARRAY:  # arrays: per layer
            return None
        if types[full] not in _INTEGER_TYPES or header.metadata[full] < 0:
            raise _Damaged(f"{full} = {header.metadata[full]!r} is not a size")
        return int(header.metadata[full])

    pins: list[tuple[str, int | None, str, int]] = [
        ("embedding_length", stated("embedding_length"), "token_embd.weight", 0),
        ("vocab_size", stated("vocab_size"), "token_embd.weight", 1),
        ("feed_forward_length", stated("feed_forward_length"), "blk.0.ffn_up.weight", 1),
    ]
    heads, head_dim = stated("attention.head_count"), stated("rope.dimension_count")
    if arch in _HEAD_DIM_FROM_ROPE and heads and head_dim:
        kv_heads = stated("attention.head_count_kv") or heads
        pins += [("attention.head_count x rope.dimension_count", heads * head_dim,
                  "blk.0.attn_q.weight", 1),
                 ("attention.head_count_kv x rope.dimension_count", kv_heads * head_dim,
                  "blk.0.attn_k.weight", 1)]
    for what, value, tensor, axis in pins:
        shape = shapes.get(tensor)
        if value is not None and shape is not None and len(shape) > axis \
                and shape[axis] != value:
            raise _Damaged(f"{arch}.{what} = {value} but the tensor {tensor!r} has shape "
                           f"{shape}")
    blocks = {int(m.group(1)) for name in shapes if (m := _BLOCK.search(name))}
    layers = stated("block_count")
    if layers is not None and blocks and layers != len(blocks):
        raise _Damaged(f"{arch}.block_count = {layers} but the file has tensors of "
                       f"{len(blocks)} blocks")
    largest = max((max(shape) for shape in shapes.values()), default=0)
    for key in ("embedding_length", "feed_forward_length", "attention.head_count",
                "attention.head_count_kv", "rope.dimension_count", "vocab_size",
                "block_count"):
        value = stated(key)
        bound = len(shapes) if key == "block_count" else largest
        if value is not None and value > bound:
            raise _Damaged(f"{arch}.{key} = {value} exceeds every tensor of the file "
                           f"(largest {'count' if key == 'block_count' else 'axis'}: {bound})")
