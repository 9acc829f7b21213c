"""JSON-lines reading: one JSON object per line, errors naming the file and line.

Public surface:
    iter_jsonl(path, error) -> Iterator[(line number, dict)]
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def iter_jsonl(
    path: str | os.PathLike[str], error: type[Exception]
) -> Iterator[tuple[int, dict[str, Any]]]:
    """The JSON object of every non-blank line of ``path``, with its 1-based line number.

    Blank lines are skipped. The file is opened as UTF-8 (a missing file raises the
    ``OSError`` of ``open``: check it first where the caller wants its own message).

    Raises:
        error: ``"{path}:{line}: not valid JSON (...)"`` or ``"{path}:{line}: expected a JSON
            object per line"``, in the calling room's error class.
    """
    path = Path(path)
    with path.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise error(f"{path}:{line_no}: not valid JSON ({e.msg})") from e
            if not isinstance(rec, dict):
                raise error(f"{path}:{line_no}: expected a JSON object per line")
            yield line_no, rec
