"""Multi-turn distillation prompts: a first request, the base's own answer, a follow-up.

docs/definitions.md sec. 10. Users go on after an answer ("can you give an example?", "make
it shorter"), and the base's next answer then reads its own previous one: heads trained only
on first turns never see that context. A distillation set already holds the base's greedy
answers to its training prompts, so a second turn costs no generation: each conversation is

    user:       a training prompt of the set (a single turn)
    assistant:  the base's complete greedy answer to it (the EOS it ended with dropped)
    user:       a follow-up drawn for the first prompt's kind (:data:`FOLLOW_UPS`)

written as ``{"source": "followup:<kind>", "messages": [...]}`` for the next ``heads distill``
(the last turn is the user's; its answer is what the heads will learn). Only the set's
*training* shards are read, never its held-out split, and every first turn is checked
against the token ids the set stored for it, so a prompt file that did not make the set is
refused rather than paired with the wrong answers.

Public surface:
    FOLLOW_UPS                                     kind -> follow-up requests ("any": every kind)
    build_followups(folder, prompt_files, tokenizer, n, seed=0, min_answer_tokens=16)
        -> (prompts, record)                       the record as :func:`mix.write_mix` writes it
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from blockdraft.core.checks import check_int
from blockdraft.training.errors import TrainingError
from blockdraft.training.heads.prompts import format_prompts, read_prompts_with_sources
from blockdraft.training.heads.shards import open_distill_set, read_turns

FOLLOW_UPS: dict[str, tuple[str, ...]] = {
    "any": (
        "Can you explain that more simply?", "Can you give me an example?",
        "Can you make that shorter?", "Why is that?", "Summarize your answer in one sentence.",
        "Can you put that as a bulleted list?", "What is the most important point here?",
        "Thanks! What should I learn next about this?", "Are you sure? Please double-check.",
        "Tell me more.",
    ),
    "instructions": ("Can you give me three examples?", "What are the pros and cons?",
                     "How would you explain this to a ten-year-old?"),
    "explain": ("Can you give a real-world example?", "How would you explain this to a child?",
                "What are common misconceptions about this?"),
    "howto": ("Can you add comments to the code?", "What happens if the input is empty?",
              "How would I write a test for this?", "Is there a simpler way to do this?",
              "Can you explain the code line by line?"),
    "summarize": ("Make it even shorter.", "Now write it as a single tweet.",
                  "What did you leave out?"),
    "rewrite": ("Now make it more formal.", "Can you make it even simpler?",
                "Now turn it into a short poem."),
    "reasoning": ("Can you check your answer step by step?",
                  "Explain the first step again, more slowly.",
                  "How would the answer change if all the numbers were doubled?",
                  "Can you write the solution as one equation?"),
}
"""Follow-up requests by the first prompt's kind (its ``source`` before the colon); a draw
takes the kind's own half of the time and the ``"any"`` ones otherwise."""


def build_followups(
    folder: str | os.PathLike[str],
    prompt_files: Sequence[str | os.PathLike[str]],
    tokenizer: Any,
    n: int,
    seed: int = 0,
    min_answer_tokens: int = 16,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``n`` three-turn conversations built on a distillation set's training answers.

    Args:
        folder: the distillation set (``heads distill``'s folder).
        prompt_files: the prompt files that made it, in the same order.
        tokenizer: the base's tokenizer (chat template, ``decode``, ``eos_token_id``).
        n: conversations to make (``>= 1``), drawn without replacement from the answers that
            ended with the EOS and have at least ``min_answer_tokens`` tokens.
        seed: the draw of answers and follow-ups.

    Returns:
        ``(prompts, record)``: ``{"source": "followup:<kind>", "messages": [...]}`` lines and
        the mix record (``format``, ``weights``, ``counts``, ``origins``, ``files``...).

    Raises:
        TrainingError: no set in ``folder``, prompt files that do not match it, fewer
            eligible answers than ``n``, a tokenizer without an EOS id.
    """
    n = check_int(n, "n", TrainingError, minimum=1)
    min_answer_tokens = check_int(min_answer_tokens, "min_answer_tokens", TrainingError,
                                  minimum=1)
    eos = getattr(tokenizer, "eos_token_id", None)
    if eos is None:
        raise TrainingError("the tokenizer has no EOS id: cannot tell complete answers")
    dset = open_distill_set(folder)
    items = read_prompts_with_sources(prompt_files)
    expected = dset.plan.get("num_prompts")
    if expected is not None and int(expected) != len(items):
        raise TrainingError(
            f"{folder} was distilled from {expected} prompts, the prompt files hold "
            f"{len(items)}: pass the files that made the set, in the same order")
    candidates: list[tuple[int, np.ndarray, np.ndarray]] = []
    for name in dset.shards("train"):
        for index, x, y in read_turns(dset.shard_path(name)):
            if index >= len(items):
                raise TrainingError(f"{dset.shard_path(name)} names prompt {index}, beyond "
                                    f"the {len(items)} of the prompt files")
            if (isinstance(items[index][1], str) and y.size >= min_answer_tokens
                    and int(y[-1]) == eos):
                candidates.append((index, x, y))
    if len(candidates) < n:
        raise TrainingError(
            f"{folder}'s training shards hold {len(candidates)} complete single-turn answers "
            f"of >= {min_answer_tokens} tokens; ask for at most that many (-n), or distil more")
    rng = np.random.default_rng(seed)
    out: list[dict[str, Any]] = []
    for c in sorted(rng.choice(len(candidates), size=n, replace=False).tolist()):
        index, x, y = candidates[c]
        source, first = items[index]
        assert isinstance(first, str)
        if format_prompts(tokenizer, [first])[0] != x.tolist():
            raise TrainingError(
                f"prompt {index} of the prompt files is not the one {folder} answered (its "
                "chat-formatted tokens differ): pass the files that made the set, in order")
        answer = tokenizer.decode(y[:-1].tolist(), skip_special_tokens=True).strip()
        kind = source.partition(":")[0] or "any"
        pool = FOLLOW_UPS[kind] if kind in FOLLOW_UPS and rng.random() < 0.5 else \
            FOLLOW_UPS["any"]
        out.append({"source": f"followup:{kind}", "messages": [
            {"role": "user", "content": first}, {"role": "assistant", "content": answer},
            {"role": "user", "content": pool[int(rng.integers(len(pool)))]}]})
    prompts = [out[i] for i in rng.permutation(len(out))]
    record = {
        "format": "blockdraft-prompt-mix", "n": n, "seed": seed,
        "weights": {"followup": 1.0}, "counts": {"followup": n},
        "origins": dict(sorted(Counter(p["source"] for p in prompts).items())),
        "files": {"distill": str(Path(folder)), "prompts": [Path(f).name for f in prompt_files]},
        "distinct": len({str(p["messages"]) for p in prompts}),
        "eligible_answers": len(candidates),
    }
    return prompts, record
