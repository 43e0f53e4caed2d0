"""Execution match: the test-suite algorithm (default) and the SParC-script one."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mtsql.core.sql.errors import OfficialCrash
from mtsql.core.sql.exec_match import _remove_distinct_tokens, remove_distinct, results_equal
from mtsql.core.sql.scoring import MAX_PREDICTION_CHARS, DataSources, score


@pytest.mark.parametrize(
    "gold, pred, order_matters, expected",
    [
        ([], [], False, True),  # both empty
        ([], [], True, True),
        ([(1,)], [], False, False),  # row counts differ
        ([(1, 2)], [(1,)], False, False),  # column counts differ
        ([(1, "a"), (2, "b")], [("b", 2), ("a", 1)], False, True),  # column permutation + row order
        ([(1, "a"), (2, "b")], [("b", 2), ("a", 1)], True, False),  # ... but rows must line up when ordered
        ([(1, "a"), (2, "b")], [("a", 1), ("b", 2)], True, True),
        ([(1,), (1,), (2,)], [(1,), (2,), (2,)], False, False),  # bags, not sets
        ([(1, 2, 3, 4, 5)], [(5, 4, 3, 2, 1)], False, True),  # wide rows: any permutation
        ([(1.0, 2)], [(1, 2)], False, True),  # 1 == 1.0
        (
            [(1, 1.5)],
            [(1.0, 1.5)],
            False,
            False,
        ),  # official quick-reject: 1 and 1.0 sort differently in a row
    ],
)
def test_results_equal(gold, pred, order_matters, expected):
    assert results_equal(gold, pred, order_matters=order_matters) is expected


def test_remove_distinct_drops_every_distinct_token_of_the_first_statement():
    assert remove_distinct("SELECT DISTINCT count(DISTINCT a) FROM t") == "SELECT  count( a) FROM t"
    assert remove_distinct("SELECT distinct_id FROM t") == "SELECT distinct_id FROM t"
    assert remove_distinct("SELECT a FROM t; DROP TABLE t") == "SELECT a FROM t; "  # sqlparse keeps the blank


_SQL_PIECES = st.sampled_from(
    [
        "SELECT",
        " ",
        "a",
        "DISTINCT",
        "distinct",
        ";",
        "\n",
        "\t",
        "GO",
        "go",
        "(",
        ")",
        "'x;'",
        '"d"',
        "--",
        "count",
        "*",
        "FROM t",
        ",",
        "1",
    ]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_SQL_PIECES, min_size=1, max_size=12).map("".join))
def test_remove_distinct_shortcut_agrees_with_sqlparse(sql):
    """Whatever the text, skipping sqlparse (no DISTINCT, no split) gives sqlparse's own answer."""
    try:
        expected = _remove_distinct_tokens(sql)
    except OfficialCrash:
        with pytest.raises(OfficialCrash):
            remove_distinct(sql)
        return
    assert remove_distinct(sql) == expected


def ex(school, gold, pred, **kw):
    return score(gold, pred, "school", school, etype="exec", **kw).execution


def test_testsuite_ignores_distinct_and_column_order(school):
    assert ex(school, "SELECT dept_id FROM student", "SELECT DISTINCT dept_id FROM student") == 1
    assert ex(school, "SELECT name, age FROM student", "SELECT age, name FROM student") == 1
    assert ex(school, "SELECT name FROM student WHERE age > 100", "SELECT name FROM dept WHERE id > 100") == 1


def test_order_matters_only_with_the_substring_order_by_in_the_gold(school):
    pred = "SELECT name FROM student ORDER BY name DESC"
    assert ex(school, "SELECT name FROM student ORDER BY name", pred) == 0
    assert ex(school, "SELECT name FROM student ORDER  BY name", pred) == 1  # two blanks: no "order by"
    assert (
        ex(
            school,
            "SELECT name FROM student WHERE id IN (SELECT id FROM student ORDER BY age)",
            "SELECT name FROM student ORDER BY name DESC",
        )
        == 0
    )  # an ORDER BY in a subquery counts


def test_spaced_operators_are_joined(school):
    assert (
        ex(school, "SELECT name FROM student WHERE age > = 22", "SELECT name FROM student WHERE age >= 22")
        == 1
    )


def test_failures_score_zero_and_a_failing_gold_is_unscorable(school):
    assert ex(school, "SELECT name FROM student", "SELECT nosuch FROM student") == 0
    # the global alias map lets this gold parse, but SQLite rejects it (like SParC's battle_death gold)
    gold = "SELECT T1.name FROM student EXCEPT SELECT T1.name FROM student AS T1"
    result = score(gold, "SELECT name FROM student", "school", school, etype="exec")
    assert result.execution is None and "gold fails" in result.error


def test_sparc_script_semantics(school):
    kw = {"exec_semantics": "sparc"}
    # DISTINCT and row order matter, columns are matched by their SELECT key, not by position
    assert ex(school, "SELECT dept_id FROM student", "SELECT DISTINCT dept_id FROM student", **kw) == 0
    assert (
        ex(
            school,
            "SELECT name FROM student ORDER BY age",
            "SELECT name FROM student ORDER BY age DESC",
            **kw,
        )
        == 0
    )
    assert ex(school, "SELECT name, age FROM student", "SELECT age, name FROM student", **kw) == 1
    # the aggregate is not part of the key: duplicate keys collapse, the last column wins
    assert (
        ex(school, "SELECT max(age), min(age) FROM student", "SELECT count(age), min(age) FROM student", **kw)
        == 1
    )
    # the raw gold runs as written: a spaced operator fails, the prediction first (0) or else the gold (null)
    spaced = "SELECT name FROM student WHERE age > = 22"
    assert ex(school, spaced, spaced, **kw) == 0
    assert ex(school, spaced, "SELECT name FROM student", **kw) is None


@pytest.mark.parametrize("exec_semantics", ["testsuite", "sparc"])
@pytest.mark.parametrize("etype", ["exec", "all"])
def test_a_missing_database_is_unscorable_whatever_the_prediction(school, tmp_path, exec_semantics, etype):
    # only a schema stand-in (as for wta_1): exact match still works, execution has nothing to run on
    stand_in = tmp_path / "schema_only"
    (stand_in / "school").mkdir(parents=True)
    (stand_in / "school" / "school.sqlite").write_bytes(school.database("school").read_bytes())
    sources = DataSources(tmp_path / "no_databases", school.tables_json, (stand_in,))
    gold = "SELECT name FROM student"
    for pred in (
        "",
        "SELECT name FROM student",
        "SELECT nosuch FROM student",
        "x" * (MAX_PREDICTION_CHARS + 1),
    ):
        result = score(gold, pred, "school", sources, etype=etype, exec_semantics=exec_semantics)
        assert result.execution is None, pred[:30]
    if etype == "all":
        assert score(gold, gold, "school", sources, etype=etype, exec_semantics=exec_semantics).exact == 1
        assert score(gold, "", "school", sources, etype=etype, exec_semantics=exec_semantics).exact == 0
