"""Settings that misbehave on purpose, for the sweep's resume and retry tests: importable by
name in spawned worker processes (``sys.path`` is passed on) and pickled by value to Ray
workers (``register_pickle_by_value``).

A plain module, not a conftest.py (imported by name, like ``ngram_testlib``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blockdraft.oracle.sweep import Resources, Setting


@dataclass(frozen=True)
class DyingSetting(Setting):
    """A setting whose worker process dies (``os._exit``) the first ``times`` it is built,
    counted in files under ``marks`` (a folder every worker sees); then it builds as its
    parent. ``times = -1``: it always dies."""

    marks: str = ""
    times: int = 1

    def build(self, resources: Resources | None = None, *args: Any, **kwargs: Any) -> Any:
        folder = Path(self.marks)
        deaths = len(list(folder.glob("death-*")))
        if self.times < 0 or deaths < self.times:
            (folder / f"death-{deaths}-{os.getpid()}").write_text("")
            os._exit(17)
        (folder / f"built-{os.getpid()}-{len(list(folder.glob('built-*')))}").write_text("")
        return super().build(resources, *args, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        """The parent's fields only: the same key as the setting it plays."""
        return Setting(**{f: getattr(self, f) for f in Setting.__dataclass_fields__}).to_dict()


class Interrupt(Exception):
    """Raised in place of Ctrl-C (which pytest would take for itself)."""


@dataclass(frozen=True)
class InterruptedSetting(Setting):
    """A setting whose build raises :class:`Interrupt`: the sweep stops there."""

    def build(self, resources: Resources | None = None, *args: Any, **kwargs: Any) -> Any:
        raise Interrupt(self.label)

    def to_dict(self) -> dict[str, Any]:
        return Setting(**{f: getattr(self, f) for f in Setting.__dataclass_fields__}).to_dict()


BUILT: list[str] = []


@dataclass(frozen=True)
class CountedSetting(Setting):
    """A setting that records every build in :data:`BUILT` (serial sweeps, this process)."""

    def build(self, resources: Resources | None = None, *args: Any, **kwargs: Any) -> Any:
        BUILT.append(self.label)
        return super().build(resources, *args, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        return Setting(**{f: getattr(self, f) for f in Setting.__dataclass_fields__}).to_dict()


def as_kind(kind: type[Setting], setting: Setting, **extra: Any) -> Setting:
    """``setting`` as an instance of ``kind`` (its fields and ``extra``)."""
    return kind(**{f: getattr(setting, f) for f in Setting.__dataclass_fields__}, **extra)
