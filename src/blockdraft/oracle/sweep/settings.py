"""The settings of a sweep: one configuration is a :class:`~blockdraft.drafts.spec.DraftSpec`
(``Setting`` here), the grid of them is a :class:`Grid`.

A setting names a drafting strategy by its kind and numbers, never by objects, so it pickles
to any worker, compares equal to the same configuration written another way and keys the
result cache (:mod:`blockdraft.oracle.sweep.cache`); :meth:`DraftSpec.build
<blockdraft.drafts.spec.DraftSpec.build>` (the one factory) makes the strategy each one
simulates. Axes that do not change a strategy's drafts are folded to one canonical value when a
setting is made, so a grid never simulates the same strategy twice (see
:mod:`blockdraft.drafts.spec`).

A sweep runs offline on a trace, so its strategies are those that need no model
(:data:`STRATEGIES`): ``heads``, ``combined``, ``iad``, ``tree``, ``lookup`` and ``oracle``.

Public surface:
    STRATEGIES, TREES, RESCORERS       the kinds a setting names
    Setting                            :class:`~blockdraft.drafts.spec.DraftSpec`
    Grid(strategies, ks, ps, alphas, rescorers, trees, budgets).expand() -> (Setting, ...)
    Resources(threads=1)               :class:`~blockdraft.drafts.spec.Resources`
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from blockdraft.core.errors import BlockdraftError
from blockdraft.drafts.spec import RESCORERS, TREES, Resources
from blockdraft.drafts.spec import DraftSpec as Setting
from blockdraft.oracle.errors import OracleError

__all__ = ["RESCORERS", "STRATEGIES", "TREES", "Grid", "Resources", "Setting"]

STRATEGIES = ("heads", "combined", "iad", "tree", "lookup", "oracle")
"""The strategy kinds a sweep runs offline (see the module docstring)."""


@dataclass(frozen=True)
class Grid:
    """The axes of a sweep: every combination that names a strategy, in canonical form.

    Attributes:
        strategies: kinds (:data:`STRATEGIES`).
        ks, ps: lattice widths and drafts per step.
        alphas: LM weights (used with a rescorer).
        rescorers: ``(kind, path)`` pairs; ``("", "")`` is no rescorer.
        trees: the trees of the ``tree`` strategy.
        budgets: the trees' node budgets.
    """

    strategies: Sequence[str] = ("heads",)
    ks: Sequence[int] = (8,)
    ps: Sequence[int] = (1,)
    alphas: Sequence[float] = (1.0,)
    rescorers: Sequence[tuple[str, str]] = (("", ""),)
    trees: Sequence[str] = ("confidence",)
    budgets: Sequence[int] = (16,)

    def expand(self) -> tuple[Setting, ...]:
        """Every distinct setting of the grid, in the grid's order (later axes fastest);
        combinations that name no strategy (a rescored tree without a rescorer) are left out.

        Raises:
            OracleError: a value a setting refuses, a strategy a sweep does not run offline,
                or a grid with no setting at all.
        """
        unknown = [s for s in self.strategies if s not in STRATEGIES]
        if unknown:
            raise OracleError(f"a sweep runs the strategies {', '.join(STRATEGIES)} offline; "
                              f"{', '.join(map(repr, unknown))} needs a model (decode it)")
        out: dict[Setting, None] = {}
        for strategy in self.strategies:
            trees = self.trees if strategy == "tree" else ("",)
            for tree, k, p, (kind, path), alpha, budget in itertools.product(
                    trees, self.ks, self.ps, self.rescorers, self.alphas, self.budgets):
                if tree == "rescored" and not kind:
                    continue
                try:
                    setting = Setting(strategy, k=k, p=p, rescorer=kind, lm=path,
                                      alpha=alpha if kind else None, tree=tree, budget=budget)
                except BlockdraftError as e:
                    raise OracleError(str(e)) from e
                out.setdefault(setting, None)
        if not out:
            raise OracleError("the grid names no strategy (a rescored tree needs a rescorer)")
        return tuple(out)
