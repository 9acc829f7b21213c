"""Reproducibility signatures: every reported number carries the settings that produced it.

In the style of sacrebleu, a signature is ``key:value`` pairs joined by ``|``, e.g.
``lm:lm4.bin|ngrams:6.6M|order:4|kind:hits|h:8|k:16|p:16|alpha:1.0|backend:exact|n:200|
device:cpu(2)|cpu:AMD EPYC (avx2+avx512f+avx512_vnni+avx512_bf16)|version:0.1.0|commit:42ce341``.
The machine fields are added by :func:`environment`: timings differ between CPUs of one
machine kind (AVX2 only, AVX-512 with or without bfloat16 units), so a CPU's model and its
vector extensions are part of every number measured on it.
"""

from __future__ import annotations

import os
import platform
import subprocess
from functools import lru_cache
from pathlib import Path

from blockdraft.core.version import __version__


@lru_cache(maxsize=1)
def git_commit() -> str:
    """Short commit of the blockdraft checkout (``"unknown"`` outside a git checkout); a
    ``+dirty`` suffix marks uncommitted changes to tracked files other than benchmark results
    (which a benchmark run itself rewrites)."""
    root = Path(__file__).resolve().parents[3]
    try:
        sha = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, check=True, timeout=5,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--",
             ".", ":!benchmarks/results"],
            capture_output=True, text=True, check=True, timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return sha + ("+dirty" if dirty else "")


VECTOR_EXTENSIONS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile")
"""The CPU flags that change what a forward costs here, in the order a signature names them."""


def _cpuinfo(key: str) -> str | None:
    """The first ``key`` line's value in ``/proc/cpuinfo`` (None off Linux)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(key):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


@lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; else the platform's word for it)."""
    return _cpuinfo("model name") or platform.processor() or "unknown CPU"


@lru_cache(maxsize=1)
def cpu_flags() -> tuple[str, ...]:
    """The CPU's vector and matrix flags (``avx*``, ``amx*``, ``fma``, ``f16c``), sorted."""
    flags = (_cpuinfo("flags") or "").split()
    return tuple(sorted(f for f in flags if f.startswith(("avx", "amx", "fma", "f16c"))))


def cpu_signature() -> str:
    """``"AMD EPYC (avx2+avx512f+avx512_vnni+avx512_bf16)"``: the model and which of
    :data:`VECTOR_EXTENSIONS` it has."""
    have = [f for f in VECTOR_EXTENSIONS if f in cpu_flags()]
    return f"{cpu_model()} ({'+'.join(have) or 'no avx2'})"


def environment(device: str = "cpu") -> dict[str, str]:
    """Machine and code fields of a signature: the device, and on a CPU its model and vector
    extensions (:func:`cpu_signature`)."""
    cores = os.cpu_count() or 0
    if device == "cpu":
        return {"device": f"cpu({cores})", "cpu": cpu_signature(), "version": __version__,
                "commit": git_commit()}
    return {"device": device, "version": __version__, "commit": git_commit()}


def format_signature(fields: dict[str, object]) -> str:
    """``key:value|key:value`` in the given order (values stringified, ``|`` escaped)."""
    return "|".join(f"{k}:{str(v).replace('|', '/')}" for k, v in fields.items())


def human_count(n: int) -> str:
    """``6559809 -> '6.6M'``, ``12000 -> '12k'``."""
    if n >= 1_000_000:
        return f"{n / 1e6:.1f}M"
    if n >= 1_000:
        return f"{n / 1e3:.0f}k"
    return str(n)
