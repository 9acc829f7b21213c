"""Questions the base model writes itself (self-instruct): distillation prompts in its own words.

docs/definitions.md sec. 10. Templated requests over a passage ("Explain this ...") all start
alike; users ask free questions. The base is shown a passage of the pretraining corpora and
asked for one question a reader might ask about its topic (:data:`REQUEST`); its greedy answer,
cleaned by :func:`parse_question`, becomes a stand-alone prompt
``{"source": "questions:<origin>", "prompt": "<question>"}``. Answers that are no question,
that lean on the passage ("in the passage", "the author"), or that repeat one already made are
dropped; the record says how many of each.

Public surface:
    REQUEST                                      the request around a passage
    parse_question(text) -> str | None           a stand-alone question, or None
    question_requests(data_root, n, seed) -> [(origin, request)]
    build_questions(model, tokenizer, requests, n, ...) -> (prompts, counts)
    self_instruct(base, data_root, n, ...) -> (prompts, record)   load, draw, generate
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from blockdraft.core.checks import check_int, check_positive_int
from blockdraft.training.errors import TrainingError
from blockdraft.training.heads.generation import greedy_batch, pad_id_of
from blockdraft.training.heads.mix import PASSAGES, corpus_passages
from blockdraft.training.heads.progress import ProgressBar, log_line
from blockdraft.training.heads.prompts import format_prompts

REQUEST = ("Here is a passage:\n\n{p}\n\nWrite one question that a curious reader might ask "
           "about this topic. Write only the question.")
"""What the base is asked about each passage (``{p}``)."""
MIN_CHARS, MAX_CHARS = 12, 300
_LEANS_ON_PASSAGE = re.compile(
    r"\b(passage|the text|the author|the article|above|this|these|curious reader|"
    r"you like to know)\b", re.I)
"""Words of a question that only makes sense beside its passage ("in this context", "what is
the purpose of this function?") or that echoes the request itself."""
_LABEL = re.compile(r"^(\*\*)?(question|q)\s*\d*\s*[:.)-]\s*(\*\*)?\s*", re.I)
_NUMBER = re.compile(r"^(\d+[.)]|[-*\u2022])\s*")


def parse_question(text: str) -> str | None:
    """The question in a generated answer: its first non-empty line without a leading label
    (``Question:``, ``Q1.``, ``1.``, ``-``), markdown bold or quotes; None unless it ends with
    ``?``, has ``MIN_CHARS .. MAX_CHARS`` characters and stands alone (no "this"/"these",
    no passage, text or author: SmolLM2's "What is the resolution of this function?" needs
    the passage the user will not give)."""
    line = next((x.strip() for x in text.splitlines() if x.strip()), "")
    line = _NUMBER.sub("", _LABEL.sub("", line)).strip().strip("*\"'\u201c\u201d").strip()
    if not line.endswith("?") or not MIN_CHARS <= len(line) <= MAX_CHARS:
        return None
    if _LEANS_ON_PASSAGE.search(line):
        return None
    return line


def question_requests(data_root: str | os.PathLike[str], n: int, seed: int = 0,
                      allow_fewer: bool = False) -> list[tuple[str, str]]:
    """``n`` ``(origin, request)`` pairs: :data:`REQUEST` around passages drawn without
    replacement (each origin of :data:`mix.PASSAGES` in turn, as long as it has passages).

    Raises:
        TrainingError: no corpus, or fewer than ``n`` passages in all (unless
            ``allow_fewer``: then one request per passage).
    """
    n = check_int(n, "n", TrainingError, minimum=1)
    texts = corpus_passages(data_root)
    total = sum(len(v) for v in texts.values())
    if allow_fewer:
        n = min(n, total)
    if total < n or total == 0:
        raise TrainingError(f"{data_root}'s corpora hold {total} passages; ask for at most "
                            "that many requests")
    rng = np.random.default_rng(seed)
    orders = {k: list(rng.permutation(len(v))) for k, v in texts.items()}
    out: list[tuple[str, str]] = []
    while len(out) < n:
        for origin in PASSAGES:
            if orders[origin] and len(out) < n:
                out.append((origin, REQUEST.format(p=texts[origin][int(orders[origin].pop())])))
    return out


def build_questions(
    model: Any,
    tokenizer: Any,
    requests: Sequence[tuple[str, str]],
    n: int,
    batch_size: int = 32,
    max_new_tokens: int = 48,
    generate: Callable[..., tuple[list[list[int]], list[torch.Tensor]]] = greedy_batch,
    progress: bool = True,
    log: Callable[[str], None] | None = log_line,
) -> tuple[list[dict[str, str]], dict[str, int]]:
    """Questions the base writes about ``requests``, until ``n`` distinct ones (or none left).

    Args:
        model: the base (a ``transformers`` causal LM in eval mode).
        tokenizer: its tokenizer (chat template, ``decode``).
        requests: ``(origin, request)`` pairs (:func:`question_requests`), in batches of
            ``batch_size`` (sorted by length within a batch's window for less padding).
        n: distinct questions wanted (``>= 1``).
        max_new_tokens: answer cap, tokens (a question is short; longer answers are cut).
        generate: batched greedy generation (:func:`generation.greedy_batch`'s signature).
        progress, log: a bar on a terminal; a line per batch elsewhere (None: quiet).

    Returns:
        ``(prompts, counts)``: ``{"source": "questions:<origin>", "prompt": ...}`` in request
        order, and ``{"asked", "kept", "not_a_question", "duplicate", "surplus"}`` (surplus:
        good questions of the last batch past the ``n``-th).
    """
    n = check_positive_int(n, "n", TrainingError)
    batch_size = check_positive_int(batch_size, "batch_size", TrainingError)
    eos = getattr(tokenizer, "eos_token_id", None)
    pad = pad_id_of(tokenizer)
    seen: set[str] = set()
    out: list[dict[str, str]] = []
    counts = Counter({"asked": 0, "kept": 0, "not_a_question": 0, "duplicate": 0,
                      "surplus": 0})
    bar = ProgressBar("questions", n, enabled=progress)
    try:
        for k in range(0, len(requests), batch_size):
            if len(out) >= n:
                break
            batch = list(requests[k:k + batch_size])
            ids = format_prompts(tokenizer, [r for _, r in batch])
            t0 = time.monotonic()
            answers, _ = generate(model, ids, max_new_tokens, eos, pad)
            rate = sum(len(a) for a in answers) / max(time.monotonic() - t0, 1e-9)
            kept = 0
            for (origin, _), answer in zip(batch, answers, strict=True):
                counts["asked"] += 1
                question = parse_question(tokenizer.decode(answer, skip_special_tokens=True))
                if question is None:
                    counts["not_a_question"] += 1
                elif question.lower() in seen:
                    counts["duplicate"] += 1
                elif len(out) < n:
                    seen.add(question.lower())
                    out.append({"source": f"questions:{origin}", "prompt": question})
                    kept += 1
                else:  # a good question past the n-th, in the last batch
                    counts["surplus"] += 1
            counts["kept"] = len(out)
            bar.advance(kept, info=f"{rate:.0f} tokens/s")
            if log is not None and not sys.stderr.isatty():
                log(f"  batch {k // batch_size}: {kept} of {len(batch)} kept, {len(out)}/{n} "
                    f"questions ({rate:.0f} tokens/s)")
    finally:
        bar.close()
    return out, dict(counts)


def self_instruct(
    base: str,
    data_root: str | os.PathLike[str],
    n: int,
    *,
    seed: int = 0,
    dtype: str = "float32",
    batch_size: int = 32,
    max_new_tokens: int = 48,
    oversample: float = 1.6,
    threads: int | None = None,
    progress: bool = True,
) -> tuple[list[dict[str, str]], dict[str, Any]]:
    """Load the base, draw ``ceil(oversample x n)`` passages (at most all), collect ``n`` questions.

    Returns:
        ``(prompts, record)``, the record as :func:`mix.write_mix` writes it (``counts`` of
        asked, kept, dropped; ``seconds``). Fewer than ``n`` prompts when too many answers were
        dropped (the record says so; raise ``oversample``).

    Raises:
        TrainingError: see :func:`question_requests`; a base without a tokenizer.
    """
    from blockdraft.models.hf.loading import load_causal_lm, resolve_base

    n = check_positive_int(n, "n", TrainingError)
    if not oversample >= 1.0:
        raise TrainingError(f"oversample must be >= 1, got {oversample!r}")
    requests = question_requests(data_root, int(np.ceil(oversample * n)), seed,
                                 allow_fewer=True)
    if threads:
        torch.set_num_threads(threads)
    model, tokenizer = load_causal_lm(base, dtype)
    if tokenizer is None:
        raise TrainingError(f"{base!r} has no tokenizer: cannot apply the chat template")
    t0 = time.monotonic()
    prompts, counts = build_questions(model, tokenizer, requests, n, batch_size=batch_size,
                                      max_new_tokens=max_new_tokens, progress=progress,
                                      log=log_line if progress else None)
    record = {
        "format": "blockdraft-prompt-mix", "n": len(prompts), "seed": seed,
        "weights": {"questions": 1.0}, "counts": {"questions": len(prompts)},
        "origins": dict(sorted(Counter(p["source"] for p in prompts).items())),
        "files": {"corpus": [g for globs in PASSAGES.values() for g in globs]},
        "distinct": len(prompts), "requested": n, "generation": counts,
        "base": f"{base}|{resolve_base(base).name}", "dtype": dtype,
        "request": REQUEST, "seconds": round(time.monotonic() - t0, 1),
    }
    return prompts, record
