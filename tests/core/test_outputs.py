"""The output rule (core/outputs.py): nothing already there is replaced unless the user says so;
only what the command writes is ever replaced; under --overwrite the old output stays until a
complete new one replaces it, and a run stopped early never replaces it."""

from __future__ import annotations

from pathlib import Path

import pytest

from blockdraft.core.errors import BlockdraftError
from blockdraft.core.outputs import claim_output


class RoomError(BlockdraftError):
    pass


def mode(path: Path, **kw: object) -> str:
    return claim_output(path, what="a thing", error=RoomError, **kw).mode  # type: ignore[arg-type]


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_folders(tmp_path: Path) -> None:
    assert mode(tmp_path / "new") == "new"
    (tmp_path / "empty").mkdir()
    assert mode(tmp_path / "empty") == "new"
    full = tmp_path / "full"
    full.mkdir()
    (full / "notes.txt").write_text("mine")
    with pytest.raises(RoomError, match=r"already holds files; pass --overwrite"):
        mode(full)
    with pytest.raises(RoomError, match=r"pass --resume to continue it, --overwrite"):
        mode(full, resume=False)
    assert mode(full, overwrite=True) == "overwrite"
    assert mode(full, resume=True) == "resume"
    with pytest.raises(RoomError, match="pass one of them"):
        mode(full, overwrite=True, resume=True)
    a_file = tmp_path / "prompts.jsonl"
    a_file.write_text("{}")
    for kw in ({}, {"overwrite": True}, {"resume": True}):
        with pytest.raises(RoomError, match="exists and is not a folder"):
            mode(a_file, **kw)
    assert (full / "notes.txt").read_text() == "mine" and a_file.read_text() == "{}"


def test_files(tmp_path: Path) -> None:
    out = tmp_path / "lm.arpa"
    assert mode(out, folder=False) == "new"
    out.write_text("x")
    with pytest.raises(RoomError, match=r"^-o .*lm.arpa already exists; pass --overwrite"):
        mode(out, folder=False)
    with pytest.raises(RoomError, match=r"^--plot .*lm.arpa already exists"):
        mode(out, folder=False, flag="--plot")
    assert mode(out, folder=False, overwrite=True) == "overwrite"
    with pytest.raises(RoomError, match="is a folder"):
        mode(tmp_path, folder=False, overwrite=True)


def test_a_sidecar_is_an_output_too(tmp_path: Path) -> None:
    """Issue 28 finding 5: `heads prompts -o P` rewrote an existing P.mix.json."""
    out = tmp_path / "p.jsonl"
    (tmp_path / "p.jsonl.mix.json").write_text("{}")
    with pytest.raises(RoomError, match=r"p.jsonl already has p.jsonl.mix.json beside it; pass "
                                        r"--overwrite"):
        mode(out, folder=False, sidecars=(".mix.json",))
    assert mode(out, folder=False, sidecars=(".mix.json",), overwrite=True) == "overwrite"
    (tmp_path / "q.jsonl.mix.json").mkdir()
    with pytest.raises(RoomError, match="q.jsonl.mix.json is a folder"):
        mode(tmp_path / "q.jsonl", folder=False, sidecars=(".mix.json",), overwrite=True)


