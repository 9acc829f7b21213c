"""Model directories: ``config.json`` + ``model.safetensors`` (+ ``tokenizer.json``).

Public surface:
    save_model(model, directory, tokenizer=None, extra_meta=None) -> Path
    load_model(directory, device="cpu") -> BlockwiseLM | RescorerLM
    load_tokenizer(directory) -> Tokenizer | HFTokenizer
    read_model_config(directory) -> (kind, BlockwiseConfig, meta)

``config.json`` is ``{"format": "blockdraft-model", "format_version": 2, "kind":
"blockwise" | "rescorer", "config": {...BlockwiseConfig...}, "meta": {...}, "integrity":
{...}}``: version 2 seals the file with SHA-256 digests of itself and of ``model.safetensors``
(:func:`blockdraft.core.digest.seal`), recorded when they are written and checked by
:func:`read_model_config` and :func:`load_model`, so an edited, corrupted or swapped file is
refused rather than loaded as another model. Version 1 files (written before digests existed)
still load, unchecked and without a warning: they are validated as before. The model and
its tokenizer load separately (``load_model`` + ``load_tokenizer``) because a model is useful
without one (token-id benchmarks) and a tokenizer without the model; ``load_model`` still checks
that a ``tokenizer.json`` beside it has the model's vocabulary size. Every file is written
atomically (:mod:`blockdraft.core.files`), so an interrupted save never leaves a half-written
file under the real name.

Before the model is built, :func:`load_model` checks the config against the weights file's
header: its digest (version 2), or (version 1, unsealed) the shapes of a model skeleton on the
``meta`` device, so an edited config naming a huge model (``n_layer`` or ``d_model`` turned
into 2**40) is refused at once instead of allocating it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch

from blockdraft.core.digest import check_file, seal, sha256_file, unseal
from blockdraft.core.files import atomic_path, write_text_atomic
from blockdraft.models.blockwise import BlockwiseLM, RescorerLM
from blockdraft.models.config import BlockwiseConfig
from blockdraft.models.errors import ModelError
from blockdraft.models.tokenizer import TOKENIZER_FILE, BaseTokenizer, Tokenizer

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
FORMAT = "blockdraft-model"
FORMAT_VERSION = 2
"""The version :func:`save_model` writes (2: sealed with digests)."""
SUPPORTED_VERSIONS = (1, 2)
"""Versions :func:`load_model` reads (1: no digests)."""
MAX_CONTEXT = 1 << 20
"""The largest ``max_seq_len`` a checkpoint may have: the model's RoPE tables are built for
every position when it loads."""
_FIX = "save the model again with save_model"
HF_TOKENIZER_CONFIG = "tokenizer_config.json"
"""Beside ``tokenizer.json``, marks a transformers tokenizer (saved by ``HFTokenizer.save``)."""
MODEL_KINDS: dict[str, type[BlockwiseLM]] = {"blockwise": BlockwiseLM, "rescorer": RescorerLM}


def _write_json(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def save_model(
    model: BlockwiseLM,
    directory: str | Path,
    tokenizer: BaseTokenizer | None = None,
    extra_meta: dict[str, Any] | None = None,
) -> Path:
    """Write a model directory (created if needed; existing files are replaced).

    Args:
        model: a :class:`BlockwiseLM` or :class:`RescorerLM`.
        directory: where to write ``config.json``, ``model.safetensors`` and, with a
            tokenizer, ``tokenizer.json``.
        tokenizer: the model's tokenizer; its ``vocab_size`` must equal the model's.
        extra_meta: JSON-serialisable facts to keep under ``"meta"`` (training data, steps,
            held-out loss...).

    Returns:
        The directory.

    Raises:
        ModelError: on a model of an unknown class, a tokenizer of another vocabulary size, or
            ``extra_meta`` that JSON cannot hold.
    """
    from safetensors.torch import save_file

    if not isinstance(model, BlockwiseLM) or model.kind not in MODEL_KINDS:
        raise ModelError(
            f"save_model expects a BlockwiseLM or RescorerLM, got {type(model).__name__}"
        )
    if tokenizer is not None and tokenizer.vocab_size != model.config.vocab_size:
        raise ModelError(
            f"the tokenizer has {tokenizer.vocab_size} tokens but the model's vocab_size is "
            f"{model.config.vocab_size}; save the tokenizer the model was trained with"
        )
    meta = dict(extra_meta or {})
    try:
        json.dumps(meta)
    except (TypeError, ValueError) as e:
        raise ModelError(f"extra_meta must be JSON-serialisable: {e}") from e
    if model.config.max_seq_len > MAX_CONTEXT:
        raise ModelError(
            f"max_seq_len = {model.config.max_seq_len} exceeds the largest a checkpoint holds "
            f"({MAX_CONTEXT}); build the model with a smaller max_seq_len"
        )
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = {name: t.detach().contiguous().cpu() for name, t in model.state_dict().items()}
    with atomic_path(directory / WEIGHTS_FILE) as tmp:
        save_file(state, str(tmp), metadata={"format": FORMAT, "kind": model.kind})
        weights_digest = sha256_file(tmp)  # of exactly the bytes renamed into place
    _write_json(directory / CONFIG_FILE, seal({
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "kind": model.kind,
        "config": model.config.to_dict(),
        "meta": meta,
    }, {WEIGHTS_FILE: weights_digest}))
    if tokenizer is not None:
        tokenizer.save(directory)
    return directory


def read_model_config(directory: str | Path) -> tuple[str, BlockwiseConfig, dict[str, Any]]:
    """The ``kind``, config and meta of a model directory, without loading weights.

    Raises:
        ModelError: when ``config.json`` is missing or unreadable, is not a blockdraft model
            config, has an unknown format version, an unknown kind, or bad config fields, or
            (version 2) its digest is missing or differs: the file was changed since written.
    """
    kind, config, meta, _ = _read_config(Path(directory))
    return kind, config, meta


def _read_config(directory: Path) -> tuple[str, BlockwiseConfig, dict[str, Any],
                                           dict[str, str] | None]:
    """:func:`read_model_config` and the companion files' digests (None: a version 1 file)."""
    path = directory / CONFIG_FILE
    if not path.is_file():
        hint = (" (it looks like a Hugging Face model; load it with an adapter)"
                if (directory / "pytorch_model.bin").exists() else "")
        raise ModelError(
            f"no {CONFIG_FILE} in {directory}: not a blockdraft model directory{hint}; "
            "write one with save_model(model, directory)"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:  # ValueError: not UTF-8, not JSON
        raise ModelError(f"cannot read {path}: {e}; re-save the model with save_model") from e
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ModelError(
            f"{path} is not a blockdraft model config (expected \"format\": \"{FORMAT}\")"
        )
    version = data.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) \
            or version not in SUPPORTED_VERSIONS:
        raise ModelError(
            f"{path} has format_version {version!r}; this blockdraft reads versions "
            f"{list(SUPPORTED_VERSIONS)}: upgrade blockdraft"
        )
    # Digests first: a changed file is reported as such, not by whatever value it broke.
    digests = unseal(data, path, ModelError, _FIX)
    if digests is None and version >= 2:
        raise ModelError(
            f"{path}: format_version {version} files carry an 'integrity' member, this one has "
            f"none: the file was changed or corrupted since it was written; {_FIX}"
        )
    if digests is not None and WEIGHTS_FILE not in digests:
        raise ModelError(
            f"{path}: its 'integrity' member has no digest of {WEIGHTS_FILE}: the file was "
            f"changed or corrupted since it was written; {_FIX}"
        )
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in MODEL_KINDS:
        raise ModelError(
            f"{path} has unknown model kind {kind!r}; expected one of {sorted(MODEL_KINDS)}"
        )
    raw = data.get("config")
    if isinstance(raw, dict):
        # save_model writes every field: a missing one would silently load as its default
        missing = sorted({f.name for f in dataclasses.fields(BlockwiseConfig)} - set(raw))
        if missing:
            raise ModelError(f"{path}: config lacks field(s) {missing}; the file is damaged, "
                             "re-save the model with save_model")
    try:
        config = BlockwiseConfig.from_dict(raw)  # type: ignore[arg-type]
    except ModelError as e:
        raise ModelError(f"{path}: {e}") from e
    if config.max_seq_len > MAX_CONTEXT:
        raise ModelError(
            f"{path}: max_seq_len = {config.max_seq_len} exceeds the largest a checkpoint holds "
            f"({MAX_CONTEXT}); the file is damaged, {_FIX}"
        )
    meta = data.get("meta")
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise ModelError(f"{path}: meta must be a JSON object, got {type(meta).__name__}")
    return str(kind), config, dict(meta), digests


