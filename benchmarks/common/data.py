"""Real data for the benchmarks: the pretraining corpus, a BPE tokenizer and n-gram LMs.

Everything is read from ``../shared/data`` (never copied into the repository) and cached under
``$BLOCKDRAFT_CACHE`` (default ``~/.cache/blockdraft``)/``bench``. The pretraining corpus is
OpenStax (``corpus/openstax`` and ``corpus/more/openstax``), Shakespeare and WikiText-2 valid;
evaluation text (WikiText-2 test and the task files) is never trained on.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("BLOCKDRAFT_SHARED_DATA", REPO.parent / "shared" / "data"))
CACHE = Path(os.environ.get("BLOCKDRAFT_CACHE", Path.home() / ".cache" / "blockdraft")) / "bench"

BPE_VOCAB = 4096
EOS = "<|endoftext|>"


def require_shared() -> Path:
    if not (SHARED / "corpus").is_dir():
        raise SystemExit(f"benchmark data not found at {SHARED}; set BLOCKDRAFT_SHARED_DATA")
    return SHARED


def pretrain_files() -> list[Path]:
    """The pretraining corpus files, in a fixed order."""
    c = require_shared() / "corpus"
    files = sorted((c / "openstax").glob("*.txt")) + sorted((c / "more" / "openstax").glob("*.txt"))
    files += [c / "tinyshakespeare" / "input.txt", c / "wikitext2_tokens" / "valid.txt"]
    return files


def heldout_file() -> Path:
    """Held-out text for lattices: WikiText-2 test (never trained on)."""
    return require_shared() / "corpus" / "wikitext2_tokens" / "test.txt"


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps([str(p) for p in parts]).encode()).hexdigest()[:10]


def bpe_tokenizer(vocab_size: int = BPE_VOCAB):
    """A byte-level BPE trained with HF tokenizers on the pretraining corpus (cached)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    files = pretrain_files()
    path = CACHE / f"bpe{vocab_size}-{_key(vocab_size, *[f.name for f in files])}.json"
    if path.is_file():
        return Tokenizer.from_file(str(path)), path
    path.parent.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    t0 = time.perf_counter()
    tok.train([str(f) for f in files], trainer)
    tok.save(str(path))
    print(f"trained BPE {vocab_size} in {time.perf_counter() - t0:.1f}s -> {path}")
    return tok, path


def encode_lines(tok, path: Path) -> list[np.ndarray]:
    """Token ids of each non-empty line of a text file."""
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    return [np.array(e.ids, dtype=np.int64) for e in tok.encode_batch(lines)]


def pretrain_ids(tok, tok_path: Path) -> list[np.ndarray]:
    """The pretraining corpus as token-id lines (cached as one .npy + offsets)."""
    base = CACHE / f"pretrain-{tok_path.stem}"
    if (base.with_suffix(".ids.npy")).is_file():
        flat = np.load(base.with_suffix(".ids.npy"))
        off = np.load(base.with_suffix(".off.npy"))
        return [flat[a:b] for a, b in zip(off[:-1], off[1:], strict=True)]
    lines: list[np.ndarray] = []
    for f in pretrain_files():
        lines += encode_lines(tok, f)
    off = np.cumsum([0] + [x.size for x in lines])
    np.save(base.with_suffix(".ids.npy"), np.concatenate(lines))
    np.save(base.with_suffix(".off.npy"), off)
    return lines


def heldout_ids(tok) -> np.ndarray:
    """WikiText-2 test as one stream of token ids."""
    return np.concatenate(encode_lines(tok, heldout_file()))


def bench_lm(order: int = 4, prune: tuple[int, ...] | None = None):
    """The benchmark n-gram LM over BPE token ids (cached): returns (NgramTrainResult-like dict)."""
    from blockdraft.training.ngram import train_ngram
    from blockdraft.training.ngram.train import arpa_counts

    tok, tok_path = bpe_tokenizer()
    name = f"lm{order}-{tok_path.stem}" + (f"-prune{''.join(map(str, prune))}" if prune else "")
    prefix = CACHE / name
    meta_path = prefix.with_suffix(".json")
    if meta_path.is_file():
        return json.loads(meta_path.read_text()), tok, tok_path
    ids = pretrain_ids(tok, tok_path)
    r = train_ngram(ids, prefix, order=order, prune=prune)
    meta = {
        "arpa": str(r.arpa), "binary": str(r.binary), "order": order, "counts": list(r.counts),
        "num_ngrams": r.num_ngrams, "tokens": r.tokens, "seconds": round(r.seconds, 1),
        "command": r.command, "tokenizer": tok_path.name, "prune": list(prune or []),
    }
    assert arpa_counts(r.arpa) == r.counts
    meta_path.write_text(json.dumps(meta, indent=1))
    return meta, tok, tok_path


if __name__ == "__main__":
    meta, _, _ = bench_lm(4)
    print(json.dumps(meta, indent=1))
