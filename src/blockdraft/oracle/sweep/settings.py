"""One configuration of a sweep (:class:`Setting`), the grid of them (:class:`Grid`) and the
strategy each one simulates (:meth:`Setting.build`).

A setting names a drafting strategy by its kind and numbers, never by objects, so it pickles
to any worker, compares equal to the same configuration written another way and keys the
result cache (:mod:`blockdraft.oracle.sweep.cache`). Axes that do not change a strategy's
drafts are folded to one canonical value when a setting is made, so a grid never simulates
the same strategy twice:

- ``heads`` (the heads' ``p`` best drafts of the top-``k`` lattice, verified as their trie;
  rescored when a rescorer is named) and ``combined`` (the same plus prompt lookup's draft):
  without a rescorer ``alpha`` is dropped, and ``p = 1`` drafts the argmax at any ``k``
  (vanilla BPD), so ``k`` becomes 1;
- ``tree`` (a token tree of ``budget`` nodes: ``confidence``, EAGLE-2 style; ``medusa``,
  the static Medusa tree cut to the budget, which reads its own ``k``; ``rescored``, best
  first by head plus ``alpha`` x LM score, which needs a rescorer): ``p`` is 1;
- ``lookup`` (prompt lookup alone, docs/definitions.md sec. 9): no axis applies;
- ``oracle`` (the top-``k`` oracle, sec. 5): ``k`` alone.

Public surface:
    STRATEGIES, TREES, RESCORERS       the kinds a setting names
    Setting(strategy, k=1, p=1, rescorer="", lm="", alpha=None, tree="", budget=0)
        .label, .to_dict(), Setting.from_dict(d), .build(resources) -> strategy
    Grid(strategies, ks, ps, alphas, rescorers, trees, budgets).expand() -> (Setting, ...)
    Resources(threads=1)        what a process loads once for every setting it builds
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from blockdraft.oracle.errors import OracleError

STRATEGIES = ("heads", "combined", "tree", "lookup", "oracle")
"""The strategy kinds of a setting (see the module docstring)."""
TREES = ("confidence", "medusa", "rescored")
"""The token trees of the ``tree`` strategy."""
RESCORERS = ("", "ngram", "neural")
"""No rescorer, an n-gram LM (a KenLM file), a small neural LM (a RescorerLM folder)."""


@dataclass(frozen=True)
class Setting:
    """One drafting strategy of a sweep, in canonical form (see the module docstring).

    Attributes:
        strategy: one of :data:`STRATEGIES`.
        k: arcs per slot of the lattice the strategy reads (``1 <= k <= K``).
        p: drafts per step (``heads``, ``combined``).
        rescorer: ``""``, ``"ngram"`` or ``"neural"``.
        lm: the rescorer's file (an n-gram LM) or folder (a RescorerLM), as given.
        alpha: the LM weight (finite, ``>= 0``), or None without a rescorer.
        tree: the token tree of the ``tree`` strategy (:data:`TREES`), else ``""``.
        budget: the tree's nodes ``N`` (root included, ``>= 2``), else 0.

    Raises:
        OracleError: an unknown kind, a number out of range, or a combination that names no
            strategy (a rescored tree without a rescorer, a rescorer without its file).
    """

    strategy: str
    k: int = 1
    p: int = 1
    rescorer: str = ""
    lm: str = ""
    alpha: float | None = None
    tree: str = ""
    budget: int = 0

    def __post_init__(self) -> None:
        put = object.__setattr__
        if self.strategy not in STRATEGIES:
            raise OracleError(f"unknown strategy {self.strategy!r}; use one of "
                              f"{', '.join(STRATEGIES)}")
        if self.rescorer not in RESCORERS:
            raise OracleError(f"unknown rescorer {self.rescorer!r}; use ngram or neural")
        for name in ("k", "p", "budget"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise OracleError(f"setting {name} must be an integer >= 0, got {value!r}")
        if bool(self.rescorer) != bool(self.lm):
            raise OracleError(f"rescorer {self.rescorer!r} and its file {self.lm!r}: name both "
                              "or neither")
        s = self.strategy
        if s == "tree" and self.tree not in TREES:
            raise OracleError(f"tree {self.tree!r}: use one of {', '.join(TREES)}")
        if s != "tree":
            put(self, "tree", "")
            put(self, "budget", 0)
        if s in ("tree", "lookup", "oracle"):
            put(self, "p", 1)
        keeps_rescorer = s in ("heads", "combined") or self.tree == "rescored"
        if not keeps_rescorer:
            put(self, "rescorer", "")
            put(self, "lm", "")
        if self.tree == "rescored" and not self.rescorer:
            raise OracleError("a rescored tree needs a rescorer (an n-gram LM or a neural LM)")
        if self.rescorer:
            alpha = 1.0 if self.alpha is None else float(self.alpha)
            if not math.isfinite(alpha) or alpha < 0:
                raise OracleError(f"alpha must be finite and >= 0, got {self.alpha!r}")
            put(self, "alpha", alpha)
        else:
            put(self, "alpha", None)
        if s == "lookup" or (s in ("heads", "combined") and self.p == 1 and not self.rescorer):
            put(self, "k", 1)
        if s == "tree" and self.budget < 2:
            raise OracleError(f"a tree's budget counts its root, so it must be >= 2, got "
                              f"{self.budget}")
        if self.tree == "medusa":  # the ranks its first budget - 1 paths read
            put(self, "k", 1 + max(max(c) for c in self.medusa_choices()))
        if self.k < 1 or self.p < 1:
            raise OracleError(f"k and p must be >= 1, got k = {self.k}, p = {self.p}")

    def medusa_choices(self) -> tuple[tuple[int, ...], ...]:
        """The rank paths of a ``medusa`` tree: the first ``budget - 1`` of Medusa's
        ``mc_sim_7b_63`` in node order (:data:`~blockdraft.drafts.MC_SIM_7B_63`)."""
        from blockdraft.drafts.trees import MC_SIM_7B_63, sort_choices

        return tuple(sort_choices(MC_SIM_7B_63)[: self.budget - 1])

    @property
    def label(self) -> str:
        """A short human name: ``vanilla``, ``heads k=8 p=4 ngram:lm4 a=1``, ``tree
        confidence k=4 N=16``, ``lookup``, ``oracle k=8``."""
        s = self.strategy
        if s == "lookup":
            return "lookup"
        if s == "oracle":
            return f"oracle k={self.k}"
        if s == "tree":
            parts = ["tree", self.tree, f"k={self.k}", f"N={self.budget}"]
        elif self.p == 1 and not self.rescorer:
            parts = ["vanilla" if s == "heads" else "vanilla + lookup"]
        else:
            parts = [s if s == "heads" else "heads + lookup", f"k={self.k}", f"p={self.p}"]
        if self.rescorer:
            parts.append(f"{self.rescorer}:{_stem(self.lm)} a={self.alpha:g}")
        return " ".join(parts)

    @property
    def rescorer_label(self) -> str:
        """``"none"`` or ``"<kind>:<file stem>"``: the rescorer axis of tables and plots."""
        return f"{self.rescorer}:{_stem(self.lm)}" if self.rescorer else "none"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (:meth:`from_dict` reads it back)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Setting:
        """The setting :meth:`to_dict` wrote.

        Raises:
            OracleError: a missing or unknown field, or values :class:`Setting` refuses.
        """
        names = {f for f in cls.__dataclass_fields__}
        if not isinstance(data, Mapping) or set(data) - names or "strategy" not in data:
            raise OracleError(f"not a sweep setting: {data!r}")
        return cls(**dict(data))

    def build(self, resources: Resources) -> Any:
        """The strategy this setting names, for :func:`~blockdraft.oracle.simulate.simulate`
        (a new object each call; the LMs it reads come from ``resources``, loaded once)."""
        from blockdraft.drafts import (
            CombinedDrafter,
            ConfidenceTreeDrafter,
            HeadDrafter,
            LookupDrafter,
            MedusaTreeDrafter,
            RescoredTreeDrafter,
            TrieDrafter,
        )
        from blockdraft.oracle.acceptance import Oracle

        s = self.strategy
        if s == "oracle":
            return Oracle(self.k)
        if s == "lookup":  # its drafts are of any length: verified as a tree
            return TrieDrafter(LookupDrafter())
        if s == "tree":
            if self.tree == "confidence":
                return ConfidenceTreeDrafter(k=self.k, budget=self.budget)
            if self.tree == "medusa":
                return MedusaTreeDrafter(choices=self.medusa_choices(), budget=self.budget)
            return RescoredTreeDrafter(lm=resources.path_scorer(self), k=self.k,
                                       budget=self.budget, alpha=float(self.alpha or 0.0))
        rescorer = resources.rescorer(self) if self.rescorer else None
        heads = HeadDrafter(k=self.k, p=self.p, rescorer=rescorer)
        if s == "combined":
            return TrieDrafter(CombinedDrafter(heads, LookupDrafter()))
        return heads


def _stem(path: str) -> str:
    p = Path(path)
    return p.stem if p.suffix in (".bin", ".arpa", ".binary", ".klm") else p.name


@dataclass
class Resources:
    """What one process loads once for every setting it builds: n-gram LMs and RescorerLMs,
    by path (a sweep checks each file's digest where it enters, :func:`~blockdraft.oracle
    .sweep.cache.file_digest`).

    Attributes:
        threads: torch intra-op threads of a neural rescorer (1: every worker one core).
    """

    threads: int = 1
    _loaded: dict[tuple[str, str], Any] = field(default_factory=dict, repr=False)

    def _load(self, kind: str, path: str) -> Any:
        key = (kind, path)
        if key not in self._loaded:
            if kind == "ngram":
                from blockdraft.rescorers.ngram import NgramLM

                self._loaded[key] = NgramLM(path)
            else:
                import torch

                from blockdraft.models import load_model

                torch.set_num_threads(self.threads)
                self._loaded[key] = load_model(path).eval()
        return self._loaded[key]

    def rescorer(self, setting: Setting) -> Any:
        """The rescorer of ``setting`` (a new one: its state starts afresh)."""
        lm = self._load(setting.rescorer, setting.lm)
        alpha = float(setting.alpha or 0.0)
        if setting.rescorer == "ngram":
            from blockdraft.rescorers.ngram import NgramRescorer

            return NgramRescorer(lm, alpha=alpha)
        from blockdraft.rescorers.neural import NeuralRescorer

        return NeuralRescorer(lm, alpha=alpha, backend="torch")

    def path_scorer(self, setting: Setting) -> Any:
        """What a rescored tree scores its paths with: the n-gram LM itself, or a
        :class:`~blockdraft.rescorers.neural.NeuralPathScorer` over the RescorerLM."""
        lm = self._load(setting.rescorer, setting.lm)
        if setting.rescorer == "ngram":
            return lm
        from blockdraft.rescorers.neural import NeuralPathScorer

        return NeuralPathScorer(lm, max_depth=max(1, setting.budget))


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
            OracleError: a value a setting refuses, or a grid with no setting at all.
        """
        out: dict[Setting, None] = {}
        for strategy in self.strategies:
            trees = self.trees if strategy == "tree" else ("",)
            for tree, k, p, (kind, path), alpha, budget in itertools.product(
                    trees, self.ks, self.ps, self.rescorers, self.alphas, self.budgets):
                if tree == "rescored" and not kind:
                    continue
                out.setdefault(Setting(strategy, k=k, p=p, rescorer=kind, lm=path,
                                       alpha=alpha if kind else None, tree=tree,
                                       budget=budget), None)
        if not out:
            raise OracleError("the grid names no strategy (a rescored tree needs a rescorer)")
        return tuple(out)
