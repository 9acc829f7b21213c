"""Where the n-gram training code went: the names and modules that moved from this package to
:mod:`blockdraft.training.ngram`, and the error that says so.

n-gram LM training makes weights, so it is the training room's (docs/architecture.md); this
room comes before it and may not import it, so the old names cannot be re-exported here. They
fail instead, with an :class:`ImportError` naming the new path (an ``ImportError``, not an
``AttributeError``, so that ``from blockdraft.rescorers.ngram import train_ngram`` shows this
message rather than Python's generic one).

Public surface:
    MOVED                    old name (in ``blockdraft.rescorers.ngram``) -> its new path
    moved_error(old) -> ImportError naming the new path
"""

from __future__ import annotations

from blockdraft.core.moved import moved_error as core_moved_error

MOVED = {
    "train_ngram": "blockdraft.training.ngram.train_ngram",
    "NgramTrainResult": "blockdraft.training.ngram.NgramTrainResult",
    "find_kenlm_tool": "blockdraft.training.ngram.find_kenlm_tool",
    "interpolate_arpa": "blockdraft.training.ngram.interpolate_arpa",
    "InterpolationResult": "blockdraft.training.ngram.InterpolationResult",
    "train": "blockdraft.training.ngram.train",
    "estimate": "blockdraft.training.ngram.estimate",
    "interpolate": "blockdraft.training.ngram.interpolate",
}
"""The names ``blockdraft.rescorers.ngram`` exported, and its modules, that moved to
:mod:`blockdraft.training.ngram`; a module's names moved with it (``...ngram.train.X`` is
``blockdraft.training.ngram.train.X``)."""


def moved_error(old: str) -> ImportError:
    """The error for ``blockdraft.rescorers.ngram.<old>``, one of :data:`MOVED`."""
    new = MOVED[old]
    parent, _, leaf = new.rpartition(".")
    return core_moved_error(f"blockdraft.rescorers.ngram.{old}", new,
                            f"n-gram LM training is the training room's; import it from there: "
                            f"from {parent} import {leaf}")
