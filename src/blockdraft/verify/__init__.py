"""The verify room: acceptance criteria, the verifier and the BPD decode loop.

    decode(model, prompt_ids, ...) -> DecodeResult      predict -> verify -> accept
    Verifier(model, criterion)                          one forward per step:
        .verify_tree(past, tree)                        a token tree
        .verify(past, drafts)                           p drafts, as their trie
    tree_accepted, tree_winner                          the verdict on a tree (acceptance)
    Criterion                                           exact (lossless), topk, distance,
                                                        min_block, gadpp, typical
"""

from blockdraft.verify.acceptance import tree_accepted, tree_winner
from blockdraft.verify.criteria import CRITERIA, Criterion
from blockdraft.verify.decode import DecodeResult, DecodeStep, Drafter, accept, decode, predict
from blockdraft.verify.errors import VerifyError
from blockdraft.verify.verifier import HeadsModel, Verifier, VerifyOutcome

__all__ = [
    "CRITERIA",
    "Criterion",
    "DecodeResult",
    "DecodeStep",
    "Drafter",
    "HeadsModel",
    "Verifier",
    "VerifyError",
    "VerifyOutcome",
    "accept",
    "decode",
    "predict",
    "tree_accepted",
    "tree_winner",
]
