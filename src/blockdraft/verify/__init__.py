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

from importlib import import_module
from typing import TYPE_CHECKING, Any

from blockdraft.core.moved import moved_error
from blockdraft.verify.decode import decode  # the function; its module imports torch lazily

if TYPE_CHECKING:
    from blockdraft.verify.acceptance import tree_accepted, tree_winner
    from blockdraft.verify.criteria import CRITERIA, Criterion
    from blockdraft.verify.decode import DecodeResult, DecodeStep
    from blockdraft.verify.engine import Steps, Verdict, accept, run
    from blockdraft.verify.errors import VerifyError
    from blockdraft.verify.verifier import HeadsModel, Verifier, VerifyOutcome

_WHERE = {
    "tree_accepted": "acceptance", "tree_winner": "acceptance", "CRITERIA": "criteria",
    "Criterion": "criteria", "DecodeResult": "decode", "DecodeStep": "decode",
    "Steps": "engine", "Verdict": "engine", "accept": "engine", "run": "engine",
    "VerifyError": "errors", "HeadsModel": "verifier", "Verifier": "verifier",
    "VerifyOutcome": "verifier",
}
"""Each public name's module, imported at the first use (PEP 562): the offline simulator reads
the verdict's walk and the step engine (numpy) without importing torch."""
_MOVED = {
    "predict": ("drafter.draft(StepView(lattice, context)) with "
                "blockdraft.lattice.step.head_lattice(head_logits, k)",
                "a drafter has one call, on a step view"),
    "Drafter": ("blockdraft.drafts.Drafter", "the drafting room declares the protocol"),
}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        new, why = _MOVED[name]
        raise moved_error(f"blockdraft.verify.{name}", new, why)
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'blockdraft.verify' has no attribute {name!r}")
    value = getattr(import_module(f"blockdraft.verify.{module}"), name)
    globals()[name] = value
    return value


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
