"""What a model can do, declared once as a typed record: :class:`Capabilities`.

The rooms downstream (drafts, verify, oracle, the demo and the CLI) never probe a model for a
feature (``getattr(model, "exact_trees", True)``); they read its record. Every model class of
blockdraft declares one (its ``capabilities`` property); :func:`capabilities_of` is the one
place that derives a record for a third party's model that declares none (the
:class:`~blockdraft.models.protocol.HeadsModel` protocol alone: ``h`` and ``heads_logits``).

Head kinds (:data:`HEAD_KINDS`), each a kind of lattice a step drafts from:

    none         the base LM alone (h = 1): drafts come from elsewhere (prompt lookup)
    medusa       independent heads on one shared state (Stern's BPD heads, Medusa heads): each
                 head's top-k is a slot of a sausage lattice
    prefix       prefix-conditioned (Hydra-style) heads: each node's children come from the head
                 that reads its last token; the lattice is a tree, expanded lazily (``expander``)
    draft-layer  an autoregressive draft layer (EAGLE-style): a tree lattice too, and a state
                 along the text (its KV cache): after each verdict the verifier hands the
                 model the accepted path (``accept_path``)

Public surface:
    HEAD_KINDS
    Capabilities(...)            frozen; ``.tree_lattice``, ``.stateful_heads``,
                                 ``.with_(**changes)``
    capabilities_of(model) -> Capabilities
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from typing import Any

from blockdraft.models.errors import ModelError

HEAD_KINDS = ("none", "medusa", "prefix", "draft-layer")
"""The kinds of heads a model may declare (see the module docstring)."""
TREE_LATTICE_KINDS = ("prefix", "draft-layer")
"""Head kinds whose step lattice is a tree expanded lazily (``model.expander``)."""
STATEFUL_KINDS = ("draft-layer",)
"""Head kinds that keep a state along the committed text, fed every accepted path
(``model.accept_path``: :class:`~blockdraft.models.protocol.DraftLayerModel`)."""


@dataclass(frozen=True)
class Capabilities:
    """What a model can do (declared by the model; read, never probed, downstream).

    Attributes:
        heads: the head kind, one of :data:`HEAD_KINDS`.
        h: heads, the base LM's included (``h >= 1``).
        vocab_size: ``V``, or None when unknown (then token ids are not range-checked).
        max_seq_len: the longest sequence the model reads (positions), or None if unknown.
        runtime: where the forward runs (``"torch"``, ``"onnxruntime"``, ``"static"``, or a
            third party's name).
        precision: what the forward computes in (``"float32"``, ``"bfloat16"``, ``"int8"``...).
        exact_trees: a token tree's rows are the model's chain rows, so one forward verifies a
            tree losslessly under the exact criterion (False: ONNX Runtime int8 and q4, whose
            integer rounding turns the last-bit differences of a tree's attention sums into
            other tokens now and then; the verifier then confirms a tree's accepted path with
            a chain forward, and the cost-sized strategies draft one path a step).
        factored: the model splits into ``hidden``, ``head_states`` and ``project``
            (:class:`~blockdraft.models.protocol.FactoredHeadsModel`); False: only
            ``heads_logits``.
        head_topk: ``head_topk(x, k, heads)`` gives the heads' top-k where the logits are (in
            the runtime, over the heads' shortlist), so a step copies ``[h - 1, k]`` to the
            host instead of ``[h - 1, V]``.
        last_only: ``heads_logits(..., last_only=True)`` projects the last position only.
        drafting: the drafting recipe packaged with the heads
            (:class:`~blockdraft.models.hf.drafting.DraftingRecipe`), or None.
        cost: a verification cost curve the model declares
            (:class:`~blockdraft.models.cost.CostCurve`), or None: a drafter that sizes its
            trees by cost measures one on the model (:func:`~blockdraft.models.cost
            .cost_curve_of`).
        device: the device type its inputs live on (``"cpu"``, ``"cuda"``).
        name: what the model is called in records and tables (its folder or class).
    """

    heads: str
    h: int
    vocab_size: int | None = None
    max_seq_len: int | None = None
    runtime: str = "torch"
    precision: str = "float32"
    exact_trees: bool = True
    factored: bool = False
    head_topk: bool = False
    last_only: bool = False
    drafting: Any = None
    cost: Any = None
    device: str = "cpu"
    name: str = ""

    def __post_init__(self) -> None:
        if self.heads not in HEAD_KINDS:
            raise ModelError(f"capabilities: heads must be one of {', '.join(HEAD_KINDS)}, got "
                             f"{self.heads!r}")
        if isinstance(self.h, bool) or not isinstance(self.h, int) or self.h < 1:
            raise ModelError(f"capabilities: h must be an integer >= 1, got {self.h!r}")
        if (self.heads == "none") != (self.h == 1):
            raise ModelError(f"capabilities: heads {self.heads!r} with h = {self.h}: a model "
                             "with extra heads names their kind, one without names 'none'")
        for name in ("vocab_size", "max_seq_len"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise ModelError(f"capabilities: {name} must be None or an integer >= 1, got "
                                 f"{value!r}")

    @property
    def tree_lattice(self) -> bool:
        """Whether a step's lattice is a tree expanded lazily (``model.expander``)."""
        return self.heads in TREE_LATTICE_KINDS

    @property
    def stateful_heads(self) -> bool:
        """Whether the heads keep a state along the text, fed the accepted path of every
        forward the verifier decides on (``model.accept_path``)."""
        return self.heads in STATEFUL_KINDS

    def with_(self, **changes: Any) -> Capabilities:
        """A copy with ``changes`` (a runtime declaring what it changes of a model's record)."""
        return dataclasses.replace(self, **changes)


def capabilities_of(model: Any) -> Capabilities:
    """The model's declared :class:`Capabilities`, or, for a third party's model that declares
    none, the record its protocol implies (a plain ``heads_logits`` model: Medusa-like heads,
    chains and trees verified through ``heads_logits``; ``vocab_size``/``max_seq_len`` read
    from the model or its ``config`` when present).

    Raises:
        ModelError: a model without ``h`` and ``heads_logits``, or one whose ``capabilities``
            is not a :class:`Capabilities`.
    """
    declared = getattr(model, "capabilities", None)
    if declared is not None:
        if not isinstance(declared, Capabilities):
            raise ModelError(f"{type(model).__name__}.capabilities must be a Capabilities "
                             f"record, got {type(declared).__name__}")
        return declared
    if not callable(getattr(model, "heads_logits", None)):
        raise ModelError(f"the model must have heads_logits(input_ids, past), got "
                         f"{type(model).__name__}")
    h = _limit(model, "h")
    if h is None:
        raise ModelError(f"{type(model).__name__} declares no number of heads h")
    try:
        last_only = "last_only" in inspect.signature(model.heads_logits).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        last_only = False
    device = getattr(model, "device", None)
    return Capabilities(
        heads="none" if h == 1 else "medusa", h=h, vocab_size=_limit(model, "vocab_size"),
        max_seq_len=_limit(model, "max_seq_len"),
        factored=all(callable(getattr(model, name, None))
                     for name in ("hidden", "head_states", "project")),
        last_only=last_only, device=str(getattr(device, "type", device or "cpu")),
        name=str(getattr(getattr(model, "config", None), "name", "") or type(model).__name__))


def _limit(model: Any, name: str) -> int | None:
    """``model.<name>``, else ``model.config.<name>``, else None (unknown)."""
    value = getattr(model, name, None)
    if value is None:
        value = getattr(getattr(model, "config", None), name, None)
    return None if value is None else int(value)
