"""Replay files: the shape of a real decode, replayed on random weights of the same shape
(issue 30, the GPU benchmark's "replay" rows).

A step's cost depends on shapes only (the tree verified, the tokens accepted), not on the
weights, so a GPU machine that cannot hold the real weights measures the decode loop end to end
at the real model's block efficiency by replaying, step for step, the tree sizes and accepted
lengths a real decode recorded on a CPU:

    python -m benchmarks.common.replay --model smollm2 --out benchmarks/replay/smollm2_chat.json
    python -m benchmarks.common.replay --tiny --out /tmp/replay.json        # a smoke run (seconds)

The file (JSON, ``"format": "blockdraft-replay/1"``) holds the command, the signature, the
model's heads digest, ``max_new_tokens`` and, per strategy (:func:`strategies`), one entry per
prompt: ``{"prompt_length": L, "tokens": m, "steps": [[nodes, depth, accepted], ...]}`` with,
for every verification call, the nodes of the tree verified (the drafts' trie, before the
last step's cut), its depth and the draft tokens accepted (``n``; the call yields ``1 + n``).

:class:`ReplayTreeDrafter` replays one prompt's steps on any model: knowing that model's own
greedy continuation of the prompt, it builds at each step a tree of the recorded size and depth
whose first ``accepted`` nodes are the greedy tokens and whose other nodes are not, so the exact
criterion accepts the recorded length (the output stays the greedy one). With ``inner`` it first
runs the real strategy's drafter on the step's lattice and discards its drafts, so the host pays
the real drafting cost (lattice, search) as well.

Public surface:
    FORMAT
    strategies() -> {name: DraftSpec}  the strategies recorded and replayed
    inner_drafter(name, model) -> Drafter   a strategy built for a model, run for its cost
    record(model, prompts, max_new_tokens, eos_id) -> {name: [per-prompt entry]}
    load_replay(path) -> dict          a replay file, checked
    ReplayTreeDrafter(steps, prompt_length, future, vocab_size, inner=None)   a Drafter
    main(argv=None) -> int             records a replay file
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = "blockdraft-replay/1"
PROMPTS = ("Explain what a Python list comprehension is.",
           "Write a function that reverses a string in Python.",
           "What is the difference between a tuple and a list?",
           "Give three tips for writing a clear email.")
"""The chat requests a SmolLM2 replay is recorded on (the end-to-end rows with real weights
decode the same ones)."""


def strategies() -> dict[str, Any]:
    """Strategy name -> its :class:`~blockdraft.drafts.DraftSpec` (greedy is the runtime's
    own loop)."""
    from blockdraft.drafts import DraftSpec

    return {"vanilla heads": DraftSpec("heads"),
            "prompt lookup": DraftSpec("lookup"),
            "8-best trie (k 16)": DraftSpec("heads", k=16, p=8)}


def inner_drafter(name: str, model: Any) -> Any:
    """The drafter a replayed strategy runs for its host cost (its drafts are discarded),
    built by the factory on ``model``'s capabilities."""
    from blockdraft.models.capabilities import capabilities_of

    return strategies()[name].build(caps=capabilities_of(model))


def step_shape(step: Any) -> list[int]:
    """``[nodes, depth, accepted]`` of one :class:`~blockdraft.verify.records.DecodeStep`."""
    tree = step.tree
    return [len(tree), int(tree.max_depth), int(step.n)]


def record(model: Any, prompts: Sequence[Sequence[int]], max_new_tokens: int,
           eos_id: int | None) -> dict[str, list[dict[str, Any]]]:
    """Decode every prompt with every strategy (exact criterion) and return their steps."""
    from blockdraft.verify import decode

    device = str(model.device)
    out: dict[str, list[dict[str, Any]]] = {}
    for name, spec in strategies().items():
        out[name] = []
        for prompt in prompts:
            r = decode(model, list(prompt), drafter=spec, max_new_tokens=max_new_tokens,
                       eos_id=eos_id, device=device)
            out[name].append({"prompt_length": len(prompt), "tokens": len(r.tokens),
                              "steps": [step_shape(s) for s in r.steps]})
    return out


def load_replay(path: Path) -> dict[str, Any]:
    """A replay file, its format and shapes checked.

    Raises:
        ValueError: another format, or a step that is not three non-negative ints with
            ``accepted <= depth < nodes``.
    """
    data = json.loads(Path(path).read_text())
    if data.get("format") != FORMAT:
        raise ValueError(f"{path}: format {data.get('format')!r}, expected {FORMAT!r}")
    for name, entries in data["strategies"].items():
        for e in entries:
            for step in e["steps"]:
                nodes, depth, acc = step
                if not (0 <= acc <= depth < nodes):
                    raise ValueError(f"{path}: {name}: step {step} is not [nodes, depth, "
                                     "accepted] with accepted <= depth < nodes")
    return data


