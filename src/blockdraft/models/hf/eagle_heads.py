"""`EagleHeads`: an EAGLE draft layer as the heads of a Hugging Face model.

An :class:`~blockdraft.models.hf.HFBlockwiseModel` holds one heads module; for a draft layer
(:class:`~blockdraft.models.heads.eagle_layer.EagleLayer`) it is this wrapper, which says what
the model reads of heads (``num_heads``: the draft depth, so the model has ``h = 1 + depth``
heads; the shortlist; the drafting recipe; the kind, ``"draft-layer"``, whose rule is
:class:`~blockdraft.models.heads.eagle.EagleRule`) and what decoding needs beside the layer:
its depth, the context it was trained with (``"answer"``: its sequences start at the
prompt's last position; ``"prompt"``: at the prompt's first), and the precision of its weights
on ONNX Runtime (``draft_precision``, one of
:data:`~blockdraft.models.heads.draft_precision.DRAFT_PRECISIONS`; part of the heads'
description, so each precision is an ONNX export of its own; other runtimes run the layer in
the model's dtype).

:meth:`EagleHeads.bind` hands the layer the base's embedding and output projection, after
holding the layer's config against the one its block shape gives (``EagleConfig.from_base``):
a layer made for another base is refused, the differing size named. :func:`capture_layers`
hands a forward's decoder-layer outputs to a layer that fuses them (``"layers"``; index ``i``
is the output of decoder layer ``i - 1``, as in training, where transformers'
``hidden_states[L]`` would be after the final norm).

Public surface:
    DEFAULT_DEPTH
    EagleHeads(layer, depth=DEFAULT_DEPTH, context="answer", base_model="",
               draft_precision="float32")                      kind "draft-layer"
        .bind(base), .logits(states, lm_head) -> [..., n, V], .num_heads, .shortlist, ...
    read_eagle_heads(folder, depth=None, draft_precision=None) -> EagleHeads
                                                        a folder of write_eagle's
    decoder_layers(base) -> list[nn.Module]
    capture_layers(base, indices) -> context manager yielding the outputs [B, T, d] each
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from blockdraft.models.errors import ModelError
from blockdraft.models.heads.draft_precision import check_draft_precision
from blockdraft.models.heads.eagle_config import CAPABILITY_KIND, EagleConfig
from blockdraft.models.heads.eagle_layer import EagleLayer
from blockdraft.models.hf.medusa import shortlist_digest

DEFAULT_DEPTH = 6
"""Draft tokens a path holds when neither the caller nor the folder's recipe (its
``blockdraft_drafting`` entry's ``"depth"``) says (EAGLE-2's tree depth)."""
CONTEXTS = ("answer", "prompt")
_COMPARED = ("d_model", "num_heads", "num_kv_heads", "head_dim", "intermediate_size",
             "vocab_size", "base_layers", "rope_theta", "rms_norm_eps")


class EagleHeads(nn.Module):
    """A draft layer as a model's heads (see the module docstring).

    Args:
        layer: the draft layer (its weights; the base's tensors come with :meth:`bind`).
        depth: draft tokens a path holds (``h - 1``), ``1 .. 16``.
        context: ``"answer"`` or ``"prompt"`` (what the layer was trained to read first).
        base_model: the base its folder names (for messages), or ``""``.
        draft_precision: the layer's weights on ONNX Runtime (``"float32"``, ``"int8"``,
            ``"q4"``: :data:`~blockdraft.models.heads.draft_precision.DRAFT_PRECISIONS`).

    Raises:
        ModelError: a bad depth, context or draft precision.
    """

    kind: ClassVar[str] = CAPABILITY_KIND
    """The heads' kind: the draft layer's rule (:class:`~blockdraft.models.heads.EagleRule`)."""

    def __init__(self, layer: EagleLayer, depth: int = DEFAULT_DEPTH, context: str = "answer",
                 base_model: str = "", draft_precision: str = "float32") -> None:
        super().__init__()
        if not isinstance(layer, EagleLayer):
            raise ModelError(f"EagleHeads wraps an EagleLayer, got {type(layer).__name__}")
        if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= 16:
            raise ModelError(f"the draft depth must be an integer in [1, 16], got {depth!r}")
        if context not in CONTEXTS:
            raise ModelError(f"context must be one of {', '.join(CONTEXTS)}, got {context!r}")
        self.layer = layer
        self.num_heads = depth
        self.context = context
        self.base_model = base_model
        self.draft_precision = check_draft_precision(draft_precision, "draft_precision")
        self.drafting: Any = None  # the folder's DraftingRecipe, if it packages one
        self.num_layers = 1
        self.own_projection = False
        self.projections = None

    @property
    def d_model(self) -> int:
        """The base's hidden size ``d``."""
        return self.layer.config.d_model

    @property
    def vocab_size(self) -> int:
        """The base's vocabulary ``V``."""
        return self.layer.config.vocab_size

    @property
    def shortlist(self) -> torch.Tensor | None:
        """The layer's draft vocabulary (sorted base ids), or None."""
        return self.layer.shortlist

    def bind(self, base: Any) -> EagleHeads:
        """Hand the layer ``base``'s input embedding and output projection, after checking
        that the layer was made for a base of this block shape.

        Raises:
            ModelError: a base whose block differs (the size named) or that the layer cannot
                copy (another activation, biases, scaled RoPE).
        """
        config = self.layer.config
        text = base.config.get_text_config(decoder=True) if callable(
            getattr(base.config, "get_text_config", None)) else base.config
        try:
            want = EagleConfig.from_base(text, config.fusion, config.fuse_layers or None)
        except ModelError as e:
            raise ModelError(f"this EAGLE draft layer cannot run on {type(base).__name__}: {e}"
                             ) from e
        made = f" (made for {self.base_model!r})" if self.base_model else ""
        for name in _COMPARED:
            mine, theirs = getattr(config, name), getattr(want, name)
            same = (math.isclose(mine, theirs, rel_tol=1e-6) if isinstance(mine, float)
                    else mine == theirs)
            if not same:
                raise ModelError(f"this EAGLE draft layer{made} was trained for another base: "
                                 f"its {name} is {mine}, the base's is {theirs}; load it with "
                                 "the base it was trained on")
        self.layer.attach(base.get_input_embeddings().weight, base.get_output_embeddings().weight)
        return self

    def logits(self, states: torch.Tensor, lm_head: nn.Module | None = None) -> torch.Tensor:
        """``states [..., n, d]`` (the layer's output features) -> raw logits ``[..., n, V]``:
        the layer's head over its shortlist, ``-inf`` elsewhere (``lm_head`` is not read: the
        layer holds its rows)."""
        out = self.layer.logits(states)  # (..., n, Vs)
        ids = self.layer.shortlist
        if ids is None:
            return out
        full = out.new_full((*out.shape[:-1], self.vocab_size), float("-inf"))
        full[..., ids.to(out.device)] = out
        return full

    def extra_repr(self) -> str:
        """Depth, context, shortlist (its size and digest) and a draft precision other than
        float32: an ONNX export keyed by the heads' description changes with the shortlist's
        content, as Medusa heads', and with the layer's precision (a float32 layer's
        description, and so its export's key, is what it was before precisions existed)."""
        ids = self.layer.shortlist
        return (f"depth={self.num_heads}, context={self.context}"
                + ("" if ids is None else f", shortlist={ids.numel()}@{shortlist_digest(ids)}")
                + ("" if self.draft_precision == "float32"
                   else f", draft_precision={self.draft_precision}"))


