"""Clause breakdown and clause F1 (used by memory observations and the process rewards)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mtsql.core.sql.clauses import breakdown, clause_f1, clause_items, clause_spans, render_breakdown

JOIN = (
    "SELECT T1.name, count(*) FROM singer AS T1 JOIN concert AS T2 ON T1.id = T2.singer_id "
    "WHERE T2.year BETWEEN 2014 AND 2015 OR T1.age ! = 3 GROUP BY T1.id ORDER BY count(*) DESC LIMIT 1"
)


def test_breakdown_keeps_the_text_as_written():
    assert breakdown(JOIN) == [
        ("SELECT", "T1.name, count(*)"),
        ("FROM", "singer AS T1 JOIN concert AS T2 ON T1.id = T2.singer_id"),
        ("WHERE", "T2.year BETWEEN 2014 AND 2015 OR T1.age ! = 3"),
        ("GROUP BY", "T1.id"),
        ("ORDER BY", "count(*) DESC"),
        ("LIMIT", "1"),
    ]
    assert (
        render_breakdown("SELECT a FROM t UNION SELECT b FROM u")
        == "SELECT a | FROM t | UNION SELECT b FROM u"
    )


def test_items_resolve_aliases_and_split_conditions():
    assert clause_items(JOIN) == {
        ("select", "singer.name"): 1,
        ("select", "count (*)"): 1,
        ("from", "singer"): 1,
        ("from", "concert"): 1,
        ("from", "on concert.singer_id = singer.id"): 1,
        ("where", "concert.year between 2014 and 2015"): 1,
        ("where", "singer.age != 3"): 1,
        ("where", "or"): 1,
        ("group by", "singer.id"): 1,
        ("order by", "count (*) desc"): 1,
        ("limit", "1"): 1,
    }


def test_items_of_set_operations_distinct_and_default_order():
    items = clause_items(
        'SELECT DISTINCT name FROM singer ORDER BY age INTERSECT SELECT name FROM singer WHERE x = "a"'
    )
    assert items[("select", "distinct")] == 1
    assert items[("order by", "age asc")] == 1
    assert items[("set", "intersect")] == 1 and items[("intersect.where", "x = 'a'")] == 1


@pytest.mark.parametrize(
    ("pred", "gold", "f1"),
    [
        (
            "SELECT T1.name FROM singer AS T1 WHERE T1.age > 20",
            "select name from singer where age > 20;",
            1.0,
        ),
        ("SELECT name FROM singer", "SELECT name FROM singer WHERE age > 20", 0.8),  # 2 of 2 vs 2 of 3
        ("SELECT name FROM singer WHERE age > 30", "SELECT name FROM singer WHERE age > 20", 2 / 3),
        ("SELECT count(*) FROM concert", "SELECT name FROM singer", 0.0),
        (None, "SELECT name FROM singer", 0.0),
        ("", "SELECT name FROM singer", 0.0),
        ("SELECT a FROM t WHERE x = 1 AND y = 2", "SELECT a FROM t WHERE y = 2 AND x = 1", 1.0),
        ("SELECT a FROM t WHERE x = 1 AND y = 2", "SELECT a FROM t WHERE x = 1 OR y = 2", 8 / 9),
    ],
)
def test_clause_f1(pred, gold, f1):
    assert clause_f1(pred, gold) == pytest.approx(f1)


def test_spans_cover_each_clause_keyword_included():
    sql = "SELECT a FROM t WHERE b = 1 ORDER BY a DESC"
    assert [sql[s:e] for _, s, e in clause_spans(sql)] == [
        "SELECT a",
        "FROM t",
        "WHERE b = 1",
        "ORDER BY a DESC",
    ]


@settings(max_examples=200, deadline=None)
@given(st.text(), st.text())
def test_any_text_has_a_breakdown_and_a_score(a, b):
    render_breakdown(a)
    assert 0.0 <= clause_f1(a, b) <= 1.0
    if clause_items(a):
        assert clause_f1(a, a) == 1.0
