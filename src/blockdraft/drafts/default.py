"""What ``decode(model, ids)`` drafts with when it is told nothing: the best strategy measured.

:func:`default_drafter` builds a :class:`~blockdraft.drafts.CostAwareTreeDrafter` for a model:

- on the model's own cost curve (:func:`~blockdraft.models.cost.measure_cost_curve`, measured
  once per model object, about a second for SmolLM2 on a CPU; the result is kept on the model);
- with the drafting recipe packaged beside its heads when there is one
  (:class:`~blockdraft.models.hf.drafting.DraftingRecipe`: the n-gram LM of the base's own
  answers with a context LM, the acceptance tables measured on held-out training answers, the
  settings tuned there);
- otherwise (a model without a recipe: a new base, tests) the heads' top-1 chain and prompt
  lookup with uncalibrated acceptance rates (:meth:`AcceptanceTables.uniform`);
- one path a step (``chain=True``) on a runtime that verifies chains losslessly but not trees
  (``model.exact_trees`` False: ONNX Runtime int8);
- prefix-conditioned heads (``model.conditional_heads``), whose lattice is a tree: EAGLE-2's
  tree over it with prompt-lookup copies merged in, cut to the size that pays on the cost
  curve (:class:`~blockdraft.drafts.ConditionalTreeDrafter` with ``cost`` and ``lookup``; the
  copies rated by the recipe's acceptance tables when the heads folder has one, its ``k`` and
  ``max_nodes`` taken too; their chain alone where trees are not exact).

Public surface:
    default_drafter(model) -> CostAwareTreeDrafter, or ConditionalTreeDrafter (prefix heads)
    model_cost_curve(model) -> CostCurve       measured once per model object
"""

from __future__ import annotations

from typing import Any

from blockdraft.drafts.budget import CostAwareTreeDrafter
from blockdraft.drafts.calibration import AcceptanceTables
from blockdraft.drafts.conditional import ConditionalTreeDrafter
from blockdraft.models.cost import CostCurve, measure_cost_curve

_COST_ATTR = "_blockdraft_cost_curve"
_DRAFTER_ATTR = "_blockdraft_default_drafter"


def model_cost_curve(model: Any) -> CostCurve:
    """The model's :class:`CostCurve`, measured at the first call and kept on the model."""
    curve = getattr(model, _COST_ATTR, None)
    if not isinstance(curve, CostCurve):
        curve = measure_cost_curve(model, nodes=(1, 2, 4, 8, 16, 32), repeats=5)
        object.__setattr__(model, _COST_ATTR, curve)
    return curve


def default_drafter(model: Any) -> CostAwareTreeDrafter | ConditionalTreeDrafter:
    """The cost-aware tree the model's packaged recipe describes (see the module docstring);
    built once per model object.

    Raises:
        RescorerError, DraftError: a packaged LM or table that cannot be read (named).
    """
    drafter = getattr(model, _DRAFTER_ATTR, None)
    if isinstance(drafter, CostAwareTreeDrafter | ConditionalTreeDrafter):
        return drafter
    cost = model_cost_curve(model)
    recipe = getattr(model, "drafting", None)
    h = int(getattr(model, "h", 2))
    chain = not bool(getattr(model, "exact_trees", True))
    if getattr(model, "conditional_heads", False):
        if chain:
            drafter = ConditionalTreeDrafter(k=1, budget=h, cost=cost)
        else:
            tables = (AcceptanceTables.load(recipe.acceptance)
                      if recipe is not None and recipe.acceptance is not None else None)
            drafter = ConditionalTreeDrafter(
                k=4 if recipe is None else recipe.k,
                budget=32 if recipe is None else recipe.max_nodes, cost=cost, lookup=True,
                tables=tables, copy_length=16 if recipe is None else recipe.copy_length)
    elif recipe is None:
        drafter = CostAwareTreeDrafter(cost=cost, tables=AcceptanceTables.uniform(h), k=4, p=0,
                                       lookup=True, chain=chain)
    else:
        rescorer = None
        if recipe.ngram is not None:
            from blockdraft.rescorers.ngram import NgramLM, NgramRescorer

            extra = ({"context_order": recipe.context_order,
                      "context_weight": recipe.context_weight}
                     if recipe.context_order and recipe.context_weight else {})
            rescorer = NgramRescorer(NgramLM(recipe.ngram), alpha=recipe.alpha, **extra)
        tables = (AcceptanceTables.load(recipe.acceptance) if recipe.acceptance is not None
                  else AcceptanceTables.uniform(h))
        drafter = CostAwareTreeDrafter(cost=cost, tables=tables, k=recipe.k, p=recipe.p,
                                       rescorer=rescorer, lookup=True,
                                       copy_length=recipe.copy_length,
                                       max_nodes=recipe.max_nodes, chain=chain)
    object.__setattr__(model, _DRAFTER_ATTR, drafter)
    return drafter
