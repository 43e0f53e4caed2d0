"""Schema rendering: CREATE TABLE text with keys and sample values, cached, with or without a database."""

from __future__ import annotations

import json
import sqlite3

import pytest

from mtsql.base.errors import UsageError
from mtsql.base.paths import FIXTURE_DATA
from mtsql.core.agent.schema_prompt import load_tables, render_schema


def test_concert_singer_has_keys_and_values():
    text = render_schema("concert_singer", FIXTURE_DATA, sample_values=2)
    assert "CREATE TABLE singer (\n  Singer_ID NUMBER,  -- e.g. 1, 2\n" in text
    assert "  Name TEXT,  -- e.g. 'Stark''s Park', 'Somerset Park'\n" in text
    assert (
        "  PRIMARY KEY (concert_ID),\n  FOREIGN KEY (Singer_ID) REFERENCES singer(Singer_ID),\n"
        "  FOREIGN KEY (concert_ID) REFERENCES concert(concert_ID)\n);"
    ) in text
    assert text.count("CREATE TABLE") == 4
    assert render_schema("concert_singer", FIXTURE_DATA, sample_values=2) is text  # cached


def test_missing_database_renders_without_values():
    text = render_schema("wta_1", FIXTURE_DATA)
    assert "CREATE TABLE players (" in text and "-- e.g." not in text


def test_no_values_when_asked_for_none():
    assert "-- e.g." not in render_schema("pets_1", FIXTURE_DATA, sample_values=0)


def test_tiny_database_quotes_names_and_cuts_long_values(tmp_path):
    (tmp_path / "sparc").mkdir()
    (tmp_path / "database" / "tiny").mkdir(parents=True)
    entry = {
        "db_id": "tiny",
        "table_names_original": ["my table"],
        "column_names_original": [[-1, "*"], [0, "id"], [0, "Home Town"], [0, "note"]],
        "column_types": ["text", "number", "text", "others"],
        "primary_keys": [1],
        "foreign_keys": [],
    }
    (tmp_path / "sparc" / "tables.json").write_text(json.dumps([entry]))
    with sqlite3.connect(tmp_path / "database" / "tiny" / "tiny.sqlite") as conn:
        conn.execute('CREATE TABLE "my table" (id INTEGER, "Home Town" TEXT, note BLOB)')
        conn.execute("INSERT INTO \"my table\" VALUES (1, ?, x'00')", ("it's " + "x" * 60,))
        conn.execute('INSERT INTO "my table" VALUES (2, NULL, NULL)')
    text = render_schema("tiny", tmp_path)
    assert text == (
        'CREATE TABLE "my table" (\n'
        "  id NUMBER,  -- e.g. 1, 2\n"
        f"  \"Home Town\" TEXT,  -- e.g. 'it''s {'x' * 35}...'\n"
        "  note OTHER,  -- e.g. <blob>\n"
        "  PRIMARY KEY (id)\n"
        ");"
    )
    assert load_tables("tiny", tmp_path)[0].columns[1] == ("Home Town", "TEXT")
    with pytest.raises(UsageError, match="not described"):
        render_schema("nope", tmp_path)
