"""JSON-lines files: one record per line."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

from mtsql.errors import UsageError


def read_jsonl(path: Path) -> list[dict]:
    return list(iter_jsonl(path))


def iter_jsonl(path: Path) -> Iterator[dict]:
    """Records of a .jsonl file; a malformed line is an error naming the file and line."""
    with Path(path).open() as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise UsageError(f"{path} line {number}: malformed JSON ({exc.msg})") from None


def write_jsonl(path: Path, rows: Iterable[dict]) -> int:
    """Write records, one per line; returns how many."""
    count = 0
    with Path(path).open("w") as handle:
        for row in rows:
            handle.write(json.dumps(row, default=str) + "\n")
            count += 1
    return count