def read_eagle_heads(folder: str | os.PathLike[str], depth: int | None = None,
                     draft_precision: str | None = None) -> EagleHeads:
    """The draft layer of a folder :func:`~blockdraft.models.heads.eagle_files.write_eagle`
    wrote, as heads: its context from the folder's training record, its drafting recipe when it
    packages one, ``depth`` (default: the recipe's ``"depth"``, else :data:`DEFAULT_DEPTH`) and
    ``draft_precision`` (default: the recipe's ``"draft_precision"``, else ``"float32"``).

    Raises:
        ModelError: not such a folder, a damaged file, a bad depth, context or draft precision.
    """
    import json

    from blockdraft.models.heads.eagle_files import eagle_record, read_eagle
    from blockdraft.models.hf.drafting import read_drafting

    root = Path(folder)
    layer = read_eagle(root)
    recipe = read_drafting(root)
    if depth is None:
        depth = int((recipe.info if recipe is not None else {}).get("depth", DEFAULT_DEPTH))
    if draft_precision is None:
        draft_precision = "float32" if recipe is None else recipe.draft_precision
    config = json.loads((root / "config.json").read_text(encoding="utf-8"))
    heads = EagleHeads(layer, depth, str(eagle_record(root).get("context", "answer")),
                       str(config.get("base_model_name_or_path") or ""), draft_precision)
    heads.drafting = recipe
    return heads


def decoder_layers(base: Any) -> list[nn.Module]:
    """The base's decoder layers in order (Llama-style ``model.layers``, GPT-2's ``h``).

    Raises:
        ModelError: none found.
    """
    decoder = base.get_decoder() if callable(getattr(base, "get_decoder", None)) else None
    for owner in (decoder, getattr(base, "model", None), getattr(base, "transformer", None)):
        for name in ("layers", "h"):
            found = getattr(owner, name, None) if owner is not None else None
            if isinstance(found, nn.ModuleList) and len(found):
                return list(found)
    raise ModelError(f"cannot find the decoder layers of {type(base).__name__}")


@contextmanager
def capture_layers(base: Any, indices: Sequence[int]) -> Iterator[list[torch.Tensor]]:
    """While the block runs, the outputs of decoder layers ``i - 1`` for each ``i`` of
    ``indices`` (the residual stream entering layer ``i``) are appended, in that order, to the
    list it yields, one ``[B, T, d]`` each per forward (nothing is hooked when ``indices`` is
    empty)."""
    layers = decoder_layers(base) if indices else []
    seen: dict[int, torch.Tensor] = {}
    out: list[torch.Tensor] = []

    def hook(i: int) -> Any:
        def keep(_module: Any, _inputs: Any, output: Any) -> None:
            seen[i] = output[0] if isinstance(output, tuple) else output
        return keep

    handles = [layers[i - 1].register_forward_hook(hook(i)) for i in indices]
    try:
        yield out
    finally:
        for handle in handles:
            handle.remove()
    out.extend(seen[i] for i in indices if i in seen)


__all__ = ["CONTEXTS", "DEFAULT_DEPTH", "EagleHeads", "capture_layers", "decoder_layers",
           "read_eagle_heads"]
