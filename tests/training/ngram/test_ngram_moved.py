"""n-gram LM training moved from ``blockdraft.rescorers.ngram`` to ``blockdraft.training.ngram``:
the old names and modules fail with an ImportError that names the new path (the rescorers'
room comes first and may not import training, so they cannot be re-exported), and each named
path is where the object now is."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import blockdraft.training.ngram as training_ngram
from blockdraft.training.ngram import estimate, interpolate, train

# old statement -> (the new path its error must name, the object that path must give)
OLD_NAMES = {
    "train_ngram": ("blockdraft.training.ngram.train_ngram", training_ngram.train_ngram),
    "NgramTrainResult": ("blockdraft.training.ngram.NgramTrainResult",
                         training_ngram.NgramTrainResult),
    "find_kenlm_tool": ("blockdraft.training.ngram.find_kenlm_tool",
                        training_ngram.find_kenlm_tool),
    "interpolate_arpa": ("blockdraft.training.ngram.interpolate_arpa",
                         training_ngram.interpolate_arpa),
    "InterpolationResult": ("blockdraft.training.ngram.InterpolationResult",
                            training_ngram.InterpolationResult),
    "train": ("blockdraft.training.ngram.train", train),
    "estimate": ("blockdraft.training.ngram.estimate", estimate),
    "interpolate": ("blockdraft.training.ngram.interpolate", interpolate),
}


def _resolve(path: str) -> object:
    """The object a dotted path names (a module, or a name in one)."""
    try:
        return importlib.import_module(path)
    except ModuleNotFoundError:
        parent, _, leaf = path.rpartition(".")
        return getattr(importlib.import_module(parent), leaf)


@pytest.mark.parametrize("old", sorted(OLD_NAMES))
def test_an_old_name_fails_naming_its_new_path(old: str) -> None:
    new, obj = OLD_NAMES[old]
    with pytest.raises(ImportError, match=f"{new} ") as caught:
        exec(f"from blockdraft.rescorers.ngram import {old}", {})
    assert f"blockdraft.rescorers.ngram.{old} moved to" in str(caught.value)
    assert _resolve(new) is obj  # the path named is the real home


@pytest.mark.parametrize(
    ("statement", "new"),
    [
        ("import blockdraft.rescorers.ngram.train", "blockdraft.training.ngram.train"),
        ("from blockdraft.rescorers.ngram.train import train_ngram, find_kenlm_tool",
         "blockdraft.training.ngram.train"),
        ("from blockdraft.rescorers.ngram.estimate import estimate_kneser_ney",
         "blockdraft.training.ngram.estimate"),
        ("from blockdraft.rescorers.ngram.interpolate import INTERPOLATE_SUFFIXES",
         "blockdraft.training.ngram.interpolate"),
    ],
)
def test_an_old_module_path_fails_naming_its_new_path(statement: str, new: str) -> None:
    with pytest.raises(ImportError, match=f"moved to {new} "):
        exec(statement, {})


def test_the_rescorers_names_that_stayed_still_work_and_unknown_names_stay_unknown() -> None:
    import blockdraft.rescorers.ngram as ngram

    assert ngram.NgramLM.__module__ == "blockdraft.rescorers.ngram.lm"
    assert not hasattr(ngram, "no_such_name")  # an AttributeError, as for any module
    assert not set(OLD_NAMES) & set(ngram.__all__)


def test_the_rescorers_ngram_package_imports_no_training_code() -> None:
    code = ("import sys, blockdraft.rescorers.ngram\n"
            "print(sorted(m for m in sys.modules if m.startswith('blockdraft.training')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
