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

The parts, one module each: the n-gram keys (:mod:`.keys`), a model as key tables read from
and written to ARPA (:mod:`.tables`), the maths of the mixture and its back-off weights
(:mod:`.mixture`), the progress bars (:mod:`.progress`); this module checks the inputs, runs
the merge and writes its files.

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
probability or back-off weight of 0 is written as ``-99``
(:data:`~blockdraft.training.ngram.tables.LOG10_ZERO`), the ARPA convention for "never".

Cost: both inputs and the merged model are held as numpy arrays: each n-gram as a key of 4
bytes a word (:mod:`.keys`: exact, sorted, found by binary search) and its float64 values.
Two LMs of 2.6M and 5.5M n-grams (orders 5 and 4) merge into 8.0M n-grams in under a minute
on one busy core at 0.8 GB resident at the peak, half of the time reading the ARPA text.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from blockdraft.core.digest import sha256_file
from blockdraft.core.files import new_temporary_directory, replace_together, write_text_atomic
from blockdraft.core.version import __version__
from blockdraft.models.tokenizer import TokenizerInfo
from blockdraft.rescorers.base import RescorerError
from blockdraft.rescorers.ngram.arpa import arpa_header
from blockdraft.rescorers.ngram.lm import is_arpa
from blockdraft.rescorers.ngram.records import (
    read_vocab_record,
    vocab_record_path,
    write_fingerprint,
    write_vocab_record,
)
from blockdraft.training.ngram.keys import add_missing, key_part, sorted_distinct
from blockdraft.training.ngram.mixture import backoffs, mixed_ln_probs
from blockdraft.training.ngram.progress import stage_bars
from blockdraft.training.ngram.tables import read_tables, write_tables
from blockdraft.training.ngram.train import LM_SUFFIXES, binary_writer

MIXTURE_SUFFIX = ".mixture.json"
"""``PREFIX.mixture.json``: what was mixed (the inputs' paths and SHA-256, the weight)."""
INTERPOLATE_SUFFIXES = (*LM_SUFFIXES, MIXTURE_SUFFIX)
"""What :func:`interpolate_arpa` writes beside a prefix: ``ngram train``'s files (ARPA, binary,
tokenizer record, fingerprint of the pair) and the record of the mixture."""


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
    with stage_bars(progress) as bars:
        model_a = read_tables(a, bars)
        model_b = read_tables(b, bars)
        top = max(len(model_a), len(model_b))
        tick = bars.stage("listing the union", 3 * top - 2)
        keys = []
        for n in range(1, top + 1):
            keys.append(sorted_distinct(np.concatenate(
                [m[n - 1].keys for m in (model_a, model_b) if n <= len(m)])))
            tick(len(keys))
        added, done = [0] * top, top
        for start, stop in ((1, 0), (0, -1)):  # suffixes first, then prefixes
            for n in range(top, 1, -1):
                keys[n - 2], k = add_missing(keys[n - 2], key_part(keys[n - 1], n, start, n + stop))
                added[n - 2] += k
                done += 1
                tick(done)
        ln_prob = mixed_ln_probs(model_a, model_b, keys, lam, bars)
        del model_a, model_b
        tick = bars.stage("back-off weights", top - 1)
        ln_backoff = []
        for n in range(1, top):
            ln_backoff.append(backoffs(keys[n - 1], ln_prob[n - 1], keys[n], ln_prob[n], n))
            tick(n)
        tmp = new_temporary_directory(out_prefix)
        try:
            staged = tmp / out_prefix.name
            arpa, bin_path, _, _, record = output_files(staged)
            write_tables(arpa, keys, ln_prob, ln_backoff, bars)
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
