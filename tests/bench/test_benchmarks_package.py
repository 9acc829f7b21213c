"""benchmarks/ is a package run from the repository root (``python -m benchmarks.NAME``): no
file edits ``sys.path``, every harness and shared module imports by its package name without
running anything, every harness has its ``__main__`` guard, and the wheel does not ship it."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
HARNESSES = sorted(p for p in BENCH.glob("*.py") if p.name != "__init__.py")
SHARED = sorted(p for p in (BENCH / "common").glob("*.py") if p.name != "__init__.py")


def module_of(path: Path) -> str:
    """``benchmarks/common/tasks.py`` -> ``benchmarks.common.tasks``."""
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def sys_path_edits(path: Path) -> list[int]:
    """The lines of ``path`` that touch ``sys.path`` (``sys.path.insert(...)``, ``from sys
    import path``, ...)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "path" \
                and isinstance(node.value, ast.Name) and node.value.id == "sys":
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "sys" \
                and any(alias.name == "path" for alias in node.names):
            lines.append(node.lineno)
    return sorted(lines)


def test_the_package_holds_the_harnesses_and_the_shared_modules() -> None:
    assert (BENCH / "__init__.py").is_file() and (BENCH / "common" / "__init__.py").is_file()
    names = {p.stem for p in HARNESSES}
    assert {"bench_real", "bench_trees", "bench_kim", "bench_gpu", "bench_sweep"} <= names
    assert {"tasks", "data", "report", "peers", "replay"} <= {p.stem for p in SHARED}
    doc = ast.get_docstring(ast.parse((BENCH / "__init__.py").read_text(encoding="utf-8")))
    assert doc is not None
    missing = [p.stem for p in [*HARNESSES, *SHARED] if p.stem not in doc]
    assert not missing, f"benchmarks/__init__.py's docstring does not list {missing}"


def test_no_file_under_benchmarks_edits_sys_path() -> None:
    found = {str(p.relative_to(ROOT)): lines for p in sorted(BENCH.rglob("*.py"))
             if (lines := sys_path_edits(p))}
    assert not found, f"sys.path edited at {found}: import benchmarks.common.X instead"


def test_the_checker_catches_a_sys_path_edit(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nfrom pathlib import Path\n\n"
                   "sys.path.insert(0, str(Path(__file__).parent))\nfrom sys import path\n")
    assert sys_path_edits(bad) == [4, 5]
    good = tmp_path / "good.py"
    good.write_text("import os\nimport sys\n\nprint(os.path.sep, sys.argv)\n")
    assert sys_path_edits(good) == []


@pytest.mark.parametrize("path", HARNESSES, ids=lambda p: p.stem)
def test_every_harness_runs_from_its_main_guard(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    guards = [node for node in tree.body if isinstance(node, ast.If)
              and ast.unparse(node.test) in ("__name__ == '__main__'", '__name__ == "__main__"')]
    assert guards, f"{path.name}: no `if __name__ == \"__main__\":` block"


@pytest.fixture(scope="module")
def imported() -> dict[str, str]:
    """Every module of the package imported by its name in one fresh interpreter, with a
    command line no harness accepts: ``{module: ""}``, or what went wrong (an exception, or
    what it printed: a harness that ran at import)."""
    names = [module_of(p) for p in [*HARNESSES, *SHARED]]
    script = (
        "import contextlib, importlib, io, json, sys\n"
        "sys.argv = ['benchmark', '--no-benchmark-takes-this-option']\n"
        "out = {}\n"
        f"for name in {names!r}:\n"
        "    buf = io.StringIO()\n"
        "    try:\n"
        "        with contextlib.redirect_stdout(buf):\n"
        "            importlib.import_module(name)\n"
        "        out[name] = buf.getvalue() and 'printed: ' + buf.getvalue()[-500:]\n"
        "    except BaseException as e:\n"
        "        out[name] = f'raised {type(e).__name__}: {e}'\n"
        "print(json.dumps(out))\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("path", [*HARNESSES, *SHARED], ids=module_of)
def test_every_module_imports_by_its_package_name_and_runs_nothing(
        imported: dict[str, str], path: Path) -> None:
    assert imported[module_of(path)] == "", f"{module_of(path)}: {imported[module_of(path)]}"


def test_the_wheel_ships_src_only() -> None:
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11+")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert config["tool"]["setuptools"]["packages"]["find"]["where"] == ["src"]
    assert not (ROOT / "src" / "benchmarks").exists()
