"""Sausage lattices: construction from head logits, paths, FST conversion, files, drawing.

Submodules: ``sausage`` (the type), ``fst`` (pynini acceptors; token id t <-> label t + 1),
``io`` (the versioned JSON file format), ``draw`` (DOT/SVG/PNG like Kim et al. Fig. 4). The
pynini and matplotlib parts import lazily.
"""

from typing import Any

from blockdraft.lattice.sausage import PAD_TOKEN, LatticeError, SausageLattice, log_softmax

__all__ = [
    "PAD_TOKEN",
    "LatticeError",
    "LatticeFile",
    "SausageLattice",
    "draw_lattice",
    "iter_lattices",
    "lattice_from_fst",
    "lattice_to_fst",
    "load_lattice",
    "log_softmax",
    "save_lattice",
    "save_lattices",
]

_LAZY = {
    "LatticeFile": "io", "load_lattice": "io", "save_lattice": "io", "iter_lattices": "io",
    "save_lattices": "io", "draw_lattice": "draw", "lattice_to_fst": "fst",
    "lattice_from_fst": "fst",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"blockdraft.lattice.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'blockdraft.lattice' has no attribute {name!r}")
