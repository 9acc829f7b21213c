"""n-gram LM training: the LMs the n-gram rescorers read, made from token ids.

    train        ``train_ngram``: modified Kneser-Ney over token ids (the built-in estimator or
                 KenLM's lmplz), the ARPA file, the KenLM binary, the tokenizer record and the
                 fingerprint of the pair; KenLM's tools (``find_kenlm_tool``, ``binary_writer``)
    estimate     ``estimate_kneser_ney``: lmplz's estimate in numpy, in memory, as ARPA
    interpolate  ``interpolate_arpa``: two LMs mixed into one ARPA back-off LM (SRILM's static
                 interpolation), built from keys (n-gram keys), tables (a model as key tables,
                 ARPA in and out), mixture (the maths) and progress (its bars)

Reading and using an LM (ARPA reading, ``NgramLM``, the rescorers, the records beside an LM,
the native search) is the rescorers' room: :mod:`blockdraft.rescorers.ngram`. This room
imports it, never the reverse. The command: ``blockdraft ngram train|interpolate``.

Public surface:
    train_ngram(sequences, out_prefix, order=4, ...) -> NgramTrainResult
    NgramTrainResult, ESTIMATORS, LM_SUFFIXES
    find_kenlm_tool(name, explicit=None) -> Path;  binary_writer(build_binary=None) -> BinaryWriter
    estimate_kneser_ney(sequences, order, prune=None) -> KneserNeyLM
    interpolate_arpa(a, b, weight, out_prefix, ...) -> InterpolationResult
    InterpolationResult, INTERPOLATE_SUFFIXES
"""

from blockdraft.training.ngram.estimate import KneserNeyLM, estimate_kneser_ney
from blockdraft.training.ngram.interpolate import (
    INTERPOLATE_SUFFIXES,
    InterpolationResult,
    interpolate_arpa,
)
from blockdraft.training.ngram.train import (
    ESTIMATORS,
    LM_SUFFIXES,
    BinaryWriter,
    NgramTrainResult,
    binary_writer,
    find_kenlm_tool,
    train_ngram,
)

__all__ = [
    "ESTIMATORS",
    "INTERPOLATE_SUFFIXES",
    "LM_SUFFIXES",
    "BinaryWriter",
    "InterpolationResult",
    "KneserNeyLM",
    "NgramTrainResult",
    "binary_writer",
    "estimate_kneser_ney",
    "find_kenlm_tool",
    "interpolate_arpa",
    "train_ngram",
]
