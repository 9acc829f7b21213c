"""The optional parts of blockdraft: which extra of ``pyproject.toml`` brings which packages,
and the one error a missing package turns into.

``pip install blockdraft`` brings the core (lattices, KenLM rescoring, the reference models,
traces, plots); the extras bring what only some parts need:

    hf      transformers, gguf, accelerate   Hugging Face causal LMs, GGUF files, head training
    onnx    onnxruntime, onnx, onnxscript    the ONNX Runtime model runtime, the neural
                                             rescorer's ONNX backend
    wfst    pynini                           the WFST rescoring backend, lattice acceptors
    ray     ray                              sweeps on a Ray cluster (``blockdraft sweep --ray``)
    all     every extra above

Public surface:
    EXTRAS                                    extra -> the modules it provides
    install_hint(extra) -> str                the command that installs an extra
    import_optional(module, extra, purpose, error) -> module   or ``error`` with the hint
"""

from __future__ import annotations

import importlib
from types import ModuleType

from blockdraft.core.errors import BlockdraftError

EXTRAS: dict[str, tuple[str, ...]] = {
    "hf": ("transformers", "gguf", "accelerate"),
    "onnx": ("onnxruntime", "onnx", "onnxscript"),
    "wfst": ("pynini",),
    "ray": ("ray",),
}
"""Each extra of ``pyproject.toml`` and the import names of the packages it installs."""


def install_hint(extra: str) -> str:
    """How to install the extra ``extra`` (one of :data:`EXTRAS`)."""
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}; known: {', '.join(EXTRAS)}")
    return (f"install it with `pip install 'blockdraft[{extra}]'` (or 'blockdraft[all]'; "
            "`make setup` installs everything)")


def import_optional(
    module: str, extra: str, purpose: str, error: type[BlockdraftError]
) -> ModuleType:
    """Import ``module``, a package of the extra ``extra``.

    Args:
        module: the import name, e.g. ``"pynini"`` or ``"onnxruntime"``.
        extra: the extra that installs it (:data:`EXTRAS`).
        purpose: what needs it, for the message (``"the wfst backend"``).
        error: the calling room's error class.

    Raises:
        error: when the module cannot be imported: ``"<purpose> needs <module> (...): <hint>"``.
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise error(f"{purpose} needs the Python package {module!r}, which is not installed: "
                    f"{install_hint(extra)}") from e
