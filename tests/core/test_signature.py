"""Signatures name the machine a number was measured on: on a CPU, its model and the vector
extensions that change what a forward costs (core/signature.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from blockdraft.core import signature
from blockdraft.core.signature import VECTOR_EXTENSIONS, environment, format_signature


@pytest.fixture
def cpuinfo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Point the CPU readers at a written ``/proc/cpuinfo``; return the writer."""
    real = Path

    def write(text: str) -> None:
        file = tmp_path / "cpuinfo"
        file.write_text(text)
        monkeypatch.setattr(signature, "Path",
                            lambda p: file if str(p) == "/proc/cpuinfo" else real(p))
        signature.cpu_model.cache_clear()
        signature.cpu_flags.cache_clear()

    yield write
    signature.cpu_model.cache_clear()
    signature.cpu_flags.cache_clear()


def test_a_cpu_signature_names_the_model_and_its_vector_extensions(cpuinfo) -> None:
    cpuinfo("processor\t: 0\nmodel name\t: AMD EPYC 9R14\n"
            "flags\t\t: fpu sse2 avx avx2 fma avx512f avx512bw avx512_bf16 f16c\n"
            "processor\t: 1\nmodel name\t: something else\n")
    env = environment("cpu")
    assert env["cpu"] == "AMD EPYC 9R14 (avx2+avx512f+avx512_bf16)"
    assert env["device"].startswith("cpu(") and "cpu" not in environment("cuda:0")
    assert signature.cpu_flags() == ("avx", "avx2", "avx512_bf16", "avx512bw", "avx512f",
                                     "f16c", "fma")
    assert "|cpu:AMD EPYC 9R14 (avx2+avx512f+avx512_bf16)|" in format_signature(env)


def test_an_avx2_only_cpu_and_one_without_avx2_are_told_apart(cpuinfo) -> None:
    cpuinfo("model name\t: Intel Xeon\nflags\t\t: avx avx2 fma\n")
    assert environment()["cpu"] == "Intel Xeon (avx2)"
    cpuinfo("model name\t: Old\nflags\t\t: sse2\n")
    assert environment()["cpu"] == "Old (no avx2)"
    assert set(VECTOR_EXTENSIONS) >= {"avx2", "avx512f", "avx512_bf16"}
