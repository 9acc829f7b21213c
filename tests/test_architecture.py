"""The house rules, checked: imports follow the data flow, no modules import each other in a
circle, no source file runs over 600 lines, and the product cites no file a user does not have
(see docs/architecture.md)."""

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


def imports_of(path: Path, text: str | None = None) -> list[tuple[int, str]]:
    """Every ``blockdraft.*`` module imported anywhere in the file (function bodies too);
    ``text``: the file's source, when it is not (yet) on disk."""
    tree = ast.parse(path.read_text(encoding="utf-8") if text is None else text)
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


def import_graph(paths: list[Path]) -> dict[str, set[str]]:
    """module -> the blockdraft modules it imports (every import, function bodies included, as
    :func:`imports_of` reads them; a package is its ``__init__``: ``from blockdraft.cli import
    heads`` imports ``blockdraft.cli``). Names that are no module of ``paths`` are left out."""
    modules = {module_name(p): p for p in paths}
    return {m: {name for _, name in imports_of(p) if name in modules and name != m}
            for m, p in modules.items()}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The circles of ``graph``: each strongly connected set of two or more modules (every one
    reaches every other through imports), sorted; Tarjan's algorithm, without recursion."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                if len(members) > 1:
                    cycles.append(sorted(members))
    return sorted(cycles)


# Being removed (issue 38): the lattice and its drawing, FST and file modules import each other.
# The fix makes them one-way; this exception goes with it.
ALLOWED_CYCLES: list[list[str]] = []


def test_no_modules_import_each_other_in_a_circle() -> None:
    cycles = [c for c in import_cycles(import_graph(all_modules())) if c not in ALLOWED_CYCLES]
    assert not cycles, "modules importing each other in a circle (make it one-way): " + "; ".join(
        " <-> ".join(c) for c in cycles)


def test_the_cycle_finder_sees_lazy_imports_and_packages() -> None:
    """The check itself can fail: a circle closed by an import inside a function, or through a
    package's ``__init__``, is found; a module importing into it one way is not in it."""
    sources = {
        "room/__init__.py": "from blockdraft.room.a import f\n",
        "room/a.py": "from blockdraft.room.b import g\ndef f():\n    return g\n",
        "room/b.py": "def g():\n    from blockdraft.room import c\n    return c\n",
        "room/d.py": "from blockdraft.room.a import f\n",
    }
    graph = {module_name(SRC / f): {n for _, n in imports_of(SRC / f, text)}
             for f, text in sources.items()}
    graph = {m: names & set(graph) for m, names in graph.items()}
    assert import_cycles(graph) == [["blockdraft.room", "blockdraft.room.a", "blockdraft.room.b"]]
    graph["blockdraft.room.b"] = set()  # the lazy import gone: one-way
    assert import_cycles(graph) == []


LONG_FILES_ALLOWED: set[str] = set()
MAX_LINES = 600


def test_no_source_file_runs_over_600_lines() -> None:
    long = {str(p.relative_to(SRC)): n for p in all_modules()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    over = {path: n for path, n in long.items() if path not in LONG_FILES_ALLOWED}
    assert not over, f"files over {MAX_LINES} lines (split them by concept): {over}"


def test_no_source_file_cites_the_private_shared_folder() -> None:
    hits = [
        f"{p.relative_to(SRC)}:{i}"
        for p in SRC.rglob("*")
        if p.is_file() and p.suffix in (".py", ".json", ".toml", ".md", ".txt")
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if "../shared" in line or "shared/SPEC" in line or "NOTES.md" in line
    ]
    assert not hits, f"cite docs/ instead: {hits}"


# ---- declared, not discovered (issue 38) ---------------------------------------------------------
PROBE_FREE_ROOMS = ("verify", "drafts", "oracle", "demo", "cli")
"""The rooms that read what a model, a drafter or a scorer can do from what it declares (its
``capabilities``, its ``needs``, its protocol), never by probing it."""
NOT_PROBES = ("self", "args", "torch")
"""``getattr`` on these is no feature probe: a dataclass reading its own fields, an argparse
namespace, the environment's torch build."""


def feature_probes(source: str) -> list[tuple[int, str]]:
    """``(line, call)`` of every ``hasattr(...)`` and every ``getattr(obj, "literal", ...)`` whose
    ``obj`` is not one of :data:`NOT_PROBES` (a name or an attribute chain starting with one):
    how a feature is discovered instead of declared. ``getattr(obj, name)`` with a computed name
    (a loop over a dataclass's fields) is no probe."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id == "hasattr":
            out.append((node.lineno, ast.unparse(node)))
        elif node.func.id == "getattr" and len(node.args) >= 2 and isinstance(
                node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            base = node.args[0]
            while isinstance(base, ast.Attribute):
                base = base.value
            if not (isinstance(base, ast.Name) and base.id in NOT_PROBES):
                out.append((node.lineno, ast.unparse(node)))
    return out


def test_no_feature_is_probed_downstream() -> None:
    found = [f"{path.relative_to(SRC)}:{line}: {call}"
             for room in PROBE_FREE_ROOMS for path in sorted((SRC / room).rglob("*.py"))
             for line, call in feature_probes(path.read_text(encoding="utf-8"))]
    assert not found, ("features probed instead of read from a declaration (capabilities, "
                       "needs, a protocol):\n" + "\n".join(found))


def test_the_probe_finder_finds_probes() -> None:
    """The check itself can fail: a literal getattr on a model and any hasattr are probes; a
    dataclass's own fields, argparse's namespace and a computed name are not."""
    source = ("a = getattr(model, 'exact_trees', True)\nb = hasattr(x, 'rescore')\n"
              "c = getattr(self, 'k')\nd = getattr(args, 'p')\ne = getattr(res, name)\n"
              "f = getattr(torch.backends, 'mps', None)\n")
    assert [line for line, _ in feature_probes(source)] == [1, 2]


def test_state_set_on_frozen_records_only_where_they_normalise_themselves() -> None:
    """``object.__setattr__`` (writing a frozen dataclass) only inside ``__post_init__``: state
    that changes lives in an object that says it is mutable, never pinned onto a model or a
    frozen record from outside."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        inside: set[int] = set()
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef) and fn.name == "__post_init__":
                inside |= {id(n) for n in ast.walk(fn)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "__setattr__" and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "object" and id(node) not in inside):
                found.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert not found, "object.__setattr__ outside __post_init__: " + ", ".join(found)
