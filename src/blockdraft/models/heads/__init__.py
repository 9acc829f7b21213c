"""The heads of a Hugging Face model, one object per kind, one backend per runtime.

A kind's rule is written once (:class:`~.rule.HeadsRule` and a subclass per kind), in terms of
what a runtime computes its own way (its backend). The model classes
(:class:`~blockdraft.models.hf.HFBlockwiseModel`, :class:`~blockdraft.models.runtimes.
OrtBlockwiseModel`, :class:`~blockdraft.models.runtimes.StaticKVModel`) hold one rule object
(:class:`~.lm.HeadsLM`) and never branch on the kind.

    kind      rule (this package)              backends
    medusa    :class:`~.medusa.MedusaRule`     PyTorch :class:`~.torch_backend.TorchMedusa`;
                                               ONNX Runtime :class:`~blockdraft.models.
                                               runtimes.onnx_heads.OrtMedusa`
    prefix    :class:`~.prefix.PrefixRule`     PyTorch :class:`~.torch_backend.TorchPrefix`;
                                               ONNX Runtime :class:`~blockdraft.models.
                                               runtimes.onnx_heads.OrtPrefix`
    draft-    :class:`~.eagle.EagleRule`       PyTorch :class:`~.torch_backend.TorchEagle`;
    layer                                      ONNX Runtime :class:`~blockdraft.models.
                                               runtimes.onnx_heads.OrtEagle` (fusion "top")

The static runtime's heads are the eager adapter's (the PyTorch modules on its device, the
draft layer's included). The kind of a heads module is its class's ``kind``
(``MedusaHeads.kind``, ``PrefixHeads.kind``, ``EagleHeads.kind``). A new kind is a module here
with its rule and an entry in :data:`RULES`, a PyTorch backend (:data:`TORCH_BACKENDS`), its
graphs (:mod:`blockdraft.models.runtimes.onnx_head_graphs`) and an ONNX Runtime backend
(:mod:`blockdraft.models.runtimes.onnx_heads`). The draft layer's rule keeps a state along the
text (its KV cache, :class:`~.eagle.DraftLayerState`), fed the accepted path after each
verdict, on every runtime (each one's forward hands the rule the base's features, ``saw``).

Public surface:
    RULES, TORCH_BACKENDS      kind -> the rule class, kind -> its PyTorch backend
    torch_rule(base, heads) -> HeadsRule        the heads module's rule on PyTorch
    HeadsRule, MedusaRule, PrefixRule, EagleRule, HeadsLM, tree_expander, padded
"""

from __future__ import annotations

from typing import Any

from blockdraft.models.errors import ModelError
from blockdraft.models.heads.eagle import EagleRule
from blockdraft.models.heads.eagle_config import CAPABILITY_KIND
from blockdraft.models.heads.lm import HeadsLM
from blockdraft.models.heads.medusa import MedusaRule
from blockdraft.models.heads.prefix import PrefixRule, tree_expander
from blockdraft.models.heads.rule import HeadsRule, padded
from blockdraft.models.heads.torch_backend import TorchEagle, TorchMedusa, TorchPrefix

RULES: dict[str, type[HeadsRule]] = {"medusa": MedusaRule, "prefix": PrefixRule,
                                     CAPABILITY_KIND: EagleRule}
"""Each kind's rule."""
TORCH_BACKENDS: dict[str, type[Any]] = {"medusa": TorchMedusa, "prefix": TorchPrefix,
                                        CAPABILITY_KIND: TorchEagle}
"""Each kind's PyTorch backend."""


def rule_class(kind: str) -> type[HeadsRule]:
    """The rule of heads of ``kind``.

    Raises:
        ModelError: a kind without a rule (naming the kinds there are).
    """
    rule = RULES.get(kind)
    if rule is None:
        raise ModelError(f"heads of kind {kind!r} have no rule; known: {', '.join(RULES)}")
    return rule


def torch_rule(base: Any, heads: Any) -> HeadsRule:
    """The rule of the heads module ``heads`` (its class's ``kind``) computed by PyTorch on
    ``base``'s ``lm_head`` and input embeddings."""
    kind = str(heads.kind)
    return rule_class(kind)(TORCH_BACKENDS[kind](base, heads))


__all__ = [
    "RULES",
    "TORCH_BACKENDS",
    "EagleRule",
    "HeadsLM",
    "HeadsRule",
    "MedusaRule",
    "PrefixRule",
    "padded",
    "rule_class",
    "torch_rule",
    "tree_expander",
]
