"""Global n-gram rescoring: `NgramLM` (KenLM over token ids), `NgramRescorer` (exact p-best
search or WFST composition, optionally interpolated with a `ContextLM`, the n-gram counts of the
committed text), `NgramPathScorer` (the LM scoring token-tree paths, one lookup per child) and
`train_ngram` (lmplz + build_binary)."""

from blockdraft.rescorers.ngram.context import ContextLM
from blockdraft.rescorers.ngram.lm import (
    NgramLM,
    read_vocab_mapping,
    read_vocab_record,
    vocab_record_path,
)
from blockdraft.rescorers.ngram.path_scorer import NgramPathScorer
from blockdraft.rescorers.ngram.rescorer import BACKENDS, NgramRescorer, SearchStats
from blockdraft.rescorers.ngram.train import NgramTrainResult, find_kenlm_tool, train_ngram

__all__ = [
    "BACKENDS",
    "ContextLM",
    "NgramLM",
    "NgramPathScorer",
    "NgramRescorer",
    "NgramTrainResult",
    "SearchStats",
    "find_kenlm_tool",
    "read_vocab_mapping",
    "read_vocab_record",
    "train_ngram",
    "vocab_record_path",
]
