"""The gold side of scoring, done once: gold parses and gold results, memoised per process and kept
on disk per database between runs.

Whatever the prediction, scoring a turn parses its gold query (exact match, hardness) and runs it
on the database files (execution match). :func:`parsed` and :func:`executed` do that work once per
process (a bounded memo, least recently used out; never mutate what they return). Inside
:func:`persisted`, one database's entries are first loaded from ``$MTSQL_HOME/cache/gold/`` and the
new ones saved at the end, so evaluating another prediction file against the same gold file (or
the same file again) parses and runs no gold query. The file name carries a digest of everything the
entries depend on: the database's SQLite files (name, size, modification time), the source of
``mtsql.core.sql`` and the versions of SQLite, NLTK, sqlparse and Python, so an edited database or
evaluator never serves old entries (and the file they left is deleted). Failures of the machine
rather than the query (timeouts, locks, I/O: ``ExecResult.transient``) are neither memoised nor saved.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import pickle
import sqlite3
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

from mtsql.base.files import write_bytes
from mtsql.base.paths import home_dir
from mtsql.core.sql.executor import ExecResult, ResultMemo, execute
from mtsql.core.sql.parser import parse_sql
from mtsql.core.sql.schema import load_schema

log = logging.getLogger(__name__)
_MEMO = ResultMemo(16_384)
_used: dict[tuple, object] | None = None  # inside persisted(): every entry looked up or computed


def _memoised(key: tuple, compute: Callable[[], object]):
    value = _MEMO.get(key, compute)
    if _used is not None and not (isinstance(value, ExecResult) and value.transient):
        _used[key] = value
    return value


def parsed(sql: str, schema_db: Path, semantics: str) -> dict:
    """The parse of a gold query (raises like :func:`mtsql.core.sql.parser.parse_sql`)."""
    return _memoised(
        ("parse", str(schema_db), sql, semantics),
        lambda: parse_sql(sql, load_schema(schema_db), semantics=semantics),
    )


def executed(
    db_path: Path, sql: str, *, timeout_s: float, max_rows: int, lossy_text: bool = True
) -> ExecResult:
    """The result of a gold query on one database file."""
    kind = "exec" if lossy_text else "exec strict-text"
    return _memoised(
        (kind, str(db_path), sql, float(timeout_s), int(max_rows)),
        lambda: execute(db_path, sql, timeout_s=timeout_s, max_rows=max_rows, lossy_text=lossy_text),
    )


def derived(kind: str, db_path: Path, sql: str, compute: Callable[[], object]):
    """Anything else computed from a gold query alone, for one database (``kind`` names it)."""
    return _memoised((kind, str(db_path), sql), compute)


def clear() -> None:
    _MEMO.clear()


@contextmanager
def persisted(db_id: str, folders: Sequence[Path]) -> Iterator[None]:
    """Load the saved entries of database ``db_id`` (under ``folders``: the database folder and the
    schema-only ones), and save them with those computed in the block when it ends without an error
    (only the entries of that database: gold work on files under ``folders/db_id``)."""
    global _used
    prefixes = tuple(str(Path(folder) / db_id) + os.sep for folder in folders)
    path = cache_file(db_id, folders)
    saved = _load(path)
    for key, value in saved.items():
        _memoised(key, lambda value=value: value)
    _used = {}
    try:
        yield
        new = {key: value for key, value in _used.items() if key not in saved and key[1].startswith(prefixes)}
    finally:
        _used = None
    if new:  # with what another process saved for this database meanwhile (BIRD splits a database's items)
        write_bytes(path, pickle.dumps(_load(path) | saved | new, protocol=pickle.HIGHEST_PROTOCOL))
        for old in path.parent.glob(f"{path.name.rsplit('-', 1)[0]}-*.pickle"):
            if old != path:  # entries of an older database file or evaluator: never served again
                old.unlink(missing_ok=True)


def _load(path: Path) -> dict:
    """The saved entries; a damaged file (cut short, overwritten, not a pickle of entries) is deleted
    with a warning and its entries computed again: a cache never decides a score."""
    try:
        with open(path, "rb") as handle:
            saved = pickle.load(handle)
    except FileNotFoundError:
        return {}
    except (
        EOFError,
        pickle.UnpicklingError,
        ValueError,
        TypeError,
        AttributeError,
        ImportError,
        IndexError,
        KeyError,
    ) as exc:  # what unpickling arbitrary bytes raises
        saved = exc
    if isinstance(saved, dict):
        return saved
    why = (
        f"{type(saved).__name__}: {saved}"
        if isinstance(saved, Exception)
        else f"holds a {type(saved).__name__}"
    )
    log.warning("gold cache %s is damaged (%s): deleted, its entries are computed again", path, why)
    path.unlink(missing_ok=True)
    return {}


def cache_file(db_id: str, folders: Sequence[Path]) -> Path:
    """Where a database's gold entries live: ``<db_id>-<where>-<what>.pickle``, ``where`` a digest of
    the folders, ``what`` one of everything the entries depend on."""
    where = hashlib.sha256("\0".join(str(Path(folder).resolve()) for folder in folders).encode())
    what = hashlib.sha256(code_digest().encode())
    for folder in folders:
        db_folder = Path(folder) / db_id
        files = sorted(p for p in db_folder.iterdir() if ".sqlite" in p.name) if db_folder.is_dir() else []
        for file in files:
            stat = file.stat()
            what.update(f"{file.name} {stat.st_size} {stat.st_mtime_ns}\n".encode())
    return home_dir() / "cache" / "gold" / f"{db_id}-{where.hexdigest()[:12]}-{what.hexdigest()[:20]}.pickle"


@functools.cache
def code_digest() -> str:
    """A digest of the code the entries come from: the SQL layer's source, SQLite, NLTK, sqlparse
    and Python versions; any change invalidates saved entries."""
    digest = hashlib.sha256()
    for source in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    versions = [
        sqlite3.sqlite_version,
        sys.version,
        *(metadata.version(name) for name in ("nltk", "sqlparse")),
    ]
    digest.update(" ".join(versions).encode())
    return digest.hexdigest()
