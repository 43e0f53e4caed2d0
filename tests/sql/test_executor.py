"""The read-only sandbox: refuses writes, stops runaway queries, survives hostile input."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import shutil
import sqlite3
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mtsql.core.sql import executor
from mtsql.core.sql.executor import ERROR_CLASSES, execute, execute_cached


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture()
def db(school_db, tmp_path):
    """A private copy of the school database (tests compare its bytes before and after)."""
    path = tmp_path / "school.sqlite"
    shutil.copy(school_db, path)
    return path


def test_typed_rows_and_preview(db):
    result = execute(db, "SELECT name, age, age / 3.0, NULL FROM student ORDER BY id LIMIT 2")
    assert result.ok and result.columns == ("name", "age", "age / 3.0", "NULL")
    assert result.rows == (("ann", 20, 20 / 3.0, None), ("bob", 22, 22 / 3.0, None))
    assert result.preview().startswith("name | age | age / 3.0 | NULL\nann | 20 |")
    assert result.preview().endswith("(2 rows)")
    assert len(result.preview(max_chars=20)) == 20


@pytest.mark.parametrize(
    "sql, error_class",
    [
        ("DELETE FROM student", "write_refused"),
        ("UPDATE student SET age = 1", "write_refused"),
        ("DROP TABLE student", "write_refused"),
        ("CREATE TABLE x (a)", "write_refused"),
        ("CREATE TEMP TABLE x (a)", "write_refused"),
        ("ATTACH ':memory:' AS m", "write_refused"),
        ("VACUUM", "write_refused"),
        ("PRAGMA query_only = 0", "write_refused"),
        ("PRAGMA user_version = 3", "write_refused"),
        ("BEGIN", "write_refused"),
        ("SELECT load_extension('x')", "write_refused"),
        ("SELEC name FROM student", "syntax"),
        ("SELECT name FROM student; SELECT 1", "syntax"),
        ("SELECT name FROM nowhere", "no_such_table"),
        ("SELECT nosuch FROM student", "no_such_column"),
        ("SELECT id FROM student JOIN dept", "ambiguous_column"),
        ("SELECT 1\x00", "syntax"),
        ("SELECT '\udcff'", "other"),
        ("SELECT '" + "x" * 10_000_000 + "'", "other"),
        ("SELECT zeroblob(100000000)", "other"),
    ],
)
def test_errors_are_classified_and_the_database_is_unchanged(db, sql, error_class):
    before = sha256(db)
    result = execute(db, sql)
    assert not result.ok and result.error_class == error_class and result.error_message
    assert sha256(db) == before


def test_vacuum_into_cannot_write_a_file(db, tmp_path):
    target = tmp_path / "copy.sqlite"
    assert execute(db, f"VACUUM INTO '{target}'").error_class == "write_refused"
    assert not target.exists()


def test_read_only_pragmas_are_allowed(db):
    assert execute(db, "PRAGMA table_info(student)").ok


def test_missing_database():
    assert execute(None, "SELECT 1").error_class == "no_database"
    assert execute("/nonexistent/x.sqlite", "SELECT 1").error_class == "no_database"


def test_row_cap_keeps_the_first_rows(db):
    result = execute(
        db, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c", max_rows=50
    )
    assert result.error_class == "too_many_rows" and result.truncated and len(result.rows) == 50


RUNAWAY = [
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
    "SELECT count(*) FROM student a, student b, student c, student d, student e, student f, student g, "
    "student h, student i, student j, student k, student l, student m, student n",
]


@pytest.mark.timeout(120)  # neither query ends on its own: only the budget can stop it
@pytest.mark.parametrize("sql", RUNAWAY)
def test_pathological_queries_are_stopped_by_the_budget(db, sql):
    result = execute(db, sql, timeout_s=0.5)
    assert result.error_class == "timeout" and result.error_message == "interrupted: time budget exceeded"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sql", RUNAWAY)
def test_a_runaway_query_stops_at_the_first_check_past_its_deadline(db, sql, monkeypatch):
    """On a clock that moves 0.25 s per reading, a 1 s budget ends at the fifth check; the wall time
    this takes on a real clock is measured by benchmarks/bench_sql_timeout.py."""
    readings = []
    monkeypatch.setattr(
        executor.time, "perf_counter", lambda: readings.append(0.25 * (len(readings) + 1)) or readings[-1]
    )
    result = execute(db, sql, timeout_s=1.0)
    assert result.error_class == "timeout"
    deadline = readings[0] + 1.0
    assert (
        len([r for r in readings if r > deadline]) <= 3
    )  # the check that stops it, the verdict, the wall time


def test_a_long_query_rarely_calls_back_into_python(db, monkeypatch):
    """The deadline check runs Python, which needs the GIL: done every few SQLite instructions it
    stalls the threads generating beside the SQL workers (and the workers with them)."""
    checks = []
    clock = executor.time.perf_counter
    monkeypatch.setattr(executor.time, "perf_counter", lambda: checks.append(1) or clock())
    count = (
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000000) "
        "SELECT count(*) FROM n"
    )
    assert execute(db, count).rows == ((1_000_000,),)
    assert len(checks) < 100  # about 17 million instructions


def test_text_that_is_not_utf8_is_decoded_leniently(tmp_path):
    path = tmp_path / "bad.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (a TEXT)")
    conn.execute("INSERT INTO t VALUES (CAST(x'41ff42' AS TEXT))")
    conn.commit()
    conn.close()
    assert execute(path, "SELECT a FROM t").rows == (("AB",),)


def make_db(path, rows: int):
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE student (id INTEGER)")
    conn.executemany("INSERT INTO student VALUES (?)", [(i,) for i in range(rows)])
    conn.commit()
    conn.close()
    return path


def test_a_kept_connection_is_replaced_with_the_file(db, tmp_path):
    assert execute(db, "SELECT count(*) FROM student").rows == ((4,),)
    os.replace(make_db(tmp_path / "new.sqlite", 7), db)
    assert execute(db, "SELECT count(*) FROM student").rows == ((7,),)
    assert [key[0] for key in executor._open.pool].count(os.fspath(db)) == 1  # the old one was closed
    link = tmp_path / "link.sqlite"
    link.symlink_to(db)
    assert execute(link, "SELECT count(*) FROM student").rows == ((7,),)
    link.unlink()
    link.symlink_to(make_db(tmp_path / "other.sqlite", 2))
    assert execute(link, "SELECT count(*) FROM student").rows == ((2,),)  # a link follows its new target
    db.unlink()
    assert execute(db, "SELECT count(*) FROM student").error_class == "no_database"


def test_a_cut_or_interrupted_query_leaves_the_next_one_whole(db):
    endless = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c"
    assert execute(db, endless, max_rows=10).error_class == "too_many_rows"
    assert execute(db, "SELECT count(*) FROM student").rows == ((4,),)
    assert execute(db, "SELECT count(*) FROM (" + endless + ")", timeout_s=0.2).error_class == "timeout"
    assert execute(db, "SELECT count(*) FROM student", timeout_s=5).rows == ((4,),)
    assert execute(db, "PRAGMA query_only = 0").error_class == "write_refused"
    assert execute(db, "DELETE FROM student").error_class == "write_refused"


def _count_in_child(db, sender):
    sender.send(execute(db, "SELECT count(*) FROM student").rows)


def test_a_forked_process_uses_its_own_connection(db):
    assert execute(db, "SELECT count(*) FROM student").ok  # the parent holds a connection
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_count_in_child, args=(db, sender))
    child.start()
    assert receiver.recv() == ((4,),)
    child.join()
    assert child.exitcode == 0 and execute(db, "SELECT count(*) FROM student").rows == ((4,),)


def test_open_connections_are_bounded_per_thread(tmp_path):
    for i in range(executor._OPEN_PER_THREAD + 5):
        assert execute(make_db(tmp_path / f"{i}.sqlite", i), "SELECT count(*) FROM student").rows == ((i,),)
    assert len(executor._open.pool) == executor._OPEN_PER_THREAD
    results = []
    worker = threading.Thread(
        target=lambda: results.append(execute(tmp_path / "3.sqlite", "SELECT count(*) FROM student"))
    )
    worker.start()
    worker.join()
    assert results[0].rows == ((3,),)


def test_gold_results_are_cached(db):
    first = execute_cached(db, "SELECT count(*) FROM student")
    assert execute_cached(db, "SELECT count(*) FROM student") is first and first.rows == ((4,),)


SQL_PIECES = st.sampled_from(
    [
        "SELECT",
        "*",
        "FROM",
        "student",
        "likes",
        "dept",
        "WHERE",
        "age",
        ">",
        "=",
        "1",
        "'x'",
        "(",
        ")",
        ",",
        "JOIN",
        "ON",
        "UNION",
        "ORDER BY",
        "LIMIT",
        "DELETE",
        "DROP TABLE",
        "INSERT INTO",
        "VALUES",
        "UPDATE",
        "SET",
        "ATTACH",
        "DETACH",
        "PRAGMA",
        "VACUUM",
        "CREATE",
        "TEMP",
        "TRIGGER",
        "WITH RECURSIVE",
        "AS",
        ";",
        "--",
        "\x00",
        "\udcff",
        "zeroblob(1000000)",
        "randomblob(99)",
        "count(*)",
        "name",
        "id",
        "BEGIN",
        "COMMIT",
        "REINDEX",
        "ANALYZE",
        "load_extension('a')",
        "writefile('x', 'y')",
        "printf('%.*c', 9999999, 'x')",
    ]
)


WHOLE_STATEMENTS = st.sampled_from(
    [
        "DELETE FROM student",
        "INSERT INTO dept VALUES (9, 'x')",
        "UPDATE student SET age = age + 1",
        "DROP TABLE likes",
        "ALTER TABLE student ADD COLUMN z",
        "CREATE INDEX i ON student(age)",
        "CREATE TRIGGER t AFTER INSERT ON dept BEGIN DELETE FROM student; END",
        "REPLACE INTO dept VALUES (1, 'y')",
        "PRAGMA journal_mode = WAL",
        "PRAGMA writable_schema = 1",
        "VACUUM",
        "REINDEX",
        "ANALYZE",
        "ATTACH 'other.sqlite' AS o",
        "SAVEPOINT s",
        "SELECT * FROM student; DELETE FROM student",
        "WITH d AS (DELETE FROM student RETURNING *) SELECT * FROM d",
        "DELETE FROM student RETURNING *",
    ]
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pieces=st.lists(SQL_PIECES | st.text(max_size=20) | WHOLE_STATEMENTS, max_size=12))
def test_fuzz_never_raises_and_never_changes_the_database(db, pieces):
    before = sha256(db)
    result = execute(db, " ".join(pieces) if len(pieces) != 1 else pieces[0], timeout_s=0.5, max_rows=100)
    assert result.ok or result.error_class in ERROR_CLASSES
    assert isinstance(result.preview(), str)
    assert sha256(db) == before
    assert execute(db, "SELECT count(*) FROM student").rows == ((4,),)  # nothing carried to the next query


def test_execute_cached_keeps_results_and_query_errors_but_not_a_failure_of_the_machine(db, monkeypatch):
    real_execute, calls = executor.execute, []
    locked = executor.ExecResult(False, (), (), "other", "database is locked", False, 0.0)
    answers = iter([locked])
    monkeypatch.setattr(
        executor,
        "execute",
        lambda *a, **k: calls.append(a[1]) or next(answers, None) or real_execute(*a, **k),
    )
    executor.forget_cached()
    assert execute_cached(db, "SELECT 1").transient and execute_cached(db, "SELECT 1").ok
    assert execute_cached(db, "SELECT 1").ok and calls == ["SELECT 1", "SELECT 1"]
    assert not execute_cached(db, "SELECT * FROM nowhere").transient
    assert execute_cached(db, "SELECT * FROM nowhere").error_class == "no_such_table" and len(calls) == 3
