"""The verify room: acceptance criteria, the batched verifier and the BPD decode loop.

    decode(model, prompt_ids, ...) -> DecodeResult      predict -> verify -> accept
    Verifier(model, criterion).verify(past, drafts)     p drafts in one batched forward
    Criterion                                           exact (lossless), topk, distance,
                                                        min_block, gadpp, typical
"""

from blockdraft.verify.criteria import CRITERIA, Criterion, VerifyError
from blockdraft.verify.decode import DecodeResult, DecodeStep, Drafter, accept, decode, predict
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
]