class ReplayTreeDrafter:
    """Replays one prompt's recorded ``(nodes, depth, accepted)`` steps (module docstring).

    A test double of this benchmark, not a drafting strategy (no spec names it): a
    :class:`~blockdraft.drafts.Drafter` (``name``, ``needs``, ``draft(view)``,
    ``observe(feedback)``) whose trees are made from the recorded shapes and the model's own
    greedy continuation.

    Args:
        steps: ``[[nodes, depth, accepted], ...]`` (cycled when the decode runs longer).
        prompt_length: the prompt's length (the step's position is read from its context).
        future: the model's own greedy continuation of the prompt (at least the decode's
            ``max_new_tokens`` tokens).
        vocab_size: the model's vocabulary (wrong nodes are drawn from it).
        inner: a drafter run on every step for its cost (its tree is discarded; it hears the
            decode's feedback too), or None. Its needs are the replay's.
    """

    def __init__(self, steps: Sequence[Sequence[int]], prompt_length: int,
                 future: Sequence[int], vocab_size: int, inner: Any = None) -> None:
        from blockdraft.drafts import Needs

        self.steps = [tuple(int(v) for v in s) for s in steps] or [(1, 0, 0)]
        self.prompt_length, self.future = prompt_length, list(future)
        self.vocab_size, self.inner = vocab_size, inner
        self._i = 0
        self.needs = inner.needs if inner is not None else Needs()
        self.name = f"replay of {inner.name if inner is not None else 'recorded steps'}"

    def _wrong(self, right: int, taken: set[int]) -> int:
        tok = (right + 1 + len(taken)) % self.vocab_size
        while tok == right or tok in taken:
            tok = (tok + 1) % self.vocab_size
        return tok

    def draft(self, view: Any) -> Any:
        """A tree of the recorded size and depth whose first ``accepted`` nodes are the greedy
        tokens (parents before children)."""
        from blockdraft.core.tree import DraftTree

        if self.inner is not None:
            self.inner.draft(view)
        nodes, depth, acc = self.steps[self._i % len(self.steps)]
        self._i += 1
        pos = len(view.context) - self.prompt_length  # the certain token's index in the output
        truth = self.future[pos + 1:pos + 1 + depth]
        depth = min(depth, len(truth))
        acc = min(acc, depth)
        tokens = [view.certain]
        parents = [-1]
        children: dict[int, set[int]] = {0: set()}
        for d in range(depth):  # the accepted chain, then wrong nodes down to the depth
            tok = truth[d] if d < acc else self._wrong(truth[d], children[len(tokens) - 1])
            children[len(tokens) - 1].add(tok)
            parents.append(len(tokens) - 1)
            tokens.append(tok)
            children[len(tokens) - 1] = set()
        chain = len(tokens)
        for j in range(max(0, nodes - chain)):  # wrong leaves under the chain's nodes
            par = j % max(1, min(acc + 1, depth))
            right = truth[par] if par < len(truth) else 0
            tok = self._wrong(right, children[par] | {right})
            children[par].add(tok)
            parents.append(par)
            tokens.append(tok)
        return DraftTree(tokens=np.asarray(tokens, dtype=np.int64),
                         parents=np.asarray(parents),
                         scores=-np.arange(len(tokens), dtype=float))

    def observe(self, feedback: Any) -> None:
        """Pass the decode's feedback to the inner drafter (a lookup index learns there)."""
        if self.inner is not None:
            self.inner.observe(feedback)


def main(argv: list[str] | None = None) -> int:
    import torch

    from benchmarks.common.report import command_line
    from blockdraft.core.files import write_text_atomic
    from blockdraft.core.signature import environment, format_signature

    ap = argparse.ArgumentParser(description="Record a replay file (module docstring).")
    ap.add_argument("--model", default="smollm2", help="what load_model takes (with heads)")
    ap.add_argument("--tiny", action="store_true", help="a tiny random Llama: a smoke run")
    ap.add_argument("--runtime", default="onnxruntime", choices=("torch", "onnxruntime"))
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.tiny:
        from benchmarks.common.stand_ins import tiny_model

        model, name, eos = tiny_model(), "tiny-random-llama", None
        prompts: list[list[int]] = [[5, 9, 2, 33, 7, 8, 9, 10, 11], [3, 1, 4, 1, 5, 9, 2, 6]]
    else:
        from blockdraft.models import load_model

        model = load_model(args.model, runtime=args.runtime, threads=args.threads)
        name, tok = args.model, model.tokenizer
        prompts = [tok.apply_chat_template([{"role": "user", "content": q}]) for q in PROMPTS]
        eos = tok.eos_id
    data = {"format": FORMAT, "command": command_line("benchmarks.common.replay", argv),
            "signature": format_signature({
                "model": name, "runtime": args.runtime, "criterion": "exact",
                "max_new_tokens": args.max_new_tokens, "prompts": len(prompts),
                **environment("cpu")}),
            "model": name, "heads_digest": getattr(model, "heads_digest", None),
            "max_new_tokens": args.max_new_tokens,
            "strategies": record(model, prompts, args.max_new_tokens, eos)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out, json.dumps(data, indent=None, separators=(",", ":")) + "\n")
    for s, entries in data["strategies"].items():
        calls = sum(1 + len(e["steps"]) for e in entries)
        print(f"{s}: B {sum(e['tokens'] for e in entries) / calls:.3f} over {len(entries)} "
              "prompts")
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
