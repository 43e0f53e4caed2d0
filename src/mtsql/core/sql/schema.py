"""Database schemas as the official evaluators see them, and the foreign-key map of ``tables.json``.

The parser's schema comes from the SQLite file itself (every ``sqlite_master`` table, then
``PRAGMA table_info``, names lower-cased, their original spelling kept beside them), not from
``tables.json``; the foreign-key map used to canonicalise columns in exact match comes from
``tables.json``. Both are cached.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from mtsql.base.errors import UsageError
from mtsql.base.files import expect, read_json

ALL_COLUMNS = "__all__"
# how long reading a schema waits for another process's write lock before it says the file is locked
BUSY_WAIT_S = 5.0


@dataclass(frozen=True)
class Schema:
    """Tables (lower-cased) with their columns, the id map of the official parser, and the same names
    as the database spells them (``spelled``: what an observation shows the model).

    ``ids`` maps ``"*"``, ``"table.column"`` and ``"table"`` to ``"__all__"``, ``"__table.column__"``
    and ``"__table__"``.
    """

    tables: dict[str, tuple[str, ...]]
    ids: dict[str, str]
    spelled: dict[str, tuple[str, ...]]

    @functools.cached_property
    def columns_of_table(self) -> dict[str, frozenset[str]]:
        """``"__table"`` -> the ids ``"__table.column__"`` of its columns."""
        columns: dict[str, set[str]] = {}
        for column in self.ids.values():
            if "." in column:
                columns.setdefault(column.split(".", 1)[0], set()).add(column)
        return {table: frozenset(ids) for table, ids in columns.items()}

    @classmethod
    def from_tables(cls, tables: dict[str, list[str] | tuple[str, ...]]) -> Schema:
        """From table -> columns as the database spells them."""
        ids = {"*": ALL_COLUMNS}
        for table, columns in tables.items():
            for column in columns:
                ids[f"{table.lower()}.{column.lower()}"] = f"__{table.lower()}.{column.lower()}__"
        for table in tables:
            ids[table.lower()] = f"__{table.lower()}__"
        lowered = {t.lower(): tuple(c.lower() for c in columns) for t, columns in tables.items()}
        return cls(lowered, ids, {t: tuple(c) for t, c in tables.items()})


@functools.lru_cache(maxsize=256)
def load_schema(db_path: str | Path) -> Schema:
    """The schema of a SQLite file, read once per path (``read_schema``)."""
    return read_schema(db_path)


def read_schema(db_path: str | Path) -> Schema:
    """The schema of a SQLite file, opened read-only. A file that cannot be read is a one-line UsageError
    saying why: empty, not SQLite (truncated, overwritten), without a table, or locked by another process
    that writes to it (after ``BUSY_WAIT_S``); without a schema no score means anything."""
    copy_again = "copy it again from the dataset (`mtsql data check` names every database it cannot read)"
    if Path(db_path).is_file() and Path(db_path).stat().st_size == 0:
        raise UsageError(f"{db_path}: an empty file (0 bytes), not a SQLite database; {copy_again}")
    uri = f"file:{quote(str(Path(db_path).resolve()))}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=BUSY_WAIT_S)
        try:
            names = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            tables = {}
            for name in names:
                escaped = name.replace("'", "''")
                tables[name] = [str(row[1]) for row in conn.execute(f"PRAGMA table_info('{escaped}')")]
        finally:
            conn.close()
    except sqlite3.OperationalError as exc:
        if "locked" not in str(exc):
            raise UsageError(f"{db_path}: not a readable SQLite database ({exc}); {copy_again}") from None
        raise UsageError(
            f"{db_path}: locked by another process that is writing to it ({exc}); let that process "
            "finish or stop it, then rerun (do not copy over a database in use)"
        ) from None
    except sqlite3.DatabaseError as exc:  # a truncated or overwritten file
        raise UsageError(f"{db_path}: not a readable SQLite database ({exc}); {copy_again}") from None
    if not tables:
        raise UsageError(f"{db_path}: a SQLite database without any table; {copy_again}")
    return Schema.from_tables(tables)


def check_databases(paths: Iterable[Path]) -> None:
    """A one-line UsageError (``read_schema``'s) for the first of ``paths`` that exists and cannot be read
    now (read again, not from ``load_schema``'s cache): a stage names such a database rather than leaving
    its turns out, or scoring them against nothing when the gold cache answers for its queries."""
    for path in paths:
        if Path(path).is_file():
            read_schema(path)


def foreign_key_map(entry: dict) -> dict[str, str]:
    """Column id -> canonical column id for one ``tables.json`` entry.

    Key sets are built greedily: each foreign-key pair joins the first existing set that holds
    either of its ends (sets are never merged), and every member maps to the member with the
    smallest column index. So two columns that reference the same key become interchangeable.
    """
    names = []
    tables = entry["table_names_original"]
    for table_index, column in entry["column_names_original"]:
        names.append(
            f"__{tables[table_index].lower()}.{column.lower()}__" if table_index >= 0 else ALL_COLUMNS
        )
    groups: list[set[int]] = []
    for left, right in entry["foreign_keys"]:
        group = next((g for g in groups if left in g or right in g), None)
        if group is None:
            group = set()
            groups.append(group)
        group.update((left, right))
    mapping = {}
    for group in groups:
        canonical = names[min(group)]
        for index in group:
            mapping[names[index]] = canonical
    return mapping


@functools.lru_cache(maxsize=8)
def load_foreign_key_maps(tables_json: str | Path) -> dict[str, dict[str, str]]:
    """db_id -> foreign-key map, for every database of a ``tables.json`` file (read once per path)."""
    entries = read_json(Path(tables_json))
    check_tables_json(entries, tables_json)
    return {entry["db_id"]: foreign_key_map(entry) for entry in entries}


TABLES_KEYS = ("db_id", "table_names_original", "column_names_original", "foreign_keys")


def check_tables_json(entries, path: str | Path) -> None:
    """A ``UsageError`` naming the file and entry unless ``entries`` is a list of database entries."""
    expect(
        isinstance(entries, list),
        Path(path),
        f"a tables.json holds a list of databases, not a "
        f"{type(entries).__name__}; copy it again from the dataset",
    )
    for index, entry in enumerate(entries):
        missing = [key for key in TABLES_KEYS if key not in entry] if isinstance(entry, dict) else TABLES_KEYS
        expect(
            not missing,
            Path(path),
            f"entry {index} is not a database description (lacks "
            f"{', '.join(missing)}); copy the file again from the dataset",
        )
