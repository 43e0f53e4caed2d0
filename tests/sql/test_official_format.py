from __future__ import annotations

import pytest

from mtsql.errors import UsageError
from mtsql.sql.official_format import prediction_line, read_interactions, replace_value_placeholder


def test_interactions_split_on_lines_blank_after_strip(tmp_path):
    path = tmp_path / "pred.txt"
    path.write_text("SELECT 1\tignored\n \t \nSELECT 2\nSELECT 3  \n\n\nSELECT 4")
    interactions = read_interactions(path, gold=False)
    assert [[t.sql for t in i] for i in interactions] == [["SELECT 1"], ["SELECT 2", "SELECT 3"], [], ["SELECT 4"]]
    assert interactions[1][1].line == 4


def test_the_sparc_script_drops_an_unterminated_last_interaction(tmp_path):
    path = tmp_path / "pred.txt"
    path.write_text("SELECT 1\n\nSELECT 2")
    assert len(read_interactions(path, gold=False, keep_unterminated=False)) == 1


def test_gold_lines_need_a_db_id(tmp_path):
    path = tmp_path / "gold.txt"
    path.write_text("SELECT 1\tdb\n\nSELECT 2\n")
    with pytest.raises(UsageError, match="line 3"):
        read_interactions(path, gold=True)


def test_value_placeholder_per_program():
    assert replace_value_placeholder("SELECT a FROM t WHERE b = value ", "testsuite") == "SELECT a FROM t WHERE b = 1 "
    assert replace_value_placeholder("SELECT a FROM t WHERE b = value", "testsuite") == "SELECT a FROM t WHERE b = value"
    assert replace_value_placeholder("SELECT a FROM t WHERE b = value", "sparc") == "SELECT a FROM t WHERE b = 1"
    assert replace_value_placeholder("SELECT VALUE FROM t", "sparc") == "SELECT VALUE FROM t"


def test_prediction_line_is_what_a_file_would_hold():
    assert prediction_line("  SELECT a\nFROM t\tjunk\n") == "SELECT a FROM t"
