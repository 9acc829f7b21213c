"""The house rules, checked: imports follow the data flow, and the product cites no file a user
does not have (see docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "blockdraft"

# The rooms in data-flow order: a module may import from its own room and from rooms before it,
# never from a later one. core is the leaf every room trades in; models come first in the flow
# (model forward -> head logits -> lattice -> rescorers -> drafts -> verify -> oracle);
# training (everything that makes weights) and the applications (the demo, the CLI) sit on top.
ROOMS = [
    "core", "models", "lattice", "rescorers", "drafts", "verify", "oracle",
    "training", "demo", "cli",
]
RANK = {room: i for i, room in enumerate(ROOMS)}


def room_of(module: str) -> str | None:
    """``blockdraft.verify.decode`` -> ``verify``; the package facade has no room."""
    parts = module.split(".")
    if parts[0] != "blockdraft" or len(parts) < 2 or parts[1] in ("__init__", "__main__"):
        return None
    return parts[1]


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports_of(path: Path) -> list[tuple[int, str]]:
    """Every ``blockdraft.*`` module imported anywhere in the file (function bodies too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                package = module_name(path).split(".")
                if path.name != "__init__.py":
                    package = package[:-1]
                base = package[: len(package) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.append((node.lineno, name))
        elif isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name) for alias in node.names)
    return [(line, name) for line, name in out if name.split(".")[0] == "blockdraft"]


def all_modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def test_every_room_is_known() -> None:
    rooms = {room_of(module_name(p)) for p in all_modules()} - {None}
    unknown = sorted(r for r in rooms if r not in RANK)
    assert not unknown, f"rooms missing from the order in this test: {unknown}"


def violations(path: Path, here: str) -> list[str]:
    """The imports in ``path`` that reach a room later than ``here``."""
    bad = []
    for line, name in imports_of(path):
        there = room_of(name)
        if there is not None and RANK[there] > RANK[here]:
            bad.append(f"line {line}: {here} imports {name} ({there} comes later)")
    return bad


@pytest.mark.parametrize("path", all_modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_imports_follow_the_data_flow(path: Path) -> None:
    here = room_of(module_name(path))
    if here is not None:
        bad = violations(path, here)
        assert not bad, "\n".join(bad)


def test_core_imports_only_core() -> None:
    for path in (SRC / "core").rglob("*.py"):
        for line, name in imports_of(path):
            assert room_of(name) == "core", f"{path.name}:{line} imports {name}"


def test_the_checker_catches_a_backward_import(tmp_path: Path) -> None:
    """The check itself can fail: a lattice module importing the verifier (even lazily,
    inside a function) is caught; importing the leaf is not."""
    fake = tmp_path / "fake.py"
    fake.write_text(
        "from blockdraft.core.batch import DraftBatch\n"
        "def f():\n    from blockdraft.verify.decode import decode\n    return decode\n"
    )
    assert violations(fake, "lattice") == [
        "line 3: lattice imports blockdraft.verify.decode (verify comes later)"
    ]
    assert violations(fake, "oracle") == []


def test_no_source_file_cites_the_private_shared_folder() -> None:
    hits = [
        f"{p.relative_to(SRC)}:{i}"
        for p in SRC.rglob("*")
        if p.is_file() and p.suffix in (".py", ".json", ".toml", ".md", ".txt")
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if "../shared" in line or "shared/SPEC" in line or "NOTES.md" in line
    ]
    assert not hits, f"cite docs/ instead: {hits}"
