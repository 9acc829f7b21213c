"""Modified Kneser-Ney estimation over token ids, as KenLM's ``lmplz`` estimates, as ARPA.

Public:
    estimate_kneser_ney(sequences, order, prune=None) -> KneserNeyLM: the model, in memory
    KneserNeyLM.write_arpa(path): the ARPA file ``lmplz -o ORDER --arpa PATH`` writes

The estimate is lmplz's (Heafield et al. 2013; Chen and Goodman 1998, eq. 26), step for step,
so that the two ARPA files agree up to float rounding (lmplz computes in float32, this in
float64; ``tests/training/ngram/test_ngram_estimate.py`` compares them):

- Each sequence is one sentence ``<s> w_1 .. w_m </s>``. n-grams of order ``n`` are the windows
  inside it; a window that would start before ``<s>`` is cut to the n-gram starting at ``<s>``.
- Adjusted counts ``a``: the raw count for the highest order and for n-grams starting with
  ``<s>``; otherwise the number of distinct words seen before the n-gram (continuation count).
  ``<unk>`` and ``<s>`` are unigrams of count 0.
- Discounts per order from the counts of adjusted counts ``t_1 .. t_4``:
  ``Y = t_1 / (t_1 + 2 t_2)``, ``D_j = j - (j + 1) Y t_{j+1} / t_j`` (j = 1, 2, 3+), in float32
  as lmplz. They fail when some ``t_j = 0`` (j <= 3) or a ``D_j`` leaves ``[0, j]``: that
  order then takes the fallback 0.5, 1, 1.5 (lmplz's ``--discount_fallback``), reported.
  lmplz counts the last n-gram of each lower order (in its suffix order) with its raw count
  instead of its adjusted count in ``t``; this does too, so the discounts are its discounts.
- Interpolated probabilities: ``p(w | h) = (a(h w) - D(a(h w))) / sum_x a(h x) + gamma(h) p(w |
  h')`` with ``gamma(h) = (sum_j D_j N_j(h) + pruned mass) / sum_x a(h x)``; unigrams
  interpolate with the uniform distribution over the vocabulary without ``<s>``; ``p(<unk>)``
  is the interpolation mass alone, ``p(<s>) = 1`` (log10 0). The back-off weight of ``h`` is
  ``gamma(h)`` (0 in log10 when ``h`` ends in ``</s>`` or ``<unk>``).
- Pruning (lmplz ``--prune``): an n-gram of order ``n`` whose raw count is at most the order's
  threshold is dropped (never a unigram); its adjusted count still counts in its context's
  denominator and discount statistics, and goes to ``gamma`` (the model still sums to one).

Everything is held in memory (numpy arrays of a few int64 per corpus token and per order):
fine to tens of millions of tokens. lmplz sorts on disk and suits larger corpora
(``train_ngram(..., estimator="lmplz")``).

Units: the ARPA file holds log10 probabilities and log10 back-off weights, as every ARPA file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from blockdraft.rescorers.base import RescorerError

UNK, BOS, EOS = 0, 1, 2
"""lmplz's word indices of the special words; token ids follow by first appearance."""

FALLBACK_DISCOUNTS = (0.5, 1.0, 1.5)
"""lmplz's ``--discount_fallback`` default: D_1, D_2, D_3+."""


@dataclass(frozen=True)
class _Order:
    """The n-grams of one order, indexed by their id ``g`` (0 .. size-1).

    Attributes:
        prefix: int64 ``[size]``: the id (one order down) of the first n-1 words (order 1: -1).
        word: int64 ``[size]``: the last word's index.
        suffix: int64 ``[size]``: the id (one order down) of the last n-1 words (order 1: -1).
        raw: int64 ``[size]``: occurrences.
        adjusted: int64 ``[size]``: Kneser-Ney adjusted counts.
        kept: bool ``[size]``: not pruned.
        prob: float64 ``[size]``: interpolated probability p(word | prefix).
        backoff: float64 ``[size]``: back-off weight (1 where none); the highest order's unused.
    """

    prefix: np.ndarray
    word: np.ndarray
    suffix: np.ndarray
    raw: np.ndarray
    adjusted: np.ndarray
    kept: np.ndarray
    prob: np.ndarray
    backoff: np.ndarray


