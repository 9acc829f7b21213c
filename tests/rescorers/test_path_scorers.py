"""The path scorers of rescored token trees (rescorers/ngram/path_scorer,
rescorers/neural/path_scorer): incremental scores equal the LM's own whole-path scores."""

from __future__ import annotations

import numpy as np
import pytest

from models_testlib import tiny_rescorer_lm


@pytest.mark.parametrize("bos_id", [None, 0])
def test_neural_path_scorer_by_brute_force(bos_id: int | None) -> None:
    import torch

    from blockdraft.rescorers.neural import NeuralPathScorer

    model = tiny_rescorer_lm()
    scorer = NeuralPathScorer(model, max_depth=4, bos_id=bos_id)
    window = scorer.window
    for context in ([], [3], list(range(1, 30))):
        tokens = [5, 6, 7]
        full = ([bos_id] if bos_id is not None else []) + context
        full = full[len(full) - window:] if window else []
        with torch.no_grad():
            logits, _ = model.logits(torch.tensor([full + tokens]))
        lp = torch.log_softmax(logits[0].double(), -1)
        want = [float(lp[len(full) + i - 1, t]) if len(full) + i > 0 else 0.0
                for i, t in enumerate(tokens)]
        np.testing.assert_allclose(scorer.score(tokens, context), want, atol=1e-4)
        np.testing.assert_allclose(scorer.next_scores(tokens[:2], context, [7, 8]),
                                   [want[2], float(lp[len(full) + 1, 8])], atol=1e-4)


def test_ngram_path_scorer_equals_whole_path_scores(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Incremental n-gram scores of tree children == NgramLM.score of the whole path, for
    every context kind (empty: start of text; short; long; with unknown ids), policy and
    path, and the cache across contexts (a new step) never leaks a state."""
    from blockdraft.rescorers import RescorerError
    from blockdraft.rescorers.ngram import NgramLM, NgramPathScorer
    from blockdraft.training.ngram import find_kenlm_tool, train_ngram

    try:
        find_kenlm_tool("lmplz")
    except RescorerError as e:
        pytest.skip(f"KenLM's lmplz is not built ({e})")
    rng = np.random.default_rng(1)
    seqs = [rng.integers(0, 40, size=25).tolist() for _ in range(150)]
    arpa = train_ngram(seqs, tmp_path / "lm4", order=4, memory="64M").arpa
    for unknown in ("unk", -7.5):
        lm = NgramLM(arpa, unknown=unknown)
        scorer = NgramPathScorer(lm)
        for context in ([], [3], [5, 6], list(rng.integers(0, 40, size=30)), [1, 45, 2]):
            for _ in range(20):
                path = rng.integers(0, 48, size=int(rng.integers(0, 5))).tolist()
                cands = rng.choice(48, size=6, replace=False)  # ids 40-47 unknown
                got = scorer.next_scores(path, context, cands)
                want = [float(lm.score([*path, int(c)], context)[-1]) for c in cands]
                np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
    with pytest.raises(RescorerError, match="45"):
        NgramPathScorer(NgramLM(arpa, unknown="error")).next_scores([1], [2], [45])
    with pytest.raises(RescorerError, match="NgramLM"):
        NgramPathScorer(object())  # type: ignore[arg-type]


def test_ngram_path_scorers_need_no_kenlm_module_on_the_native_engine(
        tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Issue 41: the default Medusa recipe rates its tree with its rescorer's path scorer, which
    imported the ``kenlm`` module even when the native library was there (a GPU image without
    the wheel failed). On the native engine it needs the library alone, and gives the kenlm
    engine's numbers: children after a path, every node of a tree, with and without the
    context LM, with both unknown-token policies."""
    import sys

    from blockdraft.rescorers import RescorerError
    from blockdraft.rescorers.ngram import NgramLM, NgramPathScorer, NgramRescorer, native
    from blockdraft.training.ngram import find_kenlm_tool, train_ngram

    if not native.available():
        pytest.skip("the native KenLM library is not built")
    try:
        find_kenlm_tool("lmplz")
    except RescorerError as e:
        pytest.skip(f"KenLM's lmplz is not built ({e})")
    rng = np.random.default_rng(2)
    seqs = [rng.integers(0, 40, size=25).tolist() for _ in range(150)]
    built = train_ngram(seqs, tmp_path / "lm4", order=4, memory="64M")
    parents = np.array([-1, 0, 0, 1, 1, 2, 3, 3, 6])
    tokens = np.array([3, 5, 41, 7, 7, 2, 9, 1, 4])  # 41: unknown to the LM
    contexts = ([], [3], list(rng.integers(0, 40, size=30)), [1, 45, 2])
    want = {}
    for unknown in ("unk", -7.5):  # the kenlm engine's numbers, module present
        lm = NgramLM(built.arpa, unknown=unknown, engine="kenlm")
        for weight in (0.0, 0.3):
            scorer = NgramRescorer(lm, context_weight=weight).path_scorer()
            for i, ctx in enumerate(contexts):
                want[unknown, weight, i] = (scorer.score_tree(tokens, parents, ctx),
                                            scorer.next_scores([3, 5], ctx, [7, 8, 41]))
    monkeypatch.setitem(sys.modules, "kenlm", None)  # the GPU image: no kenlm module
    for path in (built.arpa, built.binary):
        for unknown in ("unk", -7.5):
            lm = NgramLM(path, unknown=unknown)
            assert lm.engine == "native"
            plain = NgramPathScorer(lm)
            for weight in (0.0, 0.3):
                scorer = NgramRescorer(lm, context_weight=weight).path_scorer()
                for i, ctx in enumerate(contexts):
                    tree, kids = want[unknown, weight, i]
                    np.testing.assert_allclose(scorer.score_tree(tokens, parents, ctx), tree,
                                               rtol=1e-9, atol=1e-9)
                    np.testing.assert_allclose(scorer.next_scores([3, 5], ctx, [7, 8, 41]),
                                               kids, rtol=1e-9, atol=1e-9)
                    if weight == 0.0:
                        np.testing.assert_allclose(plain.score_tree(tokens, parents, ctx),
                                                   tree, rtol=1e-9, atol=1e-9)
    with pytest.raises(RescorerError, match="kenlm module is not installed"):
        NgramLM(built.arpa, engine="kenlm")  # the module really is gone here
