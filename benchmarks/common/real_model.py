"""What the harnesses on the real model (SmolLM2-135M-Instruct with Medusa heads: bench_real,
bench_trees, bench_kim, bench_sweep) share: its name, its chat prompts from the evaluation
tasks, and which heads a run used.

    MODEL                                  "smollm2": what ``load_model`` takes
    PromptCase                             one prompt: task, record id, token ids, how it was cut
    build_cases(tokenizer, tasks, n, prompt_tokens, seed=0, data_root=SHARED, per_task=None)
        -> [PromptCase]                    ``n`` chat prompts of every task (tasks.py), cut
    heads_folder(heads) -> Path            a known model name's packaged heads, else the folder
    heads_label(heads) -> str              ``name@sha``: the heads' files' SHA-256 (10 hex)
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common.data import SHARED

MODEL = "smollm2"


@dataclass(frozen=True)
class PromptCase:
    """One prompt: its task, record id, token ids and how it was cut."""

    task: str
    id: str
    ids: tuple[int, ...]
    truncated: bool = False
    preview: str = ""


def build_cases(tokenizer: Any, tasks: Sequence[str], n: int, prompt_tokens: int,
                seed: int = 0, data_root: Path = SHARED, per_task: dict[str, int] | None = None
                ) -> list[PromptCase]:
    """``n`` chat prompts of every task (``per_task[task]`` of those it names; seeded), cut to
    ``prompt_tokens``."""
    from benchmarks.common.tasks import encode_chat, load_chat_task

    cases = []
    for task in tasks:
        for ex in load_chat_task(task, data_root, n=(per_task or {}).get(task, n), seed=seed):
            enc = encode_chat(ex, tokenizer, prompt_tokens)
            preview = ex.message(enc.words_kept)
            cases.append(PromptCase(task, ex.id, enc.ids, enc.truncated,
                                    preview[:160] + ("..." if len(preview) > 160 else "")))
    return cases


def heads_folder(heads: str) -> Path:
    """The folder of ``heads``: a known model name's packaged heads (``smollm2``,
    ``smollm2-prefix``), else the path itself."""
    from blockdraft.models.hf.loading import KNOWN_MODELS
    from blockdraft.models.load import packaged_heads

    if heads in KNOWN_MODELS:
        return packaged_heads(heads)
    folder = Path(heads)
    if not folder.is_dir():
        raise SystemExit(f"heads {heads!r}: neither a known model name ({', '.join(KNOWN_MODELS)})"
                         " nor a heads folder")
    return folder


def heads_label(heads: str) -> str:
    """``name@sha`` of the heads the run used (the files' SHA-256, so that preliminary and
    retrained heads tell apart)."""
    folder = heads_folder(heads)
    h = hashlib.sha256()
    for f in sorted(folder.rglob("*")):
        if f.is_file() and f.suffix in (".safetensors", ".pt", ".bin", ".json") \
                and f.name != "curve.json":
            h.update(f.name.encode())
            h.update(f.read_bytes())
    name = f"{MODEL}-packaged" if heads == MODEL else folder.name
    return f"{name}@{h.hexdigest()[:10]}"
