"""Distillation prompts that look like what users ask: sources mixed by declared weights.

docs/definitions.md sec. 10. Heads learn the base's answers to the prompts they are distilled
on; prompts made of task templates teach them task answers. This module builds a prompt file
whose mix of kinds is declared (:data:`DEFAULT_WEIGHTS`) from what the shared data holds:

    instructions   open requests: the self-instruct prompts of the distillation files, and
                   requests about a topic heading of the corpora ("Explain X.", "What is X?")
    explain        "explain this passage" over textbook, Python-documentation and PEP prose
    howto          Python how-tos and code requests over the Python documentation
    summarize      summaries of passages and of Shakespeare scenes
    rewrite        rewriting passages: plainer, shorter, as key points; Shakespeare in modern
                   English
    reasoning      word problems (GSM8K train) asked for step by step
    t0             the T0 task templates of the distillation files (kept, down-weighted)

Every prompt is ``{"source": "<kind>:<origin>", "prompt": ...}``; passages are 200-1,000
characters of one paragraph of the pretraining corpus (``corpus/``); never an evaluation file
(the task files, WikiText-2 test, WMT, CNN/DM). :func:`build_mix` is deterministic in its seed;
:func:`write_mix` writes the prompt file and ``<name>.mix.json`` beside it, the record of the
mix (weights, counts per kind and origin, files read) that a heads folder's signature names.

Public surface:
    DEFAULT_WEIGHTS, KINDS, MIX_SUFFIX
    build_mix(data_root, n, weights=DEFAULT_WEIGHTS, seed=0) -> (prompts, record)
    corpus_passages(data_root) -> {origin: [passage]}   what the passage kinds draw from
    write_mix(path, prompts, record)
    read_mix(path) -> record | None          the record beside a prompt file, if any
    describe_mix(record) -> str              "instructions=0.20,explain=0.17,..." (signatures)
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from blockdraft.core.files import write_files_atomic
from blockdraft.training.errors import TrainingError
from blockdraft.training.heads.prompts import read_prompts_with_sources

DEFAULT_WEIGHTS: dict[str, float] = {
    "instructions": 0.20, "explain": 0.17, "howto": 0.15, "summarize": 0.15,
    "rewrite": 0.13, "reasoning": 0.12, "t0": 0.08,
}
"""The default mix (fractions of the prompts): open requests, explanations, how-tos, summaries
and rewrites first; word problems; the T0 templates that made up 73% of the original files
down to 8%."""
KINDS = tuple(DEFAULT_WEIGHTS)
MIX_SUFFIX = ".mix.json"
"""The record beside a prompt file: ``<file>.mix.json``."""

PASSAGES = {  # origin -> glob under corpus/ (pretraining text only)
    "openstax": ("openstax/*.txt", "more/openstax/*.txt", "more/openstax-prerelicense/*.txt"),
    "python-docs": ("more/python-docs/*.txt",),
    "python-peps": ("more/python-peps/*.txt",),
}
SHAKESPEARE = "tinyshakespeare/input.txt"
MIN_CHARS, MAX_CHARS = 200, 1000
GENERIC_HEADINGS = frozenset((
    "abstract", "motivation", "rationale", "introduction", "summary", "references",
    "copyright", "open issues", "specification", "footnotes", "examples", "example",
    "conclusion", "conclusions", "key terms", "review questions", "critical thinking questions",
    "personal application questions", "learning objectives", "discussion", "background",
    "acknowledgements", "acknowledgments", "overview", "notes", "see also", "resolution",
    "rejected ideas", "backwards compatibility", "reference implementation", "implementation",
    "how to teach this", "security implications", "related work", "glossary", "index",
    "chapter outline", "section summary", "further reading", "clarifying questions"))
"""Section titles that name no topic a user would ask about."""

TEMPLATES: dict[str, tuple[str, ...]] = {
    "explain": (
        "Explain this in simple terms:\n\n{p}",
        "What does this passage mean? Explain it to a beginner.\n\n{p}",
        "Can you explain the main idea of this text?\n\n{p}",
        "I don't understand this paragraph. Could you walk me through it?\n\n{p}",
    ),
    "howto": (
        "Write a short Python example that shows what this describes:\n\n{p}",
        "How do I use this in Python? Give a small example.\n\n{p}",
        "Explain this part of the Python documentation and show how to use it:\n\n{p}",
    ),
    "howto-topic": (
        "How do I use {t} in Python?",
        "Show me an example of {t} in Python.",
        "What is {t} in Python, and when should I use it?",
    ),
    "summarize": (
        "Summarize this paragraph in one or two sentences:\n\n{p}",
        "Give a short summary of the following text.\n\n{p}",
        "What are the key points of this passage?\n\n{p}",
        "TL;DR:\n\n{p}",
    ),
    "summarize-scene": ("Summarize what happens in these lines:\n\n{p}",
                        "Who is speaking here, and what do they want?\n\n{p}"),
    "rewrite": (
        "Rewrite this paragraph in plain, simple English:\n\n{p}",
        "Make this text shorter without losing its meaning:\n\n{p}",
        "Turn this paragraph into a bulleted list of its main points:\n\n{p}",
        "Rewrite this for a middle-school student:\n\n{p}",
    ),
    "rewrite-scene": ("Paraphrase these lines in modern English:\n\n{p}",),
    "topic": ("Explain {t}.", "What is {t}?", "Tell me about {t}.",
              "Why is {t} important?", "Give me a short introduction to {t}."),
    "reasoning": ("{q}", "{q}\nLet's think step by step.", "{q}\nExplain your reasoning."),
}


def _paragraphs(root: Path, patterns: tuple[str, ...]) -> tuple[list[str], list[str], list[str]]:
    """``(passages, headings, files)`` of the corpus files matching ``patterns``: passages are
    paragraph lines of ``MIN_CHARS .. MAX_CHARS`` characters, headings short title lines."""
    passages: list[str] = []
    headings: list[str] = []
    files: list[str] = []
    for pattern in patterns:
        for path in sorted(root.glob(pattern)):
            files.append(str(path.relative_to(root)))
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                text = line.strip()
                if MIN_CHARS <= len(text) <= MAX_CHARS:
                    passages.append(text)
                elif (3 <= len(text) <= 60 and re.fullmatch(r"[A-Z][\w ,'()-]+", text)
                      and not text.isupper() and len(text.split()) <= 7
                      and text.lower() not in GENERIC_HEADINGS):
                    headings.append(text)
    return passages, headings, files


def corpus_passages(data_root: str | os.PathLike[str]) -> dict[str, list[str]]:
    """origin -> the passages (one paragraph, ``MIN_CHARS .. MAX_CHARS`` characters) of the
    shared data's pretraining corpora (:data:`PASSAGES`), in file order.

    Raises:
        TrainingError: no ``corpus/`` folder under ``data_root``.
    """
    corpus = Path(data_root) / "corpus"
    if not corpus.is_dir():
        raise TrainingError(f"{data_root} has no corpus/ folder; point --data at the shared "
                            "data folder")
    return {name: _paragraphs(corpus, patterns)[0] for name, patterns in PASSAGES.items()}


def _scenes(path: Path, rng: np.random.Generator, n: int) -> list[str]:
    """``n`` runs of Shakespeare lines (4-10 lines, at most ``MAX_CHARS`` characters)."""
    lines = [x for x in path.read_text(encoding="utf-8").splitlines()]
    out: list[str] = []
    while len(out) < n:
        start = int(rng.integers(0, max(len(lines) - 12, 1)))
        chunk = "\n".join(lines[start:start + int(rng.integers(4, 11))]).strip()
        if MIN_CHARS // 2 <= len(chunk) <= MAX_CHARS:
            out.append(chunk)
    return out


def _check_weights(weights: Mapping[str, float]) -> dict[str, float]:
    unknown = sorted(set(weights) - set(KINDS))
    if unknown:
        raise TrainingError(f"unknown prompt kind(s) {', '.join(unknown)}; the kinds are "
                            f"{', '.join(KINDS)}")
    if (any(not (math.isfinite(w) and w >= 0) for w in weights.values())
            or sum(weights.values()) <= 0):
        raise TrainingError(f"weights must be finite numbers >= 0 with a positive sum, got "
                            f"{dict(weights)}")
    total = sum(weights.values())
    return {k: float(weights.get(k, 0.0)) / total for k in KINDS}


def build_mix(data_root: str | Path, n: int, weights: Mapping[str, float] = DEFAULT_WEIGHTS,
              seed: int = 0) -> tuple[list[dict[str, str]], dict[str, Any]]:
    """``n`` prompts mixed by ``weights`` (see the module docstring), and their record.

    Args:
        data_root: the shared data folder (with ``corpus/`` and ``prompts/``).
        n: prompts to make (``>= 1``); each kind gets ``round(weight x n)`` of them.
        weights: kind -> weight (normalised; unnamed kinds get 0).
        seed: what is drawn (passages, templates, order).

    Raises:
        TrainingError: unknown kinds, bad weights, a missing data file.
    """
    root = Path(data_root)
    if n < 1:
        raise TrainingError(f"n must be >= 1 prompts, got {n}")
    shares = _check_weights(weights)
    corpus = root / "corpus"
    prompt_files = sorted((root / "prompts").glob("distill_prompts.part*.jsonl"))
    if not corpus.is_dir() or not prompt_files:
        raise TrainingError(f"{root} has no corpus/ folder or prompts/distill_prompts.part*.jsonl;"
                            " point --data at the shared data folder")
    rng = np.random.default_rng(seed)
    texts = {name: _paragraphs(corpus, patterns) for name, patterns in PASSAGES.items()}
    distill = read_prompts_with_sources(prompt_files)
    by_source: dict[str, list[str]] = {"instructions": [], "reasoning": [], "t0": []}
    for source, prompt in distill:
        if not isinstance(prompt, str):  # a conversation: not a first turn to mix
            continue
        key = ("reasoning" if source.startswith("gsm8k") else "t0" if source.startswith("t0:")
               else "instructions")
        by_source[key].append(prompt)
    counts = {k: int(round(shares[k] * n)) for k in KINDS}
    counts[max(counts, key=lambda k: shares[k])] += n - sum(counts.values())
    out: list[dict[str, str]] = []

    def pick(items: list[Any]) -> Any:
        if not items:
            raise TrainingError(f"{root} holds nothing to make these prompts of (no passages of "
                                f"{MIN_CHARS}-{MAX_CHARS} characters, topic headings or "
                                "distillation prompts of a kind with a weight); give it a "
                                "weight of 0 or point --data at the shared data folder")
        return items[int(rng.integers(len(items)))]

    def about_passage(kind: str, origins: tuple[str, ...]) -> dict[str, str]:
        """A ``kind`` request around a passage of one of ``origins`` (an origin named twice
        is drawn twice as often)."""
        origin = pick(list(origins))
        p = pick(texts[origin][0])
        return {"source": f"{kind}:{origin}", "prompt": pick(list(TEMPLATES[kind])).format(p=p)}

    def about_scene_or_passage(kind: str, scene: str, origins: tuple[str, ...]
                               ) -> dict[str, str]:
        """A ``kind`` request around a Shakespeare scene 15% of the time, else a passage."""
        if rng.random() < 0.15:
            return {"source": f"{kind}:shakespeare", "prompt": pick(
                list(TEMPLATES[f"{kind}-scene"])).format(p=scene)}
        return about_passage(kind, origins)

    for _ in range(counts["instructions"]):
        if by_source["instructions"] and rng.random() < 0.25:
            out.append({"source": "instructions:self-instruct",
                        "prompt": pick(by_source["instructions"])})
        else:
            origin = pick(["openstax", "openstax", "python-docs"])  # PEP titles name no topic
            out.append({"source": f"instructions:topic-{origin}", "prompt": pick(
                list(TEMPLATES["topic"])).format(t=pick(texts[origin][1]))})
    for _ in range(counts["explain"]):
        out.append(about_passage("explain", ("openstax", "openstax", "python-docs",
                                             "python-peps")))
    for _ in range(counts["howto"]):
        if rng.random() < 0.4:
            out.append({"source": "howto:topic-python-docs", "prompt": pick(
                list(TEMPLATES["howto-topic"])).format(t=pick(texts["python-docs"][1]))})
        else:
            out.append({"source": "howto:python-docs", "prompt": pick(
                list(TEMPLATES["howto"])).format(p=pick(texts["python-docs"][0]))})
    scenes = _scenes(corpus / SHAKESPEARE, rng, counts["summarize"] + counts["rewrite"])
    for i in range(counts["summarize"]):
        out.append(about_scene_or_passage("summarize", scenes[i], (
            "openstax", "openstax", "python-docs", "python-peps")))
    for i in range(counts["rewrite"]):
        out.append(about_scene_or_passage("rewrite", scenes[-1 - i], (
            "openstax", "openstax", "python-peps")))
    for _ in range(counts["reasoning"]):
        out.append({"source": "reasoning:gsm8k-train", "prompt": pick(
            list(TEMPLATES["reasoning"])).format(q=pick(by_source["reasoning"]))})
    for _ in range(counts["t0"]):
        out.append({"source": "t0:distill", "prompt": pick(by_source["t0"])})
    order = rng.permutation(len(out))
    prompts = [out[i] for i in order]
    record = {
        "format": "blockdraft-prompt-mix", "n": n, "seed": seed,
        "weights": {k: shares[k] for k in KINDS}, "counts": counts,
        "origins": dict(sorted(Counter(p["source"] for p in prompts).items())),
        "files": {"corpus": sorted(f for name in texts for f in texts[name][2]) + [SHAKESPEARE],
                  "prompts": [f.name for f in prompt_files]},
        "distinct": len({p["prompt"] for p in prompts}),
    }
    return prompts, record


def write_mix(path: str | Path, prompts: Sequence[Mapping[str, Any]], record: Mapping[str, Any]
              ) -> Path:
    """The prompt file (JSON lines) and its record ``<path>.mix.json`` beside it, atomically
    and together (both new, or both as they were).

    Returns:
        The record's path.
    """
    target = Path(path)
    meta = target.with_name(target.name + MIX_SUFFIX)
    write_files_atomic({
        target: "".join(json.dumps(dict(p), ensure_ascii=False) + "\n"
                        for p in prompts).encode("utf-8"),
        meta: (json.dumps(dict(record), indent=1) + "\n").encode("utf-8")})
    return meta


def read_mix(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The record ``<path>.mix.json`` :func:`write_mix` wrote beside a prompt file, or None
    (a prompt file made otherwise, or a record that does not parse)."""
    meta = Path(path).with_name(Path(path).name + MIX_SUFFIX)
    try:
        record = json.loads(meta.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("format") == \
        "blockdraft-prompt-mix" else None


def describe_mix(record: Mapping[str, Any]) -> str:
    """The mix as ``kind=weight`` pairs (kinds with a weight), for signatures."""
    weights = record.get("weights", {})
    return ",".join(f"{k}={float(w):.2f}" for k, w in weights.items() if float(w) > 0)