@pytest.mark.parametrize("flag", ["overwrite", "resume"])
def test_files_the_command_does_not_write_are_refused_by_name(tmp_path: Path, flag: str
                                                              ) -> None:
    """Issue 28 finding 4: --overwrite deleted a notes.txt it had not written."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "plan.json").write_text("{}")
    (out / "train-00000.safetensors").write_text("")
    flags = {"resume": flag == "resume", "overwrite": flag == "overwrite"}
    own = ("plan.json", "train-*.safetensors")
    assert mode(out, own=own, **flags) == flag
    (out / "notes.txt").write_text("mine")
    with pytest.raises(RoomError, match=r"holds files that are not part of a thing \(notes.txt\), "
                                        "and blockdraft never replaces what it did not write"):
        mode(out, own=own, **flags)
    assert (out / "notes.txt").read_text() == "mine"


def _claim(path: Path, **kw: object) -> object:
    return claim_output(path, what="a thing", error=RoomError, resume=False,
                        **kw)  # type: ignore[arg-type]


def test_overwrite_replaces_only_with_a_complete_output(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "a").write_text("old")
    before = _tree(out)
    # complete: the new folder replaces the old one, and the handle names the final path
    with _claim(out, overwrite=True).writing() as w:  # type: ignore[attr-defined]
        assert w.path != out and w.path.parent == out.parent
        (w.path / "a").write_text("new")
        assert _tree(out) == before  # the old one stays while the new one is written
        assert w.final(w.path / "a") == out / "a"
    assert _tree(out) == {"a": b"new"} and w.complete
    # stopped early: the old output stays and the partial one is dropped, with an error
    with pytest.raises(RoomError, match=r"stopped at 1 of 3: -o .*out was left as it was.*"
                                        "continue it with --resume"):
        with _claim(out, overwrite=True).writing() as w:  # type: ignore[attr-defined]
            (w.path / "a").write_text("partial")
            w.stopped("stopped at 1 of 3")
    assert _tree(out) == {"a": b"new"}
    # an interrupt: the old output stays, the interrupt goes on
    with pytest.raises(KeyboardInterrupt):
        with _claim(out, overwrite=True).writing() as w:  # type: ignore[attr-defined]
            (w.path / "a").write_text("half")
            raise KeyboardInterrupt
    assert _tree(out) == {"a": b"new"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary left


def test_a_new_output_that_stopped_early_is_kept_and_says_so(tmp_path: Path) -> None:
    out = tmp_path / "new"
    with _claim(out).writing() as w:  # type: ignore[attr-defined]
        assert w.path == out
        out.mkdir()
        (out / "a").write_text("part")
        w.stopped("stopped at 1 of 3")
    assert not w.complete and _tree(out) == {"a": b"part"}
    assert w.partial_message() == (f"stopped at 1 of 3: -o {out} holds a partial thing; the "
                                   "same command with --resume goes on from there")


# ---------------------------------------------------------------- issue 42: at the rename


def _write_group(w: object, names: tuple[str, ...]) -> None:
    from blockdraft.core.files import write_text_atomic

    path = w.path  # type: ignore[attr-defined]
    for name in names:
        write_text_atomic(path.with_name(name), f"mine {name}")


@pytest.mark.parametrize("kind", ["file", "folder", "group", "prefix"])
def test_an_output_that_appeared_meanwhile_is_not_replaced(tmp_path: Path, kind: str) -> None:
    """Issue 42 row 1: the check before any work held, but another run's output that appeared
    after it was replaced at the rename without --overwrite. Now the rename itself refuses
    (every kind of output), the other run's output stays, and no temporary is left."""
    from blockdraft.core.files import write_text_atomic

    out = tmp_path / ("out" if kind in ("folder", "prefix") else "out.txt")
    kw: dict[str, object] = {"folder": kind == "folder"}
    if kind == "group":
        kw["sidecars"] = (".mix.json",)
    if kind == "prefix":
        kw.update(prefix=True, sidecars=(".arpa", ".bin"))
    theirs = {"file": [out], "folder": [out / "a"], "group": [out.with_name("out.txt.mix.json")],
              "prefix": [out.with_name("out.bin")]}[kind]
    with pytest.raises(RoomError, match=r"appeared while this command ran .* pass --overwrite"):
        with claim_output(out, what="a thing", error=RoomError,
                          **kw).writing() as w:  # type: ignore[arg-type]
            for path in theirs:  # another run of the same command put its output there
                path.parent.mkdir(exist_ok=True)
                path.write_text("theirs")
            if kind == "folder":
                write_text_atomic(w.path / "a", "mine")
            elif kind == "file":
                write_text_atomic(w.path, "mine")
            elif kind == "group":
                _write_group(w, ("out.txt", "out.txt.mix.json"))
            else:
                _write_group(w, ("out.arpa", "out.bin"))
    assert all(p.read_text() == "theirs" for p in theirs)
    made = sorted(p.name for p in tmp_path.rglob("*"))
    assert made == sorted({p.name for p in theirs} | {p.parent.name for p in theirs
                                                       if p.parent != tmp_path})
    assert not [p for p in tmp_path.rglob(".*")]
    if kind != "file":
        return
    # with --overwrite given, the user allowed the path to be replaced whenever it appears
    out.unlink()
    output = claim_output(out, what="a thing", error=RoomError, overwrite=True, folder=False)
    assert output.mode == "new"
    with output.writing() as w:
        out.write_text("theirs")
        write_text_atomic(w.path, "mine")
    assert out.read_text() == "mine"


def test_a_new_output_built_beside_its_path_is_kept_when_stopped_early(tmp_path: Path) -> None:
    """A new output that is renamed into place (not filled in place) still follows rule 4."""
    out = tmp_path / "heads"
    with claim_output(out, what="heads", error=RoomError, resume=False,
                      in_place=False).writing() as w:
        assert w.path != out
        (w.path / "a").write_text("part")
        w.stopped("stopped at step 3 of 9")
    assert not w.complete and _tree(out) == {"a": b"part"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["heads"]
