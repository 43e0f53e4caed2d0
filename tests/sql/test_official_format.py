from __future__ import annotations

import pytest

from mtsql.base.errors import UsageError
from mtsql.core.sql.official_format import prediction_line, read_interactions, replace_value_placeholder


def test_interactions_split_on_lines_blank_after_strip(tmp_path):
    path = tmp_path / "pred.txt"
    path.write_text("SELECT 1\tignored\n \t \nSELECT 2\nSELECT 3  \n\n\nSELECT 4")
    interactions = read_interactions(path, gold=False)
    assert [[t.sql for t in i] for i in interactions] == [
        ["SELECT 1"],
        ["SELECT 2", "SELECT 3"],
        [],
        ["SELECT 4"],
    ]
    assert interactions[1][1].line == 4


def test_gold_lines_need_a_db_id(tmp_path):
    path = tmp_path / "gold.txt"
    path.write_text("SELECT 1\tdb\n\nSELECT 2\n")
    with pytest.raises(UsageError, match="line 3"):
        read_interactions(path, gold=True)


@pytest.mark.parametrize(
    "prediction,expected",
    [
        ("SELECT a FROM t WHERE b = value", "SELECT a FROM t WHERE b = 1"),  # end of the line
        ("SELECT a FROM t WHERE b = value ", "SELECT a FROM t WHERE b = 1 "),
        (
            "SELECT a FROM t WHERE b IN (SELECT c FROM u WHERE d = value)",
            "SELECT a FROM t WHERE b IN (SELECT c FROM u WHERE d = 1)",
        ),
        ("SELECT a FROM t WHERE b LIKE value;", "SELECT a FROM t WHERE b LIKE 1;"),
        ("SELECT a FROM t ORDER BY b LIMIT value", "SELECT a FROM t ORDER BY b LIMIT 1"),
        ("SELECT a FROM t WHERE b BETWEEN value AND value", "SELECT a FROM t WHERE b BETWEEN 1 AND 1"),
        (
            "SELECT max_value FROM t WHERE b = 'values'",
            "SELECT max_1 FROM t WHERE b = '1s'",
        ),  # every substring
        ("SELECT a FROM t WHERE b = VALUE", "SELECT a FROM t WHERE b = VALUE"),  # case-sensitive: stays
        ("SELECT a FROM t WHERE b = Value", "SELECT a FROM t WHERE b = Value"),
    ],
)
def test_value_placeholder_is_replaced_like_both_official_programs(prediction, expected):
    assert replace_value_placeholder(prediction) == expected


def test_prediction_line_is_what_a_file_would_hold():
    assert prediction_line("  SELECT a\nFROM t\tjunk\n") == "SELECT a FROM t"
