"""Global n-gram rescoring: `NgramLM` (KenLM over token ids), `NgramRescorer` (exact p-best
search or WFST composition, optionally interpolated with a `ContextLM`, the n-gram counts of the
committed text), `NgramPathScorer` (the LM scoring token-tree paths, one lookup per child),
`train_ngram` (modified Kneser-Ney, built in or lmplz) and `interpolate_arpa` (two LMs mixed
into one ARPA back-off LM)."""

from blockdraft.rescorers.ngram.context import ContextLM
from blockdraft.rescorers.ngram.interpolate import InterpolationResult, interpolate_arpa
from blockdraft.rescorers.ngram.lm import NgramLM, read_vocab_mapping
from blockdraft.rescorers.ngram.path_scorer import NgramPathScorer
from blockdraft.rescorers.ngram.records import read_vocab_record, vocab_record_path
from blockdraft.rescorers.ngram.rescorer import BACKENDS, NgramRescorer, SearchStats
from blockdraft.rescorers.ngram.train import NgramTrainResult, find_kenlm_tool, train_ngram

__all__ = [
    "BACKENDS",
    "ContextLM",
    "InterpolationResult",
    "NgramLM",
    "NgramPathScorer",
    "NgramRescorer",
    "NgramTrainResult",
    "SearchStats",
    "find_kenlm_tool",
    "interpolate_arpa",
    "read_vocab_mapping",
    "read_vocab_record",
    "train_ngram",
    "vocab_record_path",
]
