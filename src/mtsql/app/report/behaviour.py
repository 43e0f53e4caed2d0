"""How the agent used the long-horizon protocol, counted from an evaluation's trajectories.

Definitions (the report states them too):

* memory check: a trajectory of a turn that has earlier turns (a dialogue memory to check) calls
  ``memory_retrieve`` at least once. n = such trajectories.
* query changed after a verdict: a tool result (``exec_sql`` or ``memory_retrieve``) got a
  ``pass`` / ``no_pass`` verdict, and the next query the agent proposed after it (its next
  ``exec_sql`` argument or its final answer) differs from the query that was judged (the executed
  query, or for a memory check the latest executed one), compared after lower-casing, collapsing
  whitespace and dropping a trailing semicolon. n = verdicts of that kind followed by a query.
  After ``no_pass`` a change is a self-correction; after ``pass`` it is a change of mind.
"""

from __future__ import annotations

from mtsql.app.report.stats import Rate, rate_of
from mtsql.core.agent.env import Trajectory
from mtsql.core.measures.verdicts import judged_sql, normal_sql, proposed_sql
from mtsql.core.trajectories import ScoredRow

VERDICTS = ("no_pass", "pass")


def verdict_changes(trajectory: Trajectory) -> dict[str, list[bool]]:
    """For each verdict kind, one flag per judged query that a later query followed: did it change?"""
    steps = trajectory.steps
    found: dict[str, list[bool]] = {v: [] for v in VERDICTS}
    for i, step in enumerate(steps):
        judged = judged_sql(step) if step.action == "tool_call" else None
        if step.verdict not in VERDICTS or not judged:
            continue
        following = next((sql for later in steps[i + 1 :] if (sql := proposed_sql(later))), None)
        if following is not None:
            found[step.verdict].append(normal_sql(following) != normal_sql(judged))
    return found


def behaviour(rows: list[ScoredRow]) -> dict[str, Rate]:
    """The protocol rates of scored trajectory rows (see the module docstring)."""
    trajectories = [r.trajectory for r in rows]
    with_memory = [r.trajectory for r in rows if r.turn.previous_questions]
    changes: dict[str, list[bool]] = {v: [] for v in VERDICTS}
    for trajectory in trajectories:
        for verdict, flags in verdict_changes(trajectory).items():
            changes[verdict] += flags
    return {
        "answered": rate_of(t.final_sql is not None for t in trajectories),
        "protocol_valid": rate_of(t.protocol_valid for t in trajectories),
        "memory_checked": rate_of(bool(t.tool_steps("memory_retrieve")) for t in with_memory),
        "changed_after_no_pass": rate_of(changes["no_pass"]),
        "changed_after_pass": rate_of(changes["pass"]),
    }