def load_model(directory: str | Path, device: torch.device | str = "cpu") -> BlockwiseLM:
    """The model saved in ``directory`` (a :class:`BlockwiseLM` or :class:`RescorerLM`, by
    ``kind``), in eval mode, on ``device``.

    Raises:
        ModelError: see :func:`read_model_config`; also when ``model.safetensors`` is missing
            or unreadable, differs from the digest ``config.json`` recorded (version 2), its
            tensors do not match the config (missing, unexpected or differently shaped; the
            message names them), or a ``tokenizer.json`` beside it has another vocabulary size.
    """
    directory = Path(directory)
    kind, config, _, digests = _read_config(directory)
    weights = directory / WEIGHTS_FILE
    if not weights.is_file():
        raise ModelError(
            f"no {WEIGHTS_FILE} in {directory} (its {CONFIG_FILE} is there): the save was "
            "interrupted or the file was removed; save the model again with save_model"
        )
    if digests is not None:
        check_file(weights, digests[WEIGHTS_FILE], ModelError,
                   f"{CONFIG_FILE} and {WEIGHTS_FILE} must come from one save_model; {_FIX}")
    # A sealed config is the one save_model wrote with these weights: the model it names is
    # built directly. An unsealed (version 1) one is checked on a skeleton first.
    model = MODEL_KINDS[kind](config, device="cpu") if digests is not None else None
    state = _read_weights(weights, kind, config, directory, model)
    if model is None:
        model = MODEL_KINDS[kind](config, device="cpu")
    model.load_state_dict(state)
    tok_file = directory / TOKENIZER_FILE
    if tok_file.is_file():
        size = _tokenizer_file_size(tok_file)
        # A transformers tokenizer (tokenizer_config.json beside it) may be smaller than the
        # model's padded vocabulary; blockdraft's own BPE is exactly its size.
        hf = (directory / HF_TOKENIZER_CONFIG).is_file()
        if size > config.vocab_size or (size != config.vocab_size and not hf):
            raise ModelError(
                f"{tok_file} has {size} tokens but {directory / CONFIG_FILE} "
                f"says vocab_size = {config.vocab_size}; put the model's own tokenizer beside it"
            )
    return model.to(device).eval()


