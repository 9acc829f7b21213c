"""Hypothesis profiles of the reader fuzzing harness.

``fuzz-default`` (used unless ``HYPOTHESIS_PROFILE`` names another): a handful of examples per
reader with a deadline, so the whole folder runs in a few seconds. ``fuzz-slow``: many
examples; ``fuzz-random``: a few dozen fresh random examples a run. The
``@pytest.mark.slow`` variants of each test run under it (``pytest -m slow
tests/fuzz``), and ``HYPOTHESIS_PROFILE=fuzz-slow`` puts every test under it.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_QUIET = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
          HealthCheck.data_too_large]
settings.register_profile("fuzz-default", max_examples=12, deadline=2000, derandomize=True,
                          suppress_health_check=_QUIET, database=None)
settings.register_profile("fuzz-slow", max_examples=600, deadline=10000,
                          suppress_health_check=_QUIET)
settings.register_profile("fuzz-random", max_examples=60, deadline=10000,
                          suppress_health_check=_QUIET, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or "fuzz-default")
