"""The training room's error class.

Public surface:
    TrainingError      a training run, its data or its settings were invalid
"""

from __future__ import annotations

from blockdraft.models.errors import ModelError


class TrainingError(ModelError):
    """A training run was given invalid input: settings, data, prompts, or a checkpoint or
    distillation folder that does not match the run.

    A :class:`~blockdraft.models.ModelError` (and so a ``ValueError``): training is what makes
    a model's weights, and code that caught ``ModelError`` from training before this room
    existed still catches it. Messages name the offending value (or file) and say what to do.
    """
