"""`ContextLM`: its counts and Witten-Bell estimates against their definitions recomputed from
scratch, incremental against rebuilt (hypothesis), and the native twin against the Python one."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockdraft.rescorers.base import RescorerError
from blockdraft.rescorers.ngram import ContextLM
from blockdraft.rescorers.ngram import native as native_mod

needs_native = pytest.mark.skipif(not native_mod.available(),
                                  reason="native library not built (run `make setup`)")


class RefWittenBell:
    """The module docstring's definitions, computed top-down from Counters of the whole text
    (no incremental state, no suffix states)."""

    def __init__(self, text: list[int], n: int) -> None:
        self.n = n
        self.size = len(text)
        self.grams: Counter[tuple[int, ...]] = Counter()
        for m in range(1, n + 1):
            for j in range(len(text) - m + 1):
                self.grams[tuple(text[j:j + m])] += 1
        self.follow: Counter[tuple[int, ...]] = Counter()  # c(h)
        self.distinct: Counter[tuple[int, ...]] = Counter()  # t(h)
        for g, c in self.grams.items():
            self.follow[g[:-1]] += c
            self.distinct[g[:-1]] += 1

    def prob(self, w: int, history: tuple[int, ...]) -> float:
        h = history[-(self.n - 1):] if self.n > 1 else ()
        return self._p(w, h)

    def _p(self, w: int, h: tuple[int, ...]) -> float:
        if not h:
            return self.grams[(w,)] / self.size if self.size else 0.0
        c = self.follow[h]
        if c == 0:
            return self._p(w, h[1:])
        t = self.distinct[h]
        return (self.grams[h + (w,)] + t * self._p(w, h[1:])) / (c + t)


def histories(text: list[int], n: int, alphabet: int) -> list[tuple[int, ...]]:
    """Histories to query: every suffix of every prefix of the text, plus unseen ones."""
    out = {()}
    for j in range(len(text) + 1):
        for m in range(1, n):
            if j - m >= 0:
                out.add(tuple(text[j - m:j]))
    out.update({(alphabet,), (alphabet, 0), (0, alphabet, 1), (1, 1, 1, 1, 1)})
    return sorted(out)


def test_counts_and_probs_match_the_definition() -> None:
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 4, 5):
        text = rng.integers(0, 5, size=60).tolist()
        lm = ContextLM.from_tokens(text, order=n)
        ref = RefWittenBell(text, n)
        for m in range(1, n + 1):
            want = {g: c for g, c in ref.grams.items() if len(g) == m}
            assert dict(lm.counts(m)) == want
        for h in histories(text, n, 5):
            assert lm.history_counts(h[-(n - 1):] if n > 1 else ()) == (
                ref.follow[h[-(n - 1):] if n > 1 else ()],
                ref.distinct[h[-(n - 1):] if n > 1 else ()],
            )
            for w in range(7):  # 5 and 6 never occur: P = 0, no floor
                assert lm.prob(w, h) == ref.prob(w, h)
            # a distribution over the text's tokens
            assert sum(lm.prob(w, h) for w in range(5)) == pytest.approx(1.0, abs=1e-12)
            assert lm.prob(6, h) == 0.0


def test_state_is_the_longest_suffix_with_followers_and_carries_the_history() -> None:
    text = [1, 2, 3, 1, 2, 4, 9]
    lm = ContextLM.from_tokens(text, order=4)
    assert lm.state([1, 2]) == (1, 2)  # "1 2" is followed by 3 and by 4
    assert lm.state([7, 1, 2]) == (1, 2)  # "7 1 2" never occurs
    assert lm.state([4, 9]) == ()  # "9" ends the text: never followed, nor "4 9"
    assert lm.state([2, 4]) == (2, 4)
    assert lm.state(lm.tail) == ()
    # step(state(h), w) == (prob(w, h), state(h + w)) for every history and token
    rng = np.random.default_rng(1)
    for _ in range(200):
        h = tuple(rng.integers(0, 6, size=int(rng.integers(0, 6))).tolist())
        w = int(rng.integers(0, 10))
        p, nxt = lm.step(lm.state(h), w)
        assert p == lm.prob(w, h)
        assert nxt == lm.state(h + (w,))


def test_empty_text_gives_zero_everywhere() -> None:
    lm = ContextLM(order=3)
    assert len(lm) == 0 and lm.prob(5) == 0.0 and lm.state([5, 6]) == ()
    np.testing.assert_array_equal(lm.continuation_probs([1, 2, 3]), np.zeros(3))


@settings(max_examples=60, deadline=None)
@given(
    text=st.lists(st.integers(0, 4), min_size=0, max_size=40),
    cuts=st.lists(st.integers(0, 40), max_size=6),
    n=st.integers(1, 5),
)
def test_incremental_equals_from_scratch(text: list[int], cuts: list[int], n: int) -> None:
    """After every extend, the counts, history counts and estimates equal those rebuilt from
    the whole text so far."""
    bounds = sorted({0, len(text), *[c for c in cuts if c <= len(text)]})
    inc = ContextLM(order=n)
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        inc.extend(text[a:b])
        fresh = ContextLM.from_tokens(text[:b], order=n)
        assert len(inc) == len(fresh) == b
        assert inc.tail == fresh.tail
        for m in range(1, n + 1):
            assert dict(inc.counts(m)) == dict(fresh.counts(m))
        for h in histories(text[:b], n, 5):
            key = h[-(n - 1):] if n > 1 else ()
            assert inc.history_counts(key) == fresh.history_counts(key)
            assert inc.state(h) == fresh.state(h)
            for w in range(6):
                assert inc.prob(w, h) == fresh.prob(w, h)
        np.testing.assert_array_equal(inc.continuation_probs(text[:5]),
                                      fresh.continuation_probs(text[:5]))


def test_state_stays_small() -> None:
    """The counts hold at most n entries per token (a repetitive text far fewer)."""
    rng = np.random.default_rng(2)
    lm = ContextLM(order=4)
    for _ in range(50):
        lm.extend(rng.integers(0, 30, size=20))
    assert sum(len(lm.counts(m)) for m in range(1, 5)) <= 4 * len(lm)
    loop = ContextLM.from_tokens([1, 2, 3] * 300, order=4)
    assert sum(len(loop.counts(m)) for m in range(1, 5)) <= 12


def test_bad_arguments_raise() -> None:
    with pytest.raises(RescorerError, match="order"):
        ContextLM(order=0)
    with pytest.raises(RescorerError, match="order"):
        ContextLM(order=17)
    with pytest.raises(RescorerError, match="negative"):
        ContextLM().extend([1, -2])
    with pytest.raises(RescorerError, match="order"):
        ContextLM(order=3).counts(4)


@needs_native
@pytest.mark.parametrize("n", [1, 2, 3, 4, 6])
def test_native_context_lm_equals_python(n: int) -> None:
    """The C++ context LM, grown in uneven chunks, gives bit-identical estimates along any
    continuation (its suffix states included)."""
    rng = np.random.default_rng(n)
    text = rng.integers(0, 8, size=300)
    nat = native_mod.NativeContextLM(n)
    py = ContextLM(order=n)
    for chunk in np.array_split(text, [3, 4, 50, 51, 200]):
        nat.extend(chunk)
        py.extend(chunk)
        for _ in range(20):
            cont = rng.integers(0, 10, size=12)
            np.testing.assert_array_equal(nat.continuation_probs(cont),
                                          py.continuation_probs(cont))
    nodes, entries = nat.sizes()
    assert entries == sum(len(py.counts(m)) for m in range(1, n + 1))
    assert nodes <= 1 + sum(len(py.counts(m)) for m in range(1, n))


@needs_native
def test_native_context_lm_refuses_bad_input() -> None:
    with pytest.raises(RescorerError, match="order"):
        native_mod.NativeContextLM(0)
    nat = native_mod.NativeContextLM(3)
    with pytest.raises(RescorerError, match="too large"):
        nat.extend(np.array([1, 2**32], dtype=np.int64))
    assert len(nat) == 0
