"""Sausage lattices: construction from head logits, paths, FST conversion, files, drawing."""

from blockdraft.lattice.sausage import PAD_TOKEN, LatticeError, SausageLattice, log_softmax

__all__ = ["PAD_TOKEN", "LatticeError", "SausageLattice", "log_softmax"]
