"""The output rule: nothing already there is replaced unless the user says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from blockdraft.core.errors import BlockdraftError
from blockdraft.core.outputs import output_mode


class RoomError(BlockdraftError):
    pass


def mode(path: Path, **kw: object) -> str:
    return output_mode(path, what="a thing", error=RoomError, **kw)  # type: ignore[arg-type]


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
