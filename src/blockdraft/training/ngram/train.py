"""Train n-gram LMs over token ids: modified Kneser-Ney, as ARPA and KenLM binary.

The corpus is a sequence of token-id sequences (one per document or line); the LM's words are
token ids as decimal strings (the convention of :class:`~blockdraft.rescorers.ngram.lm.NgramLM`).

Two estimators give the same model (equal up to float rounding, tested):

- ``"builtin"`` (the default): :mod:`~blockdraft.training.ngram.estimate`, lmplz's estimate
  in numpy, in memory; nothing to install, the same LM on every machine.
- ``"lmplz"``: KenLM's ``lmplz`` (``make setup`` builds it; it needs boost), which sorts on disk:
  for corpora too large for memory. It runs with an explicit memory cap (``-S``, default ``1G``:
  without it lmplz reserves most of the machine's memory up front). On corpora too small for
  Kneser-Ney discount estimation lmplz fails; it is then rerun with ``--discount_fallback`` (the
  built-in estimator takes the same fallback discounts) and the result says so.

The KenLM binary (probing) is written by the native library's writer (KenLM's own code,
byte for byte ``build_binary``'s output) or, where the library is missing or a
``build_binary`` path is given, by the ``build_binary`` tool (:func:`binary_writer`).

Everything is written in a temporary folder beside the output (``.lmplz-<pid>-*``), and
``PREFIX.arpa``/``PREFIX.bin`` are renamed into place only when both succeeded, so a failed or
interrupted run leaves the old files as they were. Ctrl-C or SIGTERM kills a running tool and
removes the folder; on Linux the tool also dies with a Python killed outright, whose folder the
next run removes.

With ``tokenizer=`` (a :class:`~blockdraft.models.TokenizerInfo`), the tokenizer the ids came
from is recorded beside the LM in ``<prefix>.vocab.json``; :meth:`NgramLM.check_vocab` then
refuses the LM for a model with another tokenizer (blockdraft's BPE or a Hugging Face model's).
``<prefix>.fingerprint.json`` records the ARPA/binary pair built together (order, counts, both
files' SHA-256); :class:`NgramLM` refuses a binary whose ``<prefix>.arpa`` is not its pair.

KenLM's executables are found in this order: the ``lmplz``/``build_binary`` arguments,
``$BLOCKDRAFT_KENLM_BIN``, the directory of the running Python (``make setup`` links them into
``.venv/bin``), the repository's ``build/kenlm/bin``, then ``$PATH``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, overload

import numpy as np

from blockdraft.core.checks import is_int
from blockdraft.core.files import pid_alive
from blockdraft.models.tokenizer import TokenizerInfo
from blockdraft.rescorers.base import RescorerError
from blockdraft.rescorers.ngram import native
from blockdraft.rescorers.ngram.arpa import arpa_header
from blockdraft.rescorers.ngram.records import (
    FINGERPRINT_SUFFIX,
    VOCAB_RECORD_SUFFIX,
    write_fingerprint,
    write_vocab_record,
)
from blockdraft.training.ngram.estimate import estimate_kneser_ney

ESTIMATORS = ("builtin", "lmplz")
"""What :func:`train_ngram` estimates with (the module docstring says how they differ)."""

LM_SUFFIXES = (".arpa", ".bin", VOCAB_RECORD_SUFFIX, FINGERPRINT_SUFFIX)
"""What :func:`train_ngram` writes beside a prefix: the ARPA file, the binary, the tokenizer
record and the fingerprint of the pair."""


def output_files(out_prefix: str | Path) -> tuple[Path, ...]:
    """The files :func:`train_ngram` may write for ``out_prefix`` (``lm4`` -> ``lm4.arpa``,
    ``lm4.bin``, ``lm4.vocab.json``, ``lm4.fingerprint.json``), in that order."""
    prefix = Path(out_prefix)
    return tuple(prefix.with_name(prefix.name + suffix) for suffix in LM_SUFFIXES)


@dataclass(frozen=True)
class NgramTrainResult:
    """Files and figures of one training run.

    Attributes:
        arpa: the ARPA file.
        binary: the KenLM binary (probing), or None when not built.
        order: n-gram order.
        counts: n-grams per order in the ARPA file (``counts[0]`` = unigrams).
        tokens: corpus tokens fed to lmplz.
        discount_fallback: whether fallback discounts were needed (lmplz's
            ``--discount_fallback``).
        seconds: wall time of the estimate and the binary.
        command: the estimator's command line (lmplz's, or the built-in's equivalent), for
            signatures.
        vocab_record: ``<prefix>.vocab.json`` (the tokenizer's record), or None.
        estimator: ``"builtin"`` or ``"lmplz"``.
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
    estimator: str = "builtin"

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
        + (" (or use the built-in estimator, the default)" if name == "lmplz" else "")
    )


