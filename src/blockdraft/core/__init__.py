"""The bottom of the house: what every room trades in and the helpers every room shares.

Nothing here imports another blockdraft room (numpy and the standard library only), so every
room can import from here without a cycle (see ``docs/architecture.md``).

Modules:
    errors    BlockdraftError, the root of every room's error class; BlockdraftWarning
    efficiency the counting rule of block efficiency B (tokens per serial call)
    extras    the optional parts (pyproject extras hf, onnx, wfst) and their install hint
    outputs   the rule every command that writes an output follows (--overwrite, --resume)
    version   the package version (one home; ``pyproject.toml`` reads it from here)
    arrays    numpy helpers (torch tensors accepted, torch never imported)
    checks    validation of integers and token ids, raising the caller's error class
    files     atomic writes: files and folders appear complete or not at all
    digest    SHA-256 integrity digests, recorded when a file is written, checked when read
    jsonl     JSON-lines reading (one object per line), raising the caller's error class
    batch     DraftBatch: p drafts of h tokens with their scores
    signature reproducibility signatures (sacrebleu style) and the git commit
"""
