"""The official SParC / CoSQL / Spider gold and prediction files, read the way the official programs
read them.

One SQL per line (``SQL<TAB>db_id`` in gold files; anything after a TAB is ignored in predictions),
interactions separated by lines that are blank after ``strip()``; Spider files have no blank line
(every line is a question: an interaction of one turn). Predictions then get every
``value`` substring replaced by ``1`` (case-sensitive, so ``VALUE`` stays and fails), exactly as both
official programs do (test-suite ``evaluation.py`` at e97acc5 and the SParC script).

A final interaction with no blank line after it is kept, as the test-suite program keeps it. The
SParC script drops it from both files; mtsql reads a file one way whatever the execution algorithm,
so that exact match never depends on ``--exec-semantics``.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

from mtsql.base.errors import UsageError
from mtsql.base.files import read_text


@dataclass(frozen=True)
class FileTurn:
    """One non-blank line: the SQL, its db_id (gold files) and its 1-based line number."""

    sql: str
    db_id: str | None
    line: int


class Interaction(list):
    """The turns of one interaction, and the line it starts at (for an empty one, the blank line that
    ends it: two blank lines in a row make an interaction of no turn, as the official programs read)."""

    def __init__(self, line: int):
        super().__init__()
        self.line = line


def read_interactions(path: Path, *, gold: bool) -> list[Interaction]:
    """Interactions of an official-format file; a gold line without exactly one TAB is a UsageError."""
    interactions: list[Interaction] = []
    current = Interaction(1)
    for number, line in enumerate(_lines(path), start=1):
        text = line.strip()
        if not text:
            if not current:
                current.line = number
            interactions.append(current)
            current = Interaction(number + 1)
            continue
        if not current:
            current.line = number
        current.append(_file_turn(text, number, path, gold))
    if current:
        interactions.append(current)
    return interactions


def read_questions(path: Path, *, gold: bool) -> list[list[FileTurn]]:
    """A single-turn (Spider) file: one SQL per line, each an interaction of one turn. A blank line
    is a UsageError naming it (the test-suite program would read two sessions and stop); blank lines
    at the very end are ignored, as that program ignores them."""
    lines = [line.strip() for line in _lines(path)]
    while lines and not lines[-1]:
        lines.pop()
    questions = []
    for number, text in enumerate(lines, start=1):
        if not text:
            raise UsageError(
                f"{path} line {number} is blank: a Spider file has one SQL per line and no blank "
                f"lines (write a query, even a wrong one, for every question)"
            )
        questions.append([_file_turn(text, number, path, gold)])
    return questions


def _lines(path: Path) -> list[str]:
    """The lines of a UTF-8 file, as Python's text mode splits them (``\\n``, ``\\r\\n`` or ``\\r``); a
    byte-order mark before the first line is dropped (an editor's, not part of the SQL); bytes that are
    not UTF-8, a folder or a device are a UsageError."""
    if Path(path).is_dir():
        raise UsageError(f"{path} is a folder, not an official-format file of SQL lines")
    if Path(path).exists() and not Path(path).is_file():
        raise UsageError(f"{path} is not a regular file (a device or a pipe?): give an official-format file")
    try:
        text = read_text(path)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    return io.StringIO(text.removeprefix("\ufeff"), newline=None).readlines()


def _file_turn(text: str, number: int, path: Path, gold: bool) -> FileTurn:
    fields = text.split("\t")
    if gold and len(fields) != 2:
        raise UsageError(
            f"{path} line {number}: a gold line must be 'SQL<TAB>db_id', "
            f"found {len(fields)} tab-separated field(s)"
        )
    return FileTurn(fields[0], fields[1] if gold else None, number)


def prediction_line(text: str) -> str:
    """What a prediction becomes once written as one line of a file and read back (newlines become
    spaces, then the official ``line.strip().split("\t")[0]``)."""
    return text.replace("\r", " ").replace("\n", " ").strip().split("\t")[0]


def replace_value_placeholder(sql: str) -> str:
    """The official ``value`` -> ``1`` replacement: every substring, case-sensitive."""
    return sql.replace("value", "1")
