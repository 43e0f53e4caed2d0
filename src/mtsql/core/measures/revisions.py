"""Self-correction and recovery from execution errors, counted from an evaluation's trajectories.

*Revisions*: every tool result the agent judged ``no_pass`` (an ``exec_sql`` result, or a memory
check about the latest executed query) whose next proposed query (its next ``exec_sql`` argument or
its answer) differs from the judged one, compared as ``verdicts.normal_sql`` does. Each revision is
classed by the EX (against the turn's gold) of the judged query and of the revision: ``wrong_to_right``,
``right_to_wrong``, ``stayed_right``, ``stayed_wrong``, or ``unscored`` when either cannot be scored.
``no_pass`` counts every such verdict, revised or not.

*Execution errors*: ``with_error`` counts the trajectories in which an ``exec_sql`` call failed;
``ran_after`` those in which a later ``exec_sql`` ran (a result, empty or not); ``resolved`` those
whose final answer is right (EX 1) all the same: the agent got past the failure; ``recovered`` those
in which both hold (``is_recovery``).

*Recovery* (``is_recovery``): one trajectory where an ``exec_sql`` failed, a later one ran, and the
answer is right: the agent noticed its failed query and fixed it in the same turn.
"""

from __future__ import annotations

from collections.abc import Callable

from mtsql.core.agent.env import Trajectory
from mtsql.core.measures.verdicts import judged_sql, next_proposal, normal_sql, proposed_sql
from mtsql.core.trajectories import ScoredRow

OUTCOMES = ("wrong_to_right", "right_to_wrong", "stayed_right", "stayed_wrong", "unscored")


def revisions(rows: list[ScoredRow], judge: Callable[[ScoredRow, str], int | None]) -> dict:
    """``{"no_pass", "revised", <OUTCOMES>, "with_error", "ran_after", "resolved", "recovered"}`` over
    scored rows; ``judge(row, sql)`` is the EX (1, 0 or None) of ``sql`` against ``row``'s gold."""
    out = dict.fromkeys(
        ("no_pass", "revised", *OUTCOMES, "with_error", "ran_after", "resolved", "recovered"), 0
    )
    for row in rows:
        steps = row.trajectory.steps
        for i, step in enumerate(steps):
            judged = judged_sql(step) if step.action == "tool_call" else None
            if step.verdict != "no_pass" or not judged:
                continue
            out["no_pass"] += 1
            following = next_proposal(steps, i)
            if following is None or normal_sql(proposed_sql(following)) == normal_sql(judged):
                continue
            out["revised"] += 1
            out[_outcome(judge(row, judged), judge(row, proposed_sql(following)))] += 1
        executed = row.trajectory.tool_steps("exec_sql")
        failed = next((k for k, s in enumerate(executed) if s.result_kind == "error"), None)
        if failed is not None:
            out["with_error"] += 1
            out["ran_after"] += any(s.result_kind in ("ok", "empty") for s in executed[failed + 1 :])
            out["resolved"] += row.execution == 1
            out["recovered"] += is_recovery(row.trajectory, row.execution)
    return out


def is_recovery(trajectory: Trajectory, execution: int | None) -> bool:
    """A failed ``exec_sql``, a later one that ran, and a right answer (EX 1) in one trajectory."""
    executed = trajectory.tool_steps("exec_sql")
    failed = next((k for k, s in enumerate(executed) if s.result_kind == "error"), None)
    return (
        execution == 1
        and failed is not None
        and any(s.result_kind in ("ok", "empty") for s in executed[failed + 1 :])
    )


def _outcome(before: int | None, after: int | None) -> str:
    if before is None or after is None:
        return "unscored"
    if before == after:
        return "stayed_right" if after == 1 else "stayed_wrong"
    return "wrong_to_right" if after == 1 else "right_to_wrong"
