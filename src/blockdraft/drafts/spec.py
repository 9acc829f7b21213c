"""A drafting strategy named declaratively, and the one factory that builds it: :class:`DraftSpec`.

A spec names a strategy by its kind and numbers, and the files it reads (an n-gram LM, a small
neural LM, acceptance tables) by path, never by objects: it pickles to any worker, compares
equal to the same strategy written another way and keys a sweep's result cache. Axes that do
not change a strategy's drafts are folded to one canonical value when a spec is made, so a grid
never runs the same strategy twice. :meth:`DraftSpec.build` is the one factory: the decode loop,
the offline simulator, sweeps, the CLI, the demo and the benchmarks build drafters through it,
with the model's limits (:class:`~blockdraft.models.capabilities.Capabilities`) applied once:
on a runtime whose token trees take a confirming forward (ONNX Runtime int8 and q4) a
lossless decode's cost-sized strategies draft one path a step (the fixed ones draft their
trees, whose paths the verifier confirms).

Strategies (:data:`STRATEGIES`):

    default        what a model drafts with when told nothing (:mod:`~blockdraft.drafts.default`:
                   its packaged recipe, its head kind, its runtime's cost curve)
    heads          the heads' ``p`` best paths of the top-``k`` lattice, one trie; ranked by a
                   rescorer when one is named (``p = 1`` without one is vanilla BPD at any ``k``)
    combined       the same plus prompt lookup's copy
    iad            the same plus the input copy (Ge et al.'s IAD)
    lookup         prompt lookup alone
    tree           a token tree of ``budget`` nodes: ``confidence`` (EAGLE-2's), ``medusa`` (the
                   static Medusa tree cut to the budget), ``rescored`` (best first by head plus
                   ``alpha`` x LM), ``rated`` (the ``budget`` best by reach of Medusa's
                   candidates, rated by ``tables`` and a rescorer's LM evidence when one is
                   named: the cost-aware tree with N fixed, which a GPU step drafts on the
                   device)
    cost-aware     the heads' chain, rescored p-best paths and ``lookup`` copies in one trie, rated
                   by acceptance tables and cut to the size that pays on the cost curve, at
                   most ``budget`` nodes
    tree-lattice   the tree lattice of prefix heads or a draft layer: EAGLE-2's tree of at most
                   ``budget`` nodes grown while it pays (``p = 0``; rescored best first by
                   head plus ``alpha`` x LM when a rescorer is named), with ``lookup`` copies
                   merged; or its ``p`` best paths (``p > 0``, an LM's when a rescorer is
                   named)
    oracle         the top-``k`` oracle (offline only: it reads the reference)

Public surface:
    STRATEGIES, TREES, RESCORERS
    DraftSpec(strategy, k=1, p=1, rescorer="", lm="", alpha=None, tree="", budget=0,
              lookup=False, tables="", copy_length=16, context_order=0, context_weight=0.0,
              given=None)
        .label, .needs_cost, .to_dict(), DraftSpec.from_dict(d),
        .build(resources=None, caps=None, cost=None, lossless=True) -> Pipeline
    default_spec(caps) -> DraftSpec      what a model drafts with when told nothing
    Resources(threads=1)        mutable: the LMs and tables a process loads once, by path
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from blockdraft.core.batch import DraftError
from blockdraft.drafts.budget import CostAwareTreeDrafter
from blockdraft.drafts.calibration import AcceptanceTables
from blockdraft.drafts.cut import CostCut
from blockdraft.drafts.grow import (
    ConditionalTreeDrafter,
    ConfidenceTreeDrafter,
    RescoredTreeDrafter,
)
from blockdraft.drafts.heads import ConditionalDrafter, HeadDrafter
from blockdraft.drafts.iad import CombinedDrafter, InputCopyDrafter
from blockdraft.drafts.lookup import LookupDrafter
from blockdraft.drafts.oracle import Oracle
from blockdraft.drafts.pipeline import Pipeline
from blockdraft.drafts.rates import TableRates
from blockdraft.drafts.trees import MC_SIM_7B_63, MedusaTreeDrafter, RankPaths, sort_choices
from blockdraft.models.capabilities import Capabilities
from blockdraft.models.cost import CostCurve

STRATEGIES = ("default", "heads", "combined", "iad", "lookup", "tree", "cost-aware",
              "tree-lattice", "oracle")
"""The strategy kinds a spec names (see the module docstring)."""
TREES = ("confidence", "medusa", "rescored", "rated")
"""The token trees of the ``tree`` strategy."""
RESCORERS = ("", "ngram", "neural", "given")
"""No rescorer, an n-gram LM (a KenLM file), a small neural LM (a RescorerLM folder), or an
object already built (``given``)."""
_HEADS = ("heads", "combined", "iad")
_RATED = ("cost-aware", "tree-lattice")


@dataclass(frozen=True)
class DraftSpec:
    """One drafting strategy, in canonical form (see the module docstring).

    Attributes:
        strategy: one of :data:`STRATEGIES`.
        k: arcs per slot of the lattice the strategy reads (``>= 1``).
        p: drafts per step (``heads``, ``combined``, ``iad``; ``cost-aware``: rescored paths
            beside the chain, 0 for none; ``tree-lattice``: 0 grows a tree, more takes the p
            best paths).
        rescorer: ``""``, ``"ngram"`` or ``"neural"``.
        lm: the rescorer's file (an n-gram LM) or folder (a RescorerLM), as given.
        alpha: the LM weight (finite, ``>= 0``), or None without a rescorer.
        tree: the token tree of the ``tree`` strategy (:data:`TREES`), else ``""``.
        budget: the tree's nodes ``N`` (root included, ``>= 2``): ``tree``'s size, the largest
            ``cost-aware`` and ``tree-lattice`` tree.
        lookup: merge prompt-lookup copies (``cost-aware``, ``tree-lattice``).
        tables: acceptance tables (a JSON file) rating a rated strategy's nodes (and a
            ``rated`` tree's), ``""``: uniform stand-ins.
        copy_length: tokens a lookup copy proposes (``cost-aware``, ``tree-lattice``).
        heads_on_demand: ``cost-aware`` with lookup: skip the heads on a step whose best copy
            matched at least this many tokens (the copies alone drafted, the Medusa heads not
            computed: :class:`~blockdraft.drafts.lookup.HeadsOnDemand`); 0: the heads every
            step.
        context_order, context_weight: the context LM interpolated with an n-gram rescorer
            (0: none).
        given: with ``rescorer="given"``, an LM object already built (a rescorer, a path
            scorer or an n-gram LM: decode's ``rescorer=``), in place of a file: a spec holding
            one compares and hashes without it and does not serialise.

    Raises:
        DraftError: an unknown kind, a number out of range, or a combination that names no
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
    lookup: bool = False
    tables: str = ""
    copy_length: int = 16
    heads_on_demand: int = 0
    context_order: int = 0
    context_weight: float = 0.0
    given: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        put = object.__setattr__
        s = self.strategy
        if s not in STRATEGIES:
            raise DraftError(f"unknown strategy {s!r}; use one of {', '.join(STRATEGIES)}")
        if self.rescorer not in RESCORERS:
            raise DraftError(f"unknown rescorer {self.rescorer!r}; use ngram or neural")
        for name in ("k", "p", "budget", "copy_length", "heads_on_demand", "context_order"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise DraftError(f"setting {name} must be an integer >= 0, got {value!r}")
        if (self.rescorer == "given") != (self.given is not None):
            raise DraftError("an LM object goes with rescorer='given' (given=...), and "
                             "rescorer='given' with its object")
        if self.rescorer in ("ngram", "neural") and not self.lm:
            raise DraftError(f"rescorer {self.rescorer!r} needs its file (lm=...)")
        if self.lm and self.rescorer not in ("ngram", "neural"):
            raise DraftError(f"an LM file {self.lm!r} needs its kind: rescorer='ngram' or "
                             "'neural'")
        if s == "tree" and self.tree not in TREES:
            raise DraftError(f"tree {self.tree!r}: use one of {', '.join(TREES)}")
        if s != "tree":
            put(self, "tree", "")
        if s not in ("tree", *_RATED):
            put(self, "budget", 0)
        if s in ("tree", "lookup", "oracle", "default"):
            put(self, "p", 1)
        if s not in _RATED:
            put(self, "lookup", False)
            if self.tree != "rated":
                put(self, "tables", "")
            put(self, "copy_length", 16)
        elif not self.lookup:
            put(self, "copy_length", 16)
        if s != "cost-aware" or not self.lookup:
            put(self, "heads_on_demand", 0)
        keeps_rescorer = (s in (*_HEADS, "cost-aware", "tree-lattice")
                          or self.tree in ("rescored", "rated"))
        if not keeps_rescorer:
            for name, default in (("rescorer", ""), ("lm", ""), ("given", None)):
                put(self, name, default)
        if self.tree == "rescored" and not self.rescorer:
            raise DraftError("a rescored tree needs a rescorer (an n-gram LM or a neural LM)")
        if self.rescorer:
            alpha = 1.0 if self.alpha is None else float(self.alpha)
            if not math.isfinite(alpha) or alpha < 0:
                raise DraftError(f"alpha must be finite and >= 0, got {self.alpha!r}")
            put(self, "alpha", alpha)
        else:
            put(self, "alpha", None)
        if self.rescorer != "ngram" or not (self.context_order and self.context_weight):
            put(self, "context_order", 0)
            put(self, "context_weight", 0.0)
        elif not (math.isfinite(self.context_weight) and 0 < self.context_weight <= 1):
            raise DraftError(f"context_weight must lie in (0, 1], got {self.context_weight!r}")
        if s in ("lookup", "default") or (s in _HEADS and self.p == 1 and not self.rescorer):
            put(self, "k", 1)
        if s == "tree" and self.budget < 2:
            raise DraftError(f"a tree's budget counts its root, so it must be >= 2, got "
                             f"{self.budget}")
        if s in _RATED and self.budget < 1:
            put(self, "budget", 32)
        if self.tree == "medusa":  # the ranks its first budget - 1 paths read
            put(self, "k", 1 + max(max(c) for c in self.medusa_choices()))
        if self.tree == "rated":  # the ranks of Medusa's candidates
            put(self, "k", 1 + max(max(c) for c in MC_SIM_7B_63))
        if self.k < 1 or (self.p < 1 and s not in _RATED):
            raise DraftError(f"k and p must be >= 1, got k = {self.k}, p = {self.p}")

    def medusa_choices(self) -> tuple[tuple[int, ...], ...]:
        """The rank paths of a ``medusa`` tree: the first ``budget - 1`` of Medusa's
        ``mc_sim_7b_63`` in node order (:data:`~blockdraft.drafts.MC_SIM_7B_63`)."""
        return tuple(sort_choices(MC_SIM_7B_63)[: self.budget - 1])

    @property
    def needs_cost(self) -> bool:
        """Whether building it takes the runtime's cost curve (a rated strategy that grows or
        cuts by cost; ``default`` too, which becomes one)."""
        return self.strategy in (*_RATED, "default") and not (
            self.strategy == "tree-lattice" and self.p > 0)

    @property
    def label(self) -> str:
        """A short human name: ``vanilla``, ``heads k=8 p=4 ngram:lm4 a=1``, ``tree
        confidence k=4 N=16``, ``lookup``, ``oracle k=8``, ``cost-aware k=8 p=4 N<=32``."""
        s = self.strategy
        if s in ("lookup", "default"):
            return s
        if s == "oracle":
            return f"oracle k={self.k}"
        if s == "tree":
            parts = ["tree", self.tree, f"k={self.k}", f"N={self.budget}"]
        elif s in _RATED:
            parts = [s, f"k={self.k}", f"p={self.p}", f"N<={self.budget}"]
            if self.lookup:
                parts.append(f"+ lookup L={self.copy_length}")
            if self.heads_on_demand:
                parts.append(f"heads unless match>={self.heads_on_demand}")
        elif self.p == 1 and not self.rescorer:
            parts = [{"heads": "vanilla", "combined": "vanilla + lookup",
                      "iad": "vanilla + iad"}[s]]
        else:
            parts = [{"heads": "heads", "combined": "heads + lookup", "iad": "heads + iad"}[s],
                     f"k={self.k}", f"p={self.p}"]
        if self.rescorer:
            parts.append(f"{self.rescorer_label} a={self.alpha:g}")
            if self.context_order:
                parts.append(f"ctx{self.context_order}={self.context_weight:g}")
        return " ".join(parts)

    @property
    def rescorer_label(self) -> str:
        """``"none"`` or ``"<kind>:<file stem>"``: the rescorer axis of tables and plots."""
        if not self.rescorer:
            return "none"
        return f"{self.rescorer}:{_stem(self.lm) if self.lm else type(self.given).__name__}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (:meth:`from_dict` reads it back).

        Raises:
            DraftError: a spec holding an LM object (``given``): only files serialise.
        """
        if self.given is not None:
            raise DraftError("a spec holding an LM object does not serialise: name its file "
                             "(lm=...) instead")
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "given"}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DraftSpec:
        """The spec :meth:`to_dict` wrote.

        Raises:
            DraftError: a missing or unknown field, or values :class:`DraftSpec` refuses.
        """
        names = {f.name for f in fields(cls)} - {"given"}
        if not isinstance(data, Mapping) or set(data) - names or "strategy" not in data:
            raise DraftError(f"not a drafting spec: {data!r}")
        return cls(**dict(data))

    # ---- the one factory -----------------------------------------------------------------

    def build(self, resources: Resources | None = None, caps: Capabilities | None = None,
              cost: CostCurve | None = None, lossless: bool = True) -> Pipeline:
        """The drafter this spec names (a new one each call; the files it reads come from
        ``resources``, loaded once).

        Args:
            resources: where LMs and tables are loaded (default: the process's own).
            caps: the model's declared capabilities: its limits are applied here (on a runtime
                whose trees take a confirming forward the cost-sized strategies draft one
                path a step under a lossless criterion), and ``default`` reads its recipe and
                head kind. None: no model (the offline simulator).
            cost: the runtime's cost curve, for a strategy that needs one (:attr:`needs_cost`).
            lossless: the criterion is lossless (``exact``).

        Raises:
            DraftError: a strategy that needs a cost curve or a model it was not given.
        """
        res = resources if resources is not None else SHARED
        if self.strategy == "default":
            if caps is None:
                raise DraftError("the default strategy reads the model's recipe and head kind: "
                                 "build it with caps=model.capabilities")
            return default_spec(caps).build(res, caps, cost, lossless)
        if self.needs_cost and cost is None:
            raise DraftError(f"strategy {self.label!r} sizes its trees on the runtime's cost "
                             "curve: build it with cost=cost_curve_of(model) (or a curve file)")
        # a runtime whose tree rows are not chain rows bit for bit (ONNX Runtime int8, q4)
        # confirms a tree's path with a second forward (lossless, slower): the strategies that
        # size their drafts by cost draft the one path that pays there, which needs none
        chains = caps is not None and lossless and not caps.exact_trees
        return self._build(res, caps, cost, chains)

    def _build(self, res: Resources, caps: Capabilities | None, cost: CostCurve | None,
               chains: bool) -> Pipeline:
        s = self.strategy
        if s == "oracle":
            return Oracle(self.k)
        if s == "lookup":
            return LookupDrafter()
        if s == "tree":
            if self.tree == "confidence":
                return ConfidenceTreeDrafter(k=self.k, budget=self.budget)
            if self.tree == "medusa":
                return MedusaTreeDrafter(choices=self.medusa_choices(), budget=self.budget)
            if self.tree == "rated":
                return self._rated(res, caps)
            return RescoredTreeDrafter(lm=res.path_scorer(self), k=self.k,
                                       budget=self.budget, alpha=float(self.alpha or 0.0))
        if s == "cost-aware":
            assert cost is not None
            h = caps.h if caps is not None else 2
            tables = res.tables(self.tables) if self.tables else AcceptanceTables.uniform(h)
            rescorer = res.rescorer(self) if self.rescorer else None
            return CostAwareTreeDrafter(cost=cost, tables=tables, k=self.k, p=self.p,
                                        rescorer=rescorer, lookup=self.lookup,
                                        copy_length=self.copy_length, max_nodes=self.budget,
                                        chain=chains,
                                        heads_on_demand=self.heads_on_demand or None)
        if s == "tree-lattice":
            if self.p > 0:
                scorer = res.path_scorer(self) if self.rescorer else None
                return ConditionalDrafter(k=self.k, p=self.p, scorer=scorer,
                                          alpha=float(self.alpha or 0.0))
            lattice_tables = res.tables(self.tables) if self.tables else None
            if chains:  # one path a step: the heads' greedy chain or a copy, whichever pays
                h = caps.h if caps is not None else 2
                return ConditionalTreeDrafter(k=1, budget=h, cost=cost, lookup=self.lookup,
                                              tables=lattice_tables,
                                              copy_length=self.copy_length, chain=True)
            return ConditionalTreeDrafter(k=self.k, budget=self.budget, cost=cost,
                                          lookup=self.lookup, tables=lattice_tables,
                                          copy_length=self.copy_length,
                                          scorer=res.path_scorer(self) if self.rescorer
                                          else None, alpha=float(self.alpha or 0.0))
        rescorer = res.rescorer(self) if self.rescorer else None
        heads = HeadDrafter(k=self.k, p=self.p, rescorer=rescorer)
        if s == "combined":  # its drafts are of any length: one trie
            return CombinedDrafter(heads, LookupDrafter())
        if s == "iad":
            return CombinedDrafter(heads, InputCopyDrafter())
        return heads


    def _rated(self, res: Resources, caps: Capabilities | None) -> Pipeline:
        """The ``rated`` tree: Medusa's candidates the heads reach (``caps.h - 1`` deep; all
        of them without a model), rated by the tables (and the rescorer's LM), the
        ``budget`` best by reach."""
        depth = caps.h - 1 if caps is not None else max(len(c) for c in MC_SIM_7B_63)
        choices = [c for c in sort_choices(MC_SIM_7B_63) if len(c) <= depth]
        tables = (res.tables(self.tables) if self.tables
                  else AcceptanceTables.uniform(depth + 1))
        lm = res.path_scorer(self) if self.rescorer else None
        return Pipeline([RankPaths(choices)], rates=TableRates(tables, lm),
                        cut=CostCut(None, self.budget), name=self.label, source="rated")


CHAIN_HEADS_ON_DEMAND = 1
"""The Medusa default's ``heads_on_demand`` on a runtime that drafts one path a step (int8, q4):
a step whose best lookup copy matched a token or more drafts the copies alone. Measured on q4
(24 prompts of seven tasks, two prompt sets: ``benchmarks/results/q4/on-demand-seed0``,
``on-demand-seed1``): +3.6% and +5.2% tokens/s over the heads every step, level with or above
prompt lookup alone, at 1-3% less B; on float32's trees the gain was +1.4% at 6% less B, so
float32 keeps its recipe's setting."""


def default_spec(caps: Capabilities) -> DraftSpec:
    """The strategy a model with ``caps`` drafts with by default (:mod:`blockdraft.drafts
    .default` says why): prompt lookup without extra heads; the tree lattice's cost-aware tree
    with lookup copies for prefix heads (or a draft layer); the cost-aware tree of the chain,
    rescored p-best paths and lookup copies for Medusa heads; each with the packaged recipe's
    settings and files when the heads folder has one. On a runtime that drafts one path a step
    (``exact_trees`` False: ONNX Runtime int8 and q4) the Medusa default skips the heads on a
    step whose best copy matched a token or more (:data:`CHAIN_HEADS_ON_DEMAND`), unless the
    recipe names its own ``heads_on_demand``."""
    recipe = caps.drafting
    tables = "" if recipe is None or recipe.acceptance is None else str(recipe.acceptance)
    if caps.heads == "none":
        return DraftSpec("lookup")
    if caps.tree_lattice:
        if recipe is None:
            return DraftSpec("tree-lattice", k=4, p=0, budget=32, lookup=True, copy_length=16)
        return DraftSpec("tree-lattice", k=recipe.k, p=0, budget=recipe.max_nodes, lookup=True,
                         tables=tables, copy_length=recipe.copy_length)
    chains = 0 if caps.exact_trees else CHAIN_HEADS_ON_DEMAND
    if recipe is None:
        return DraftSpec("cost-aware", k=4, p=0, budget=32, lookup=True, copy_length=16,
                         heads_on_demand=chains)
    ngram = {} if recipe.ngram is None else {
        "rescorer": "ngram", "lm": str(recipe.ngram), "alpha": recipe.alpha,
        "context_order": recipe.context_order, "context_weight": recipe.context_weight}
    return DraftSpec("cost-aware", k=recipe.k, p=recipe.p, budget=recipe.max_nodes,
                     lookup=True, tables=tables, copy_length=recipe.copy_length,
                     heads_on_demand=recipe.heads_on_demand or chains, **ngram)


def _stem(path: str) -> str:
    p = Path(path)
    return p.stem if p.suffix in (".bin", ".arpa", ".binary", ".klm") else p.name


class Resources:
    """What one process loads once for every spec it builds (mutable: a cache): n-gram LMs,
    RescorerLMs and acceptance tables, by path (a sweep checks each file's digest where it
    enters, :func:`~blockdraft.oracle.sweep.cache.file_digest`).

    Args:
        threads: torch intra-op threads of a neural rescorer (1: every worker one core).
    """

    def __init__(self, threads: int = 1) -> None:
        self.threads = threads
        self._loaded: dict[tuple[str, str], Any] = {}

    def _load(self, kind: str, path: str) -> Any:
        key = (kind, path)
        if key not in self._loaded:
            if kind == "ngram":
                from blockdraft.rescorers.ngram import NgramLM

                self._loaded[key] = NgramLM(path)
            elif kind == "tables":
                self._loaded[key] = AcceptanceTables.load(path)
            else:
                import torch

                from blockdraft.models import load_model

                torch.set_num_threads(self.threads)
                self._loaded[key] = load_model(path).eval()
        return self._loaded[key]

    def tables(self, path: str) -> AcceptanceTables:
        """The acceptance tables of ``path``."""
        return self._load("tables", path)  # type: ignore[no-any-return]

    def rescorer(self, spec: DraftSpec) -> Any:
        """The rescorer of ``spec`` (a new one: its state starts afresh), or the one it was
        given."""
        if spec.given is not None:
            return spec.given
        lm = self._load(spec.rescorer, spec.lm)
        alpha = float(spec.alpha or 0.0)
        if spec.rescorer == "ngram":
            from blockdraft.rescorers.ngram import NgramRescorer

            if spec.context_order:
                return NgramRescorer(lm, alpha=alpha, context_order=spec.context_order,
                                     context_weight=spec.context_weight)
            return NgramRescorer(lm, alpha=alpha)
        from blockdraft.rescorers.neural import NeuralRescorer

        return NeuralRescorer(lm, alpha=alpha, backend="torch")

    def path_scorer(self, spec: DraftSpec) -> Any:
        """What a rescored tree scores its paths with: the given path scorer, an n-gram LM's
        :class:`~blockdraft.rescorers.ngram.NgramPathScorer`, or a
        :class:`~blockdraft.rescorers.neural.NeuralPathScorer` over the RescorerLM."""
        if spec.given is not None:
            from blockdraft.rescorers.ngram import NgramLM, NgramPathScorer

            return NgramPathScorer(spec.given) if isinstance(spec.given, NgramLM) else spec.given
        lm = self._load(spec.rescorer, spec.lm)
        if spec.rescorer == "ngram":
            from blockdraft.rescorers.ngram import NgramPathScorer

            return NgramPathScorer(lm)
        from blockdraft.rescorers.neural import NeuralPathScorer

        return NeuralPathScorer(lm, max_depth=max(1, spec.budget))


SHARED = Resources()
"""The process's resources: files loaded once, for every drafter built without its own."""
