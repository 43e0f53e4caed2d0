"""A database schema as the model sees it: CREATE TABLE statements with keys and sample values.

    render_schema("concert_singer", data_root, sample_values=3, dataset="spider")

Names, types and keys come from the dataset's own ``tables.json`` (Spider-DK's describes its modified
databases; a robustness set without one reads Spider's), else from the first of the data folder that
lists the database; example values per column are read
from the SQLite file through the read-only sandbox (none when the database file is missing, as for
``wta_1``). Renderings are cached per (database, data folder, number of values).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from mtsql.base.errors import UsageError
from mtsql.base.files import read_json
from mtsql.base.paths import data_dir, database_path
from mtsql.core.data import tables_files
from mtsql.core.sql.executor import execute
from mtsql.core.sql.schema import check_tables_json

TYPE_NAMES = {"number": "NUMBER", "text": "TEXT", "time": "TIME", "boolean": "BOOLEAN", "others": "OTHER"}
VALUE_CHARS = 40  # a longer sample value is cut
SAMPLE_TIMEOUT_S = 2.0
_PLAIN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[tuple[str, str], ...]  # (name, type)
    primary_key: tuple[str, ...]
    foreign_keys: tuple[tuple[str, str, str], ...]  # (column, referenced table, referenced column)


def render_schema(
    db_id: str, data_root: Path | None = None, sample_values: int = 3, dataset: str | None = None
) -> str:
    """The ``CREATE TABLE`` text of ``db_id``, each column commented with up to ``sample_values`` values."""
    return _render(db_id, data_dir(data_root), sample_values, dataset)


def load_tables(db_id: str, data_root: Path | None = None, dataset: str | None = None) -> tuple[Table, ...]:
    """The tables of ``db_id`` from ``dataset``'s ``tables.json``, else from the first of the data folder
    that lists it."""
    return _tables(data_dir(data_root), db_id, dataset)


@lru_cache(maxsize=512)
def _render(db_id: str, root: Path, sample_values: int, dataset: str | None) -> str:
    tables = _tables(root, db_id, dataset)
    db_file = database_path(db_id, root)
    blocks = []
    for table in tables:
        lines = []
        for name, type_name in table.columns:
            values = _sample_values(db_file, table.name, name, sample_values) if db_file.exists() else []
            comment = f"  -- e.g. {', '.join(values)}" if values else ""
            lines.append((f"  {_quote(name)} {type_name}", comment))
        if table.primary_key:
            lines.append((f"  PRIMARY KEY ({', '.join(_quote(c) for c in table.primary_key)})", ""))
        for column, ref_table, ref_column in table.foreign_keys:
            lines.append(
                (f"  FOREIGN KEY ({_quote(column)}) REFERENCES {_quote(ref_table)}({_quote(ref_column)})", "")
            )
        body = "\n".join(
            text + ("," if i < len(lines) - 1 else "") + comment for i, (text, comment) in enumerate(lines)
        )
        blocks.append(f"CREATE TABLE {_quote(table.name)} (\n{body}\n);")
    return "\n\n".join(blocks)


@lru_cache(maxsize=512)
def _tables(root: Path, db_id: str, dataset: str | None) -> tuple[Table, ...]:
    for path in tables_files(root, dataset):
        if path.exists():
            entry = _by_db(str(path)).get(db_id)
            if entry is not None:
                return _parse_entry(entry)
    raise UsageError(f"database '{db_id}' is not described in any tables.json under {root}")


@lru_cache(maxsize=8)
def _by_db(path: str) -> dict[str, dict]:
    entries = read_json(Path(path))
    check_tables_json(entries, path)
    return {entry["db_id"]: entry for entry in entries}


def _parse_entry(entry: dict) -> tuple[Table, ...]:
    names = entry["table_names_original"]
    columns = entry["column_names_original"]
    types = entry["column_types"]
    keys: set[int] = set()
    for key in entry["primary_keys"]:
        keys.update(key if isinstance(key, list) else [key])
    out = []
    for index, table in enumerate(names):
        own = [i for i, (t, _) in enumerate(columns) if t == index]
        fks = tuple(
            (columns[a][1], names[columns[b][0]], columns[b][1]) for a, b in entry["foreign_keys"] if a in own
        )
        out.append(
            Table(
                name=table,
                columns=tuple((columns[i][1], TYPE_NAMES.get(types[i], types[i].upper())) for i in own),
                primary_key=tuple(columns[i][1] for i in own if i in keys),
                foreign_keys=fks,
            )
        )
    return tuple(out)


def _sample_values(db_file: Path, table: str, column: str, limit: int) -> list[str]:
    if limit <= 0:
        return []
    sql = (
        f"SELECT DISTINCT {_quote(column, always=True)} FROM {_quote(table, always=True)} "
        f"WHERE {_quote(column, always=True)} IS NOT NULL LIMIT {int(limit)}"
    )
    result = execute(db_file, sql, timeout_s=SAMPLE_TIMEOUT_S, max_rows=limit)
    if not result.ok:
        return []
    return [_literal(row[0]) for row in result.rows]


def _literal(value: object) -> str:
    if isinstance(value, bytes):
        return "<blob>"
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value).replace("\n", " ")
    if len(text) > VALUE_CHARS:
        text = text[:VALUE_CHARS] + "..."
    return "'" + text.replace("'", "''") + "'"


def _quote(name: str, *, always: bool = False) -> str:
    if not always and _PLAIN_NAME.match(name):
        return name
    return '"' + name.replace('"', '""') + '"'