def _read_weights(weights: Path, kind: str, config: BlockwiseConfig, directory: Path,
                  model: BlockwiseLM | None) -> dict[str, torch.Tensor]:
    """The tensors of ``weights``, once their names and shapes (read from the file's header)
    match those of ``model``, or without one, of a skeleton of the model ``config`` describes
    on the ``meta`` device (no memory). A config with more blocks and heads than the file has
    tensors is refused before even that (an edited ``n_layer`` must not build a million
    modules)."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(weights), framework="pt") as f:
            shapes = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
            modules = config.n_layer + config.h - 1  # each holds at least one tensor
            if modules > len(shapes):
                raise ModelError(
                    f"{directory / CONFIG_FILE} describes {config.n_layer} blocks and "
                    f"{config.h - 1} extra heads, but {weights} holds only {len(shapes)} "
                    "tensors; the two files come from different models: save the model again"
                )
            _check_shapes(shapes, model, kind, config, weights, directory)
            return {name: f.get_tensor(name) for name in shapes}
    except (SafetensorError, OSError, RuntimeError) as e:  # RuntimeError: a bad tensor
        raise ModelError(f"cannot read {weights}: {e}; save the model again") from e


def _check_shapes(shapes: dict[str, tuple[int, ...]], model: BlockwiseLM | None, kind: str,
                  config: BlockwiseConfig, weights: Path, directory: Path) -> None:
    """Refuse weights whose tensor names or shapes are not those of ``model`` (None: a
    skeleton of the config's model on the ``meta`` device)."""
    if model is None:
        try:
            with torch.device("meta"):
                model = MODEL_KINDS[kind](config, device="meta")
        except (RuntimeError, ValueError, OverflowError) as e:  # sizes torch cannot hold
            raise ModelError(
                f"{directory / CONFIG_FILE} describes a model torch cannot build ({e}); {_FIX}"
            ) from e
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    missing = sorted(set(expected) - set(shapes))
    unexpected = sorted(set(shapes) - set(expected))
    mismatched = [
        f"{name}: file {shapes[name]} vs config {expected[name]}"
        for name in sorted(set(shapes) & set(expected))
        if shapes[name] != expected[name]
    ]
    if missing or unexpected or mismatched:
        parts = []
        if mismatched:
            parts.append("shape mismatch " + "; ".join(mismatched[:5]))
        if missing:
            parts.append(f"missing tensors {missing[:5]}")
        if unexpected:
            parts.append(f"unexpected tensors {unexpected[:5]}")
        raise ModelError(
            f"{weights} does not match {directory / CONFIG_FILE}: " + ", ".join(parts)
            + "; the two files come from different models: save the model again"
        )


def _tokenizer_file_size(file: Path) -> int:
    """Tokens (added ones included) of a ``tokenizer.json`` file."""
    from tokenizers import Tokenizer as RustTokenizer

    try:
        return int(RustTokenizer.from_file(str(file)).get_vocab_size(with_added_tokens=True))
    except Exception as e:  # tokenizers raises a bare Exception on bad JSON
        raise ModelError(f"{file} is not a valid tokenizer file: {e}") from e


def load_tokenizer(directory: str | Path) -> BaseTokenizer:
    """The tokenizer saved beside a model (``directory/tokenizer.json``): blockdraft's
    :class:`Tokenizer`, or an :class:`~blockdraft.models.hf.HFTokenizer` when a transformers
    ``tokenizer_config.json`` is beside it (a model trained over a Hugging Face model's
    tokenizer; its ``vocab_size`` is then the model's). :func:`blockdraft.models.load_tokenizer`
    takes model names and Hugging Face folders too.

    Raises:
        ModelError: when there is none (save the model with ``tokenizer=``) or it is invalid.
    """
    directory = Path(directory)
    path = directory / TOKENIZER_FILE
    if not path.is_file():
        raise ModelError(
            f"no {TOKENIZER_FILE} in {directory}; save the model with "
            "save_model(model, directory, tokenizer=tok) or load a tokenizer with Tokenizer.load"
        )
    if (directory / HF_TOKENIZER_CONFIG).is_file():
        from blockdraft.models.hf.tokenizer import load_hf_tokenizer

        size = None
        if (directory / CONFIG_FILE).is_file():
            size = read_model_config(directory)[1].vocab_size
        return load_hf_tokenizer(directory, vocab_size=size)
    return Tokenizer.load(path)
