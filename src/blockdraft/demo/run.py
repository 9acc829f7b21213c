"""The demo's run: :func:`run_demo` ties the corpus, the cached models, the measurements and
the lattice drawing together (see the package docstring for the steps)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from blockdraft.core.checks import check_int, check_positive_int
from blockdraft.demo.config import (
    DEMO_K,
    DEMO_VERSION,
    DRAW_K,
    NEURAL_ALPHA,
    NGRAM_ALPHA,
    DemoConfig,
)
from blockdraft.demo.corpus import cache_key, cache_root, load_corpus
from blockdraft.demo.decode import greedy_references, measure, strategies
from blockdraft.demo.errors import DemoError
from blockdraft.demo.prepare import ngram_loss, prepare, unigram_loss, write_json
from blockdraft.demo.results import DemoResult


def pick_threads(requested: int | None = None) -> int:
    """Torch threads: ``requested``, else the cores not already busy (the cores minus the
    whole part of the 1-minute load average), at least 1. Oversubscribed cores slow
    small-model training down several-fold (2 threads beside another 2-thread job on 2 cores
    measured 10x slower than 1 thread)."""
    if requested is not None:
        return check_int(requested, "threads", DemoError, minimum=1)
    cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:  # pragma: no cover - platforms without a load average
        load = 0.0
    return max(1, min(cores, cores - int(load)))


def run_demo(
    corpus: Path | None = None,
    out_dir: Path = Path("demo-output"),
    *,
    config: DemoConfig | None = None,
    num_examples: int = 8,
    prompt_len: int = 24,
    max_new_tokens: int = 48,
    stop_at_eos: bool = False,
    seed: int = 0,
    threads: int | None = None,
    progress: bool = False,
    log: Callable[[str], None] = print,
) -> DemoResult:
    """Run the pipeline of the package docstring and return its table.

    Args:
        corpus: a text file (paragraphs separated by blank lines, else lines); None: the
            CPython documentation topics (``pydoc_data.topics``).
        out_dir: where the lattice drawing, the trace and ``demo.json`` go (created).
        config: what to train (default :class:`DemoConfig`); part of the cache key.
        num_examples: held-out prompts to decode.
        prompt_len: tokens of each prompt (taken from the start of a held-out paragraph,
            after an EOS that stands for the start of a text).
        max_new_tokens: tokens generated per prompt.
        stop_at_eos: stop a prompt's decode at EOS. Off by default: the paragraphs are short
            and the model ends most of them within a dozen tokens, so EOS is decoded as the
            paragraph separator it is in the training stream and every prompt gets exactly
            ``max_new_tokens`` tokens (a steadier ``B``).
        seed: the split, the models' initialisation and training; part of the cache key.
        threads: torch intra-op threads (default: the cores not already busy).
        progress: show training progress bars on stderr.
        log: receives one-line progress messages; those about training start with
            ``"training"`` (a cached run sends none of those).

    Returns:
        A :class:`DemoResult`.

    Raises:
        DemoError: on too little text, no held-out paragraph long enough for a prompt, a
            lossless decode that differs from greedy decoding, or bad settings.
    """
    import torch

    from blockdraft.core.signature import environment, format_signature, human_count
    from blockdraft.oracle.record import record_trace
    from blockdraft.rescorers.neural import NeuralRescorer
    from blockdraft.rescorers.ngram import NgramRescorer
    from blockdraft.training import eos_stream

    t_start = time.perf_counter()
    config = config or DemoConfig()
    num_examples = check_positive_int(num_examples, "num_examples", DemoError)
    prompt_len = check_positive_int(prompt_len, "prompt_len", DemoError)
    max_new_tokens = check_positive_int(max_new_tokens, "max_new_tokens", DemoError)
    text = load_corpus(corpus, config, seed)
    name = text.name
    key = cache_key(text.paragraphs, config, seed)
    cache = cache_root() / "demo" / key
    cache.mkdir(parents=True, exist_ok=True)
    write_json(cache / "settings.json", {"version": DEMO_VERSION, "corpus": name,
                                         "paragraphs": len(text.paragraphs), "seed": seed,
                                         "config": config.to_dict()})

    n_threads = pick_threads(threads)
    old_threads = torch.get_num_threads()
    torch.set_num_threads(n_threads)
    try:
        art = prepare(cache, text.train, text.held_out, config, seed, name, log, progress)
        tok, model, lm = art.tokenizer, art.model, art.lm
        h = int(model.config.h)

        # Held-out prompts: the first paragraphs (in the seeded order) long enough to leave a
        # continuation; each starts after an EOS, as texts do in the training stream.
        held_ids = tok.encode_batch(text.held_out)
        prompts = [[tok.eos_id, *ids[:prompt_len]] for ids in held_ids
                   if len(ids) >= prompt_len + 16][:num_examples]
        if not prompts:
            raise DemoError(f"{name}: no held-out paragraph has {prompt_len + 16} tokens; "
                            "use longer paragraphs or a smaller prompt_len")
        unigram = unigram_loss(eos_stream(tok.encode_batch(text.train), tok.eos_id),
                               eos_stream(held_ids, tok.eos_id), tok.vocab_size)

        eos = tok.eos_id if stop_at_eos else None
        log(f"greedy decoding {len(prompts)} held-out prompts (the reference)")
        greedy, greedy_s = greedy_references(model, prompts, max_new_tokens, eos)

        neural = NeuralRescorer(art.rescorer_dir, alpha=NEURAL_ALPHA, backend="onnx",
                                bos_id=tok.eos_id)
        ngram = NgramRescorer(lm, alpha=NGRAM_ALPHA)
        order = lm.order
        plan = strategies(neural, ngram, order)

        trace_dir = out_dir / "trace"
        out_dir.mkdir(parents=True, exist_ok=True)
        trace = record_trace(model, prompts, trace_dir, max_new_tokens=max_new_tokens,
                             eos_id=eos, K=DEMO_K, overwrite=True,
                             signature={"model": config.describe(), "corpus": name,
                                        "cache": key, "seed": seed})
        for i, ref in enumerate(greedy):
            if trace[i].greedy_ids.tolist() != ref:
                raise DemoError(f"the trace's greedy output of prompt {i} differs from "
                                "greedy decoding (a bug: report it)")

        shared = {
            "model": f"{config.describe()}/{key}",
            "rescorer": f"rescorer({config.rescorer_n_layer}L,d{config.rescorer_d_model})",
            "corpus": name, "examples": len(prompts), "prompt": prompt_len,
            "max_new": max_new_tokens, "eos_stops": stop_at_eos, "h": h,
            "criterion": "exact", "order": order,
            "ngrams": human_count(sum(art.ngram_counts)), "seed": seed,
            "threads": n_threads, **environment(),
        }
        signature = format_signature(shared)
        rows, vanilla_rep = measure(model, prompts, greedy, greedy_s, trace, plan, shared,
                                    max_new_tokens, eos, log)
        png = draw_first_step(trace, tok, h, out_dir / "demo_lattice.png")
        result = DemoResult(
            rows=tuple(rows), num_examples=len(prompts),
            generated_tokens=sum(len(g) for g in greedy), greedy_s=greedy_s,
            heldout_loss=art.heldout_loss, heldout_accuracy=art.heldout_accuracy,
            unigram_loss=unigram, rescorer_loss=art.rescorer_loss,
            ngram_loss=ngram_loss(lm, held_ids), vanilla_repetition=vanilla_rep,
            sample_prompt=tok.decode(prompts[0][1:]), sample_output=tok.decode(greedy[0]),
            lattice_png=png, trace_dir=trace_dir, cache_dir=cache, trained=art.trained,
            train_s=art.train_s, threads=n_threads, signature=signature,
            seconds=time.perf_counter() - t_start,
        )
        write_json(out_dir / "demo.json", result.to_dict())
        return result
    finally:
        torch.set_num_threads(old_threads)


def draw_first_step(trace: Any, tok: Any, h: int, png: Path) -> Path:
    """One real step's lattice: the first step of the first prompt (top :data:`DRAW_K` of
    each head), the greedy path in red (Kim et al. Fig. 4); returns ``png``."""
    from blockdraft.lattice.draw import draw_lattice

    ex = trace[0]
    lat = ex.lattice(0, k=DRAW_K, certain_first=True)
    reference = np.asarray(ex.greedy_ids[:h], dtype=np.int64) if ex.m >= h else None
    draw_lattice(lat, png, reference=reference, labels=lambda i: tok.decode([i]),
                 title=f"first step of held-out prompt 1: top {DRAW_K} of each of {h} "
                       "heads; greedy path in red")
    return png