@dataclass(frozen=True)
class BinaryWriter:
    """What writes KenLM probing binaries (:func:`binary_writer`).

    Attributes:
        tool: the ``build_binary`` executable, or None for the native library's writer.
    """

    tool: Path | None

    @property
    def name(self) -> str:
        """``"native"`` or ``"build_binary"``."""
        return "native" if self.tool is None else "build_binary"

    def write(self, arpa: Path, out: Path, memory: str = "1G") -> None:
        """Write the binary of ``arpa`` at ``out`` (``memory``: ``build_binary -S``).

        Raises:
            RescorerError: KenLM refused the file (``build_binary failed: <its stderr>``).
        """
        if self.tool is None:
            native.write_binary(arpa, out)
            return
        proc = _run([str(self.tool), "-S", memory, str(arpa), str(out)], None)
        if proc.returncode != 0:
            raise RescorerError(f"build_binary failed: {proc.stderr.strip()[-2000:]}")


def binary_writer(build_binary: str | Path | None = None) -> BinaryWriter:
    """The native library's writer (KenLM's own code, the output of ``build_binary`` byte for
    byte), unless a ``build_binary`` path is given or the library is missing: then the tool,
    found by :func:`find_kenlm_tool`.

    Raises:
        RescorerError: neither is there.
    """
    if build_binary is None and native.can_write_binary():
        return BinaryWriter(None)
    return BinaryWriter(find_kenlm_tool("build_binary", build_binary))


def arpa_counts(path: str | Path) -> tuple[int, ...]:
    """The n-gram counts of an ARPA file's ``\\data\\`` header."""
    return arpa_header(path)


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
        for arr in _checked(sequences):  # streamed: a corpus is never held whole
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
    estimator: str = "builtin",
    lmplz: str | Path | None = None,
    build_binary: str | Path | None = None,
    tokenizer: TokenizerInfo | None = None,
) -> NgramTrainResult:
    """Train an order-``order`` modified Kneser-Ney LM over token ids.

    Args:
        sequences: token-id sequences (documents or lines; empty ones are skipped).
        out_prefix: writes ``<out_prefix>.arpa`` and ``<out_prefix>.bin``.
        order: 2 to 5.
        prune: lmplz ``--prune`` thresholds, one per order (the first must be 0), e.g.
            ``(0, 0, 1, 1)`` drops singleton 3- and 4-grams (both estimators).
        memory: lmplz and build_binary ``-S`` cap (e.g. ``"1G"`` or ``"20%"``); the built-in
            estimator and the native binary writer do not use it.
        binary: also write the KenLM probing binary (:func:`binary_writer`).
        estimator: ``"builtin"`` (default) or ``"lmplz"`` (module docstring).
        lmplz, build_binary: paths of KenLM's tools (else found by :func:`find_kenlm_tool`;
            ``build_binary`` only where the native writer is missing, or when given).
        tokenizer: the tokenizer the ids came from (``tok.info(name)``), recorded in
            ``<out_prefix>.vocab.json`` for :meth:`NgramLM.check_vocab`; an old record there
            is removed when None.

    Raises:
        RescorerError: bad order, pruning or estimator, empty corpus, a negative id, ids
            outside the tokenizer's vocabulary, a missing tool, lmplz/build_binary failures
            (with their stderr).
    """
    if not is_int(order) or not 2 <= order <= 5:
        raise RescorerError(f"order must be an integer from 2 to 5, got {order!r}")
    order = int(order)
    if estimator not in ESTIMATORS:
        raise RescorerError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
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
    lmplz_path = find_kenlm_tool("lmplz", lmplz) if estimator == "lmplz" else None
    writer = binary_writer(build_binary) if binary else None
    arpa, binary_path = output_files(out_prefix)[:2]
    bin_path = binary_path if binary else None
    t0 = time.perf_counter()
    _sweep_stale_temporaries(out_prefix.parent)
    # Everything is written inside a temporary folder beside the output and renamed into
    # place only once the ARPA file and the binary both succeeded: a failure, Ctrl-C or
    # SIGTERM leaves the old PREFIX.arpa / PREFIX.bin byte for byte as they were.
    tmp = Path(tempfile.mkdtemp(dir=out_prefix.parent, prefix=f"{_TMP_PREFIX}{os.getpid()}-"))
    try:
        tmp_arpa = tmp / "lm.arpa"
        if lmplz_path is None:
            seqs = _checked_sequences(sequences)
            n_tokens = int(sum(s.size for s in seqs))
            max_id = max((int(s.max()) for s in seqs), default=-1)
        else:
            corpus = tmp / "corpus.txt"
            n_tokens, max_id = write_corpus(sequences, corpus, with_max=True)
        if n_tokens == 0:
            raise RescorerError("the corpus is empty: nothing to train an n-gram LM on")
        if tokenizer is not None and max_id >= tokenizer.vocab_size:
            raise RescorerError(
                f"the corpus holds token id {max_id}, outside the vocabulary of the tokenizer "
                f"{tokenizer.name or ''} (V = {tokenizer.vocab_size})"
            )
        if lmplz_path is None:
            model = estimate_kneser_ney(seqs, order, prune)
            model.write_arpa(tmp_arpa)
            fallback = model.discount_fallback
            command = (f"blockdraft-kneser-ney -o {order}"
                       + (f" --prune {' '.join(map(str, prune))}" if prune else "")
                       + (" --discount_fallback" if fallback else ""))
        else:
            fallback, command = _run_lmplz(lmplz_path, corpus, tmp_arpa, order, prune, memory,
                                           tmp, arpa)
        counts = arpa_counts(tmp_arpa)
        tmp_bin = tmp / "lm.bin"
        if writer is not None:
            try:
                writer.write(tmp_arpa, tmp_bin, memory)
            except RescorerError as e:
                raise RescorerError(f"{e}; {arpa} was left as it was") from e
        # Both complete: each is renamed into place (a rename replaces a file whole).
        if bin_path is not None:
            os.replace(tmp_bin, bin_path)
        os.replace(tmp_arpa, arpa)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    record = write_vocab_record(out_prefix, tokenizer)
    write_fingerprint(out_prefix, arpa, bin_path, counts)
    return NgramTrainResult(
        arpa=arpa,
        binary=bin_path,
        order=order,
        counts=counts,
        tokens=n_tokens,
        discount_fallback=fallback,
        seconds=time.perf_counter() - t0,
        command=command,
        vocab_record=record,
        estimator=estimator,
    )


