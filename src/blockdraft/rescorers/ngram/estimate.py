"""Moved: this module is now :mod:`blockdraft.training.ngram.estimate` (n-gram LM training is the
training room's, which comes after this one: its names cannot be re-exported here).

Importing this module raises an :class:`ImportError` naming the new path.
"""

from blockdraft.rescorers.ngram._moved import moved_error

raise moved_error("estimate")
