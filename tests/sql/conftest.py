"""A tiny SQLite database with foreign keys (built once per session) and helpers to score on it."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from mtsql.core.sql.schema import load_schema
from mtsql.core.sql.scoring import DataSources

SCHOOL_SQL = """
CREATE TABLE dept (id INTEGER PRIMARY KEY, name TEXT);
CREATE TABLE student (id INTEGER PRIMARY KEY, name TEXT, age INTEGER, dept_id INTEGER REFERENCES dept(id));
CREATE TABLE likes (student_id INTEGER REFERENCES student(id), liked_id INTEGER REFERENCES student(id));
INSERT INTO dept VALUES (1, 'math'), (2, 'art');
INSERT INTO student VALUES (1, 'ann', 20, 1), (2, 'bob', 22, 1), (3, 'cid', 20, 2), (4, 'dan', 25, 2);
INSERT INTO likes VALUES (1, 2), (2, 3), (3, 1), (4, 1);
"""

SCHOOL_TABLES = {
    "db_id": "school",
    "table_names_original": ["dept", "student", "likes"],
    "table_names": ["dept", "student", "likes"],
    "column_names_original": [
        [-1, "*"],
        [0, "id"],
        [0, "name"],
        [1, "id"],
        [1, "name"],
        [1, "age"],
        [1, "dept_id"],
        [2, "student_id"],
        [2, "liked_id"],
    ],
    "column_names": [
        [-1, "*"],
        [0, "id"],
        [0, "name"],
        [1, "id"],
        [1, "name"],
        [1, "age"],
        [1, "dept id"],
        [2, "student id"],
        [2, "liked id"],
    ],
    "column_types": ["text", "number", "text", "number", "text", "number", "number", "number", "number"],
    "primary_keys": [1, 3],
    "foreign_keys": [[6, 1], [7, 3], [8, 3]],
}


@pytest.fixture(scope="session")
def school(tmp_path_factory) -> DataSources:
    """A data folder with database/school/school.sqlite and its tables.json."""
    root = tmp_path_factory.mktemp("school")
    folder = root / "database" / "school"
    folder.mkdir(parents=True)
    conn = sqlite3.connect(folder / "school.sqlite")
    conn.executescript(SCHOOL_SQL)
    conn.commit()
    conn.close()
    (root / "tables.json").write_text(json.dumps([SCHOOL_TABLES]))
    return DataSources(root / "database", root / "tables.json")


@pytest.fixture(scope="session")
def school_db(school) -> Path:
    return school.database("school")


@pytest.fixture(scope="session")
def school_schema(school_db):
    return load_schema(school_db)


@pytest.fixture(autouse=True)
def mtsql_home(tmp_path_factory, monkeypatch) -> Path:
    """A fresh $MTSQL_HOME per test: the gold cache never reads or writes the user's."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("MTSQL_HOME", str(home))
    return home
