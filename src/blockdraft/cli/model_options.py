"""The options of the commands that load a model (``trace``, ``decode``): ``--model``,
``--heads``, ``--dtype``, ``--runtime``, ``--precision``, ``--draft-precision``, ``--threads``,
``--chat``; the model
they name, loaded (:func:`blockdraft.models.load_model` takes a blockdraft checkpoint folder, a
known name such as ``smollm2``, a Hugging Face folder or ``.gguf`` file with ``--heads``), its
tokenizer, and a prompt's ids (``--chat`` wraps it in the model's chat template)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from blockdraft.cli.common import CliError
from blockdraft.cli.values import Rule, add_rules, positive_int


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


def load_from_args(args: argparse.Namespace) -> Any:
    """The model of ``--model`` (``--heads``, ``--dtype``, ``--device``, ``--runtime``,
    ``--precision``, ``--draft-precision``, ``--threads``); a first ONNX export reports its
    stages on stderr."""
    from blockdraft.models import load_model

    return load_model(args.model, dtype=args.dtype, device=args.device, heads=args.heads,
                      runtime=args.runtime, precision=args.precision, threads=args.threads,
                      log=_stderr, draft_precision=args.draft_precision)


def model_tokenizer(model: Any, args: argparse.Namespace) -> Any:
    """The model's own tokenizer (a Hugging Face model's), else the one beside ``--model``."""
    from blockdraft.models import load_tokenizer

    tok = model.tokenizer  # every blockdraft model declares one (None: kept beside it)
    return tok if tok is not None else load_tokenizer(args.model)


def vocab_size_of(model: Any) -> int:
    """The model's vocabulary size ``V`` (its declared capabilities)."""
    from blockdraft.models.capabilities import capabilities_of

    vocab = capabilities_of(model).vocab_size
    if vocab is None:  # pragma: no cover - every model load_model makes declares one
        raise CliError(f"{type(model).__name__} declares no vocabulary size")
    return vocab


def encode_prompt(tok: Any, text: str, chat: bool) -> list[int]:
    """The ids of a prompt: ``text`` encoded, or with ``chat`` one user turn in the model's
    chat template (ending with the assistant's turn opener).

    Raises:
        CliError: ``chat`` with a tokenizer without a chat template.
    """
    if not chat:
        return [int(i) for i in tok.encode(text)]
    if not tok.has_chat_template:
        raise CliError("--chat: this model's tokenizer has no chat template (it is not a chat "
                       "model); drop --chat to decode the plain text")
    return [int(i) for i in tok.apply_chat_template([{"role": "user", "content": text}])]


def model_name(args: argparse.Namespace) -> str:
    """``--model`` as a signature names it: a path's last part, or the name."""
    name = str(args.model)
    return Path(name).name if Path(name).exists() else name


MODEL_RULES = (
    Rule("--precision", "is for --runtime onnxruntime; PyTorch's (and the static runtime's) "
         "precision is --dtype", lambda a: a.runtime == "onnxruntime",
         ("--precision", "int8")),
    Rule("--draft-precision", "is for --runtime onnxruntime; other runtimes run the heads in "
         "--dtype", lambda a: a.runtime == "onnxruntime", ("--draft-precision", "q4")),
    Rule("--dtype", "is PyTorch's; --runtime onnxruntime takes --precision float32|int8|q4",
         lambda a: a.runtime != "onnxruntime" or a.dtype == "float32",
         ("--runtime", "onnxruntime", "--dtype", "bfloat16")),
    Rule("--device", "does not apply with --runtime onnxruntime (it runs on the CPU); drop "
         "--device, or use --runtime torch|static",
         lambda a: a.runtime != "onnxruntime" or a.device == "cpu",
         ("--runtime", "onnxruntime", "--device", "cuda")),
)
"""The model options that apply only with some runtimes (:mod:`blockdraft.cli.values`)."""


def model_arguments(p: argparse.ArgumentParser) -> None:
    """``--model``, ``--heads``, ``--dtype``, ``--runtime``, ``--precision``,
    ``--draft-precision``, ``--threads`` and ``--chat`` of ``trace`` and ``decode`` (each adds
    its own ``--device``), and their rules."""
    p.add_argument("--model", required=True,
                   help="a blockdraft checkpoint folder, a known model name (smollm2), a "
                        "Hugging Face model folder or .gguf file (with --heads), or a Medusa "
                        "heads folder naming its base")
    p.add_argument("--heads", type=Path, default=None,
                   help="Medusa heads folder (any layout) for a Hugging Face model; overrides "
                        "the heads a known name brings")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default=None,
                   help="parameter dtype (default: a checkpoint as saved, a Hugging Face model "
                        "in float32; bfloat16 may break exact equality with greedy, see "
                        "docs/real-models.md)")
    p.add_argument("--runtime", choices=["torch", "onnxruntime", "static"], default="torch",
                   help="where the forward runs: PyTorch eager (default), ONNX Runtime (a "
                        "Hugging Face model exported once and cached; the fastest on a CPU) "
                        "or static (a Hugging Face model on a preallocated KV cache, in "
                        "--dtype float32|bfloat16; CUDA graphs on a GPU)")
    p.add_argument("--precision", choices=["float32", "int8", "q4"], default=None,
                   help="--runtime onnxruntime: float32 (default), int8 (per-row int8 "
                        "activations, chunk-invariant: still lossless against its own greedy) "
                        "or q4 (a model loaded from a GGUF file, e.g. smollm2, verified on the "
                        "file's own Q4_1/Q8_0 blocks: about a third of float32's weight "
                        "traffic; lossless against q4's own greedy: one draft a step, or a token "
                        "tree whose path a second forward confirms)")
    p.add_argument("--draft-precision", choices=["float32", "int8", "q4"], default=None,
                   help="--runtime onnxruntime: the heads' weights (Medusa, prefix heads or a "
                        "draft layer), whatever --precision: float32, or int8 / 4-bit blocks "
                        "(faster heads, slightly other drafts; the output stays the base's "
                        "greedy); default: the heads folder's recipe, else float32")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="intra-op threads of the runtime (default: torch's setting)")
    p.add_argument("--chat", action="store_true",
                   help="wrap each prompt in the model's chat template as one user turn "
                        "(an error if the model has none)")
    add_rules(p, *MODEL_RULES)

