"""The official parser's structured dict and each of its quirks (listed in mtsql.core.sql.parser's
docstring)."""

from __future__ import annotations

import sqlite3

import pytest

from mtsql.core.sql.errors import SqlParseError
from mtsql.core.sql.parser import parse_sql
from mtsql.core.sql.schema import load_schema


def parse(sql, schema, **kw):
    return parse_sql(sql, schema, **kw)


def test_structured_dict(school_schema):
    sql = parse(
        "SELECT T1.name, count(*) FROM student AS T1 JOIN dept AS T2 ON T1.dept_id = T2.id "
        "WHERE T1.age > 20 GROUP BY T1.name HAVING count(*) >= 1 ORDER BY T1.age DESC LIMIT 3",
        school_schema,
    )
    assert sql["select"] == (
        False,
        [(0, (0, (0, "__student.name__", False), None)), (3, (0, (0, "__all__", False), None))],
    )
    assert sql["from"] == {
        "table_units": [("table_unit", "__student__"), ("table_unit", "__dept__")],
        "conds": [(False, 2, (0, (0, "__student.dept_id__", False), None), (0, "__dept.id__", False), None)],
    }
    assert sql["where"] == [(False, 3, (0, (0, "__student.age__", False), None), 20.0, None)]
    assert sql["groupBy"] == [(0, "__student.name__", False)]
    assert sql["having"] == [(False, 5, (0, (3, "__all__", False), None), 1.0, None)]
    assert sql["orderBy"] == ("desc", [(0, (0, "__student.age__", False), None)])
    assert sql["limit"] == 1  # LIMIT is always parsed as 1
    assert sql["intersect"] is sql["union"] is sql["except"] is None


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT name FROM student WHERE age=20",  # glued "="
        "SELECT name FROM student WHERE age >=20",  # ">=20" -> ">", "=20"
        "SELECT name FROM student WHERE age == 20",
        "SELECT name FROM student WHERE age <> 20",
        "SELECT name AS n FROM student",  # column alias
        "SELECT s.name FROM student s",  # table alias without AS
        "SELECT name FROM student AS dept",  # alias equal to a table name
        "SELECT name FROM student, dept",  # comma join
        "SELECT name FROM student LIMIT",  # LIMIT needs a following token
    ],
)
def test_official_parse_failures(sql, school_schema):
    with pytest.raises(SqlParseError):
        parse(sql, school_schema)


@pytest.mark.parametrize(
    "sql", ["SELECT name FROM student WHERE age > 20", "SELECT name FROM student WHERE age>20"]
)
def test_spaced_or_glued_greater_than_parse(sql, school_schema):
    assert parse(sql, school_schema)["where"][0][1] == 3


@pytest.mark.parametrize(
    "query, suffix",
    [
        ("SELECT name FROM student WHERE age > 20", " )"),
        ("SELECT name FROM student WHERE age > 20", " ;;"),
        ("SELECT name FROM student WHERE age > 20", " JOIN likes"),  # a truncated JOIN without ON
        ("SELECT name FROM student LIMIT 3", " garbage tokens"),
    ],
)
def test_tokens_after_a_complete_query_are_ignored(query, suffix, school_schema):
    assert parse(query + suffix, school_schema) == parse(query, school_schema)


def test_from_select_without_parentheses_is_cut_short(school_schema):
    sql = parse("SELECT count(*) FROM student SELECT name FROM dept", school_schema)
    assert sql["from"]["table_units"] == [("table_unit", "__student__")]


def test_aliases_are_global_and_the_last_definition_wins(school_schema):
    sql = parse("SELECT T1.name FROM student AS T1 UNION SELECT T1.name FROM dept AS T1", school_schema)
    assert sql["select"][1][0][1][1][1] == "__dept.name__"  # T1 resolved to dept in the first operand too
    assert sql["union"]["select"][1][0][1][1][1] == "__dept.name__"


def test_limit_value_is_ignored(school_schema):
    assert parse("SELECT name FROM student LIMIT 5", school_schema) == parse(
        "SELECT name FROM student LIMIT 1", school_schema
    )


def test_column_value_swallows_extra_tokens(school_schema):
    sql = parse("SELECT name FROM student WHERE age = dept_id junk tokens", school_schema)
    assert sql["where"] == [
        (False, 2, (0, (0, "__student.age__", False), None), (0, "__student.dept_id__", False), None)
    ]


def test_subqueries_and_set_operations(school_schema):
    sql = parse(
        "SELECT name FROM student WHERE id NOT IN (SELECT liked_id FROM likes) "
        "INTERSECT SELECT name FROM student WHERE age BETWEEN 1 AND 30",
        school_schema,
    )
    negated, op, _unit, value, _ = sql["where"][0]
    assert (negated, op) == (True, 8) and value["from"]["table_units"] == [("table_unit", "__likes__")]
    assert sql["intersect"]["where"][0][3:] == (1.0, 30.0)


def test_strict_mode_fixes_operator_quirks_and_rejects_trailing_tokens(school_schema):
    official = parse("SELECT name FROM student WHERE age >= 20", school_schema)
    assert parse("SELECT name FROM student WHERE age>=20", school_schema, semantics="strict") == official
    assert (
        parse("SELECT name FROM student WHERE age==20", school_schema, semantics="strict")["where"][0][1] == 2
    )
    assert (
        parse("SELECT name FROM student WHERE age<>20", school_schema, semantics="strict")["where"][0][1] == 7
    )
    with pytest.raises(SqlParseError):
        parse("SELECT name FROM student WHERE age > 20 )", school_schema, semantics="strict")


def test_deep_nesting_is_a_parse_error_not_a_crash(school_schema):
    with pytest.raises(SqlParseError):
        parse(
            "SELECT name FROM student WHERE id IN (" * 2000 + "SELECT id FROM student" + ")" * 2000,
            school_schema,
        )


def test_schema_lowercases_names_for_the_parser_and_keeps_their_spelling(tmp_path):
    db = tmp_path / "pets.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE Pets (PetID INTEGER, PetType TEXT)")
    schema = load_schema(db)
    assert schema.tables == {"pets": ("petid", "pettype")}
    assert schema.spelled == {"Pets": ("PetID", "PetType")}
    assert parse_sql("SELECT PetType FROM PETS", schema)["select"][1][0][1][1][1] == "__pets.pettype__"
