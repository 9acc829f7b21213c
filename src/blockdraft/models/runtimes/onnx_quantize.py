"""The heads' graphs in their draft precision: ONNX Runtime's own weight-only quantizer over
every matmul on a constant 2-D weight.

``int8`` and ``q4`` (:data:`~blockdraft.models.heads.draft_precision.DRAFT_PRECISIONS`) hand a
float32 graph to ``onnxruntime.quantization.matmul_nbits_quantizer`` (round-to-nearest,
symmetric, blocks of :data:`BLOCK_SIZE` along the input dimension, 8 or 4 bits), which turns
each ``MatMul`` whose second input is a constant ``[K, N]`` weight into ``MatMulNBits`` at
``accuracy_level`` 4 (int8 activations, each row quantized on its own, a scale per block: no
scale is shared by the rows of a call). Everything else (embedding gathers, attention, norms,
``TopK``, a 3-D weight such as Medusa heads' own projections) stays float32. The heads draft
only; the base verifies (:mod:`blockdraft.models.heads.draft_precision`).

Public surface:
    BITS, BLOCK_SIZE
    quantized(proto, draft_precision) -> onnx.ModelProto     the constant MatMuls as MatMulNBits
"""

from __future__ import annotations

import logging
from typing import Any

from blockdraft.core.extras import import_optional
from blockdraft.models.errors import ModelError
from blockdraft.models.runtimes.onnx_blocks import ACCURACY_LEVEL

BITS = {"int8": 8, "q4": 4}
"""Bits a weight of each quantized draft precision."""
BLOCK_SIZE = 32
"""Weights along the input dimension that share a scale (a change of this, or of
:data:`BITS`, needs a new ``GRAPH_VERSION``: the export's key holds the precision's name only).
Blocks of 32 rather than 128: on the trained SmolLM2 draft layer (280 answer positions of four
chat prompts) the depth-1 draft agreed with float32's at 99% against 98% (``int8``) and 83%
against 78% (``q4``)."""


def quantized(proto: Any, draft_precision: str) -> Any:
    """``proto`` with every ``MatMul`` on a constant 2-D weight as ONNX Runtime's
    ``MatMulNBits`` of :data:`BITS` bits in blocks of :data:`BLOCK_SIZE` (the module
    docstring), by ``onnxruntime.quantization``'s ``MatMulNBitsQuantizer`` (in place); ``proto``
    itself in ``float32``.

    The quantizer's module configures the root logger when first imported
    (``logging.basicConfig`` at INFO) and logs a line a node: the root logger is restored after
    the import and the quantizer's own logger held at WARNING while it runs.

    Raises:
        ModelError: ``onnxruntime.quantization`` cannot be imported (with the install hint).
    """
    if draft_precision == "float32":
        return proto
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        module = import_optional("onnxruntime.quantization.matmul_nbits_quantizer", "onnx",
                                 "quantized heads", ModelError)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    noisy = logging.getLogger(module.__name__)
    kept = noisy.level
    noisy.setLevel(logging.WARNING)
    try:
        quantizer = module.MatMulNBitsQuantizer(proto, algo_config=(
            module.DefaultWeightOnlyQuantConfig(
                block_size=BLOCK_SIZE, is_symmetric=True, accuracy_level=ACCURACY_LEVEL,
                bits=BITS[draft_precision])))
        quantizer.process()
    finally:
        noisy.setLevel(kept)
    return quantizer.model.model
