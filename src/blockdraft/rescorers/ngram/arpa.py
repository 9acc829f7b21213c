"""A streaming reader and validator of ARPA back-off n-gram files.

Public surface:
    read_arpa(path) -> Iterator[ArpaNgram]
        every n-gram of the file, section by section in file order, each line validated as it
        is read; the whole file is never held in memory.
    arpa_header(path) -> tuple[int, ...]
        the n-gram counts of the ``\\data\\`` header (``counts[0]`` = unigrams), read alone.
    ArpaNgram(order, words, log10_prob, log10_backoff)
        one n-gram line (an immutable named tuple: cheap enough for millions of lines).
    ArpaFormatError(RescorerError)
        a malformed or truncated file; ``.path`` and ``.lineno`` say where.

The format read (the one ``lmplz``, SRILM and KenLM write and read)::

    \\data\\
    ngram 1=C1
    ...
    ngram N=CN

    \\1-grams:
    log10_prob<WS>w1[<WS>log10_backoff]      (C1 lines)
    ...
    \\N-grams:
    log10_prob<WS>w1 ... wN                  (CN lines: no back-off on the highest order)

    \\end\\

Blank lines are ignored everywhere (so a header or section may be followed by any number of
them), fields are separated by any whitespace, text after ``\\end\\`` is ignored.

Validation, each failure an :class:`ArpaFormatError` naming the file, the line and the value:
no ``\\data\\`` first; a header line other than ``ngram N=COUNT``, orders out of sequence or no
counts; a section header missing or out of order; a section with fewer lines than its count
(the next section starts early) or more; a file that ends inside a section (truncated); a line
with the wrong number of fields; a probability or back-off that is not a number, is NaN or
``+inf``; a log10 probability above 0; no ``\\end\\``.

Units: every number is returned as written, a log10 probability (or log10 back-off weight, 0
when absent). Convert to natural log (times ``ln 10``) once, where it is consumed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, NamedTuple, NoReturn

from blockdraft.rescorers.base import RescorerError

_NGRAM_COUNT = re.compile(r"ngram\s+(\d+)\s*=\s*(\d+)")


class ArpaFormatError(RescorerError):
    """An ARPA file is malformed or truncated.

    Attributes:
        path: the file.
        lineno: 1-based line number of the offending line (the last line of the file when the
            file ends too early; 0 for an empty file).
        what: what is wrong, with the offending value.
    """

    def __init__(self, path: str | Path, lineno: int, what: str) -> None:
        self.path = Path(path)
        self.lineno = int(lineno)
        self.what = what
        super().__init__(f"{self.path}:{self.lineno}: {what}")


class ArpaNgram(NamedTuple):
    """One n-gram line of an ARPA file.

    Attributes:
        order: ``n``, the number of words.
        words: the ``n`` words, oldest first (history ``words[:-1]``, predicted ``words[-1]``).
        log10_prob: ``log10 P(words[-1] | words[:-1])`` as written (``<= 0``; may be ``-inf``).
        log10_backoff: the log10 back-off weight of ``words`` as a history, 0 when absent.
    """

    order: int
    words: tuple[str, ...]
    log10_prob: float
    log10_backoff: float


def _open(path: Path) -> IO[str]:
    if path.is_dir():
        raise RescorerError(f"ARPA file {path} is a folder; pass the .arpa file inside it")
    if not path.is_file():
        raise RescorerError(f"ARPA file {path} does not exist")
    # Words are opaque byte strings to the format: keep undecodable bytes round-trippable.
    return open(path, encoding="utf-8", errors="surrogateescape")


class _Lines:
    """The non-blank, stripped lines of a file with their 1-based numbers, with one pushback.

    ``it`` is the raw ``(lineno, line)`` iterator, for hot loops that read it directly (they
    must keep ``lineno`` current and ``push`` the line they stop at).
    """

    def __init__(self, f: IO[str]) -> None:
        self.it = enumerate(f, 1)
        self.lineno = 0
        self._pushed: tuple[int, str] | None = None

    def push(self, lineno: int, stripped: str) -> None:
        """Return a line to the stream: the next :meth:`next` gives it again."""
        self._pushed = (lineno, stripped)

    def next(self) -> str | None:
        """The next non-blank line, stripped, or None at the end of the file."""
        if self._pushed is not None:
            self.lineno, s = self._pushed
            self._pushed = None
            return s
        for lineno, raw in self.it:
            self.lineno = lineno
            s = raw.strip()
            if s:
                return s
        return None


def _read_header(path: Path, lines: _Lines) -> tuple[tuple[int, ...], str | None]:
    """Parse ``\\data\\`` and its counts; returns ``(counts, first line after the header)``."""
    first = lines.next()
    if first is None:
        raise ArpaFormatError(path, lines.lineno, "empty file: expected '\\data\\'")
    if first != "\\data\\":
        raise ArpaFormatError(
            path, lines.lineno,
            f"expected '\\data\\' as the first non-blank line, got {first[:60]!r}; "
            "is this an ARPA file?",
        )
    counts: list[int] = []
    while True:
        s = lines.next()
        if s is None:
            raise ArpaFormatError(
                path, lines.lineno, "file ends inside the \\data\\ header (truncated file?)"
            )
        if s.startswith("\\"):
            break
        m = _NGRAM_COUNT.fullmatch(s)
        if m is None:
            raise ArpaFormatError(
                path, lines.lineno, f"malformed header line {s[:60]!r}: expected 'ngram N=COUNT'"
            )
        order, count = int(m.group(1)), int(m.group(2))
        if order != len(counts) + 1:
            raise ArpaFormatError(
                path, lines.lineno,
                f"header declares order {order} after order {len(counts)}: orders must be "
                "1, 2, ... in sequence",
            )
        counts.append(count)
    if not counts:
        raise ArpaFormatError(path, lines.lineno, "the \\data\\ header declares no n-gram counts")
    return tuple(counts), s


def arpa_header(path: str | Path) -> tuple[int, ...]:
    """The n-gram counts declared by an ARPA file's ``\\data\\`` header.

    Args:
        path: the ARPA file.

    Returns:
        ``counts`` with ``counts[n - 1]`` the number of ``n``-grams; ``len(counts)`` is the order.

    Raises:
        ArpaFormatError: no ``\\data\\``, a malformed header line, orders out of sequence.
        RescorerError: the file does not exist.
    """
    path = Path(path)
    with _open(path) as f:
        counts, _ = _read_header(path, _Lines(f))
    return counts


def _number(path: Path, lineno: int, text: str, what: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise ArpaFormatError(path, lineno, f"non-numeric {what} {text[:40]!r}") from None
    if x != x:  # NaN
        raise ArpaFormatError(path, lineno, f"{what} is NaN")
    if x == math.inf:
        raise ArpaFormatError(path, lineno, f"{what} is +inf")
    return x


def _bad_fields(
    path: Path, lineno: int, order: int, n_min: int, n_max: int, line: str
) -> NoReturn:
    n = len(line.split())
    expected = (
        f"{n_min} (log10 prob, {order} words)" if n_min == n_max
        else f"{n_min} or {n_max} (log10 prob, {order} words[, log10 back-off])"
    )
    raise ArpaFormatError(
        path, lineno,
        f"{order}-gram line has {n} fields, expected {expected}: {line.strip()[:80]!r}",
    )


def read_arpa(path: str | Path) -> Iterator[ArpaNgram]:
    """Every n-gram of an ARPA file, validated line by line as it streams.

    Args:
        path: the ARPA file.

    Yields:
        :class:`ArpaNgram` in file order: all 1-grams, then all 2-grams, ... Values are log10
        as written. An error is raised when the reader reaches the bad line, so n-grams before
        it have already been yielded.

    Raises:
        ArpaFormatError: see the module docstring for every case; the message names the file,
            the line number and the offending value.
        RescorerError: the file does not exist.
    """
    path = Path(path)
    with _open(path) as f:
        lines = _Lines(f)
        counts, s = _read_header(path, lines)
        top = len(counts)
        make = tuple.__new__  # ArpaNgram(...) minus the Python-level __new__: a hot loop
        for order in range(1, top + 1):
            want = f"\\{order}-grams:"
            if s is None:
                raise ArpaFormatError(
                    path, lines.lineno,
                    f"file ends before section {want} declared in \\data\\ (truncated file?)",
                )
            if s != want:
                raise ArpaFormatError(
                    path, lines.lineno, f"expected section header {want!r}, got {s[:60]!r}"
                )
            count = counts[order - 1]
            n_min, n_max = order + 1, order + 1 if order == top else order + 2
            i = 0
            for lineno, raw in lines.it:
                lines.lineno = lineno
                parts = raw.split()
                if not parts:
                    continue
                if i == count or parts[0][0] == "\\":
                    lines.push(lineno, raw.strip())
                    break
                n = len(parts)
                if n < n_min or n > n_max:
                    _bad_fields(path, lineno, order, n_min, n_max, raw)
                try:
                    prob = float(parts[0])
                except ValueError:
                    prob = _number(path, lineno, parts[0], "log10 probability")
                if not prob <= 0.0:  # NaN, +inf and positive values
                    _number(path, lineno, parts[0], "log10 probability")
                    raise ArpaFormatError(path, lineno, f"log10 probability {prob} is above 0")
                backoff = 0.0
                if n == n_max and order < top:
                    try:
                        backoff = float(parts[-1])
                    except ValueError:
                        backoff = _number(path, lineno, parts[-1], "log10 back-off")
                    if not -math.inf < backoff < math.inf:  # NaN and infinities
                        _number(path, lineno, parts[-1], "log10 back-off")
                        raise ArpaFormatError(path, lineno, "log10 back-off is -inf")
                i += 1
                yield make(ArpaNgram, (order, tuple(parts[1 : order + 1]), prob, backoff))
            if i < count:
                s = lines.next()
                if s is None:
                    raise ArpaFormatError(
                        path, lines.lineno,
                        f"file ends inside section {want} after {i} of the {count} n-grams "
                        "declared in \\data\\ (truncated file?)",
                    )
                raise ArpaFormatError(
                    path, lines.lineno,
                    f"section {want} has {i} n-grams but \\data\\ declares {count} "
                    f"({s[:30]!r} begins early)",
                )
            s = lines.next()
            if s is not None and s[0] != "\\":
                raise ArpaFormatError(
                    path, lines.lineno,
                    f"section {want} has more n-grams than the {count} declared in \\data\\: "
                    f"{s[:60]!r}",
                )
        if s is None:
            raise ArpaFormatError(
                path, lines.lineno, "missing '\\end\\' after the last section (truncated file?)"
            )
        if s != "\\end\\":
            raise ArpaFormatError(
                path, lines.lineno,
                f"expected '\\end\\' after section \\{top}-grams:, got {s[:60]!r}",
            )