@dataclass(frozen=True)
class KneserNeyLM:
    """A modified Kneser-Ney back-off LM over token ids (:func:`estimate_kneser_ney`).

    Attributes:
        order: n-gram order.
        counts: n-grams per order written to the ARPA file (after pruning).
        tokens: corpus tokens (``<s>``/``</s>`` not counted).
        discounts: ``(D_1, D_2, D_3+)`` per order, as used.
        discount_fallback: whether some order took the fallback discounts.
        words: the word strings by index (``<unk>``, ``<s>``, ``</s>``, then token ids).
    """

    order: int
    counts: tuple[int, ...]
    tokens: int
    discounts: tuple[tuple[float, float, float], ...]
    discount_fallback: bool
    words: tuple[str, ...]
    _orders: tuple[_Order, ...]

    def write_arpa(self, path: str | Path) -> None:
        """Write the ARPA file: log10 values with 9 significant digits (KenLM reads each as
        the float32 nearest the float64 value; fewer digits would lose precision that
        back-off normalisation downstream, e.g. :func:`interpolate_arpa`, amplifies), n-grams
        in lmplz's order (unigrams by index, higher orders by last word, then the one
        before, ...)."""
        words = list(self.words)
        texts: list[list[str]] = []
        with open(path, "w", encoding="ascii") as f:
            f.write("\\data\\\n")
            for n, c in enumerate(self.counts, start=1):
                f.write(f"ngram {n}={c}\n")
            f.write("\n")
            for n, o in enumerate(self._orders, start=1):
                if n == 1:
                    text = words
                else:
                    below = texts[-1]
                    text = [below[p] + " " + words[w]
                            for p, w in zip(o.prefix.tolist(), o.word.tolist(), strict=True)]
                texts.append(text)
                ids = np.flatnonzero(o.kept)
                ids = ids[np.lexsort(_columns(self._orders[:n], ids))] if n > 1 else ids
                # min(0, .): lmplz's guard against rounding above 1; + 0.0 turns -0.0 into 0
                logp = (np.minimum(0.0, np.log10(o.prob[ids])) + 0.0).tolist()
                f.write(f"\\{n}-grams:\n")
                if n < self.order:
                    logb = (np.log10(o.backoff[ids]) + 0.0).tolist()
                    f.writelines(f"{lp:.9g}\t{text[g]}\t{lb:.9g}\n"
                                 for g, lp, lb in zip(ids.tolist(), logp, logb, strict=True))
                else:
                    f.writelines(f"{lp:.9g}\t{text[g]}\n"
                                 for g, lp in zip(ids.tolist(), logp, strict=True))
                f.write("\n")
            f.write("\\end\\\n")


def _columns(orders: Sequence[_Order], ids: np.ndarray) -> list[np.ndarray]:
    """The word indices of the n-grams ``ids`` of the last of ``orders``, first word first."""
    cols = []
    for o in reversed(orders):
        cols.append(o.word[ids])
        ids = o.prefix[ids]
    return cols[::-1]


