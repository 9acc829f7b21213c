"""The demo's trained pieces, trained once and cached: a BPE tokenizer, a BlockwiseLM (base,
then its extra heads on the frozen base), a RescorerLM exported to ONNX, and an n-gram LM;
and the held-out numbers that let a reader judge them.

Each piece in the cache is marked done by a JSON file written last (atomically), so an
interrupted run trains the missing pieces again and nothing else.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from blockdraft.core.files import write_text_atomic
from blockdraft.demo.config import DemoConfig
from blockdraft.demo.errors import DemoError


@dataclass(frozen=True)
class Artefacts:
    """The trained pieces, loaded, and their held-out numbers."""

    tokenizer: Any
    model: Any
    rescorer_dir: Path
    lm: Any
    ngram_counts: tuple[int, ...]
    heldout_loss: tuple[float, ...]
    heldout_accuracy: tuple[float, ...]
    rescorer_loss: float
    trained: bool
    train_s: float


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None when there is none."""
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else None


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` atomically (indented JSON)."""
    write_text_atomic(path, json.dumps(data, indent=2) + "\n")


def prepare(cache: Path, train_paras: list[str], held_paras: list[str], config: DemoConfig,
            seed: int, name: str, log: Callable[[str], None], progress: bool) -> Artefacts:
    """Train what the cache lacks (each piece marked done by a JSON file written last).

    Raises:
        DemoError: when the text gives too few tokens for one training window.
    """
    from blockdraft.models import Tokenizer, load_model
    from blockdraft.rescorers.ngram import NgramLM
    from blockdraft.training import eos_stream, new_model, train_and_save, train_tokenizer
    from blockdraft.training.ngram import train_ngram

    trained = False
    t_train = 0.0
    tok_path = cache / "tokenizer.json"
    if tok_path.is_file():
        tok = Tokenizer.load(tok_path)
    else:
        t0 = time.perf_counter()
        tok = train_tokenizer(train_paras, config.vocab_size, log,
                              unit=f"paragraphs of {name}")
        tok.save(cache)
        t_train += time.perf_counter() - t0
        trained = True
    train_ids = tok.encode_batch(train_paras)
    held_ids = tok.encode_batch(held_paras)
    train_stream, held_stream = eos_stream(train_ids, tok.eos_id), eos_stream(held_ids, tok.eos_id)
    window = config.seq_len + config.h + 1
    if train_stream.size < window or held_stream.size < window:
        raise DemoError(
            f"{name}: {train_stream.size} training and {held_stream.size} held-out tokens; "
            f"the demo needs more than {window} of each: use more text or a smaller seq_len"
        )

    model_dir = cache / "blockwise"
    meta = read_json(model_dir / "demo.json")
    if meta is None:
        log(f"training a BlockwiseLM ({config.n_layer} layers, d={config.d_model}, "
            f"h={config.h}, V={tok.vocab_size}): {config.steps} steps of {config.batch_size} x "
            f"{config.seq_len} tokens over {train_stream.size:,} tokens, base then heads")
        t0 = time.perf_counter()
        model = new_model(config.model_config(tok.vocab_size), seed=seed)

        def blockwise_facts(res: Any) -> dict[str, Any]:
            ev = res.evals[-1]
            return {"heldout_loss": list(ev.loss), "heldout_accuracy": list(ev.accuracy),
                    "train_s": res.wall_s, "tokens_per_s": res.tokens_per_s}

        res = train_and_save(model, train_stream, model_dir, tokenizer=tok,
                             cfg=config.train_config(config.steps), mode="base-then-heads",
                             seed=seed, eval_ids=held_stream, progress=progress,
                             extra_meta=lambda r: {"demo": blockwise_facts(r)})
        meta = blockwise_facts(res)
        write_json(model_dir / "demo.json", meta)
        t_train += time.perf_counter() - t0
        trained = True
        log(f"BlockwiseLM: held-out loss of head 1 {meta['heldout_loss'][0]:.3f} nats, "
            f"{res.tokens_per_s:,.0f} tokens/s, {res.wall_s:.0f} s")
    model = load_model(model_dir)

    rescorer_dir = cache / "rescorer"
    rmeta = read_json(rescorer_dir / "demo.json")
    if rmeta is None:
        from blockdraft.rescorers.neural.onnx_export import export_rescorer_onnx

        log(f"training a RescorerLM ({config.rescorer_n_layer} layers, "
            f"d={config.rescorer_d_model}): {config.rescorer_steps} steps, then ONNX export")
        t0 = time.perf_counter()
        rescorer: Any = new_model(config.rescorer_config(tok.vocab_size), rescorer=True,
                                  seed=seed + 1)  # a RescorerLM

        def rescorer_facts(res: Any) -> dict[str, Any]:
            return {"heldout_loss": res.evals[-1].loss[0], "train_s": res.wall_s}

        res = train_and_save(rescorer, train_stream, rescorer_dir, tokenizer=tok,
                             cfg=config.train_config(config.rescorer_steps), mode="base",
                             seed=seed + 1, eval_ids=held_stream, progress=progress,
                             extra_meta=lambda r: {"demo": rescorer_facts(r)})
        rmeta = rescorer_facts(res)
        export_rescorer_onnx(rescorer, rescorer_dir)
        write_json(rescorer_dir / "demo.json", rmeta)
        t_train += time.perf_counter() - t0
        trained = True
        log(f"RescorerLM: held-out loss {rmeta['heldout_loss']:.3f} nats, "
            f"{res.wall_s:.0f} s")

    order = config.ngram_order
    lm_prefix = cache / f"lm{order}"
    lmeta = read_json(cache / f"lm{order}.json")
    if lmeta is None:
        log(f"training a {order}-gram LM")
        t0 = time.perf_counter()
        r = train_ngram(train_ids, lm_prefix, order=order)
        lmeta = {"binary": str(r.binary.name if r.binary else r.arpa.name),
                 "counts": list(r.counts)}
        write_json(cache / f"lm{order}.json", lmeta)
        t_train += time.perf_counter() - t0
        trained = True
    lm = NgramLM(cache / str(lmeta["binary"]))
    lm.check_vocab(tok.vocab_size)
    return Artefacts(
        tokenizer=tok, model=model, rescorer_dir=rescorer_dir, lm=lm,
        ngram_counts=tuple(int(c) for c in lmeta["counts"]),
        heldout_loss=tuple(float(x) for x in meta["heldout_loss"]),
        heldout_accuracy=tuple(float(x) for x in meta["heldout_accuracy"]),
        rescorer_loss=float(rmeta["heldout_loss"]), trained=trained, train_s=t_train,
    )


def unigram_loss(train_stream: np.ndarray, held_stream: np.ndarray, vocab_size: int) -> float:
    """Held-out cross-entropy (nats) of the add-one-smoothed training unigram distribution."""
    counts = np.bincount(train_stream, minlength=vocab_size).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    return float(-logp[held_stream].mean())


def ngram_loss(lm: Any, held_ids: Sequence[Sequence[int]]) -> float:
    """Held-out cross-entropy (nats per token) of the n-gram LM, each text from ``<s>``."""
    total, count = 0.0, 0
    for ids in held_ids:
        if not ids:
            continue
        scores = lm.score(np.asarray(ids, dtype=np.int64))  # from <s>: empty context
        total -= float(np.sum(scores))
        count += len(ids)
    return total / max(count, 1)
