"""Global n-gram rescoring: `NgramLM` (KenLM over token ids), `NgramRescorer` (exact p-best
search or WFST composition, optionally interpolated with a `ContextLM`, the n-gram counts of the
committed text), `NgramPathScorer` (the LM scoring token-tree paths, one lookup per child),
`NgramTable` (the LM as sorted arrays: a whole tree scored in a few gathers, on any device).

Training an LM (`train_ngram`, `interpolate_arpa`, `find_kenlm_tool`, ...) is the training
room's: :mod:`blockdraft.training.ngram`. Their old names here (and the old modules ``train``,
``estimate``, ``interpolate``) raise an ImportError naming the new path."""

from typing import Any

from blockdraft.rescorers.ngram._moved import MOVED, moved_error
from blockdraft.rescorers.ngram.context import ContextLM
from blockdraft.rescorers.ngram.lm import NgramLM, read_vocab_mapping
from blockdraft.rescorers.ngram.path_scorer import NgramPathScorer
from blockdraft.rescorers.ngram.records import read_vocab_record, vocab_record_path
from blockdraft.rescorers.ngram.rescorer import BACKENDS, NgramRescorer, SearchStats
from blockdraft.rescorers.ngram.table import NgramTable

__all__ = [
    "BACKENDS",
    "ContextLM",
    "NgramLM",
    "NgramPathScorer",
    "NgramRescorer",
    "NgramTable",
    "SearchStats",
    "read_vocab_mapping",
    "read_vocab_record",
    "vocab_record_path",
]


def __getattr__(name: str) -> Any:
    # n-gram training moved to blockdraft.training.ngram, a later room: say where, never import
    if name in MOVED:
        raise moved_error(name)
    raise AttributeError(f"module 'blockdraft.rescorers.ngram' has no attribute {name!r}")
