"""The one factory, ``DraftSpec``: canonical forms (a folded axis names the same strategy and
drafts the same trees), its dict round trip, a spec holding an object, and the runtime's limits
applied once (a runtime whose trees are not lossless drafts chains, or refuses by name)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from blockdraft.core.tree import DraftTree
from blockdraft.drafts import ChainCut, DraftError, DraftSpec, StepView, default_spec
from blockdraft.lattice.conditional import TreeLattice
from blockdraft.lattice.sausage import SausageLattice, log_softmax
from blockdraft.models.capabilities import Capabilities
from blockdraft.models.cost import CostCurve

COST = CostCurve(nodes=(1, 2, 4, 8, 16, 32), step_ms=(10.0, 10.1, 10.2, 10.4, 10.8, 11.6),
                 heads_ms=1.0, greedy_ms=10.0)
INT8 = Capabilities(heads="medusa", h=4, runtime="onnxruntime", precision="int8",
                    exact_trees=False)
INT8_PREFIX = INT8.with_(heads="prefix")


def lattice(seed: int = 0, h: int = 4, k: int = 8, vocab: int = 30) -> SausageLattice:
    return SausageLattice.from_logits(np.random.default_rng(seed).normal(size=(h, vocab)) * 2, k)


def view(lat: SausageLattice, context: Any = (), tree: TreeLattice | None = None) -> StepView:
    return StepView(lattice=lat, context=np.asarray(context, dtype=np.int64), tree=tree)


def is_chain(tree: DraftTree) -> bool:
    return all(len(tree.children(u)) <= 1 for u in range(tree.num_nodes))


def wide_expand(prefix: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """A tree lattice rooted at token 0, three arcs a node, each depending on the prefix."""
    if not prefix:
        return np.array([0]), np.zeros(1)
    rng = np.random.default_rng([3, len(prefix), *prefix])
    ids = rng.choice(8, size=3, replace=False)
    return ids, log_softmax(rng.normal(0, 2, size=8))[ids]


@pytest.mark.parametrize(("a", "b"), [
    (DraftSpec("heads", k=7, p=1), DraftSpec("heads")),  # vanilla at any k
    (DraftSpec("heads", k=4, p=2, alpha=3.0), DraftSpec("heads", k=4, p=2)),  # no LM: no alpha
    (DraftSpec("lookup", k=5, p=3, budget=9), DraftSpec("lookup")),
    (DraftSpec("oracle", k=4, p=9, lookup=True), DraftSpec("oracle", k=4)),
    (DraftSpec("tree", tree="confidence", k=4, budget=6, rescorer="ngram", lm="a.bin"),
     DraftSpec("tree", tree="confidence", k=4, budget=6)),  # the LM is not read
    (DraftSpec("tree", tree="medusa", k=32, budget=6), DraftSpec("tree", tree="medusa", budget=6)),
    (DraftSpec("cost-aware", budget=0, copy_length=8), DraftSpec("cost-aware", budget=32)),
    (DraftSpec("heads", p=2, rescorer="ngram", lm="a.bin", context_order=3),
     DraftSpec("heads", p=2, rescorer="ngram", lm="a.bin", alpha=1.0)),  # no weight: no ctx LM
])
def test_canonical_forms_are_equal(a: DraftSpec, b: DraftSpec) -> None:
    assert a == b and hash(a) == hash(b) and a.label == b.label
    assert a.to_dict() == b.to_dict()


def test_a_folded_axis_drafts_the_same_trees() -> None:
    lat = lattice(1)
    for a, b in ((DraftSpec("heads", k=7, p=1), DraftSpec("heads")),
                 (DraftSpec("tree", tree="medusa", k=32, budget=9),
                  DraftSpec("tree", tree="medusa", k=1, budget=9))):
        ta, tb = a.build().draft(view(lat)), b.build().draft(view(lat))
        assert ta.tokens.tolist() == tb.tokens.tolist()
        assert ta.parents.tolist() == tb.parents.tolist()
    medusa = DraftSpec("tree", tree="medusa", budget=9)
    assert medusa.build().needs.k == medusa.k == 1 + max(max(c) for c in medusa.medusa_choices())


@pytest.mark.parametrize("spec", [
    DraftSpec("heads", k=8, p=4, rescorer="ngram", lm="lm.bin", alpha=0.5, context_order=4,
              context_weight=0.2),
    DraftSpec("tree", tree="rescored", k=4, budget=12, rescorer="neural", lm="rescorer/"),
    DraftSpec("cost-aware", k=8, p=4, budget=24, lookup=True, tables="acc.json",
              copy_length=12),
    DraftSpec("cost-aware", k=8, p=4, budget=24, lookup=True, heads_on_demand=3),
    DraftSpec("tree-lattice", k=4, p=0, budget=32, lookup=True),
    DraftSpec("oracle", k=3), DraftSpec("lookup"), DraftSpec("default"),
])
def test_to_dict_and_back(spec: DraftSpec) -> None:
    d = json.loads(json.dumps(spec.to_dict()))
    back = DraftSpec.from_dict(d)
    assert back == spec and back.to_dict() == spec.to_dict() and back.label == spec.label


def test_from_dict_refuses_what_is_not_a_spec() -> None:
    with pytest.raises(DraftError, match="not a drafting spec"):
        DraftSpec.from_dict({"strategy": "heads", "colour": "blue"})
    with pytest.raises(DraftError, match="not a drafting spec"):
        DraftSpec.from_dict({"k": 4})
    with pytest.raises(DraftError, match="unknown strategy 'beam'"):
        DraftSpec.from_dict({"strategy": "beam"})


class GivenRescorer:
    """An LM object a spec may hold (``rescorer="given"``)."""

    def rescore(self, lattice: SausageLattice, context: Any, p: int = 1) -> Any:
        return lattice.best_paths(p)

    def path_scorer(self) -> None:
        return None

    def check_vocab(self, vocab_size: int) -> None:
        pass


def test_a_spec_holding_an_object_does_not_serialise() -> None:
    given = GivenRescorer()
    spec = DraftSpec("heads", k=4, p=2, rescorer="given", given=given)
    with pytest.raises(DraftError, match="holding an LM object does not serialise"):
        spec.to_dict()
    # it compares and hashes without its object
    assert spec == DraftSpec("heads", k=4, p=2, rescorer="given", given=GivenRescorer())
    assert spec.rescorer_label == "given:GivenRescorer"
    drafter = spec.build()
    assert given in drafter.needs.lms  # checked against the model's vocabulary once
    with pytest.raises(DraftError, match="rescorer='given' with its object"):
        DraftSpec("heads", rescorer="given")


def test_build_asks_for_what_it_needs() -> None:
    with pytest.raises(DraftError, match=r"strategy 'cost-aware k=1 p=1 N<=32' sizes its trees "
                                         r"on the runtime's cost curve"):
        DraftSpec("cost-aware").build()
    with pytest.raises(DraftError, match="default strategy reads the model's recipe"):
        DraftSpec("default").build()


@pytest.mark.parametrize("spec", [
    DraftSpec("heads", k=4, p=3), DraftSpec("combined"), DraftSpec("iad"),
    DraftSpec("tree", tree="confidence", k=4, budget=6),
    DraftSpec("tree", tree="medusa", budget=8),
])
def test_a_runtime_without_exact_trees_drafts_the_trees_it_is_asked_for(spec: DraftSpec) -> None:
    """A fixed strategy's trees are drafted as they are on a runtime whose tree rows are not
    chain rows (the verifier confirms their path); lossy or lossless, the strategy built without
    a model's limits."""
    free = spec.build()
    lat = lattice()
    for lossless in (True, False):
        built = spec.build(caps=INT8, cost=COST, lossless=lossless)
        assert built.name == free.name
        assert built.draft(view(lat)).tokens.tolist() == free.draft(view(lat)).tokens.tolist()


