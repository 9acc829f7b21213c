"""``blockdraft doctor``: which optional parts this environment has, and their versions.

Public:
    probe_parts() -> list[Part]: each part, found by loading it (not by its metadata alone)
    version_line() -> str: what ``blockdraft --version`` prints

A part is present when it loads: the native search library opens, a module imports, a KenLM
tool is an executable file, a CUDA device answers. An installed package that fails to import
is reported absent, with the reason.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import platform
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from blockdraft.cli.common import JSON_HELP, add_command, print_json
from blockdraft.core.version import __version__


@dataclass(frozen=True)
class Part:
    """One optional part of blockdraft.

    Attributes:
        name: what it is (``native search``, ``pynini``, ...).
        present: whether it loads here.
        version: its version (None when absent or unversioned).
        detail: where it is or what it brings; when absent, why and what is lost.
        get: how to get it (empty when present).
    """

    name: str
    present: bool
    version: str | None
    detail: str
    get: str


def _native() -> Part:
    from blockdraft.rescorers.ngram import native

    path = native.library_path()
    if native.available():
        extra = "" if native.can_write_binary() else " (built before its binary writer)"
        return Part("native search", True, None, f"{path}{extra}", "")
    return Part("native search", False, None,
                f"missing ({path}): the exact p-best search runs in Python, "
                f"{native.PYTHON_SLOWDOWN}", native.HOW_TO_BUILD)


def _kenlm_tools() -> Part:
    from blockdraft.rescorers.base import RescorerError
    from blockdraft.training.ngram import find_kenlm_tool

    try:
        found = [find_kenlm_tool(name) for name in ("lmplz", "build_binary")]
    except RescorerError:
        return Part("lmplz, build_binary", False, None,
                    "absent: `ngram train` uses its built-in estimator (the default, the same "
                    "model); lmplz only for --estimator lmplz, corpora beyond memory",
                    "`make setup` in a clone (scripts/build_kenlm.sh; needs boost)")
    return Part("lmplz, build_binary", True, None, ", ".join(map(str, found)), "")


def _module(name: str, dist: str, what: str, get: str,
            describe: Callable[[Any], str] | None = None) -> Part:
    try:
        module = importlib.import_module(name)
    except Exception as e:  # any failure to load is "absent", with the reason
        reason = " ".join(str(e).split()) or type(e).__name__
        installed = _dist_version(dist)
        why = f"installed ({installed}) but fails to import: {reason}" if installed else \
            "not installed"
        return Part(dist, False, installed, f"{why}; {what}", get)
    detail = what if describe is None else f"{what}; {describe(module)}"
    return Part(dist, True, _dist_version(dist), detail, "")


def _dist_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _gpu() -> Part:
    import torch

    if torch.cuda.is_available():
        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        return Part("GPU", True, torch.version.cuda, f"CUDA: {', '.join(names)}", "")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return Part("GPU", True, None, "Apple MPS", "")
    cuda = torch.version.cuda
    why = f"no CUDA device answers (torch built for CUDA {cuda})" if cuda else \
        "torch is a CPU build"
    return Part("GPU", False, None, f"{why}; everything runs on the CPU",
                "a CUDA build of torch and a CUDA device (docs/real-models.md)")


def probe_parts() -> list[Part]:
    """Every optional part, probed now (imports torch; transformers and onnxruntime when
    installed)."""
    return [
        _native(),
        _kenlm_tools(),
        _module("kenlm", "kenlm", "KenLM queries (the Python search, tests)",
                "pip install kenlm"),
        _module("pynini", "pynini", "the WFST backend (extra wfst)",
                "pip install 'blockdraft[wfst]' (Linux wheels)"),
        _module("onnxruntime", "onnxruntime", "ONNX Runtime, the fast CPU runtime (extra onnx)",
                "pip install 'blockdraft[onnx]'",
                lambda m: "providers " + ", ".join(m.get_available_providers())),
        _module("transformers", "transformers",
                "Hugging Face models, SmolLM2, head training (extra hf)",
                "pip install 'blockdraft[hf]'"),
        _module("torch", "torch", "models and training", "pip install torch"),
        _gpu(),
    ]


def version_line() -> str:
    """``blockdraft X.Y.Z (Python ..., platform)``."""
    return (f"blockdraft {__version__} (Python {platform.python_version()}, "
            f"{platform.system()} {platform.machine()})")


def cmd_doctor(args: argparse.Namespace) -> int:
    parts = probe_parts()
    if args.json:
        print_json({"version": __version__, "python": platform.python_version(),
                    "platform": f"{platform.system()} {platform.machine()}",
                    "parts": [asdict(p) for p in parts]})
        return 0
    # plain lines, never wrapped or cut: paths and reasons are read whole
    width = max(len(p.name) for p in parts)
    print(f"{version_line()}: optional parts")
    for p in parts:
        version = f" {p.version}" if p.version else ""
        print(f"  {p.name:<{width}}  {'yes' if p.present else 'no '}{version}  {p.detail}"
              + (f"; to get it: {p.get}" if p.get else ""))
    return 0


def add_parser(sub: Any) -> None:
    """``doctor``."""
    p = add_command(sub, "doctor", "which optional parts are here (native search, lmplz, "
                    "pynini, onnxruntime, transformers, a GPU) and their versions", cmd_doctor)
    p.add_argument("--json", action="store_true", help=JSON_HELP)
