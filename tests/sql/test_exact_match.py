"""Exact set match as the official evaluators compute it (values and DISTINCT ignored, FK canonical)."""

from __future__ import annotations

import pytest

from mtsql.core.sql.errors import OfficialCrash
from mtsql.core.sql.exact_match import exact_match, rebuild
from mtsql.core.sql.parser import empty_sql, parse_sql
from mtsql.core.sql.schema import foreign_key_map


@pytest.fixture(scope="module")
def fk(school):
    return school.foreign_keys("school")


@pytest.fixture()
def em(school_schema, fk):
    def exact(gold, pred):
        return exact_match(
            rebuild(parse_sql(pred, school_schema), school_schema, fk),
            rebuild(parse_sql(gold, school_schema), school_schema, fk),
        )

    return exact


def test_foreign_key_map_is_built_greedily(fk):
    assert fk == {
        "__dept.id__": "__dept.id__",
        "__student.dept_id__": "__dept.id__",
        "__student.id__": "__student.id__",
        "__likes.student_id__": "__student.id__",
        "__likes.liked_id__": "__student.id__",
    }


def test_first_set_with_either_end_wins_and_sets_never_merge():
    entry = {
        "table_names_original": ["t"],
        "column_names_original": [[-1, "*"], [0, "a"], [0, "b"], [0, "c"], [0, "d"]],
        "foreign_keys": [[1, 2], [3, 4], [2, 4]],
    }
    # {1,2} and {3,4}; then (2,4) joins {1,2}: d maps to a (set 1) and then to c (set 2, written last)
    assert foreign_key_map(entry) == {
        "__t.a__": "__t.a__",
        "__t.b__": "__t.a__",
        "__t.c__": "__t.c__",
        "__t.d__": "__t.c__",
    }


@pytest.mark.parametrize(
    "gold, pred, expected",
    [
        # values are ignored in WHERE / HAVING / ON
        ("SELECT name FROM student WHERE age > 20", "SELECT name FROM student WHERE age > 99", 1),
        ("SELECT name FROM student WHERE name = 'ann'", "SELECT name FROM student WHERE name = 'zed'", 1),
        # the operator is not
        ("SELECT name FROM student WHERE age > 20", "SELECT name FROM student WHERE age < 20", 0),
        # DISTINCT is ignored in SELECT, in aggregates and in WHERE column units
        ("SELECT name FROM student", "SELECT DISTINCT name FROM student", 1),
        ("SELECT count(name) FROM student", "SELECT count(DISTINCT name) FROM student", 1),
        # ... but not inside a WHERE subquery, which is not column-rebuilt
        (
            "SELECT name FROM student WHERE id IN (SELECT liked_id FROM likes)",
            "SELECT name FROM student WHERE id IN (SELECT DISTINCT liked_id FROM likes)",
            0,
        ),
        # values inside a WHERE subquery are dropped
        (
            "SELECT name FROM student WHERE id IN (SELECT id FROM student WHERE age > 1)",
            "SELECT name FROM student WHERE id IN (SELECT id FROM student WHERE age > 2)",
            1,
        ),
        # FROM subqueries are compared as parsed: values matter there
        (
            "SELECT count(*) FROM (SELECT dept_id FROM student GROUP BY dept_id HAVING count(*) > 5)",
            "SELECT count(*) FROM (SELECT dept_id FROM student GROUP BY dept_id HAVING count(*) > 15)",
            0,
        ),
        # only the presence of LIMIT matters (with ORDER BY), and the direction of ORDER BY
        ("SELECT name FROM student ORDER BY age LIMIT 1", "SELECT name FROM student ORDER BY age LIMIT 3", 1),
        ("SELECT name FROM student ORDER BY age LIMIT 1", "SELECT name FROM student ORDER BY age", 0),
        ("SELECT name FROM student ORDER BY age DESC", "SELECT name FROM student ORDER BY age ASC", 0),
        # select order, table order and ON conditions are ignored
        ("SELECT name, age FROM student", "SELECT age, name FROM student", 1),
        (
            "SELECT T1.name FROM student AS T1 JOIN dept AS T2 ON T1.dept_id = T2.id",
            "SELECT T1.name FROM dept AS T2 JOIN student AS T1",
            1,
        ),
        # set operations: recursive, operand order matters
        (
            "SELECT name FROM student INTERSECT SELECT name FROM dept",
            "SELECT name FROM dept INTERSECT SELECT name FROM student",
            0,
        ),
        (
            "SELECT name FROM student UNION SELECT name FROM dept",
            "SELECT name FROM student INTERSECT SELECT name FROM dept",
            0,
        ),
        # a permuted SELECT inside a set-operation operand still matches
        (
            "SELECT name, age FROM student EXCEPT SELECT name, age FROM student WHERE age > 1",
            "SELECT name, age FROM student EXCEPT SELECT age, name FROM student WHERE age > 1",
            1,
        ),
        # AND / OR are compared as a set; NOT / IN / LIKE are keywords
        (
            "SELECT name FROM student WHERE age > 1 AND age < 9",
            "SELECT name FROM student WHERE age > 1 OR age < 9",
            0,
        ),
        ("SELECT name FROM student WHERE name LIKE 'a%'", "SELECT name FROM student WHERE name = 'a%'", 0),
        # foreign-key columns of tables in FROM are interchangeable
        (
            "SELECT count(*) FROM likes AS T1 GROUP BY T1.liked_id",
            "SELECT count(*) FROM likes AS T1 GROUP BY T1.student_id",
            1,
        ),
        (
            "SELECT T1.name FROM student AS T1 JOIN likes AS T2 ON T1.id = T2.student_id "
            "WHERE T2.student_id > 1",
            "SELECT T1.name FROM student AS T1 JOIN likes AS T2 ON T1.id = T2.student_id WHERE T1.id > 1",
            1,
        ),
        # GROUP BY is a list: order matters
        (
            "SELECT count(*) FROM student GROUP BY name, age",
            "SELECT count(*) FROM student GROUP BY age, name",
            0,
        ),
    ],
)
def test_exact_match(gold, pred, expected, em):
    assert em(gold, pred) == expected


def test_a_prediction_that_does_not_parse_never_matches(school_schema, fk):
    gold = rebuild(parse_sql("SELECT name FROM student", school_schema), school_schema, fk)
    assert exact_match(rebuild(empty_sql(), school_schema, fk), gold) == 0


def test_official_crashes_are_reported(em):
    # two conditions without AND/OR: the second sits in a connector slot; with a subquery it is unhashable
    pred = "SELECT name FROM student WHERE age > 1 id NOT IN (SELECT liked_id FROM likes)"
    with pytest.raises(OfficialCrash):
        em("SELECT name FROM student WHERE age > 1", pred)
    # two different FROM subqueries cannot be sorted
    two = "SELECT count(*) FROM (SELECT name FROM student) (SELECT name FROM dept)"
    with pytest.raises(OfficialCrash):
        em(two, two.replace("SELECT name FROM dept", "SELECT student_id FROM likes"))
