"""What ``decode(model, ids)`` drafts with when it is told nothing: the best strategy measured.

:func:`~blockdraft.drafts.spec.default_spec` reads the model's declared capabilities
(:class:`~blockdraft.models.capabilities.Capabilities`) and names one strategy
(:class:`~blockdraft.drafts.spec.DraftSpec`):

- Medusa heads (a sausage lattice): the cost-aware tree of the heads' chain, rescored p-best
  paths and prompt lookup, with the drafting recipe packaged beside the heads when there is one
  (:class:`~blockdraft.models.hf.drafting.DraftingRecipe`: the n-gram LM of the base's own
  answers with a context LM, the acceptance tables measured on held-out training answers, the
  settings tuned there); otherwise (a new base, tests) the heads' top-1 chain and prompt lookup
  with uncalibrated acceptance rates;
- prefix-conditioned heads or a draft layer (a tree lattice): EAGLE-2's tree over it with
  prompt-lookup copies merged in, cut to the size that pays (the copies rated by the recipe's
  acceptance tables when the heads folder has one, its ``k`` and ``max_nodes`` taken too);
- a model without extra heads: prompt lookup.

Built on the model's cost curve (declared, or measured once per model object:
:func:`~blockdraft.models.cost.cost_curve_of`); on a runtime whose trees take a confirming
forward (ONNX Runtime int8 and q4) the factory cuts the tree to one path a step, and the Medusa
default skips the heads on a step whose best lookup copy matched a token or more (heads on
demand: :data:`~blockdraft.drafts.spec.CHAIN_HEADS_ON_DEMAND`).

Public surface:
    default_spec(caps) -> DraftSpec           (in blockdraft.drafts.spec, the factory's module)
    default_drafter(model) -> Pipeline        the default spec built for the model
    model_cost_curve(model) -> CostCurve      the model's cost curve (cost_curve_of)
"""

from __future__ import annotations

from typing import Any

from blockdraft.drafts.pipeline import Pipeline
from blockdraft.drafts.spec import default_spec
from blockdraft.models.capabilities import capabilities_of
from blockdraft.models.cost import CostCurve, cost_curve_of


def model_cost_curve(model: Any) -> CostCurve:
    """The model's :class:`CostCurve`: declared, or measured at the first call and kept for the
    model object (:func:`~blockdraft.models.cost.cost_curve_of`)."""
    return cost_curve_of(model)


def default_drafter(model: Any) -> Pipeline:
    """The model's default drafter (a new one, on its cost curve; see the module docstring).

    Raises:
        RescorerError, DraftError: a packaged LM or table that cannot be read (named).
    """
    caps = capabilities_of(model)
    return default_spec(caps).build(caps=caps, cost=cost_curve_of(model))
