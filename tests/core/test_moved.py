"""Public names that moved or went away in the drafting pipeline's redesign (issue 38) fail
with an error naming what to use instead; other missing names stay ordinary AttributeErrors."""

from __future__ import annotations

import importlib
import re

import numpy as np
import pytest

from blockdraft.core.moved import moved_getattr


def test_moved_getattr_names_the_replacement_and_only_for_moved_names() -> None:
    get = moved_getattr("pkg.mod", {"old": ("pkg.new", "it moved")})
    with pytest.raises(ImportError, match=r"pkg\.mod\.old moved to pkg\.new \(it moved\)") as e:
        get("old")
    assert e.value.name == "pkg.mod.old"
    with pytest.raises(AttributeError, match="has no attribute 'other'"):
        get("other")


@pytest.mark.parametrize(("module", "name", "new"), [
    ("blockdraft.drafts", "TreeDrafter", "blockdraft.drafts.Drafter"),
    ("blockdraft.drafts", "row_source", "DraftTree.label"),
    ("blockdraft.verify", "predict", "drafter.draft"),
    ("blockdraft.verify", "Drafter", "blockdraft.drafts.Drafter"),
    ("blockdraft.models.protocol", "factored", "capabilities_of(model).factored"),
    ("blockdraft.models.protocol", "takes_last_only", "capabilities_of(model).last_only"),
])
def test_a_moved_name_says_where_it_went(module: str, name: str, new: str) -> None:
    mod = importlib.import_module(module)
    with pytest.raises(ImportError, match=f"moved to {re.escape(new)}"):
        getattr(mod, name)
    with pytest.raises(ImportError, match=f"moved to {re.escape(new)}"):
        exec(f"from {module} import {name}", {})


def test_the_conditional_drafts_module_says_where_its_drafters_went() -> None:
    with pytest.raises(ImportError, match="ConditionalDrafter, ConditionalTreeDrafter"):
        importlib.import_module("blockdraft.drafts.conditional")


@pytest.mark.parametrize(("method", "function"), [
    ("save", "save_lattice"), ("load", "load_lattice"), ("to_fst", "lattice_to_fst"),
    ("from_fst", "lattice_from_fst"), ("draw", "draw_lattice")])
def test_the_lattices_former_methods_name_their_functions(method: str, function: str) -> None:
    from blockdraft.lattice import SausageLattice

    lattice = SausageLattice.from_logits(np.zeros((2, 5)), 2)
    for owner in (lattice, SausageLattice):
        with pytest.raises(AttributeError, match=f"SausageLattice.{method} is gone: .*{function}"):
            getattr(owner, method)
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        lattice.nonsense  # noqa: B018