def _checked(sequences: Iterable[Sequence[int] | np.ndarray]) -> Iterator[np.ndarray]:
    """The non-empty sequences as flat int64 arrays, one at a time; a negative id is
    refused."""
    for seq in sequences:
        arr = np.asarray(seq, dtype=np.int64).reshape(-1)
        if arr.size == 0:
            continue
        if (arr < 0).any():
            raise RescorerError(f"corpus holds a negative token id: {int(arr[arr < 0][0])}")
        yield arr


def _checked_sequences(sequences: Iterable[Sequence[int] | np.ndarray]) -> list[np.ndarray]:
    """The non-empty sequences as flat int64 arrays (all of them); a negative id is refused."""
    return list(_checked(sequences))


def _run_lmplz(lmplz: Path, corpus: Path, out: Path, order: int, prune: Sequence[int] | None,
               memory: str, tmp: Path, final: Path) -> tuple[bool, str]:
    """lmplz over ``corpus`` into ``out`` (rerun with ``--discount_fallback`` when it asks for
    it); returns ``(fallback needed, the command line for signatures)``."""
    sort_dir = tmp / "sort"
    sort_dir.mkdir()
    cmd = [str(lmplz), "-o", str(order), "-S", memory, "-T", str(sort_dir), "--arpa", str(out)]
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
            f"lmplz failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}; "
            f"{final} was left as it was"
        )
    return fallback, " ".join(Path(cmd[0]).name if i == 0 else c for i, c in enumerate(cmd))


_TMP_PREFIX = ".lmplz-"


def _sweep_stale_temporaries(folder: Path) -> None:
    """Remove ``.lmplz-<pid>-*`` folders left by a run that was killed outright (SIGKILL, power
    loss): their process no longer exists, so nothing else can be using them."""
    for d in folder.glob(f"{_TMP_PREFIX}*"):
        m = re.match(re.escape(_TMP_PREFIX) + r"(\d+)-", d.name)
        if m and d.is_dir() and not pid_alive(int(m.group(1))):
            shutil.rmtree(d, ignore_errors=True)


def _death_signal_setter() -> Any:
    """Linux: a ``preexec_fn`` making the child get SIGKILL when the Python that started it
    dies, even by SIGKILL (``prctl(PR_SET_PDEATHSIG)``); None elsewhere. libc is looked up
    here, in the parent: the child between fork and exec must not import anything."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def set_death_signal() -> None:  # pragma: no cover - runs in the child
        prctl(1, int(signal.SIGKILL))  # 1 = PR_SET_PDEATHSIG

    return set_death_signal


class _Terminated(BaseException):
    """SIGTERM while a KenLM tool runs (turned into an exception so ``finally`` cleans up)."""


def _run(cmd: list[str], stdin_path: Path | None) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` to completion; on Ctrl-C, SIGTERM or any error the child is killed and
    waited for before the exception goes on (no orphaned lmplz keeps writing)."""
    main_thread = threading.current_thread() is threading.main_thread()
    old_handler: Any = None
    if main_thread:
        def on_term(signum: int, frame: Any) -> None:
            raise _Terminated()

        old_handler = signal.signal(signal.SIGTERM, on_term)
    stdin = open(stdin_path, "rb") if stdin_path is not None else subprocess.DEVNULL
    try:
        proc = subprocess.Popen(
            cmd, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=_death_signal_setter(),
        )
        try:
            out, err = proc.communicate()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    except _Terminated:
        raise KeyboardInterrupt("terminated (SIGTERM)") from None
    finally:
        if stdin is not subprocess.DEVNULL:
            stdin.close()  # type: ignore[union-attr]
        if main_thread:
            signal.signal(signal.SIGTERM, old_handler)
