"""The protocol rates the report states: memory checks and queries changed after a verdict."""

from dataclasses import replace
from pathlib import Path

from mtsql.app.report.behaviour import behaviour, verdict_changes
from mtsql.app.report.stats import Rate
from mtsql.core.agent.env import Step
from mtsql.core.trajectories import read_rows

REAL_ROW = read_rows(Path(__file__).resolve().parents[1] / "fixtures" / "scored_rows.jsonl")[0]


def exec_step(i, sql, verdict):
    return Step(index=i, text="", action="tool_call", tool="exec_sql", sql=sql, verdict=verdict)


def memory_step(i, checked, verdict):
    return Step(
        index=i, text="", action="tool_call", tool="memory_retrieve", checked_sql=checked, verdict=verdict
    )


def answer(i, sql):
    return Step(index=i, text="", action="answer", sql=sql)


def taking(*steps):
    return replace(REAL_ROW.trajectory, steps=list(steps))


def test_changes_are_judged_against_the_next_proposed_query():
    steps = [
        exec_step(0, "SELECT a FROM t", "no_pass"),
        Step(index=1, text="", action="invalid"),  # proposes nothing
        exec_step(2, "select  A from T ;", "pass"),  # the same query up to case, spacing, semicolon
        memory_step(3, "select  A from T ;", "no_pass"),
        answer(4, "SELECT b FROM t"),
    ]
    assert verdict_changes(taking(*steps)) == {"no_pass": [False, True], "pass": [True]}


def test_a_verdict_without_a_later_query_or_a_judged_query_is_not_counted():
    assert verdict_changes(taking(exec_step(0, "SELECT a FROM t", "pass"), memory_step(1, None, "pass"))) == {
        "no_pass": [],
        "pass": [],
    }
    never_judged = taking(exec_step(0, "SELECT a FROM t", None), answer(1, "SELECT b FROM t"))
    assert verdict_changes(never_judged) == {"no_pass": [], "pass": []}


def test_behaviour_rates_and_their_n():
    def row(previous, steps, final_sql, valid):
        trajectory = replace(taking(*steps), final_sql=final_sql, protocol_valid=valid)
        return replace(
            REAL_ROW, turn=replace(REAL_ROW.turn, previous_questions=previous), trajectory=trajectory
        )

    rows = [
        row((), [answer(0, "SELECT 1")], "SELECT 1", False),
        row(
            ("q0",),
            [exec_step(0, "SELECT 1", "pass"), memory_step(1, "SELECT 1", "pass"), answer(2, "SELECT 1")],
            "SELECT 1",
            True,
        ),
        row(("q0", "q1"), [exec_step(0, "SELECT 2", "no_pass"), exec_step(1, "SELECT 3", None)], None, False),
    ]
    rates = behaviour(rows)
    assert rates == {
        "answered": Rate(2, 3),
        "protocol_valid": Rate(1, 3),
        "memory_checked": Rate(1, 2),
        "changed_after_no_pass": Rate(1, 1),
        "changed_after_pass": Rate(0, 2),
    }
