"""Reading and writing files: JSON and JSON-lines with errors that name the file and line, and
atomic writes (a temporary sibling renamed into place, so a reader never sees half a file; the
file gets the permissions of the process umask, like any other file)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from mtsql.base.errors import UsageError


def read_json(path: Path) -> Any:
    """Parse a JSON file; a missing, UTF-16 or malformed file is a one-line ``UsageError``."""
    try:
        data = Path(path).read_bytes()
        if utf16 := _utf16(data):
            raise UsageError(f"{path}: {utf16} text, not UTF-8; save it as UTF-8")
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: file not found (set MTSQL_DATA to a data folder that has it)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read ({exc})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path} line {exc.lineno} column {exc.colno}: malformed JSON ({exc.msg})") from None


def read_text(path: Path) -> str:
    """A UTF-8 text file; UTF-16 text (a byte-order mark, or a NUL byte beside most characters) or bytes
    that are not UTF-8 are a one-line ``UsageError`` naming the encoding or the line (an ``OSError`` is
    left to the caller, who knows what the file is for)."""
    data = Path(path).read_bytes()
    if utf16 := _utf16(data):
        raise UsageError(f"{path}: {utf16} text, not UTF-8; save it as UTF-8")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UsageError(
            f"{path} line {line}: not UTF-8 text (byte {data[exc.start]:#04x}); save it as UTF-8"
        ) from None


def _utf16(data: bytes) -> str | None:
    """``UTF-16LE`` or ``UTF-16BE`` when ``data`` reads as UTF-16 text, else None: its byte-order mark,
    or, without one, a NUL byte in most odd (LE) or even (BE) places, as ASCII characters leave them
    (UTF-8 text has no NUL)."""
    marks = {b"\xff\xfe": "UTF-16LE", b"\xfe\xff": "UTF-16BE"}
    if data[:2] in marks:
        return f"{marks[data[:2]]} (with a byte-order mark)"
    pairs = len(data) // 2
    if pairs == 0 or b"\0" not in data:
        return None
    for order, start in (("LE", 1), ("BE", 0)):
        if data[start::2].count(0) > pairs / 2:
            return f"UTF-16{order}"
    return None


def check_folder(path: Path, setting: str, fix: str) -> Path:
    """``path`` as a folder to write into (it need not exist yet); a file on the way is a one-line
    ``UsageError`` naming ``setting`` and how to ``fix`` it."""
    for folder in (Path(path), *Path(path).parents):
        if folder.exists():
            if not folder.is_dir():
                raise UsageError(f"{setting}: {folder} is a file, not a folder; {fix}")
            break
    return Path(path)


def expect(condition: bool, path: Path, message: str) -> None:
    """Raise a ``UsageError`` naming ``path`` unless the data has the expected shape."""
    if not condition:
        raise UsageError(f"{path}: {message}")


def read_jsonl(path: Path) -> list[dict]:
    return list(iter_jsonl(path))


def iter_jsonl(path: Path) -> Iterator[dict]:
    """Records of a .jsonl file; a malformed line is an error naming the file and line."""
    with Path(path).open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise UsageError(f"{path} line {number}: malformed JSON ({exc.msg})") from None


def write_jsonl(path: Path, rows: Iterable[dict]) -> int:
    """Write records atomically, one per line; returns how many."""
    lines = [json.dumps(row, default=str, ensure_ascii=False) + "\n" for row in rows]
    write_text(path, "".join(lines))
    return len(lines)


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically."""
    write_text(path, json.dumps(data, indent=2, default=str) + "\n")


def write_text(path: Path, text: str) -> None:
    """Write a text file atomically (temporary sibling + rename)."""
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path: Path, data: bytes) -> None:
    """Write a file atomically (temporary sibling + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.filename:
            raise
        raise OSError(exc.errno, exc.strerror, str(path)) from None  # a full disk: say which file it stopped
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
