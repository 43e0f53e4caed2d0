"""The official SParC / CoSQL gold and prediction files, read the way the official programs read them.

One SQL per line (``SQL<TAB>db_id`` in gold files; anything after a TAB is ignored in predictions),
interactions separated by lines that are blank after ``strip()``. Predictions then get every
``value`` substring replaced by ``1`` (case-sensitive, so ``VALUE`` stays and fails), exactly as both
official programs do (test-suite ``evaluation.py`` at e97acc5 and the SParC script).

A final interaction with no blank line after it is kept, as the test-suite program keeps it. The
SParC script drops it from both files; mtsql reads a file one way whatever the execution algorithm,
so that exact match never depends on ``--exec-semantics``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mtsql.errors import UsageError


@dataclass(frozen=True)
class FileTurn:
    """One non-blank line: the SQL, its db_id (gold files) and its 1-based line number."""

    sql: str
    db_id: str | None
    line: int


def read_interactions(path: Path, *, gold: bool) -> list[list[FileTurn]]:
    """Interactions of an official-format file; a gold line without exactly one TAB is a UsageError."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.readlines()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    interactions: list[list[FileTurn]] = []
    current: list[FileTurn] = []
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text:
            interactions.append(current)
            current = []
            continue
        fields = text.split("\t")
        if gold and len(fields) != 2:
            raise UsageError(f"{path} line {number}: a gold line must be 'SQL<TAB>db_id', "
                             f"found {len(fields)} tab-separated field(s)")
        current.append(FileTurn(fields[0], fields[1] if gold else None, number))
    if current:
        interactions.append(current)
    return interactions


def prediction_line(text: str) -> str:
    """What a prediction becomes once written as one line of a file and read back (newlines become
    spaces, then the official ``line.strip().split("\t")[0]``)."""
    return text.replace("\r", " ").replace("\n", " ").strip().split("\t")[0]


def replace_value_placeholder(sql: str) -> str:
    """The official ``value`` -> ``1`` replacement: every substring, case-sensitive."""
    return sql.replace("value", "1")
