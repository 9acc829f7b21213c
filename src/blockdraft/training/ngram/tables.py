"""An ARPA back-off model in memory as sorted key tables, read from and written to ARPA text.

Each order of a model is a :class:`Table`: its n-grams' keys (:mod:`.keys`), sorted and
distinct, and row for row their natural-log probabilities and back-off weights. Reading
converts the file's log10 values to nats once; writing converts back once (8 significant
digits: finer than the float32 KenLM keeps), a probability or back-off weight of 0 as ``-99``
(:data:`LOG10_ZERO`), the ARPA convention for "never".

Public surface:
    Table(keys, ln_prob, ln_backoff)            one order
    read_tables(path, bars) -> tuple[Table, ...]   every order of an ARPA file
    write_tables(path, keys, ln_prob, ln_backoff, bars)   a model as an ARPA file
    log10_or_zero(ln) -> log10 values, ``-inf`` as LOG10_ZERO
    LOG10_ZERO, CHUNK (n-grams handled at a time)
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from blockdraft.rescorers.base import RescorerError
from blockdraft.rescorers.ngram.arpa import arpa_header, read_arpa
from blockdraft.rescorers.ngram.lm import LN10
from blockdraft.training.ngram.keys import WordCodes, decode_keys, encode_keys, word_name
from blockdraft.training.ngram.progress import StageBars

LOG10_ZERO = -99.0
"""The log10 value written for a probability or back-off weight of 0."""
CHUNK = 1 << 20
"""n-grams scored or written at a time: bounds the temporaries."""


@dataclass(frozen=True)
class Table:
    """One order of an input model: ``keys`` (sorted, distinct: :func:`.keys.encode_keys`)
    and, row for row, ``ln_prob`` (ln P of the last word given the others, nats) and
    ``ln_backoff`` (ln of the back-off weight of the row as a history; 0 where the file gives
    none)."""

    keys: np.ndarray
    ln_prob: np.ndarray
    ln_backoff: np.ndarray


def read_tables(path: Path, bars: StageBars) -> tuple[Table, ...]:
    """Every order of an ARPA file as a :class:`Table` (values converted to nats).

    Raises:
        ArpaFormatError: a malformed or truncated file.
        RescorerError: a word that is not a token id, an n-gram listed twice.
    """
    counts = arpa_header(path)
    codes = [array("q") for _ in counts]
    probs = [array("d") for _ in counts]
    backs = [array("d") for _ in counts]
    code = WordCodes(path).__getitem__
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
        keys = encode_keys(np.frombuffer(codes[n - 1], dtype=np.int64).reshape(-1, n))
        codes[n - 1] = array("q")
        rows = np.argsort(keys, kind="stable")
        keys = keys[rows]
        twice = np.flatnonzero(keys[1:] == keys[:-1])
        if twice.size:
            gram = " ".join(word_name(c) for c in decode_keys(keys[twice[:1]], n)[0].tolist())
            raise RescorerError(f"{path}: the {n}-gram {gram!r} is listed twice; is this a "
                                "valid ARPA file?")
        tables.append(Table(
            keys,
            LN10 * np.frombuffer(probs[n - 1], dtype=np.float64)[rows],
            LN10 * np.frombuffer(backs[n - 1], dtype=np.float64)[rows],
        ))
        probs[n - 1], backs[n - 1] = array("d"), array("d")
    return tuple(tables)


def write_tables(path: Path, keys: Sequence[np.ndarray], ln_prob: Sequence[np.ndarray],
                ln_backoff: Sequence[np.ndarray], bars: StageBars) -> None:
    """The merged model as an ARPA file: n-grams in key order within each order (special
    words first, then token ids ascending, by the oldest word first), log10 values to 8 significant
    digits, 0 as :data:`LOG10_ZERO`."""
    top = len(keys)
    codes = decode_keys(keys[0], 1).reshape(-1)  # sorted; every word is a unigram (closure)
    names = np.array([word_name(c) for c in codes.tolist()], dtype=object)
    tick = bars.stage("writing the ARPA file", sum(k.size for k in keys))
    done = 0
    with open(path, "w", encoding="ascii") as f:
        f.write("\\data\\\n")
        f.writelines(f"ngram {n}={k.size}\n" for n, k in enumerate(keys, 1))
        for n in range(1, top + 1):
            f.write(f"\n\\{n}-grams:\n")
            line = "%.8g\t" + " ".join(["%s"] * n) + ("\t%.8g" if n < top else "") + "\n"
            for start in range(0, keys[n - 1].size, CHUNK):
                rows = slice(start, start + CHUNK)
                words = decode_keys(keys[n - 1][rows], n)
                columns = [names[np.searchsorted(codes, words[:, j])].tolist()
                           for j in range(n)]
                values = [log10_or_zero(ln_prob[n - 1][rows]).tolist(), *columns]
                if n < top:
                    values.append(log10_or_zero(ln_backoff[n - 1][rows]).tolist())
                f.writelines(map(line.__mod__, zip(*values, strict=True)))
                done += words.shape[0]
                tick(done)
        f.write("\n\\end\\\n")


def log10_or_zero(ln: np.ndarray) -> np.ndarray:
    """log10 of natural-log values, ``-inf`` as :data:`LOG10_ZERO`."""
    return np.where(np.isneginf(ln), LOG10_ZERO, ln / LN10)
