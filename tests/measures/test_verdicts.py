"""Verdict calibration on a crafted trajectory set whose 2x2 tables were counted by hand."""

import pytest

from mtsql.measures.verdicts import verdict_calibration

G, W, W2, X = "SELECT a FROM t", "SELECT b FROM t", "SELECT c FROM t", "SELECT broken"


def exec_step(i, sql, verdict):
    return {"index": i, "action": "tool_call", "tool": "exec_sql", "sql": sql, "verdict": verdict}


def memory_step(i, checked, verdict):
    return {"index": i, "action": "tool_call", "tool": "memory_retrieve", "checked_sql": checked, "verdict": verdict}


def answer(i, sql):
    return {"index": i, "action": "answer", "sql": sql, "verdict": None}


ROWS = [{"trajectory": {"steps": steps}} for steps in (
    [exec_step(0, W, "no_pass"), exec_step(1, G, "pass"), memory_step(2, G, "pass"), answer(3, "select A from t;")],
    [exec_step(0, W, "pass"), answer(1, W)],                              # a wrong pass, acted on
    [exec_step(0, G, "no_pass"), exec_step(1, G, None)],                  # a right no_pass, not acted on
    [exec_step(0, W2, "pass"), exec_step(1, G, "pass"), answer(2, G)],    # pass, but the query changed
    [memory_step(0, W, "no_pass")],                                       # no_pass, then nothing
    [exec_step(0, X, "pass"), answer(1, X)],                              # the evaluator cannot score X
)]


def judge(row, sql):
    return None if sql == X else int(sql == G)


def test_exec_verify_table_rates_and_following():
    cell = verdict_calibration(ROWS, judge)["exec_verify"]
    assert cell["table"] == {"pass": {"right": 2, "wrong": 2}, "no_pass": {"right": 1, "wrong": 1}}
    assert cell["unscored"] == 1
    assert cell["precision_pass"] == pytest.approx(2 / 4) and cell["recall_pass"] == pytest.approx(2 / 3)
    assert cell["precision_no_pass"] == pytest.approx(1 / 2) and cell["recall_no_pass"] == pytest.approx(1 / 3)
    assert cell["accuracy"] == pytest.approx(3 / 6)
    assert cell["followed"] == {"pass": {"followed": 4, "count": 5}, "no_pass": {"followed": 1, "count": 2}}


def test_memory_verify_table_and_following():
    cell = verdict_calibration(ROWS, judge)["memory_verify"]
    assert cell["table"] == {"pass": {"right": 1, "wrong": 0}, "no_pass": {"right": 0, "wrong": 1}}
    assert (cell["precision_pass"], cell["recall_pass"], cell["precision_no_pass"], cell["recall_no_pass"],
            cell["accuracy"]) == (1.0, 1.0, 1.0, 1.0, 1.0)
    assert cell["followed"] == {"pass": {"followed": 1, "count": 1}, "no_pass": {"followed": 0, "count": 1}}


def test_nothing_to_divide_is_none():
    cell = verdict_calibration([{"trajectory": {"steps": [answer(0, G)]}}], judge)["exec_verify"]
    assert cell["accuracy"] is None and cell["precision_pass"] is None and cell["unscored"] == 0
