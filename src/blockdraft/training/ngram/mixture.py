"""The maths of static interpolation over key tables: each input's back-off probability of
listed n-grams, their mixture, and the back-off weights that make the mixture sum to one
(:mod:`.interpolate` has the model they compute; values in nats).

Public surface:
    ln_prob(model, grams, n) -> float64 [q]     ln P(w | h) under one model's back-off
    mix(ln_a, ln_b, weight) -> ln(weight e^ln_a + (1 - weight) e^ln_b)
    mixed_ln_probs(model_a, model_b, keys, weight, bars) -> per order, the merged ln P
    backoffs(histories, ln_history, grams, ln_gram, n) -> ln bo(h) of each history
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from blockdraft.rescorers.ngram.wfst.history import BOS_CODE
from blockdraft.training.ngram.keys import encode_keys, find_keys, key_part
from blockdraft.training.ngram.progress import StageBars
from blockdraft.training.ngram.tables import CHUNK, Table

_EMPTY = 1e-12  # a lower-order mass below this leaves nothing to back off to


def ln_prob(model: Sequence[Table], grams: np.ndarray, n: int) -> np.ndarray:
    """float64 ``[q]``: ln P(w | h) of each ``n``-word key ``h w`` of ``grams`` under the
    model's back-off: the longest listed suffix of the n-gram, times the back-off weights of
    the histories dropped on the way (1 for a history the model does not list); the model
    reads only its last ``order - 1`` words of ``h``. ``-inf`` (P = 0) where the model does
    not list ``w`` at all (see the module docstring on the vocabulary)."""
    out = np.zeros(grams.size)
    todo = np.arange(grams.size)
    for length in range(min(n, len(model)), 0, -1):
        table = model[length - 1]
        idx = find_keys(table.keys, key_part(grams[todo], n, n - length, n))
        hit = idx >= 0
        out[todo[hit]] += table.ln_prob[idx[hit]]
        todo = todo[~hit]
        if length > 1 and todo.size:
            history = model[length - 2]
            at = find_keys(history.keys, key_part(grams[todo], n, n - length, n - 1))
            listed = at >= 0
            out[todo[listed]] += history.ln_backoff[at[listed]]
    out[todo] = -np.inf
    return out


def mix(ln_a: np.ndarray, ln_b: np.ndarray, weight: float) -> np.ndarray:
    """ln(weight * e^ln_a + (1 - weight) * e^ln_b), elementwise, exact at weight 0 and 1."""
    ln_w = math.log(weight) if weight > 0 else -math.inf
    ln_1w = math.log1p(-weight) if weight < 1 else -math.inf
    return np.logaddexp(ln_w + ln_a, ln_1w + ln_b)


def backoffs(histories: np.ndarray, ln_history: np.ndarray, grams: np.ndarray,
              ln_gram: np.ndarray, n: int) -> np.ndarray:
    """ln bo(h) of each merged ``n``-gram ``h`` (``histories``, whose merged ln probabilities
    are ``ln_history``) from the merged (n+1)-grams ``h w`` (``grams``, ``ln_gram``):
    ``(1 - sum P(w|h)) / (1 - sum P(w|h'))`` over the listed ``h w``, where ``h' w`` is an
    ``n``-gram too (suffix closure). A history whose listed words take all the mass gets
    ``-inf`` (written as -99); one whose lower order has no mass left to give gets back-off
    1, its leftover mass (if any) lost: impossible while ``<unk>`` has a probability, since
    ``h <unk>`` is never listed."""
    at = find_keys(histories, key_part(grams, n + 1, 0, n))  # all listed (prefix closure)
    low = find_keys(histories, key_part(grams, n + 1, 1, n + 1))  # all listed (suffix closure)
    num = 1.0 - np.bincount(at, weights=np.exp(ln_gram), minlength=histories.size)
    den = 1.0 - np.bincount(at, weights=np.exp(ln_history[low]), minlength=histories.size)
    with np.errstate(divide="ignore"):
        ln_bo = np.log(np.maximum(num, 0.0)) - np.log(np.maximum(den, _EMPTY))
    ln_bo[den <= _EMPTY] = 0.0
    return ln_bo


def mixed_ln_probs(model_a: Sequence[Table], model_b: Sequence[Table], keys: Sequence[np.ndarray],
           lam: float, bars: StageBars) -> list[np.ndarray]:
    """Per order, ln P(w|h) of every merged n-gram: the mixture of the inputs' back-off
    probabilities; ``<s>``'s unigram placeholder copied from ``a`` (else ``b``)."""
    tick = bars.stage("mixing", sum(k.size for k in keys))
    done = 0
    out = []
    for n, k in enumerate(keys, 1):
        ln = np.empty(k.size)
        for start in range(0, k.size, CHUNK):
            grams = k[start:start + CHUNK]
            ln[start:start + CHUNK] = mix(ln_prob(model_a, grams, n),
                                            ln_prob(model_b, grams, n), lam)
            done += grams.size
            tick(done)
        out.append(ln)
    bos_key = encode_keys(np.array([[BOS_CODE]]))
    bos = find_keys(keys[0], bos_key)[0]
    if bos >= 0:
        for model in (model_b, model_a):  # a's wins
            at = find_keys(model[0].keys, bos_key)[0]
            if at >= 0:
                out[0][bos] = model[0].ln_prob[at]
    return out
