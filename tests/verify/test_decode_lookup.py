"""Decoding with prompt lookup: drafts of different lengths verified as one trie, lossless."""

from __future__ import annotations

import numpy as np
import pytest

from blockdraft.drafts import CombinedDrafter, DraftBatch, HeadDrafter, LookupDrafter
from blockdraft.models import greedy_generate
from blockdraft.verify import Verifier, VerifyError, decode


def test_padded_drafts_verify_as_their_trie(random_model) -> None:  # type: ignore[no-untyped-def]
    model = random_model(seed=3, vocab=64, h=4)
    prompt = [3, 1, 4, 1, 5]
    truth = greedy_generate(model, prompt, 9)
    verifier = Verifier(model)
    _, past = verifier.prefill(prompt)
    rows = np.array([[truth[0], (truth[1] + 1) % 64, -1, -1, -1, -1, -1],
                     truth[:7]])
    batch = DraftBatch(tokens=rows, scores=np.array([0.0, -1.0]), head_scores=np.zeros(2),
                       lm_scores=np.zeros(2))
    out = verifier.verify(past, batch)
    assert out.accept_lengths == (0, 6) and out.winner == 1 and out.tokens == tuple(truth[:7])
    bad = DraftBatch(tokens=np.array([[truth[0], -1, 5]]), scores=np.zeros(1),
                     head_scores=np.zeros(1), lm_scores=np.zeros(1))
    with pytest.raises(VerifyError, match="padding"):
        verifier.verify(past, bad)


@pytest.mark.parametrize("seed", range(3))
def test_decoding_with_lookup_is_lossless(chain_model, random_model, seed: int) -> None:  # type: ignore[no-untyped-def]
    model, order = chain_model(vocab=64, h=4, seed=seed)
    prompt = [int(t) for t in order] + [int(order[0])]  # the whole chain, then its start again
    want = greedy_generate(model, prompt, 30)
    alone = decode(model, prompt, drafter=LookupDrafter(), max_new_tokens=30)
    # it copies the chain: 1 + 2 then 11 tokens a call once the match is 3 tokens long
    assert alone.tokens == want and alone.block_efficiency > 4
    assert all(s.drafts.source == "lookup" for s in alone.steps)
    both = decode(model, prompt, max_new_tokens=30,
                  drafter=CombinedDrafter(HeadDrafter(k=2, p=2), LookupDrafter()))
    assert both.tokens == want
    other = random_model(seed=seed, vocab=64, h=4)
    ref = greedy_generate(other, [1, 2, 3, 1, 2], 25)
    for drafter in (LookupDrafter(), CombinedDrafter(HeadDrafter(k=3, p=2), LookupDrafter())):
        assert decode(other, [1, 2, 3, 1, 2], drafter=drafter, max_new_tokens=25).tokens == ref


