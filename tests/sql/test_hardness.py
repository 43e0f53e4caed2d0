"""Hardness formulas, including the official aggregate-count quirks."""

from __future__ import annotations

import pytest

from mtsql.core.sql.hardness import component1, component2, count_others, hardness
from mtsql.core.sql.parser import parse_sql


@pytest.mark.parametrize(
    "sql, comp1, comp2, others, level",
    [
        ("SELECT name FROM student", 0, 0, 0, "easy"),
        ("SELECT name FROM student WHERE age > 1", 1, 0, 0, "easy"),
        ("SELECT name, age FROM student", 0, 0, 1, "medium"),
        ("SELECT name FROM student WHERE age > 1 ORDER BY age LIMIT 1", 3, 0, 0, "hard"),
        (
            "SELECT T1.name FROM student AS T1 JOIN dept AS T2 ON T1.dept_id = T2.id "
            "WHERE T2.name LIKE 'a%' OR T1.age > 1",
            4,
            0,
            1,
            "extra",
        ),
        ("SELECT name FROM student WHERE id IN (SELECT liked_id FROM likes)", 1, 1, 0, "hard"),
        ("SELECT name FROM student UNION SELECT name FROM dept", 0, 1, 0, "hard"),
        # a FROM subquery adds nothing: this is easy
        ("SELECT count(*) FROM (SELECT name FROM student WHERE age > 1 GROUP BY name)", 0, 0, 0, "easy"),
        # quirk: a NOT condition counts as an aggregate (with count(*): two aggregates), so NOT IN is extra
        ("SELECT count(*) FROM student WHERE id IN (SELECT liked_id FROM likes)", 1, 1, 0, "hard"),
        ("SELECT count(*) FROM student WHERE id NOT IN (SELECT liked_id FROM likes)", 1, 1, 1, "extra"),
        # quirk: HAVING connectors count as aggregates, HAVING's own aggregates do not
        ("SELECT dept_id FROM student GROUP BY dept_id HAVING count(*) > 1", 1, 0, 0, "easy"),
        (
            "SELECT max(age) FROM student GROUP BY dept_id HAVING count(*) > 1 AND max(age) > 2",
            1,
            0,
            1,
            "medium",
        ),
    ],
)
def test_hardness_components(sql, comp1, comp2, others, level, school_schema):
    parsed = parse_sql(sql, school_schema)
    assert (component1(parsed), component2(parsed), count_others(parsed)) == (comp1, comp2, others)
    assert hardness(parsed) == level
