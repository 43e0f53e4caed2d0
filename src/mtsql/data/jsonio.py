"""Reading JSON data files with errors that name the file and the line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mtsql.errors import UsageError


def read_json(path: Path) -> Any:
    """Parse a JSON file; a missing or malformed file is a one-line ``UsageError``."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: file not found (set MTSQL_DATA to a data folder that has it)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read ({exc})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path} line {exc.lineno} column {exc.colno}: malformed JSON ({exc.msg})") from None


def expect(condition: bool, path: Path, message: str) -> None:
    """Raise a ``UsageError`` naming ``path`` unless the data has the expected shape."""
    if not condition:
        raise UsageError(f"{path}: {message}")
