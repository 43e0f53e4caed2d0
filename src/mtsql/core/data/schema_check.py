"""`mtsql data check`'s comparison of a dataset's ``tables.json`` with its SQLite files.

Prompts show the schema of ``tables.json`` (:mod:`mtsql.core.agent.schema_prompt`) while queries run on
the database file: a table or column that one has and the other lacks makes the model write SQL that
cannot run, or hides what it could use. Names are compared as SQLite resolves them, without case.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from mtsql.base.errors import UsageError
from mtsql.base.files import read_json
from mtsql.base.paths import database_path
from mtsql.core.sql.schema import check_tables_json, load_schema


def schema_differences(tables_json: Path, db_ids: Iterable[str], root: Path) -> dict[str, list[str]]:
    """``{db_id: [difference, ...]}`` for each of ``db_ids`` whose database file exists and differs from
    its ``tables.json`` entry (or has none); databases that agree are left out."""
    entries = read_json(tables_json)
    check_tables_json(entries, tables_json)
    described = {entry["db_id"]: entry for entry in entries}
    found: dict[str, list[str]] = {}
    for db_id in sorted(set(db_ids)):
        db_file = database_path(db_id, root)
        if not db_file.is_file():
            continue
        if db_id not in described:
            found[db_id] = [f"not described in {tables_json.name}"]
            continue
        try:
            actual = load_schema(db_file).tables
        except UsageError as exc:  # unreadable: nothing to compare, and the reason is the difference
            found[db_id] = [str(exc)]
            continue
        differences = _differences(_listed(described[db_id]), actual)
        if differences:
            found[db_id] = differences
    return found


def _listed(entry: dict) -> dict[str, tuple[str, ...]]:
    """Table -> columns of one ``tables.json`` entry (original names, lower-cased)."""
    tables = [name.lower() for name in entry["table_names_original"]]
    columns: dict[str, list[str]] = {name: [] for name in tables}
    for table_index, column in entry["column_names_original"]:
        if table_index >= 0:  # -1 is the "*" column
            columns[tables[table_index]].append(column.lower())
    return {table: tuple(names) for table, names in columns.items()}


def _differences(listed: dict[str, tuple[str, ...]], actual: dict[str, tuple[str, ...]]) -> list[str]:
    out = [f"table {table} is in tables.json, not in the database" for table in listed if table not in actual]
    out += [
        f"table {table} is in the database, not in tables.json"
        for table in actual
        if table not in listed and not table.startswith("sqlite_")
    ]  # SQLite's own (sqlite_sequence)
    for table in (t for t in listed if t in actual):
        out += [
            f"column {table}.{c} is in tables.json, not in the database"
            for c in listed[table]
            if c not in actual[table]
        ]
        out += [
            f"column {table}.{c} is in the database, not in tables.json"
            for c in actual[table]
            if c not in listed[table]
        ]
    return out
