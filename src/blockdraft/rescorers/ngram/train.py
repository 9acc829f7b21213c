"""Train n-gram LMs over token ids with KenLM's ``lmplz`` and ``build_binary``.

The corpus is a sequence of token-id sequences (one per document or line); each becomes one
line of decimal ids for ``lmplz``, so the LM's words are token ids as decimal strings (the
convention of :class:`~blockdraft.rescorers.ngram.lm.NgramLM`).

``lmplz`` runs with an explicit memory cap (``-S``, default ``1G``: without it lmplz reserves
most of the machine's memory up front) and a temporary directory beside the output. On corpora
too small for Kneser-Ney discount estimation lmplz fails; it is then rerun with
``--discount_fallback`` and the result says so.

With ``tokenizer=`` (a :class:`~blockdraft.models.TokenizerInfo`), the tokenizer the ids came
from is recorded beside the LM in ``<prefix>.vocab.json``; :meth:`NgramLM.check_vocab` then
refuses the LM for a model with another tokenizer (blockdraft's BPE or a Hugging Face model's).

Executables are found in this order: the ``lmplz``/``build_binary`` arguments,
``$BLOCKDRAFT_KENLM_BIN``, the directory of the running Python (``make setup`` links them into
``.venv/bin``), the repository's ``build/kenlm/bin``, then ``$PATH``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, overload

import numpy as np

from blockdraft.core.checks import is_int
from blockdraft.models.tokenizer import TokenizerInfo
from blockdraft.rescorers.base import RescorerError
from blockdraft.rescorers.ngram.lm import write_vocab_record


@dataclass(frozen=True)
class NgramTrainResult:
    """Files and figures of one ``lmplz`` run.

    Attributes:
        arpa: the ARPA file.
        binary: the KenLM binary (probing), or None when not built.
        order: n-gram order.
        counts: n-grams per order in the ARPA file (``counts[0]`` = unigrams).
        tokens: corpus tokens fed to lmplz.
        discount_fallback: whether ``--discount_fallback`` was needed.
        seconds: wall time of lmplz + build_binary.
        command: the lmplz command line, for signatures.
        vocab_record: ``<prefix>.vocab.json`` (the tokenizer's record), or None.
    """

    arpa: Path
    binary: Path | None
    order: int
    counts: tuple[int, ...]
    tokens: int
    discount_fallback: bool
    seconds: float
    command: str
    vocab_record: Path | None = None

    @property
    def num_ngrams(self) -> int:
        """Total n-grams of all orders."""
        return int(sum(self.counts))


def find_kenlm_tool(name: str, explicit: str | Path | None = None) -> Path:
    """Path of ``lmplz`` or ``build_binary`` (see the module docstring for the search order)."""
    candidates: list[Path] = []
    if explicit:
        candidates.append(Path(explicit))
    env = os.environ.get("BLOCKDRAFT_KENLM_BIN")
    if env:
        candidates.append(Path(env) / name)
    candidates.append(Path(sys.executable).parent / name)
    candidates.append(Path(__file__).resolve().parents[4] / "build" / "kenlm" / "bin" / name)
    on_path = shutil.which(name)
    if on_path:
        candidates.append(Path(on_path))
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    raise RescorerError(
        f"KenLM's {name} was not found (looked in {[str(c) for c in candidates]}); run "
        "`make setup` (scripts/build_kenlm.sh builds it) or pass its path"
    )


def arpa_counts(path: str | Path) -> tuple[int, ...]:
    """The n-gram counts of an ARPA file's ``\\data\\`` header."""
    counts: list[int] = []
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            m = re.match(r"ngram (\d+)=(\d+)", line.strip())
            if m:
                counts.append(int(m.group(2)))
            elif counts and line.strip().startswith("\\"):
                break
    if not counts:
        raise RescorerError(f"{path}: no ngram counts in the \\data\\ header; not an ARPA file?")
    return tuple(counts)


@overload
def write_corpus(sequences: Iterable[Sequence[int] | np.ndarray], path: str | Path) -> int: ...


@overload
def write_corpus(sequences: Iterable[Sequence[int] | np.ndarray], path: str | Path, *,
                 with_max: Literal[True]) -> tuple[int, int]: ...


def write_corpus(sequences: Iterable[Sequence[int] | np.ndarray], path: str | Path, *,
                 with_max: bool = False) -> int | tuple[int, int]:
    """Write token-id sequences as lmplz input (one line each); returns the token count (and
    with ``with_max`` the largest id, -1 when empty)."""
    n = 0
    top = -1
    with open(path, "w", encoding="ascii") as f:
        for seq in sequences:
            arr = np.asarray(seq, dtype=np.int64).reshape(-1)
            if arr.size == 0:
                continue
            if (arr < 0).any():
                raise RescorerError(f"corpus holds a negative token id: {int(arr[arr < 0][0])}")
            f.write(" ".join(map(str, arr.tolist())))
            f.write("\n")
            n += int(arr.size)
            top = max(top, int(arr.max()))
    return (n, top) if with_max else n


def train_ngram(
    sequences: Iterable[Sequence[int] | np.ndarray],
    out_prefix: str | Path,
    order: int = 4,
    *,
    prune: Sequence[int] | None = None,
    memory: str = "1G",
    binary: bool = True,
    lmplz: str | Path | None = None,
    build_binary: str | Path | None = None,
    tokenizer: TokenizerInfo | None = None,
) -> NgramTrainResult:
    """Train an order-``order`` Kneser-Ney LM over token ids.

    Args:
        sequences: token-id sequences (documents or lines).
        out_prefix: writes ``<out_prefix>.arpa`` and ``<out_prefix>.bin``.
        order: 2 to 5.
        prune: lmplz ``--prune`` thresholds, one per order (the first must be 0), e.g.
            ``(0, 0, 1, 1)`` drops singleton 3- and 4-grams.
        memory: lmplz ``-S`` cap (e.g. ``"1G"`` or ``"20%"``).
        binary: also build the KenLM probing binary.
        tokenizer: the tokenizer the ids came from (``tok.info(name)``), recorded in
            ``<out_prefix>.vocab.json`` for :meth:`NgramLM.check_vocab`; an old record there
            is removed when None.

    Raises:
        RescorerError: bad order or pruning, empty corpus, lmplz/build_binary failures (with
            their stderr), ids outside the tokenizer's vocabulary.
    """
    if not is_int(order) or not 2 <= order <= 5:
        raise RescorerError(f"order must be an integer from 2 to 5, got {order!r}")
    order = int(order)
    if prune is not None:
        prune = [int(x) for x in prune]
        if len(prune) > order or prune[0] != 0 or any(x < 0 for x in prune):
            raise RescorerError(
                f"prune needs at most {order} thresholds >= 0 starting with 0 (unigrams are "
                f"never pruned), got {prune}"
            )
        if any(b < a for a, b in zip(prune, prune[1:], strict=False)):
            raise RescorerError(f"prune thresholds must be non-decreasing, got {prune}")
    out_prefix = Path(out_prefix)
    out_prefix.parent.mkdir(parents=True, exist_ok=True)
    lmplz_path = find_kenlm_tool("lmplz", lmplz)
    arpa = out_prefix.with_name(out_prefix.name + ".arpa")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=out_prefix.parent, prefix=".lmplz-") as tmp:
        corpus = Path(tmp) / "corpus.txt"
        n_tokens, max_id = write_corpus(sequences, corpus, with_max=True)
        if n_tokens == 0:
            raise RescorerError("the corpus is empty: nothing to train an n-gram LM on")
        if tokenizer is not None and max_id >= tokenizer.vocab_size:
            raise RescorerError(
                f"the corpus holds token id {max_id}, outside the vocabulary of the tokenizer "
                f"{tokenizer.name or ''} (V = {tokenizer.vocab_size})"
            )
        cmd = [str(lmplz_path), "-o", str(order), "-S", memory, "-T", tmp, "--arpa", str(arpa)]
        if prune:
            cmd += ["--prune", *map(str, prune)]
        fallback = False
        proc = _run(cmd, corpus)
        if proc.returncode != 0 and "discount_fallback" in proc.stderr:
            fallback = True
            cmd = cmd + ["--discount_fallback"]
            proc = _run(cmd, corpus)
        if proc.returncode != 0:
            raise RescorerError(
                f"lmplz failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}"
            )
    bin_path: Path | None = None
    if binary:
        bb = find_kenlm_tool("build_binary", build_binary)
        bin_path = out_prefix.with_name(out_prefix.name + ".bin")
        proc = subprocess.run(
            [str(bb), "-S", memory, str(arpa), str(bin_path)],
            capture_output=True, text=True, check=False,
        )
        if proc.returncode != 0:
            raise RescorerError(f"build_binary failed: {proc.stderr.strip()[-2000:]}")
    record = write_vocab_record(out_prefix, tokenizer)
    return NgramTrainResult(
        arpa=arpa,
        binary=bin_path,
        order=order,
        counts=arpa_counts(arpa),
        tokens=n_tokens,
        discount_fallback=fallback,
        seconds=time.perf_counter() - t0,
        command=" ".join(Path(cmd[0]).name if i == 0 else c for i, c in enumerate(cmd)),
        vocab_record=record,
    )


def _run(cmd: list[str], stdin_path: Path) -> subprocess.CompletedProcess[str]:
    with open(stdin_path, "rb") as f:
        return subprocess.run(cmd, stdin=f, capture_output=True, text=True, check=False)
