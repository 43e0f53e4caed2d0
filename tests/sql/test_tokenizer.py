from __future__ import annotations

import pytest

from mtsql.core.sql.errors import SqlParseError
from mtsql.core.sql.tokenizer import tokenize


def test_lower_cases_and_keeps_literals_whole_with_double_quotes():
    assert tokenize("SELECT Name FROM T WHERE a = 'Big Apple'") == [
        "select",
        "name",
        "from",
        "t",
        "where",
        "a",
        "=",
        '"Big Apple"',
    ]


def test_odd_number_of_quotes_is_an_error():
    with pytest.raises(SqlParseError):
        tokenize("SELECT 'it''s")  # three quotes once ' becomes "


@pytest.mark.parametrize(
    "text, tokens",
    [
        ("a ! = 5", ["a", "!=", "5"]),
        ("a != 5", ["a", "!=", "5"]),
        ("a > = 5", ["a", ">=", "5"]),
        ("a >= 5", ["a", ">=", "5"]),
        ("a>5", ["a", ">", "5"]),
        ("a=5", ["a=5"]),  # NLTK does not split "=": the glued token breaks the parse later
        ("a >=5", ["a", ">", "=5"]),  # the >=5 split failure
        ("T1.id=T2.id", ["t1.id=t2.id"]),
    ],
)
def test_comparison_operators(text, tokens):
    assert tokenize(text) == tokens


def test_count_star_and_parentheses_are_split():
    assert tokenize("count(*)") == ["count", "(", "*", ")"]


def test_final_period_is_split_off():
    assert tokenize("SELECT a FROM t.") == ["select", "a", "from", "t", "."]
