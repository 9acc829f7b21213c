"""The verifier: batched = one draft at a time, the cache after accepting = a fresh prefill,
the winner rule, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from blockdraft.drafts import DraftBatch
from blockdraft.models import KVCache, greedy_generate
from blockdraft.verify import Criterion, Verifier, VerifyError

PROMPT = [3, 1, 4, 1, 5, 9, 2, 6]


def batch(rows: list[list[int]] | np.ndarray) -> DraftBatch:
    tokens = np.asarray(rows, dtype=np.int64)
    p = tokens.shape[0]
    return DraftBatch(tokens=tokens, scores=-np.arange(p, dtype=float),
                      head_scores=np.zeros(p), lm_scores=np.zeros(p))


def drafts_for(truth: list[int], p: int, h: int, vocab: int, seed: int) -> np.ndarray:
    """p drafts starting with truth[0]: truth prefixes of random lengths, random after."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(p):
        cut = int(rng.integers(1, h + 1))
        rows.append(truth[:cut] + rng.integers(0, vocab, size=h - cut).tolist())
    return np.array(rows)


def test_batched_equals_one_at_a_time(random_model) -> None:  # type: ignore[no-untyped-def]
    model = random_model(seed=3, vocab=64, h=5)
    truth = greedy_generate(model, PROMPT, 30)
    verifier = Verifier(model)
    logits, past = verifier.prefill(PROMPT)
    assert int(logits[0].argmax()) == truth[0]
    seen = set()
    t = 0
    for step in range(6):
        rows = drafts_for(truth[t:], p=5, h=5, vocab=64, seed=step)
        together = verifier.verify(past, batch(rows))
        alone = [verifier.verify(past, batch(rows[j : j + 1])) for j in range(len(rows))]
        assert together.accept_lengths == tuple(a.n for a in alone)
        best = max(together.accept_lengths)
        assert together.winner == together.accept_lengths.index(best)
        torch.testing.assert_close(together.next_logits, alone[together.winner].next_logits,
                                   atol=1e-5, rtol=1e-5)
        assert together.tokens == alone[together.winner].tokens
        # exact: the accepted tokens are the greedy ones, and so is the next certain token
        n = together.n
        assert list(together.tokens) == truth[t : t + 1 + n]
        assert together.next_token == truth[t + 1 + n]
        seen.add(n)
        past, t = together.past, t + 1 + n
    assert len(seen) > 1  # the drafts exercised more than one accepted length


def test_cache_after_accepting_equals_a_fresh_prefill(random_model) -> None:  # type: ignore[no-untyped-def]
    model = random_model(seed=5, vocab=64, h=4)
    truth = greedy_generate(model, PROMPT, 30)
    verifier = Verifier(model)
    _, past = verifier.prefill(PROMPT)
    committed: list[int] = []
    for step in range(5):
        t = len(committed)
        outcome = verifier.verify(past, batch(drafts_for(truth[t:], 3, 4, 64, seed=10 + step)))
        committed += list(outcome.tokens)
        text = PROMPT + committed
        assert outcome.past.length == len(text) and outcome.past.batch_size == 1
        with torch.no_grad():
            fresh_logits, fresh = model.heads_logits(torch.tensor([text]))
            torch.testing.assert_close(outcome.next_logits, fresh_logits[0, -1],
                                       atol=1e-5, rtol=1e-5)
            for a, b in zip(outcome.past.keys + outcome.past.values, fresh.keys + fresh.values,
                            strict=True):
                torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
            # and the next forward on top of it agrees too
            nxt = torch.tensor([[outcome.next_token]])
            on_kept, _ = model.heads_logits(nxt, outcome.past)
            on_fresh, _ = model.heads_logits(nxt, fresh)
            torch.testing.assert_close(on_kept, on_fresh, atol=1e-5, rtol=1e-5)
        past = outcome.past


def test_winner_largest_n_ties_to_lowest_index(random_model) -> None:  # type: ignore[no-untyped-def]
    model = random_model(seed=1, vocab=64, h=4)
    truth = greedy_generate(model, PROMPT, 8)
    verifier = Verifier(model)
    _, past = verifier.prefill(PROMPT)
    wrong = [truth[0], (truth[1] + 1) % 64, 0, 0]
    right = truth[:4]
    out = verifier.verify(past, batch([wrong, right, right]))
    assert (out.winner, out.n, out.accept_lengths) == (1, 3, (0, 3, 3))
    out = verifier.verify(past, batch([wrong, wrong]))
    assert (out.winner, out.n, out.tokens) == (0, 0, (truth[0],))
    assert out.next_token == truth[1]
    assert out.forward_s >= 0 and out.accept_s >= 0


def test_nothing_is_accepted_after_an_eos(random_model) -> None:  # type: ignore[no-untyped-def]
    model = random_model(seed=6, vocab=64, h=5)
    truth = greedy_generate(model, PROMPT, 8)
    verifier = Verifier(model)
    _, past = verifier.prefill(PROMPT)
    rows = [truth[:5], truth[:5]]
    assert verifier.verify(past, batch(rows)).n == 4
    eos = truth[2]  # d_3 of both drafts
    capped = verifier.verify(past, batch(rows), eos_id=eos)
    assert (capped.n, capped.tokens, capped.accept_lengths) == (2, tuple(truth[:3]), (2, 2))
    assert capped.past.length == len(PROMPT) + 3
    # a draft whose EOS comes earlier is capped earlier; d_1 = EOS caps nothing
    early = [truth[0], truth[1], 63, 63, 63]
    out = verifier.verify(past, batch([early, truth[:5]]), eos_id=truth[1])
    assert out.accept_lengths == (1, 1) and out.winner == 0
    assert verifier.verify(past, batch([truth[:5]]), eos_id=truth[0]).n == (
        4 if truth[0] not in truth[1:5] else truth[1:5].index(truth[0]) + 1)


