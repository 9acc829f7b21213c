"""Static linear interpolation of two n-gram LMs into one ARPA back-off model (what SRILM's
``ngram -lm A -mix-lm B -lambda LAM -write-lm`` does).

Public surface:
    interpolate_arpa(a, b, weight, out_prefix, *, binary=True, build_binary=None,
                     memory="1G", progress=False) -> InterpolationResult
        the merged model of ``P(w|h) = weight * P_a(w|h) + (1 - weight) * P_b(w|h)`` written
        as ``PREFIX.arpa``, its KenLM binary ``PREFIX.bin``, the tokenizer record
        ``PREFIX.vocab.json``, the fingerprint of the pair and the record of the mixture
        ``PREFIX.mixture.json`` (the inputs' paths, SHA-256 and orders, the weight).
    InterpolationResult
        the files and figures of one merge.
    INTERPOLATE_SUFFIXES, output_files(prefix)
        what a merge writes beside a prefix.

The merged model (SRILM's static interpolation):
    - Listed n-grams: the union of both inputs' n-grams of every order (the merged order is the
      larger of the two), closed under suffixes and prefixes (the history ``h`` and the
      lower-order ``h' w`` of every listed ``h w`` are listed; KenLM needs both). Models
      written by ``lmplz`` are closed already: nothing is added for them
      (:attr:`InterpolationResult.added` counts what was).
    - Each listed ``h w`` gets ``P(w|h) = weight * P_a(w|h) + (1 - weight) * P_b(w|h)``
      exactly, each input's probability taken with its own back-off (an n-gram an input does
      not list is backed off there: ``bo_x(h) * P_x(w|h')``, ``bo_x(h) = 1`` for a history it
      does not list; an input of lower order reads only the last ``order_x - 1`` words of h).
    - Each history ``h`` of the merged model gets the back-off weight that makes it sum to 1:
      ``bo(h) = (1 - sum P(w|h)) / (1 - sum P(w|h'))``, both sums over the listed ``h w``,
      ``h'`` is ``h`` without its oldest word and ``P(w|h')`` the merged model's own.
    - An n-gram neither input lists is not stored: the merged model backs off,
      ``bo(h) * P(w|h')``, which is *not* the mixture of the two inputs' back-off
      probabilities of that n-gram (they back off from different histories with different
      weights); as in SRILM, the merged model is exact on listed n-grams and an approximation
      elsewhere. This module's tests measure it over 3000 random unlisted n-grams of two LMs
      of the pydoc corpus (orders 3 and 4, weight 0.3): |log10 gap| mean 0.04, median 0.03,
      90% under 0.08, max 0.5. A dynamic mixture of two
      :class:`~.lm.NgramLM` scores is the exact one, at two lookups a token.

The vocabulary: both inputs' words must be token ids as decimal strings plus ``<s>``,
``</s>``, ``<unk>`` (what ``blockdraft ngram train`` writes); the merged vocabulary is their
union. ``<unk>`` is a word like any other: its merged probability is the mixture of the
inputs' ``<unk>`` probabilities, and a token that neither input lists is scored as that.
A word only one input lists gets probability 0 from the other one (SRILM's convention for a
shared vocabulary: that input's ``<unk>`` mass is not handed to each word it lacks), so the
merged model sums to 1 over the union vocabulary; with ``weight = 1`` a word only ``b`` lists
has probability 0 (written ``-99``), every other probability is ``a``'s. ``<s>`` is never
predicted: its unigram entry is a placeholder (``lmplz`` writes 0), copied from ``a`` (from
``b`` when ``a`` lacks it) and left out of every sum.

Units: the ARPA files hold log10 values; they are converted to natural log once, as read, and
back to log10 once, as written (8 significant digits: finer than the float32 KenLM keeps). A
probability or back-off weight of 0 is written as ``-99`` (:data:`LOG10_ZERO`), the ARPA
convention for "never".

Cost: both inputs and the merged model are held as numpy arrays: each n-gram as a key of 4
bytes a word (:func:`_encode`: exact, sorted, found by binary search) and its float64 values.
Two LMs of 2.6M and 5.5M n-grams (orders 5 and 4) merge into 8.0M n-grams in under a minute
on one busy core at 0.8 GB resident at the peak, half of the time reading the ARPA text.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import time
from array import array
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from blockdraft.core.digest import sha256_file
from blockdraft.core.files import new_temporary_directory, replace_together, write_text_atomic
from blockdraft.core.version import __version__
from blockdraft.models.tokenizer import TokenizerInfo
from blockdraft.rescorers.base import RescorerError
from blockdraft.rescorers.ngram.arpa import arpa_header, read_arpa
from blockdraft.rescorers.ngram.lm import is_arpa
from blockdraft.rescorers.ngram.records import (
    read_vocab_record,
    vocab_record_path,
    write_fingerprint,
    write_vocab_record,
)
from blockdraft.rescorers.ngram.train import LM_SUFFIXES, binary_writer
from blockdraft.rescorers.ngram.wfst.history import BOS_CODE, EOS_CODE, UNK_CODE

LN10 = math.log(10.0)
LOG10_ZERO = -99.0
"""The log10 value written for a probability or back-off weight of 0."""
MIXTURE_SUFFIX = ".mixture.json"
"""``PREFIX.mixture.json``: what was mixed (the inputs' paths and SHA-256, the weight)."""
INTERPOLATE_SUFFIXES = (*LM_SUFFIXES, MIXTURE_SUFFIX)
"""What :func:`interpolate_arpa` writes beside a prefix: ``ngram train``'s files (ARPA, binary,
tokenizer record, fingerprint of the pair) and the record of the mixture."""

_SPECIAL = {"<s>": BOS_CODE, "</s>": EOS_CODE, "<unk>": UNK_CODE}
_NAMES = {code: word for word, code in _SPECIAL.items()}
_OFFSET = 3  # word code + 3 >= 0: the 4 bytes of a word in a key
_MAX_ID = 2**32 - 1 - _OFFSET
_CHUNK = 1 << 20  # n-grams scored or written at a time: bounds the temporaries
_EMPTY = 1e-12  # a lower-order mass below this leaves nothing to back off to


def output_files(out_prefix: str | Path) -> tuple[Path, ...]:
    """The files :func:`interpolate_arpa` may write for ``out_prefix`` (``mix`` ->
    ``mix.arpa``, ``mix.bin``, ``mix.vocab.json``, ``mix.fingerprint.json``,
    ``mix.mixture.json``), in that order."""
    prefix = Path(out_prefix)
    return tuple(prefix.with_name(prefix.name + suffix) for suffix in INTERPOLATE_SUFFIXES)


@dataclass(frozen=True)
class InterpolationResult:
    """Files and figures of one merge.

    Attributes:
        arpa: the merged ARPA file.
        binary: its KenLM binary (probing), or None when not built.
        vocab_record: ``PREFIX.vocab.json`` (the inputs' tokenizer), or None when the inputs
            carry no tokenizer record.
        record: ``PREFIX.mixture.json``, the record of what was mixed.
        a: the first input (probability share ``weight``).
        b: the second input (share ``1 - weight``).
        weight: ``lam`` of ``P = lam * P_a + (1 - lam) * P_b``.
        order: the merged order (the larger of the inputs').
        counts: n-grams per order of the merged model (``counts[0]`` = unigrams).
        added: n-grams per order listed by neither input, added to close the listed set under
            prefixes and suffixes (all 0 for models written by ``lmplz``).
        seconds: wall time of the merge, the binary included.
        tokenizer: the inputs' tokenizer (their records agree), or None.
    """

    arpa: Path
    binary: Path | None
    vocab_record: Path | None
    record: Path
    a: Path
    b: Path
    weight: float
    order: int
    counts: tuple[int, ...]
    added: tuple[int, ...]
    seconds: float
    tokenizer: TokenizerInfo | None = None

    @property
    def num_ngrams(self) -> int:
        """Total n-grams of all orders of the merged model."""
        return int(sum(self.counts))


# ------------------------------------------------------------------------------ n-gram keys


def _encode(words: np.ndarray) -> np.ndarray:
    """Keys ``S{4n}`` ``[c]`` of word codes int64 ``[c, n]``: each code + 3 as 4 big-endian
    bytes, so that keys compare as their rows do, oldest word first (``<unk>`` < ``</s>`` <
    ``<s>`` < token 0 < token 1 ...). Exact: no two rows share a key."""
    n = words.shape[1]
    return (words + _OFFSET).astype(">u4").view(f"S{4 * n}").reshape(-1)


def _decode(keys: np.ndarray, n: int) -> np.ndarray:
    """Word codes int64 ``[c, n]`` of ``n``-word keys (the inverse of :func:`_encode`)."""
    return keys.view(">u4").reshape(-1, n).astype(np.int64) - _OFFSET


def _part(keys: np.ndarray, n: int, start: int, stop: int) -> np.ndarray:
    """The keys of words ``start:stop`` of each ``n``-word key (``1, n``: the suffixes,
    ``0, n - 1``: the histories)."""
    columns = np.ascontiguousarray(keys.view(np.uint8).reshape(-1, 4 * n)[:, 4 * start:4 * stop])
    return columns.view(f"S{4 * (stop - start)}").reshape(-1)


def _find(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """int64 ``[q]``: the index of each of ``wanted`` in the sorted distinct ``keys``, -1
    where it is not there."""
    if keys.size == 0:
        return np.full(wanted.size, -1, dtype=np.int64)
    pos = np.minimum(np.searchsorted(keys, wanted), keys.size - 1)
    return np.where(keys[pos] == wanted, pos, -1)


def _sorted_distinct(keys: np.ndarray) -> np.ndarray:
    """The distinct keys, sorted (``np.unique`` is several times slower on byte strings)."""
    keys = np.sort(keys, kind="stable")
    first = np.ones(keys.size, dtype=bool)
    first[1:] = keys[1:] != keys[:-1]
    return keys[first]


def _close(keys: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, int]:
    """``keys`` with those of ``wanted`` it lacks added (sorted, distinct); and how many."""
    missing = wanted[_find(keys, wanted) < 0]
    if missing.size == 0:
        return keys, 0
    closed = _sorted_distinct(np.concatenate([keys, missing]))
    return closed, closed.size - keys.size


@dataclass(frozen=True)
class _Table:
    """One order of an input model: ``keys`` (sorted, distinct: :func:`_encode`) and, row
    for row, ``ln_prob`` (ln P of the last word given the others, nats) and ``ln_backoff``
    (ln of the back-off weight of the row as a history; 0 where the file gives none)."""

    keys: np.ndarray
    ln_prob: np.ndarray
    ln_backoff: np.ndarray


class _WordCodes(dict[str, int]):
    """ARPA word -> word code (a token id, or the code of ``<s>``, ``</s>``, ``<unk>``),
    memoised; a word that is not a token id raises."""

    def __init__(self, path: Path) -> None:
        super().__init__(_SPECIAL)
        self.path = path

    def __missing__(self, word: str) -> int:
        if not (word.isascii() and word.isdigit()):
            raise RescorerError(
                f"{self.path}: the LM word {word!r} is not a decimal token id; interpolation "
                "needs two LMs over token ids (as `blockdraft ngram train` writes them), "
                "plus <s>, </s> and <unk>"
            )
        code = int(word)
        if code > _MAX_ID:
            raise RescorerError(f"{self.path}: token id {code} exceeds {_MAX_ID}")
        self[word] = code
        return code


def _read_model(path: Path, bars: _Bars) -> tuple[_Table, ...]:
    """Every order of an ARPA file as a :class:`_Table` (values converted to nats).

    Raises:
        ArpaFormatError: a malformed or truncated file.
        RescorerError: a word that is not a token id, an n-gram listed twice.
    """
    counts = arpa_header(path)
    codes = [array("q") for _ in counts]
    probs = [array("d") for _ in counts]
    backs = [array("d") for _ in counts]
    code = _WordCodes(path).__getitem__
    tick = bars.stage(f"reading {path.name}", sum(counts))
    for i, (n, line_words, log10_prob, log10_backoff) in enumerate(read_arpa(path), 1):
        codes[n - 1].extend(map(code, line_words))
        probs[n - 1].append(log10_prob)
        backs[n - 1].append(log10_backoff)
        if not i & 0xFFFF:
            tick(i)
    tick(sum(counts))
    tables = []
    for n in range(1, len(counts) + 1):
        keys = _encode(np.frombuffer(codes[n - 1], dtype=np.int64).reshape(-1, n))
        codes[n - 1] = array("q")
        rows = np.argsort(keys, kind="stable")
        keys = keys[rows]
        twice = np.flatnonzero(keys[1:] == keys[:-1])
        if twice.size:
            gram = " ".join(_word(c) for c in _decode(keys[twice[:1]], n)[0].tolist())
            raise RescorerError(f"{path}: the {n}-gram {gram!r} is listed twice; is this a "
                                "valid ARPA file?")
        tables.append(_Table(
            keys,
            LN10 * np.frombuffer(probs[n - 1], dtype=np.float64)[rows],
            LN10 * np.frombuffer(backs[n - 1], dtype=np.float64)[rows],
        ))
        probs[n - 1], backs[n - 1] = array("d"), array("d")
    return tuple(tables)


def _word(code: int) -> str:
    """The ARPA word of a word code."""
    return _NAMES.get(code, str(code))


# ------------------------------------------------------------------------------ the maths


def _ln_prob(model: Sequence[_Table], grams: np.ndarray, n: int) -> np.ndarray:
    """float64 ``[q]``: ln P(w | h) of each ``n``-word key ``h w`` of ``grams`` under the
    model's back-off: the longest listed suffix of the n-gram, times the back-off weights of
    the histories dropped on the way (1 for a history the model does not list); the model
    reads only its last ``order - 1`` words of ``h``. ``-inf`` (P = 0) where the model does
    not list ``w`` at all (see the module docstring on the vocabulary)."""
    out = np.zeros(grams.size)
    todo = np.arange(grams.size)
    for length in range(min(n, len(model)), 0, -1):
        table = model[length - 1]
        idx = _find(table.keys, _part(grams[todo], n, n - length, n))
        hit = idx >= 0
        out[todo[hit]] += table.ln_prob[idx[hit]]
        todo = todo[~hit]
        if length > 1 and todo.size:
            history = model[length - 2]
            at = _find(history.keys, _part(grams[todo], n, n - length, n - 1))
            listed = at >= 0
            out[todo[listed]] += history.ln_backoff[at[listed]]
    out[todo] = -np.inf
    return out


def _mix(ln_a: np.ndarray, ln_b: np.ndarray, weight: float) -> np.ndarray:
    """ln(weight * e^ln_a + (1 - weight) * e^ln_b), elementwise, exact at weight 0 and 1."""
    ln_w = math.log(weight) if weight > 0 else -math.inf
    ln_1w = math.log1p(-weight) if weight < 1 else -math.inf
    return np.logaddexp(ln_w + ln_a, ln_1w + ln_b)


def _backoffs(histories: np.ndarray, ln_history: np.ndarray, grams: np.ndarray,
              ln_gram: np.ndarray, n: int) -> np.ndarray:
    """ln bo(h) of each merged ``n``-gram ``h`` (``histories``, whose merged ln probabilities
    are ``ln_history``) from the merged (n+1)-grams ``h w`` (``grams``, ``ln_gram``):
    ``(1 - sum P(w|h)) / (1 - sum P(w|h'))`` over the listed ``h w``, where ``h' w`` is an
    ``n``-gram too (suffix closure). A history whose listed words take all the mass gets
    ``-inf`` (written as -99); one whose lower order has no mass left to give gets back-off
    1, its leftover mass (if any) lost: impossible while ``<unk>`` has a probability, since
    ``h <unk>`` is never listed."""
    at = _find(histories, _part(grams, n + 1, 0, n))  # all listed (prefix closure)
    low = _find(histories, _part(grams, n + 1, 1, n + 1))  # all listed (suffix closure)
    num = 1.0 - np.bincount(at, weights=np.exp(ln_gram), minlength=histories.size)
    den = 1.0 - np.bincount(at, weights=np.exp(ln_history[low]), minlength=histories.size)
    with np.errstate(divide="ignore"):
        ln_bo = np.log(np.maximum(num, 0.0)) - np.log(np.maximum(den, _EMPTY))
    ln_bo[den <= _EMPTY] = 0.0
    return ln_bo


# ------------------------------------------------------------------------------ the writer


def _write_arpa(path: Path, keys: Sequence[np.ndarray], ln_prob: Sequence[np.ndarray],
                ln_backoff: Sequence[np.ndarray], bars: _Bars) -> None:
    """The merged model as an ARPA file: n-grams in key order within each order (special
    words first, then token ids ascending, by the oldest word first), log10 values to 8 significant
    digits, 0 as :data:`LOG10_ZERO`."""
    top = len(keys)
    codes = _decode(keys[0], 1).reshape(-1)  # sorted; every word is a unigram (closure)
    names = np.array([_word(c) for c in codes.tolist()], dtype=object)
    tick = bars.stage("writing the ARPA file", sum(k.size for k in keys))
    done = 0
    with open(path, "w", encoding="ascii") as f:
        f.write("\\data\\\n")
        f.writelines(f"ngram {n}={k.size}\n" for n, k in enumerate(keys, 1))
        for n in range(1, top + 1):
            f.write(f"\n\\{n}-grams:\n")
            line = "%.8g\t" + " ".join(["%s"] * n) + ("\t%.8g" if n < top else "") + "\n"
            for start in range(0, keys[n - 1].size, _CHUNK):
                rows = slice(start, start + _CHUNK)
                words = _decode(keys[n - 1][rows], n)
                columns = [names[np.searchsorted(codes, words[:, j])].tolist()
                           for j in range(n)]
                values = [_log10(ln_prob[n - 1][rows]).tolist(), *columns]
                if n < top:
                    values.append(_log10(ln_backoff[n - 1][rows]).tolist())
                f.writelines(map(line.__mod__, zip(*values, strict=True)))
                done += words.shape[0]
                tick(done)
        f.write("\n\\end\\\n")


def _log10(ln: np.ndarray) -> np.ndarray:
    """log10 of natural-log values, ``-inf`` as :data:`LOG10_ZERO`."""
    return np.where(np.isneginf(ln), LOG10_ZERO, ln / LN10)


# ------------------------------------------------------------------------------ progress


class _Bars:
    """Rich progress bars on standard error, one per stage (drawn only when enabled and
    standard error is a terminal)."""

    def __init__(self, enabled: bool) -> None:
        self._progress: Any = None
        if enabled and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TimeElapsedColumn(), console=Console(stderr=True))
            self._progress.start()

    def stage(self, description: str, total: int | None) -> Callable[[int], None]:
        """A new bar; returns ``done(n)``, which sets how much of ``total`` is done."""
        if self._progress is None:
            return lambda n: None
        task = self._progress.add_task(description, total=total)
        return lambda n: self._progress.update(task, completed=n)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()


@contextmanager
def _bars(enabled: bool) -> Iterator[_Bars]:
    bars = _Bars(enabled)
    try:
        yield bars
    finally:
        bars.close()


# ------------------------------------------------------------------------------ the merge


def _check_inputs(a: Path, b: Path, weight: Any) -> float:
    """The weight as a float; refuses a weight outside [0, 1] and inputs that are not ARPA."""
    if isinstance(weight, bool) or not isinstance(weight, (int, float, np.floating,
                                                           np.integer)):
        raise RescorerError(f"weight must be a number in [0, 1] (the share of {a.name}), got "
                            f"{weight!r}")
    lam = float(weight)
    if not 0.0 <= lam <= 1.0:  # NaN too
        raise RescorerError(f"weight must be in [0, 1] (the share of {a.name}), got {weight!r}")
    for path in (a, b):
        if path.is_dir():
            raise RescorerError(f"ARPA file {path} is a folder; pass the .arpa file inside it")
        if not path.is_file():
            raise RescorerError(f"ARPA file {path} does not exist")
        if not is_arpa(path):
            raise RescorerError(
                f"{path} is not an ARPA file (a KenLM binary?); interpolation reads the ARPA "
                f"files: pass {path.with_suffix('.arpa').name}")
    return lam


def _tokenizer(a: Path, b: Path) -> TokenizerInfo | None:
    """The tokenizer both inputs were trained over, from their records (None when neither
    has one).

    Raises:
        RescorerError: the records differ, or only one input has one.
    """
    ta, tb = read_vocab_record(a), read_vocab_record(b)
    if ta is None and tb is None:
        return None
    if ta is None or tb is None:
        has, lacks, rec = (a, b, ta) if tb is None else (b, a, tb)
        assert rec is not None
        raise RescorerError(
            f"{has} was trained over the tokenizer {rec.name or '?'} (fingerprint "
            f"{rec.fingerprint}, {vocab_record_path(has).name}) but {lacks} has no tokenizer "
            f"record ({vocab_record_path(lacks).name}), so its token ids cannot be checked to "
            "be the same tokens; retrain it with blockdraft ngram train --tokenizer "
            f"{rec.name or 'MODEL'}, or remove {vocab_record_path(has).name} to mix them "
            "unchecked"
        )
    if ta.fingerprint != tb.fingerprint or ta.vocab_size != tb.vocab_size:
        raise RescorerError(
            f"{a.name} and {b.name} were trained over different tokenizers: {ta.name or '?'} "
            f"(V = {ta.vocab_size}, fingerprint {ta.fingerprint}) and {tb.name or '?'} (V = "
            f"{tb.vocab_size}, fingerprint {tb.fingerprint}); the same token id is another "
            "token in each, so they cannot be mixed: train both with one tokenizer"
        )
    return ta


def interpolate_arpa(
    a: str | Path,
    b: str | Path,
    weight: float,
    out_prefix: str | Path,
    *,
    binary: bool = True,
    build_binary: str | Path | None = None,
    memory: str = "1G",
    progress: bool = False,
) -> InterpolationResult:
    """Merge two ARPA LMs over token ids into one back-off model of their linear mixture.

    ``P(w|h) = weight * P_a(w|h) + (1 - weight) * P_b(w|h)`` on every n-gram either model
    lists, back-off weights recomputed so that the model sums to 1 (the module docstring has
    the maths, the vocabulary, ``<unk>`` and how close unlisted n-grams are).

    Args:
        a: the first ARPA file (share ``weight``).
        b: the second ARPA file (share ``1 - weight``); its order may differ from ``a``'s.
        weight: ``lam`` in ``[0, 1]``.
        out_prefix: writes ``PREFIX.arpa``, ``PREFIX.bin`` (unless ``binary=False``),
            ``PREFIX.vocab.json`` (when the inputs carry a tokenizer record: both must carry
            the same), ``PREFIX.fingerprint.json`` (the ARPA/binary pair, as ``ngram train``)
            and ``PREFIX.mixture.json`` (the inputs' paths, SHA-256, orders and counts, the
            weight). They are built in a hidden folder beside the prefix and renamed into
            place together at the end: a failure or an interrupt leaves the old ones as they
            were (a member the new merge does not write is removed).
        binary: also write the KenLM probing binary (as ``ngram train``: the native
            library's writer, else ``build_binary``; :func:`~.train.binary_writer`).
        build_binary: path of ``build_binary`` (used instead of the native writer when given).
        memory: ``build_binary -S`` memory cap.
        progress: draw rich progress bars on standard error (when it is a terminal).

    Returns:
        :class:`InterpolationResult`.

    Raises:
        RescorerError: a missing input or one that is not an ARPA file, a weight outside
            ``[0, 1]``, inputs of different tokenizers (or only one with a record), a word
            that is not a token id, a ``build_binary`` failure.
        ArpaFormatError: a malformed or truncated input.
    """
    t0 = time.perf_counter()
    a, b = Path(a), Path(b)
    lam = _check_inputs(a, b, weight)
    tokenizer = _tokenizer(a, b)
    sources = {"a": _source(a), "b": _source(b)}  # what is read next
    bb = binary_writer(build_binary) if binary else None
    out_prefix = Path(out_prefix)
    out_prefix.parent.mkdir(parents=True, exist_ok=True)
    with _bars(progress) as bars:
        model_a = _read_model(a, bars)
        model_b = _read_model(b, bars)
        top = max(len(model_a), len(model_b))
        tick = bars.stage("listing the union", 3 * top - 2)
        keys = []
        for n in range(1, top + 1):
            keys.append(_sorted_distinct(np.concatenate(
                [m[n - 1].keys for m in (model_a, model_b) if n <= len(m)])))
            tick(len(keys))
        added, done = [0] * top, top
        for start, stop in ((1, 0), (0, -1)):  # suffixes first, then prefixes
            for n in range(top, 1, -1):
                keys[n - 2], k = _close(keys[n - 2], _part(keys[n - 1], n, start, n + stop))
                added[n - 2] += k
                done += 1
                tick(done)
        ln_prob = _mixed(model_a, model_b, keys, lam, bars)
        del model_a, model_b
        tick = bars.stage("back-off weights", top - 1)
        ln_backoff = []
        for n in range(1, top):
            ln_backoff.append(_backoffs(keys[n - 1], ln_prob[n - 1], keys[n], ln_prob[n], n))
            tick(n)
        tmp = new_temporary_directory(out_prefix)
        try:
            staged = tmp / out_prefix.name
            arpa, bin_path, _, _, record = output_files(staged)
            _write_arpa(arpa, keys, ln_prob, ln_backoff, bars)
            counts = tuple(k.size for k in keys)
            del keys, ln_prob, ln_backoff
            if bb is not None:
                built = bars.stage("binary", 1)
                try:
                    bb.write(arpa, bin_path, memory)
                except RescorerError as e:
                    raise RescorerError(f"the merged model's binary: {e}; {out_prefix}.* were "
                                        "left as they were") from e
                built(1)
            vocab = write_vocab_record(staged, tokenizer)
            write_fingerprint(staged, arpa, bin_path if bb is not None else None, counts)
            write_text_atomic(record, json.dumps(_record(sources, lam, counts, added),
                                                 indent=2) + "\n")
            finals = output_files(out_prefix)
            made = [(s, f) for s, f in zip(output_files(staged), finals, strict=True)
                    if s.exists()]
            replace_together(made, [f for s, f in zip(output_files(staged), finals,
                                                      strict=True) if not s.exists()])
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    final_arpa, final_bin, final_vocab, _, final_record = output_files(out_prefix)
    return InterpolationResult(
        arpa=final_arpa, binary=final_bin if bb is not None else None,
        vocab_record=final_vocab if vocab is not None else None, record=final_record,
        a=a, b=b, weight=lam, order=top, counts=counts, added=tuple(added),
        seconds=time.perf_counter() - t0, tokenizer=tokenizer,
    )


def _mixed(model_a: Sequence[_Table], model_b: Sequence[_Table], keys: Sequence[np.ndarray],
           lam: float, bars: _Bars) -> list[np.ndarray]:
    """Per order, ln P(w|h) of every merged n-gram: the mixture of the inputs' back-off
    probabilities; ``<s>``'s unigram placeholder copied from ``a`` (else ``b``)."""
    tick = bars.stage("mixing", sum(k.size for k in keys))
    done = 0
    out = []
    for n, k in enumerate(keys, 1):
        ln = np.empty(k.size)
        for start in range(0, k.size, _CHUNK):
            grams = k[start:start + _CHUNK]
            ln[start:start + _CHUNK] = _mix(_ln_prob(model_a, grams, n),
                                            _ln_prob(model_b, grams, n), lam)
            done += grams.size
            tick(done)
        out.append(ln)
    bos_key = _encode(np.array([[BOS_CODE]]))
    bos = _find(keys[0], bos_key)[0]
    if bos >= 0:
        for model in (model_b, model_a):  # a's wins
            at = _find(model[0].keys, bos_key)[0]
            if at >= 0:
                out[0][bos] = model[0].ln_prob[at]
    return out


def _source(path: Path) -> dict[str, Any]:
    """An input as ``PREFIX.mixture.json`` records it."""
    counts = arpa_header(path)
    return {"path": str(path.resolve()), "sha256": sha256_file(path), "order": len(counts),
            "counts": list(counts)}


def _record(sources: dict[str, Any], lam: float, counts: Sequence[int], added: Sequence[int]
            ) -> dict[str, Any]:
    """The contents of ``PREFIX.mixture.json``."""
    return {
        "format": "blockdraft-ngram-mixture", "format_version": 1,
        "formula": "P(w|h) = weight * P_a(w|h) + (1 - weight) * P_b(w|h) on every listed "
                   "n-gram, back-off weights renormalised (static interpolation, SRILM "
                   "ngram -mix-lm)",
        "weight": lam, **sources,
        "order": len(counts), "counts": [int(c) for c in counts],
        "added": [int(x) for x in added], "blockdraft": __version__,
    }
