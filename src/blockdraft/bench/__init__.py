"""Benchmark helpers shared by the CLI (`blockdraft bench`) and `benchmarks/`."""
