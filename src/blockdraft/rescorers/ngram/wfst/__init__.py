"""WFST backend of global n-gram rescoring (Kim et al. 2024, sec. 6.3 and 7.2).

The lattice is composed with the n-gram LM as an OpenFst WFST; the ``p`` cheapest distinct
strings of the result are the drafts. One module per concept:

    :mod:`.openfst`    the lazy ``pywrapfst`` import, token labels and the ``<unk>`` label
    :mod:`.history`    LM histories: word codes, their hashing, the history -> state map
    :mod:`.compiler`   ARPA -> WFST (the LM's layout as an FST)
    :mod:`.cache`      the on-disk cache of compiled LMs
    :mod:`.rescorer`   the rescorer (composition, p shortest paths; how it differs from the
                       exact backend)
    :mod:`.context`    the context LM here: the n-best list re-ranked with the interpolated
                       LM (approximate)

Public surface (all importable from here):
    arpa_to_fst(arpa_path) -> pywrapfst.VectorFst
        the LM as a tropical WFST over token labels; start state = ``<s>``.
    build_ngram_wfst(arpa_path) -> NgramWfst
        that FST plus its :class:`ContextStates` (history -> state map), built from the file.
    load_ngram_wfst(arpa_path, cache_dir=None) -> NgramWfst
        :func:`build_ngram_wfst` through an on-disk cache keyed by the file's path, size, mtime.
    default_cache_dir() -> Path
        ``$BLOCKDRAFT_CACHE/wfst``, else ``~/.cache/blockdraft/wfst``.
    ContextStates
        ``.lookup(context) -> state``: the state the LM is in after a committed prefix.
    WfstRescorer(fst, alpha=1.0, context_states=None, unknown="unk")
    WfstRescorer.from_arpa(path, alpha=1.0, cache_dir=None, unknown="unk")
        ``.rescore(lattice, context, p) -> DraftBatch`` (the Rescorer protocol, source
        ``"ngram-wfst"``), for the ARPA LM or any tropical WFST over token labels.
    nbest_size(p) -> int, rerank_nbest(wfst, lattice, ctx, p, lm_scores) -> DraftBatch
        the context LM on this backend: the WFST's ``max(4 p, 16)`` best drafts re-scored
        exactly with the interpolated LM and re-ranked (:mod:`.context`).
    agreement(exact_batch, wfst_batch) -> bool
        True when two batches hold the same token rows in the same order (defined in
        :mod:`blockdraft.rescorers.base`).

Labels and weights (shared with :mod:`blockdraft.lattice.fst`): token id ``t`` is OpenFst
label ``t + LABEL_OFFSET`` = ``t + 1`` (label 0 is epsilon). Weights are tropical costs
``-ln p`` in nats: the ARPA file's log10 values are multiplied by ``-ln 10`` exactly once, in
:mod:`.compiler`.
"""

from blockdraft.rescorers.base import agreement
from blockdraft.rescorers.ngram.wfst.cache import CACHE_FORMAT, default_cache_dir, load_ngram_wfst
from blockdraft.rescorers.ngram.wfst.compiler import (
    KENLM_MISSING_UNK_LOG10,
    LN10,
    NgramWfst,
    arpa_to_fst,
    build_ngram_wfst,
)
from blockdraft.rescorers.ngram.wfst.context import nbest_size, rerank_nbest
from blockdraft.rescorers.ngram.wfst.history import BOS_CODE, EOS_CODE, UNK_CODE, ContextStates
from blockdraft.rescorers.ngram.wfst.openfst import MAX_TOKEN_ID, UNK_LABEL
from blockdraft.rescorers.ngram.wfst.rescorer import WfstRescorer

__all__ = [
    "BOS_CODE",
    "CACHE_FORMAT",
    "EOS_CODE",
    "KENLM_MISSING_UNK_LOG10",
    "LN10",
    "MAX_TOKEN_ID",
    "UNK_CODE",
    "UNK_LABEL",
    "ContextStates",
    "NgramWfst",
    "WfstRescorer",
    "agreement",
    "arpa_to_fst",
    "build_ngram_wfst",
    "default_cache_dir",
    "load_ngram_wfst",
    "nbest_size",
    "rerank_nbest",
]