def test_shorter_blocks_and_other_criteria(random_model) -> None:  # type: ignore[no-untyped-def]
    model = random_model(seed=2, vocab=64, h=4)
    truth = greedy_generate(model, PROMPT, 8)
    verifier = Verifier(model)
    _, past = verifier.prefill(PROMPT)
    one = verifier.verify(past, batch([[truth[0]]]))  # a block of one column: d_1 alone
    assert (one.n, one.tokens, one.next_token, one.past.length) == (0, (truth[0],), truth[1], 9)
    two = verifier.verify(past, batch([truth[:2]]))
    assert (two.n, two.next_token) == (1, truth[2])
    forced = Verifier(model, "min_block:l=4").verify(past, batch([[truth[0], 1, 2, 3]]))
    assert forced.n == 3 and forced.tokens == (truth[0], 1, 2, 3) and forced.past.length == 12
    assert Verifier(model, Criterion.topk(64)).verify(past, batch([[truth[0], 1, 2, 3]])).n == 3
    assert "min_block:l=4" in repr(Verifier(model, "min_block:l=4"))


def test_bad_input(random_model) -> None:  # type: ignore[no-untyped-def]
    model = random_model(seed=0, vocab=64, h=4, max_seq_len=16)
    verifier = Verifier(model)
    _, past = verifier.prefill(PROMPT)
    with pytest.raises(VerifyError, match="same certain token"):
        verifier.verify(past, batch([[1, 2, 3, 4], [2, 2, 3, 4]]))
    with pytest.raises(VerifyError, match=r"64 is outside the model's vocabulary \[0, 64\)"):
        verifier.verify(past, batch([[1, 2, 64, 4]]))
    with pytest.raises(VerifyError, match="needs the prefix cache"):
        verifier.verify(None, batch([[1, 2, 3, 4]]))
    two_rows = KVCache(keys=tuple(k.expand(2, -1, -1, -1) for k in past.keys),
                       values=tuple(v.expand(2, -1, -1, -1) for v in past.values))
    with pytest.raises(VerifyError, match="one row"):
        verifier.verify(two_rows, batch([[1, 2, 3, 4]]))
    with pytest.raises(VerifyError, match="must be a DraftBatch"):
        verifier.verify(past, np.array([[1, 2, 3, 4]]))  # type: ignore[arg-type]
    _, long_past = verifier.prefill(list(range(14)))
    with pytest.raises(VerifyError, match=r"verify: 4 new positions after 14 cached ones need 18 > "
                                         r"max_seq_len = 16; verify at most 2 columns"):
        verifier.verify(long_past, batch([[1, 2, 3, 4]]))
    assert verifier.verify(long_past, batch([[1, 2]])).past.length in (15, 16)
    with pytest.raises(VerifyError, match="heads_logits"):
        Verifier(object())  # type: ignore[arg-type]
    with pytest.raises(VerifyError, match="k must be an integer >= 1"):
        Verifier(model, "topk:k=0")


class HeadsLogitsOnly:
    """A model seen only through ``heads_logits`` (an adapter without the factored split)."""

    def __init__(self, model) -> None:  # type: ignore[no-untyped-def]
        self.inner = model
        self.config = model.config
        self.device = model.device
        self.h = model.config.h

    def heads_logits(self, input_ids, past=None, **kwargs):  # type: ignore[no-untyped-def]
        return self.inner.heads_logits(input_ids, past, **kwargs)


def test_factored_path_equals_the_heads_logits_path(random_model) -> None:  # type: ignore[no-untyped-def]
    from blockdraft.models.capabilities import capabilities_of

    model = random_model(seed=9, vocab=64, h=6)
    plain = HeadsLogitsOnly(model)
    # the model declares itself factored; the plain one is given the record its protocol implies
    assert capabilities_of(model).factored and not capabilities_of(plain).factored
    assert capabilities_of(plain).h == 6 and capabilities_of(plain).vocab_size == 64
    truth = greedy_generate(model, PROMPT, 40)
    assert greedy_generate(plain, PROMPT, 40) == truth  # head 1 alone = head 1 of all heads
    fast, slow = Verifier(model), Verifier(plain)
    _, past_fast = fast.prefill(PROMPT)
    _, past_slow = slow.prefill(PROMPT)
    t, lengths = 0, set()
    for step in range(6):
        rows = drafts_for(truth[t:], p=7, h=6, vocab=64, seed=40 + step)
        a = fast.verify(past_fast, batch(rows))
        b = slow.verify(past_slow, batch(rows))
        assert (a.n, a.winner, a.tokens, a.accept_lengths) == (b.n, b.winner, b.tokens,
                                                                b.accept_lengths)
        assert tuple(a.next_logits.shape) == (6, 64)
        torch.testing.assert_close(a.next_logits, b.next_logits, atol=1e-5, rtol=1e-5)
        assert a.past.length == b.past.length
        lengths.add(a.n)
        past_fast, past_slow, t = a.past, b.past, t + 1 + a.n
    assert len(lengths) > 1