@pytest.mark.parametrize("seed", range(4))
def test_a_runtime_without_exact_trees_drafts_chains(seed: int) -> None:
    lat = lattice(seed)
    context = np.tile(np.random.default_rng(seed).integers(0, 30, 5), 4)  # lookup finds copies
    flat = CostCurve(nodes=(1, 32), step_ms=(10.0, 10.0), heads_ms=1.0, greedy_ms=10.0)
    for spec in (DraftSpec("heads"), DraftSpec("lookup"),
                 DraftSpec("cost-aware", k=4, p=3, budget=16, lookup=True)):
        drafter = spec.build(caps=INT8, cost=flat)
        assert is_chain(drafter.draft(view(lat, context))), spec.label
    # the same cost-aware spec drafts a tree where trees are exact, a chain cut where not
    spec = DraftSpec("cost-aware", k=4, p=3, budget=16, lookup=True)
    assert isinstance(spec.build(caps=INT8, cost=flat).cut, ChainCut)
    exact = spec.build(caps=INT8.with_(exact_trees=True), cost=flat).draft(view(lat, context))
    assert not is_chain(exact)
    # prefix heads: the tree lattice's greedy chain
    lattice_spec = DraftSpec("tree-lattice", k=4, p=0, budget=16, lookup=True)
    chain = lattice_spec.build(caps=INT8_PREFIX, cost=flat)
    assert chain.needs.k == 1 and chain.needs.tree_lattice
    zero = SausageLattice(tokens=np.zeros((4, 1), dtype=np.int64), scores=np.zeros((4, 1)))

    def narrow(prefix: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        ids, scores = wide_expand(prefix)
        best = int(np.argmax(scores))
        return ids[best:best + 1], scores[best:best + 1]  # the k = 1 it asked for

    tree = chain.draft(view(zero, tree=TreeLattice(4, narrow)))
    assert is_chain(tree) and tree.num_nodes == 4


def test_a_tree_lattice_p_best_on_int8_drafts_its_p_paths() -> None:
    """The p best paths of a tree lattice are drafted as asked on int8 (the verifier confirms
    the accepted one with a chain forward): the same trie as without the model's limits."""
    spec = DraftSpec("tree-lattice", k=4, p=3)
    zero = SausageLattice(tokens=np.zeros((4, 1), dtype=np.int64), scores=np.zeros((4, 1)))
    got = spec.build(caps=INT8_PREFIX, cost=COST).draft(view(zero, tree=TreeLattice(4,
                                                                                  wide_expand)))
    free = spec.build().draft(view(zero, tree=TreeLattice(4, wide_expand)))
    assert not is_chain(got) and got.tokens.tolist() == free.tokens.tolist()


def test_the_tree_lattice_chain_stays_a_chain_over_a_wider_lattice() -> None:
    chain = DraftSpec("tree-lattice", k=4, p=0, budget=16).build(caps=INT8_PREFIX, cost=COST)
    zero = SausageLattice(tokens=np.zeros((4, 1), dtype=np.int64), scores=np.zeros((4, 1)))
    assert is_chain(chain.draft(view(zero, tree=TreeLattice(4, wide_expand))))


class FavourOdd:
    """A path scorer that all but rules out the even tokens (natural log)."""

    def next_scores(self, path: Any, context: Any, candidates: np.ndarray) -> np.ndarray:
        return np.where(np.asarray(candidates) % 2 == 1, 0.0, -20.0)

    def score_tree(self, tokens: Any, parents: Any, context: Any) -> np.ndarray:
        return np.zeros(len(tokens))

    def check_vocab(self, vocab_size: int) -> None:
        pass


def test_a_tree_lattice_tree_is_rescored_when_a_rescorer_is_named() -> None:
    """``tree-lattice`` with ``p = 0`` keeps its rescorer (a draft layer's tree rescored by an
    n-gram LM): the tree grows best first by arc + alpha x LM, so the LM's favourite paths come
    first; without one it is the confidence tree."""
    from blockdraft.lattice.search import grow, narrowed

    scorer = FavourOdd()
    spec = DraftSpec("tree-lattice", k=3, p=0, budget=8, rescorer="given", given=scorer,
                     alpha=1.0)
    assert spec.rescorer == "given" and "given:FavourOdd" in spec.label
    assert DraftSpec("tree-lattice", k=3, p=0, rescorer="ngram", lm="lm.bin").lm == "lm.bin"
    zero = SausageLattice(tokens=np.zeros((4, 1), dtype=np.int64), scores=np.zeros((4, 1)))
    caps = INT8_PREFIX.with_(exact_trees=True)
    flat = CostCurve(nodes=(1, 32), step_ms=(10.0, 10.0), heads_ms=0.0, greedy_ms=10.0)
    plain = DraftSpec("tree-lattice", k=3, p=0, budget=8).build(caps=caps, cost=flat).draft(
        view(zero, tree=TreeLattice(4, wide_expand)))
    drafter = spec.build(caps=caps, cost=flat)
    rescored = drafter.draft(view(zero, tree=TreeLattice(4, wide_expand)))
    assert scorer in drafter.needs.lms and rescored.num_nodes == plain.num_nodes == 8
    want = grow(narrowed(TreeLattice(4, wide_expand), 3), 8, scorer=scorer, alpha=1.0)
    assert rescored.tokens.tolist() == want.tokens.tolist()
    assert rescored.parents.tolist() == want.parents.tolist()
    odd = [int(t) % 2 for t in rescored.tokens[1:]]
    assert sum(odd) > sum(int(t) % 2 for t in plain.tokens[1:])


@pytest.mark.parametrize("sure", [True, False])
def test_the_tree_lattice_chain_drafts_the_path_that_pays_heads_or_copy(sure: bool) -> None:
    """Where trees are not lossless, a tree lattice's default (lookup on) still merges the
    lookup copies and keeps the one root path that pays best (its ChainCut): the heads' greedy
    chain when the heads are sure, the copy when they are not."""
    spec = DraftSpec("tree-lattice", k=4, p=0, budget=16, lookup=True, copy_length=6)
    drafter = spec.build(caps=INT8_PREFIX, cost=COST)
    assert isinstance(drafter.cut, ChainCut)
    context = np.array([5, 20, 0, 22, 23, 24, 25, 26, 27, 9, 20])  # with the root: "20 0"

    def heads(prefix: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        if not prefix:
            return np.array([0]), np.zeros(1)
        return np.array([10 + len(prefix)]), np.array([0.0 if sure else np.log(0.02)])

    zero = SausageLattice(tokens=np.zeros((4, 1), dtype=np.int64), scores=np.zeros((4, 1)))
    tree = drafter.draft(view(zero, context, tree=TreeLattice(4, heads)))
    assert is_chain(tree) and tree.num_nodes > 1
    path = tree.tokens[1:].tolist()
    assert path == ([11, 12, 13] if sure else [22, 23, 24, 25, 26, 27][: len(path)]), path


def test_heads_on_demand_belongs_to_the_cost_aware_tree_with_copies() -> None:
    on = DraftSpec("cost-aware", k=4, p=0, budget=16, lookup=True, heads_on_demand=2)
    assert on.heads_on_demand == 2 and "heads unless match>=2" in on.label
    assert on.build(cost=COST).needs.on_demand
    assert not DraftSpec("cost-aware", k=4, p=0, budget=16, lookup=True).build(
        cost=COST).needs.on_demand
    for other in (DraftSpec("cost-aware", k=4, lookup=False, heads_on_demand=2),
                  DraftSpec("tree-lattice", k=4, p=0, lookup=True, heads_on_demand=2),
                  DraftSpec("heads", heads_on_demand=2)):
        assert other.heads_on_demand == 0  # folded: nothing else skips the heads
    with pytest.raises(DraftError, match="heads_on_demand"):
        DraftSpec("cost-aware", lookup=True, heads_on_demand=-1)
    with pytest.raises(DraftError, match="at most 4 tokens"):
        DraftSpec("cost-aware", k=4, lookup=True, heads_on_demand=5).build(cost=COST)


def test_the_medusa_default_skips_the_heads_where_a_copy_matched_on_one_path_a_step() -> None:
    """On int8/q4 (one path a step) the Medusa default turns heads on demand on at one matched
    token; on a runtime of exact trees it keeps the recipe's setting (none here); a recipe that
    names its own value keeps it on both."""
    from blockdraft.drafts.spec import CHAIN_HEADS_ON_DEMAND
    from blockdraft.models.hf.drafting import DraftingRecipe

    exact = INT8.with_(precision="float32", exact_trees=True)
    assert default_spec(INT8).heads_on_demand == CHAIN_HEADS_ON_DEMAND == 1
    assert default_spec(exact).heads_on_demand == 0
    assert default_spec(INT8).build(caps=INT8, cost=COST).needs.on_demand
    for caps in (INT8, exact):
        own = caps.with_(drafting=DraftingRecipe(k=4, p=0, heads_on_demand=3))
        assert default_spec(own).heads_on_demand == 3
        chained = caps.with_(drafting=DraftingRecipe(k=4, p=0))
        assert default_spec(chained).heads_on_demand == (1 if caps is INT8 else 0)
    assert default_spec(INT8_PREFIX).heads_on_demand == 0  # the tree lattice's default: none
