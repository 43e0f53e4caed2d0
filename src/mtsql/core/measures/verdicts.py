"""How well the agent's verdicts predict correctness, and whether it acts on them.

Every tool result the agent judged gives one verdict: an ``exec_sql`` result (``<exec_verify>``, about
the executed query) or a ``memory_retrieve`` check (``<memory_verify>``, about the latest executed
query, the one checked against the dialogue memory). The judged query is *right* when it scores EX 1
against the turn's gold; a query the evaluator cannot score is counted as ``unscored`` and left out.

Per verdict kind, the 2x2 table ``{verdict: {"right": a, "wrong": b}}`` gives, with "pass" as the
positive call: ``precision_pass`` = right among pass, ``recall_pass`` = pass among right,
``precision_no_pass`` = wrong among no_pass, ``recall_no_pass`` = no_pass among wrong, and
``accuracy`` = pass on right or no_pass on wrong, over all scored verdicts.

*Followed*: after ``no_pass``, the next query the agent proposed (its next ``exec_sql`` argument or
its answer) differs from the judged one (a revision); after ``pass``, that next query is its answer
and the same query. Queries are compared after lower-casing, collapsing whitespace and dropping a
final semicolon. A verdict with no later query counts as not followed. n = every verdict of the kind.
"""

from __future__ import annotations

from collections.abc import Callable

from mtsql.core.agent.env import Step

VERDICTS = ("pass", "no_pass")
KINDS = {"exec_sql": "exec_verify", "memory_retrieve": "memory_verify"}


def normal_sql(sql: str) -> str:
    return " ".join(sql.lower().split()).rstrip(";").strip()


def proposed_sql(step: Step) -> str | None:
    """The query a step proposes: an exec_sql argument or an answer."""
    if step.action == "answer" or (step.action == "tool_call" and step.tool == "exec_sql"):
        return step.sql
    return None


def judged_sql(step: Step) -> str | None:
    """The query a tool step's verdict is about: the executed one, or for a memory check the latest
    executed."""
    return step.sql if step.tool == "exec_sql" else step.checked_sql


def next_proposal(steps: list[Step], after: int) -> Step | None:
    """The first step after index ``after`` that proposes a query."""
    return next((later for later in steps[after + 1 :] if proposed_sql(later)), None)


def followed(steps: list[Step], index: int) -> bool:
    """Did the action after the verdict on ``steps[index]`` follow it (see the module docstring)?"""
    step, nxt = steps[index], next_proposal(steps, index)
    if nxt is None:
        return False
    same = normal_sql(proposed_sql(nxt)) == normal_sql(judged_sql(step) or "")
    return not same if step.verdict == "no_pass" else nxt.action == "answer" and same


def verdict_calibration(rows: list, judge: Callable[[object, str], int | None]) -> dict:
    """``{"exec_verify": cell, "memory_verify": cell}`` over scored rows (``trajectories.ScoredRow``);
    ``judge(row, sql)`` is the EX
    (1, 0 or None) of ``sql`` against ``row``'s gold. A cell: ``table``, ``unscored``, ``followed``
    (``{verdict: {"followed", "count"}}``) and the rates of the module docstring (None without n)."""
    tables = {kind: {v: {"right": 0, "wrong": 0} for v in VERDICTS} for kind in KINDS.values()}
    unscored = dict.fromkeys(KINDS.values(), 0)
    follow = {kind: {v: {"followed": 0, "count": 0} for v in VERDICTS} for kind in KINDS.values()}
    for row in rows:
        steps = row.trajectory.steps
        for i, step in enumerate(steps):
            kind = KINDS.get(step.tool) if step.action == "tool_call" else None
            judged = judged_sql(step) if kind else None
            if step.verdict not in VERDICTS or not judged:
                continue
            verdict = step.verdict
            follow[kind][verdict]["count"] += 1
            follow[kind][verdict]["followed"] += followed(steps, i)
            ex = judge(row, judged)
            if ex is None:
                unscored[kind] += 1
            else:
                tables[kind][verdict]["right" if ex == 1 else "wrong"] += 1
    return {
        kind: {
            "table": tables[kind],
            "unscored": unscored[kind],
            "followed": follow[kind],
            **rates(tables[kind]),
        }
        for kind in KINDS.values()
    }


def rates(table: dict) -> dict:
    """Precision, recall and accuracy of a 2x2 verdict table (None where there is nothing to divide)."""
    a, b = table["pass"]["right"], table["pass"]["wrong"]
    c, d = table["no_pass"]["right"], table["no_pass"]["wrong"]
    return {name: k / n if n else None for name, (k, n) in calibration_counts(a, b, c, d).items()}


def calibration_counts(a: int, b: int, c: int, d: int) -> dict[str, tuple[int, int]]:
    """(k, n) of each rate from the cells: pass/right a, pass/wrong b, no_pass/right c, no_pass/wrong d."""
    return {
        "precision_pass": (a, a + b),
        "recall_pass": (a, a + c),
        "precision_no_pass": (d, c + d),
        "recall_no_pass": (d, b + d),
        "accuracy": (a + d, a + b + c + d),
    }
