"""Two versions of blockdraft timed against each other (``python -m benchmarks.before_after``).

``worker.py`` runs in a fresh process against whichever ``src`` is on its ``PYTHONPATH`` and
imports nothing from this package, so it runs the code of any commit; the driver
(``__main__.py``) alternates the two versions by process, round by round, and writes the
report.
"""