def estimate_kneser_ney(
    sequences: Sequence[np.ndarray],
    order: int,
    prune: Sequence[int] | None = None,
) -> KneserNeyLM:
    """Estimate an order-``order`` modified Kneser-Ney LM of token-id sequences, as lmplz.

    Args:
        sequences: non-empty int64 arrays of token ids ``>= 0``, one sentence each (trusted:
            :func:`~blockdraft.training.ngram.train.train_ngram` checks them).
        order: 2 to 5 (trusted).
        prune: lmplz ``--prune`` thresholds, one per order or fewer (the last repeats; the
            first 0): an n-gram whose raw count is at most its order's threshold is dropped.

    Returns:
        The :class:`KneserNeyLM`.

    Raises:
        RescorerError: no sequences.
    """
    if not sequences:
        raise RescorerError("the corpus is empty: nothing to train an n-gram LM on")
    thresholds = _thresholds(prune, order)
    lengths = np.array([s.size for s in sequences], dtype=np.int64)
    flat = np.concatenate(sequences).astype(np.int64, copy=False)
    # lmplz's indices: <unk>, <s>, </s>, then the token ids in order of first appearance
    uniq, first, inverse = np.unique(flat, return_index=True, return_inverse=True)
    rank = np.empty(uniq.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(uniq.size)
    by_index = uniq[np.argsort(rank)]
    words = ("<unk>", "<s>", "</s>", *map(str, by_index.tolist()))
    v = len(words)
    # the padded stream: <s> w_1 .. w_m </s> per sentence; pos = place in the sentence
    starts = np.concatenate([[0], np.cumsum(lengths + 2)[:-1]])
    total = int(lengths.sum() + 2 * lengths.size)
    stream = np.full(total, EOS, dtype=np.int64)
    stream[starts] = BOS
    inner = np.ones(total, dtype=bool)
    inner[starts] = False
    inner[starts + lengths + 1] = False
    stream[inner] = 3 + rank[inverse]
    pos = np.arange(total, dtype=np.int64) - np.repeat(starts, lengths + 2)

    ids = [stream]  # ids[n - 1][t]: the id of the order-n n-gram ending at t (-1: none)
    tables: list[dict[str, np.ndarray]] = []
    at = np.flatnonzero(pos >= 1)  # unigrams: every word but <s>, which is added below
    raw1 = np.bincount(stream[at], minlength=v)
    tables.append({"prefix": np.full(v, -1), "word": np.arange(v), "suffix": np.full(v, -1),
                   "raw": raw1, "bos": np.zeros(v, dtype=bool)})
    for n in range(2, order + 1):
        at = np.flatnonzero(pos >= n - 1)
        key = ids[-1][at - 1] * v + stream[at]
        uniq_key, inv = np.unique(key, return_inverse=True)
        this = np.full(total, -1, dtype=np.int64)
        this[at] = inv
        size = uniq_key.size
        suffix = np.empty(size, dtype=np.int64)
        suffix[inv] = ids[-1][at]
        bos = np.zeros(size, dtype=bool)
        bos[inv] = pos[at] == n - 1
        tables.append({"prefix": uniq_key // v, "word": uniq_key % v, "suffix": suffix,
                       "raw": np.bincount(inv, minlength=size), "bos": bos})
        ids.append(this)

    # adjusted counts; lower orders: continuation counts, except n-grams starting with <s>
    adjusted = []
    for n, t in enumerate(tables, start=1):
        if n == order:
            adjusted.append(t["raw"].copy())
        else:
            cont = np.bincount(tables[n]["suffix"], minlength=t["raw"].size)
            adjusted.append(np.where(t["bos"], t["raw"], cont))
    adjusted[0][[UNK, BOS]] = 0

    # pruning marks: raw count at most the order's threshold (raw counts shrink with order,
    # and the thresholds do not, so a kept n-gram's context and suffix are kept)
    kept = [t["raw"] > th if n > 1 else np.ones(t["raw"].size, dtype=bool)
            for n, (t, th) in enumerate(zip(tables, thresholds, strict=True), start=1)]

    # discounts, from counts of adjusted counts (with lmplz's raw-count quirk, see above)
    stats = [np.bincount(np.minimum(a, 5), minlength=6)[:5].copy() for a in adjusted]
    for n, g in _last_flushed(stream, pos, ids, order):
        if not tables[n - 1]["bos"][g]:
            adj_g, raw_g = int(adjusted[n - 1][g]), int(tables[n - 1]["raw"][g])
            if adj_g < 5:
                stats[n - 1][adj_g] -= 1
            if raw_g < 5:
                stats[n - 1][raw_g] += 1
    discounts: list[tuple[float, float, float]] = []
    fallback = False
    for s in stats:
        d = _discounts(s)
        if d is None:
            fallback = True
            d = FALLBACK_DISCOUNTS
        discounts.append(d)

    # probabilities, order by order (each interpolates with the one below)
    uniform = 1.0 / (v - 1)  # the vocabulary without <s>
    orders: list[_Order] = []
    lower_prob = np.empty(0)
    for n, (t, adj, keep, d) in enumerate(zip(tables, adjusted, kept, discounts, strict=True),
                                          start=1):
        dtab = np.array([0.0, *d])
        disc = dtab[np.minimum(adj, 3)]
        cls = np.where(keep & (adj > 0), np.minimum(adj, 3), 0)
        if n == 1:
            total_adj = float(adj.sum())
            gamma = float((dtab[cls]).sum()) / total_adj
            prob = (adj - disc) / total_adj + gamma * uniform
            prob[UNK] = gamma * uniform
            prob[BOS] = 1.0
        else:
            size_below = tables[n - 2]["raw"].size
            den = np.bincount(t["prefix"], weights=adj, minlength=size_below)
            mass = np.bincount(t["prefix"], weights=dtab[cls] + np.where(keep, 0, adj),
                               minlength=size_below)
            with np.errstate(invalid="ignore", divide="ignore"):
                gamma_h = mass / den  # NaN where h is no context
            prob = ((adj - disc) / den[t["prefix"]]
                    + gamma_h[t["prefix"]] * lower_prob[t["suffix"]])
            # the back-off weights of the order below: gamma of each context
            below = orders[-1]
            bo = np.where(np.isnan(gamma_h), 1.0, gamma_h)
            bo[np.isin(below.word, (UNK, EOS))] = 1.0
            orders[-1] = _replace_backoff(below, bo)
        orders.append(_Order(prefix=t["prefix"], word=t["word"], suffix=t["suffix"],
                             raw=t["raw"], adjusted=adj, kept=keep, prob=prob,
                             backoff=np.ones(prob.size)))
        lower_prob = prob
    return KneserNeyLM(order=order, counts=tuple(int(k.sum()) for k in kept),
                       tokens=int(lengths.sum()), discounts=tuple(discounts),
                       discount_fallback=fallback, words=words, _orders=tuple(orders))


def _replace_backoff(o: _Order, backoff: np.ndarray) -> _Order:
    return _Order(prefix=o.prefix, word=o.word, suffix=o.suffix, raw=o.raw, adjusted=o.adjusted,
                  kept=o.kept, prob=o.prob, backoff=backoff)


def _thresholds(prune: Sequence[int] | None, order: int) -> list[int]:
    """One threshold per order (lmplz: the last given repeats; none: 0 everywhere)."""
    if not prune:
        return [0] * order
    given = [int(x) for x in prune]
    return (given + [given[-1]] * order)[:order]


def _discounts(t: np.ndarray) -> tuple[float, float, float] | None:
    """``(D_1, D_2, D_3+)`` from the counts of adjusted counts ``t[0..4]``, in float32 as
    lmplz computes them; None where lmplz would refuse them (then the fallback applies)."""
    if any(t[j] == 0 for j in (1, 2, 3)):
        return None
    f = np.float32
    y = f(f(t[1]) / f(float(t[1]) + 2.0 * float(t[2])))
    out = []
    for j in (1, 2, 3):
        dj = f(f(j) - f(f(f(j + 1) * y) * f(t[j + 1])) / f(t[j]))
        if dj < 0.0 or dj > j:
            return None
        out.append(float(dj))
    return out[0], out[1], out[2]


def _last_flushed(stream: np.ndarray, pos: np.ndarray, ids: list[np.ndarray],
                  order: int) -> list[tuple[int, int]]:
    """``(n, id)`` of the lower-order n-grams lmplz counts in its discount statistics with
    their raw count: the suffixes (orders 1 .. m) of the last full window in its suffix order
    (last word by index, then the word before, ...; windows padded with ``<s>``), m stopping
    at the n-gram that starts with the sentence's ``<s>``."""
    cand = np.flatnonzero(pos >= 1)
    for back in range(order):
        prev = np.where(pos[cand] >= back, stream[np.maximum(cand - back, 0)], BOS)
        cand = cand[prev == prev.max()]
        if cand.size == 1:
            break
    t = int(cand[0])
    top = min(order - 1, int(pos[t]) + 1)
    return [(n, int(ids[n - 1][t])) for n in range(1, top + 1)]
