"""The verify room: acceptance criteria, the verifier, the step engine and the BPD decode loop.

    decode(model, prompt_ids, drafter=None, ...) -> DecodeResult   predict -> verify -> accept
    run(drafter, steps, prompt, ...)                  the step engine (online and offline)
    Verifier(model, criterion)                        one forward per step:
        .verify_tree(past, tree)                      a token tree
        .verify(past, drafts)                         p drafts, as their trie
    tree_accepted, tree_winner                        the verdict on a tree (acceptance)
    Criterion                                         exact (lossless), topk, distance,
                                                      min_block, gadpp, typical
"""

from blockdraft.core.moved import moved_getattr
from blockdraft.verify.acceptance import tree_accepted, tree_winner
from blockdraft.verify.criteria import CRITERIA, Criterion
from blockdraft.verify.decode import DecodeResult, DecodeStep, decode
from blockdraft.verify.engine import Steps, Verdict, accept, run
from blockdraft.verify.errors import VerifyError
from blockdraft.verify.verifier import HeadsModel, Verifier, VerifyOutcome

__all__ = [
    "CRITERIA",
    "Criterion",
    "DecodeResult",
    "DecodeStep",
    "HeadsModel",
    "Steps",
    "Verdict",
    "Verifier",
    "VerifyError",
    "VerifyOutcome",
    "accept",
    "decode",
    "run",
    "tree_accepted",
    "tree_winner",
]

__getattr__ = moved_getattr("blockdraft.verify", {
    "predict": ("drafter.draft(StepView(lattice, context)) with "
                "blockdraft.lattice.step.head_lattice(head_logits, k)",
                "a drafter has one call, on a step view"),
    "Drafter": ("blockdraft.drafts.Drafter", "the drafting room declares the protocol"),
})

