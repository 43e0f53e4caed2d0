"""Revisions after no_pass and recovery from execution errors, on trajectories counted by hand."""

from dataclasses import replace
from pathlib import Path

from mtsql.core.agent.env import Step
from mtsql.core.measures.revisions import is_recovery, revisions
from mtsql.core.trajectories import read_rows

REAL_ROW = read_rows(Path(__file__).resolve().parents[1] / "fixtures" / "scored_rows.jsonl")[0]

G, W, W2, X = "SELECT a FROM t", "SELECT b FROM t", "SELECT c FROM t", "SELECT broken"


def exec_step(i, sql, verdict, kind="ok"):
    return Step(
        index=i, text="", action="tool_call", tool="exec_sql", sql=sql, verdict=verdict, result_kind=kind
    )


def memory_step(i, checked, verdict):
    return Step(
        index=i, text="", action="tool_call", tool="memory_retrieve", checked_sql=checked, verdict=verdict
    )


def answer(i, sql):
    return Step(index=i, text="", action="answer", sql=sql)


def row(execution, *steps):
    """A real scored row whose answer scored ``execution`` and whose trajectory took ``steps``."""
    return replace(REAL_ROW, execution=execution, trajectory=replace(REAL_ROW.trajectory, steps=list(steps)))


def judge(row, sql):
    return None if sql == X else int(" ".join(sql.lower().split()).rstrip(";") == G.lower())


ROWS = [
    row(1, exec_step(0, W, "no_pass"), exec_step(1, G, "pass"), answer(2, G)),  # wrong -> right
    row(1, memory_step(0, W, "no_pass"), answer(1, G)),  # wrong -> right, after memory
    row(0, exec_step(0, G, "no_pass"), answer(1, W)),  # right -> wrong
    row(
        0, exec_step(0, W, "no_pass"), exec_step(1, W2, "no_pass"), answer(2, W2)
    ),  # wrong -> wrong, then no change
    row(1, exec_step(0, G, "no_pass"), answer(1, "select a from t;")),  # no_pass, the same query again
    row(None, memory_step(0, W, "no_pass"), answer(1, X)),  # revision to an unscorable query
    row(
        1, exec_step(0, X, "no_pass", kind="error"), exec_step(1, G, "pass"), answer(2, G)
    ),  # error, resolved
    row(0, exec_step(0, W, "pass", kind="error"), answer(1, W)),  # error, nothing ran after
    row(
        0, exec_step(0, W, "pass", kind="error"), exec_step(1, W2, None, kind="empty"), answer(2, W2)
    ),  # ran, wrong
    row(1, exec_step(0, G, "no_pass")),  # no_pass with nothing after
]


def test_revisions_are_classed_by_the_ex_before_and_after():
    counts = revisions(ROWS, judge)
    assert counts["no_pass"] == 9
    assert counts["revised"] == 6
    assert (
        counts["wrong_to_right"],
        counts["right_to_wrong"],
        counts["stayed_wrong"],
        counts["stayed_right"],
        counts["unscored"],
    ) == (2, 1, 1, 0, 2)


def test_execution_errors_ran_after_and_resolved():
    counts = revisions(ROWS, judge)
    assert (counts["with_error"], counts["ran_after"], counts["resolved"]) == (3, 2, 1)


def test_a_recovery_is_a_failed_query_then_one_that_ran_and_a_right_answer():
    assert revisions(ROWS, judge)["recovered"] == 1
    assert [is_recovery(r.trajectory, r.execution) for r in ROWS[6:9]] == [True, False, False]
    resolved_without_running = row(1, exec_step(0, X, "no_pass", kind="error"), answer(1, G))
    assert not is_recovery(resolved_without_running.trajectory, 1), (
        "right all the same, but nothing ran after"
    )


def test_no_trajectory_counts_nothing():
    assert set(revisions([], judge).values()) == {0}
