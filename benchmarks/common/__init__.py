"""What the benchmark harnesses share (the list: ``benchmarks/__init__.py``); no harness code.

Import its modules by their full names (``from benchmarks.common.tasks import load_task``);
this package re-exports nothing.
"""
