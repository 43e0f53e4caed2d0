"""Gold parses and results: computed once, saved per database, never served once stale."""

from __future__ import annotations

import os
import pickle
import shutil

import pytest

from mtsql.core.sql import gold_cache
from mtsql.core.sql.executor import ExecResult
from mtsql.core.sql.scoring import DataSources, score

from ..caches import clear_caches

GOLD = [
    "SELECT name FROM student WHERE age > 20",
    "SELECT count(*) FROM dept",
    "SELECT name FROM student ORDER BY age",
]
PRED = ["SELECT name FROM student WHERE age > 21", "SELECT count(*) FROM likes", "SELECT name FROM student"]


@pytest.fixture()
def sources(school, tmp_path) -> DataSources:
    """A copy of the school database that the test may touch."""
    folder = tmp_path / "database" / "school"
    folder.mkdir(parents=True)
    shutil.copy(school.database("school"), folder / "school.sqlite")
    return DataSources(tmp_path / "database", school.tables_json)


@pytest.fixture()
def gold_work(monkeypatch) -> list[str]:
    """Every gold query gold_cache parses or runs (its own calls only: not the predictions')."""
    calls: list[str] = []
    real_parse, real_execute = gold_cache.parse_sql, gold_cache.execute
    monkeypatch.setattr(
        gold_cache, "parse_sql", lambda sql, *a, **k: calls.append(sql) or real_parse(sql, *a, **k)
    )
    monkeypatch.setattr(
        gold_cache, "execute", lambda db, sql, **k: calls.append(sql) or real_execute(db, sql, **k)
    )
    return calls


def scores(sources: DataSources) -> list:
    clear_caches()
    with gold_cache.persisted("school", (sources.db_dir,)):
        return [score(g, p, "school", sources) for g, p in zip(GOLD, PRED, strict=True)]


def test_a_second_run_does_no_gold_work_and_scores_the_same(sources, gold_work):
    first = scores(sources)
    assert len(gold_work) == 6  # three parses, three executions
    assert [(s.exact, s.execution) for s in first] == [(1, 1), (0, 0), (0, 0)]
    (saved,) = (gold_cache.cache_file("school", (sources.db_dir,)).parent).iterdir()
    gold_work.clear()
    assert scores(sources) == first and gold_work == []
    assert len(pickle.loads(saved.read_bytes())) == 15  # parse, hardness, rebuilt, test-suite query, result


def test_a_changed_database_file_gets_fresh_entries_and_the_old_ones_go(sources, gold_work):
    scores(sources)
    before = gold_cache.cache_file("school", (sources.db_dir,))
    db = sources.database("school")
    stat = db.stat()
    os.utime(db, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    after = gold_cache.cache_file("school", (sources.db_dir,))
    assert after != before
    gold_work.clear()
    scores(sources)
    assert len(gold_work) == 6 and after.exists() and not before.exists()


def test_timeouts_are_not_saved_and_a_damaged_file_is_rebuilt(sources, monkeypatch):
    path = gold_cache.cache_file("school", (sources.db_dir,))
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a pickle")
    timeout = ExecResult(False, (), (), "timeout", "interrupted: time budget exceeded", False, 5.0)
    monkeypatch.setattr(gold_cache, "execute", lambda *a, **k: timeout)
    assert [s.execution for s in scores(sources)] == [None, None, None]
    saved = pickle.loads(path.read_bytes())
    assert saved and not any(isinstance(value, ExecResult) for value in saved.values())


def test_nothing_is_saved_when_scoring_fails(sources):
    with pytest.raises(KeyError), gold_cache.persisted("school", (sources.db_dir,)):
        score(GOLD[0], PRED[0], "school", sources)
        raise KeyError("stop")
    assert not gold_cache.cache_file("school", (sources.db_dir,)).exists()


@pytest.mark.parametrize(
    "content",
    [b"gold cache\n", b"12345\n", pickle.dumps([1, 2]), pickle.dumps(None)],
    ids=["text (ValueError)", "digits", "a list", "None"],
)
def test_any_damaged_file_is_recomputed_with_a_warning(sources, gold_work, content, caplog):
    first = scores(sources)
    path = gold_cache.cache_file("school", (sources.db_dir,))
    path.write_bytes(content)
    gold_work.clear()
    with caplog.at_level("WARNING", logger="mtsql.core.sql.gold_cache"):
        assert scores(sources) == first
    assert len(gold_work) == 6  # computed again, not served from the damaged file
    assert f"gold cache {path} is damaged" in caplog.text
    assert isinstance(pickle.loads(path.read_bytes()), dict)  # saved again, whole


@pytest.mark.parametrize(
    "failure",
    [
        ("timeout", "interrupted: time budget exceeded"),
        ("other", "database is locked"),
        ("other", "disk I/O error"),
        ("other", "unable to open database file"),
        ("other", "out of memory"),
        ("no_database", "no database file at /gone/school.sqlite"),
    ],
)
def test_a_failure_of_the_machine_is_forgotten_and_the_next_scoring_runs_the_gold_again(
    sources, monkeypatch, failure
):
    """A gold query that failed because of the machine (load, a lock, I/O, memory), not because of the
    query, must not decide a later score: neither the process memo nor the saved file keeps it."""
    real_execute = gold_cache.execute
    flaky = ExecResult(False, (), (), *failure, False, 0.1)
    monkeypatch.setattr(gold_cache, "execute", lambda *a, **k: flaky)
    with gold_cache.persisted("school", (sources.db_dir,)):  # the process memo is not cleared in between
        assert score(GOLD[0], PRED[0], "school", sources).execution is None
        monkeypatch.setattr(gold_cache, "execute", real_execute)
        assert score(GOLD[0], GOLD[0], "school", sources).execution == 1
    path = gold_cache.cache_file("school", (sources.db_dir,))
    assert not any(value == flaky for value in pickle.loads(path.read_bytes()).values())


def test_a_query_error_is_remembered(sources, monkeypatch):
    """An error of the query itself (here UNION's sides disagree on their columns) is its result: run
    once, then served."""
    broken = "SELECT name FROM student WHERE age > 20 UNION SELECT name, age FROM student"
    runs: list[str] = []
    real_execute = gold_cache.execute
    monkeypatch.setattr(
        gold_cache, "execute", lambda db, sql, **k: runs.append(sql) or real_execute(db, sql, **k)
    )
    clear_caches()
    for _ in range(2):
        with gold_cache.persisted("school", (sources.db_dir,)):
            assert score(broken, "SELECT 1", "school", sources).execution is None
    assert runs == [broken]
