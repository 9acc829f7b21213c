"""The verify room: acceptance criteria, the batched verifier and the BPD decode loop.

    decode(model, prompt_ids, ...) -> DecodeResult      predict -> verify -> accept
    Verifier(model, criterion).verify(past, drafts)     p drafts in one batched forward
    TreeVerifier(model, criterion).verify_tree(past, tree)   a token tree in one forward
    Criterion                                           exact (lossless), topk, distance,
                                                        min_block, gadpp, typical
"""

from blockdraft.verify.criteria import CRITERIA, Criterion, VerifyError
from blockdraft.verify.decode import DecodeResult, DecodeStep, Drafter, accept, decode, predict
from blockdraft.verify.tree import TreeOutcome, TreeVerifier, tree_accepted, tree_winner
from blockdraft.verify.verifier import HeadsModel, Verifier, VerifyOutcome

__all__ = [
    "CRITERIA",
    "Criterion",
    "DecodeResult",
    "DecodeStep",
    "Drafter",
    "HeadsModel",
    "TreeOutcome",
    "TreeVerifier",
    "Verifier",
    "VerifyError",
    "VerifyOutcome",
    "accept",
    "decode",
    "predict",
    "tree_accepted",
    "tree_winner",
]
