"""The heads' draft precision: the precision of their weights on ONNX Runtime, whatever the
base's.

Heads only propose tokens and the base verifies each one, so the numbers of the heads change
which tokens are proposed (their acceptance, their speed), never which are accepted: the
output stays the base's own greedy output. That holds for every head kind (Medusa heads,
prefix-conditioned heads, an EAGLE draft layer); the graphs are built by
:mod:`blockdraft.models.runtimes.onnx_quantize`. The setting belongs to the heads (their
``draft_precision``), comes from a heads folder's drafting recipe
(``blockdraft_drafting.draft_precision``) or from ``load_model(..., draft_precision=)``, and is
part of the export's key (each precision is an export of its own).

Public surface:
    DRAFT_PRECISIONS
    check_draft_precision(value, what) -> str
"""

from __future__ import annotations

from typing import Any

from blockdraft.models.errors import ModelError

DRAFT_PRECISIONS = ("float32", "int8", "q4")
"""The heads' weights on ONNX Runtime: ``float32`` (as trained), ``int8`` (8-bit blocks of 32,
int8 activations) or ``q4`` (4-bit blocks of 32, int8 activations): every matmul on a constant
2-D weight (a ResBlock's, a draft layer's linear layers, the projection onto the shortlist)
through ONNX Runtime's ``MatMulNBits``; embeddings, attention products and heads' own
per-head projections (3-D) stay float32."""


def check_draft_precision(value: Any, what: str) -> str:
    """``value`` when it is one of :data:`DRAFT_PRECISIONS`.

    Args:
        value: the precision asked for.
        what: where it came from, for the message (``"draft_precision"``,
            ``"config.json: blockdraft_drafting.draft_precision"``).

    Raises:
        ModelError: naming the value and the choices.
    """
    if not isinstance(value, str) or value not in DRAFT_PRECISIONS:
        raise ModelError(f"{what} must be one of {', '.join(DRAFT_PRECISIONS)} (the heads' "
                         f"weights on ONNX Runtime), got {value!r}")
    return value
