"""The protocol rates the report states: memory checks and queries changed after a verdict."""

from mtsql.app.report.behaviour import behaviour, verdict_changes
from mtsql.app.report.stats import Rate
from mtsql.core.agent.env import Step


def exec_step(i, sql, verdict):
    return {"index": i, "action": "tool_call", "tool": "exec_sql", "sql": sql, "verdict": verdict}


def answer(i, sql):
    return {"index": i, "action": "answer", "sql": sql, "verdict": None}


def test_changes_are_judged_against_the_next_proposed_query():
    steps = [exec_step(0, "SELECT a FROM t", "no_pass"),
             {"index": 1, "action": "invalid", "sql": None, "verdict": None},  # proposes nothing
             exec_step(2, "select  A from T ;", "pass"),  # the same query up to case, spacing, semicolon
             {"index": 3, "action": "tool_call", "tool": "memory_retrieve", "checked_sql": "select  A from T ;",
              "verdict": "no_pass"},
             answer(4, "SELECT b FROM t")]
    assert verdict_changes({"steps": steps}) == {"no_pass": [False, True], "pass": [True]}


def test_a_verdict_without_a_later_query_or_a_judged_query_is_not_counted():
    steps = [exec_step(0, "SELECT a FROM t", "pass"),
             {"index": 1, "action": "tool_call", "tool": "memory_retrieve", "checked_sql": None, "verdict": "pass"}]
    assert verdict_changes({"steps": steps}) == {"no_pass": [], "pass": []}
    never_judged = [exec_step(0, "SELECT a FROM t", None), answer(1, "SELECT b FROM t")]
    assert verdict_changes({"steps": never_judged}) == {"no_pass": [], "pass": []}


def test_behaviour_rates_and_their_n():
    memory = {"index": 1, "action": "tool_call", "tool": "memory_retrieve", "checked_sql": "SELECT 1", "verdict": "pass"}
    rows = [
        {"turn": {"previous_questions": []}, "trajectory": {"steps": [answer(0, "SELECT 1")], "final_sql": "SELECT 1",
                                                            "protocol_valid": False}},
        {"turn": {"previous_questions": ["q0"]},
         "trajectory": {"steps": [exec_step(0, "SELECT 1", "pass"), memory, answer(2, "SELECT 1")],
                        "final_sql": "SELECT 1", "protocol_valid": True}},
        {"turn": {"previous_questions": ["q0", "q1"]},
         "trajectory": {"steps": [exec_step(0, "SELECT 2", "no_pass"), exec_step(1, "SELECT 3", None)],
                        "final_sql": None, "protocol_valid": False}},
    ]
    rates = behaviour(rows)
    assert rates == {"answered": Rate(2, 3), "protocol_valid": Rate(1, 3), "memory_checked": Rate(1, 2),
                     "changed_after_no_pass": Rate(1, 1), "changed_after_pass": Rate(0, 2)}


def test_step_records_have_the_fields_the_counts_read():
    fields = set(Step.__dataclass_fields__)
    assert {"index", "action", "tool", "sql", "checked_sql", "verdict"} <= fields
