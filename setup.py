"""blockdraft's one native part: the exact p-best search, built as part of the package.

Everything else (metadata, packages, data) is in pyproject.toml; this file adds the library
``blockdraft/_native/libbdkenlm.so``: ``native/kenlm_pbest.cc`` compiled with the KenLM query
code vendored in ``native/kenlm`` (LGPL-2.1-or-later, see ``native/kenlm/README.md``; no boost
needed). ``pip install .``, ``pip wheel .`` and the editable install of ``make setup`` all
build it here, with the same flags, so a wheel's search is the clone's search.

The library is loaded with ctypes (:mod:`blockdraft.rescorers.ngram.native`), never imported:
it holds no Python C API, so its file has no ABI tag and the wheel is tagged
``py3-none-<platform>`` (one wheel serves every Python 3 on that platform).

Build knobs (environment): ``BLOCKDRAFT_BUILD_JOBS`` compiler processes (default: ``-jN`` of
``$MAKEFLAGS``, else the CPU count). Reading gzip/bzip2/xz-compressed ARPA files is compiled in
when the zlib, libbz2 and liblzma headers are found, as KenLM's own build does.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from multiprocessing.pool import ThreadPool
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1: the wheel package's
    from wheel.bdist_wheel import bdist_wheel  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent
KENLM = Path("native") / "kenlm"
LIB_NAME = "libbdkenlm"
MAX_ORDER = 6  # KenLM's compile-time limit on n-gram order (blockdraft trains up to 5)

# Compression libraries KenLM reads through when present: (define, header, library).
COMPRESSION = (("HAVE_ZLIB", "zlib.h", "z"), ("HAVE_BZLIB", "bzlib.h", "bz2"),
               ("HAVE_XZLIB", "lzma.h", "lzma"))


def _sources() -> list[str]:
    """native/kenlm_pbest.cc and every vendored KenLM .cc file (all of them are query code)."""
    found = [p.relative_to(ROOT).as_posix() for sub in ("lm", "util", "util/double-conversion")
             for p in sorted((ROOT / KENLM / sub).glob("*.cc"))]
    if not found:
        raise RuntimeError(f"the vendored KenLM sources are missing from {ROOT / KENLM}")
    return ["native/kenlm_pbest.cc", *found]


def _headers() -> list[str]:
    """Every vendored header: a change to one rebuilds the library (distutils tracks no
    includes)."""
    return sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / KENLM).rglob("*.h*"))


def _jobs(requested: int | None) -> int:
    if requested:
        return requested
    env = os.environ.get("BLOCKDRAFT_BUILD_JOBS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    m = re.search(r"(?:^|\s)-j\s*(\d+)", os.environ.get("MAKEFLAGS", ""))
    return int(m.group(1)) if m else (os.cpu_count() or 1)


class BuildNative(build_ext):
    """build_ext for a ctypes library: a plain ``libbdkenlm.so`` name, no ``PyInit`` export,
    compression support probed, sources compiled in parallel."""

    def get_ext_filename(self, fullname: str) -> str:
        parts = fullname.split(".")
        if parts[-1] == LIB_NAME:
            return os.path.join(*parts[:-1], f"{LIB_NAME}.so")
        return super().get_ext_filename(fullname)

    def get_export_symbols(self, ext: Extension) -> list[str]:
        return []  # no Python module inside: nothing named PyInit_ to export

    def build_extensions(self) -> None:
        for ext in self.extensions:
            for define, header, lib in COMPRESSION:
                if self._links(header, lib):
                    ext.define_macros.append((define, None))
                    ext.libraries.append(lib)
        jobs = _jobs(self.parallel if isinstance(self.parallel, int) else None)
        compiler = self.compiler
        if jobs > 1 and all(hasattr(compiler, m) for m in
                            ("_setup_compile", "_get_cc_args", "_compile")):
            compiler.compile = _parallel_compile(compiler, jobs)  # type: ignore[method-assign]
        super().build_extensions()

    def copy_extensions_to_source(self) -> None:
        # in place (an editable install): src/blockdraft/_native is a folder of no package
        build_py = self.get_finalized_command("build_py")
        for ext in self.extensions:
            package = ext.name.rpartition(".")[0]
            Path(build_py.get_package_dir(package)).mkdir(parents=True, exist_ok=True)
        super().copy_extensions_to_source()

    def _links(self, header: str, lib: str) -> bool:
        """Whether a program including ``header`` links against ``-l{lib}``."""
        from distutils.errors import CompileError, LinkError

        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp, "probe.c")
            src.write_text(f"#include <{header}>\nint main(void) {{ return 0; }}\n")
            try:
                objects = self.compiler.compile([str(src)], output_dir=tmp)
                self.compiler.link_executable(objects, "probe", output_dir=tmp,
                                              libraries=[lib])
            except (CompileError, LinkError):
                print(f"blockdraft: {header} or -l{lib} not found: KenLM is built without it",
                      file=sys.stderr)
                return False
        return True


def _parallel_compile(compiler, jobs: int):  # type: ignore[no-untyped-def]
    """``compiler.compile`` with ``jobs`` sources at a time (distutils compiles one by one)."""

    def compile_(sources, output_dir=None, macros=None, include_dirs=None, debug=False,
                 extra_preargs=None, extra_postargs=None, depends=None):
        macros, objects, extra_postargs, pp_opts, build = compiler._setup_compile(
            output_dir, macros, include_dirs, sources, depends, extra_postargs)
        cc_args = compiler._get_cc_args(pp_opts, debug, extra_preargs)

        def one(obj: str) -> None:
            src, ext = build[obj]
            compiler._compile(obj, src, ext, cc_args, extra_postargs, pp_opts)

        with ThreadPool(jobs) as pool:
            pool.map(one, objects)
        return objects

    return compile_


class WheelForAnyPython(bdist_wheel):
    """Tag the wheel ``py3-none-<platform>``: the native library uses no Python ABI."""

    def get_tag(self) -> tuple[str, str, str]:
        _, _, plat = super().get_tag()
        return "py3", "none", plat


native_search = Extension(
    f"blockdraft._native.{LIB_NAME}",
    sources=_sources(),
    depends=_headers(),
    include_dirs=[KENLM.as_posix()],
    define_macros=[("KENLM_MAX_ORDER", str(MAX_ORDER)), ("NDEBUG", None)],
    # Python's CFLAGS come first; these override its -O2/-g/-fwrapv where it has them, so the
    # flags are those scripts/build_kenlm.sh used (KenLM Release: -O3 -DNDEBUG).
    extra_compile_args=["-std=c++17", "-O3", "-g0", "-fno-wrapv"],
    extra_link_args=["-Wl,--no-undefined"] if sys.platform.startswith("linux") else [],
    language="c++",
)

setup(ext_modules=[native_search],
      cmdclass={"build_ext": BuildNative, "bdist_wheel": WheelForAnyPython})
