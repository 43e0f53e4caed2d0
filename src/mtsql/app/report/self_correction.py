"""Self-correction and execution errors in the long-horizon evaluations: the counts of
``measures.revisions`` (written by the evaluate stage), and verified against unverified answers.

A *verified* answer is one the agent had run with ``exec_sql`` and judged ``pass`` before answering
it (the same query, compared as ``measures.verdicts.normal_sql`` does).
"""

from __future__ import annotations

from mtsql.app.report.evaluation import trajectory_rows
from mtsql.app.report.markdown import table
from mtsql.app.report.runs import datasets, evaluation_of, is_long_horizon
from mtsql.app.report.stats import Rate, rate_of
from mtsql.base.artifacts import Artifact
from mtsql.core.agent.env import Trajectory
from mtsql.core.measures.verdicts import normal_sql
from mtsql.core.trajectories import ScoredRow

COLUMNS = {
    "no_pass": "no_pass verdicts",
    "revised": "revised after no_pass",
    "wrong_to_right": "wrong → right",
    "right_to_wrong": "right → wrong",
    "stayed_wrong": "stayed wrong",
    "stayed_right": "stayed right",
    "unscored": "unscored",
    "with_error": "turns with a failed exec_sql",
    "ran_after": "a later query ran",
    "resolved": "answer right all the same",
    "recovered": "recovered (a later query ran, answer right)",
}


def revision_counts(art: Artifact, dataset: str) -> dict:
    """The ``revisions`` measure of one evaluated dataset."""
    return evaluation_of(art).datasets[dataset].revisions


def is_verified(trajectory: Trajectory) -> bool:
    """The final answer was run with ``exec_sql`` and judged ``pass`` before it was given."""
    final = trajectory.final_sql
    return final is not None and any(
        step.verdict == "pass" and normal_sql(step.sql or "") == normal_sql(final)
        for step in trajectory.tool_steps("exec_sql")
    )


def verified_rates(rows: list[ScoredRow]) -> tuple[Rate, Rate]:
    """EX of the scored turns with a verified answer, and of the others (n: such turns)."""
    scored = [r for r in rows if r.execution is not None]
    verified = [r.execution == 1 for r in scored if is_verified(r.trajectory)]
    others = [r.execution == 1 for r in scored if not is_verified(r.trajectory)]
    return rate_of(verified), rate_of(others)


def self_correction_section(evals: dict[str, Artifact]) -> list[str]:
    """Per long-horizon evaluation and dataset: revisions after no_pass by their outcome, turns with
    a failed execution and how they ended, and EX with and without a verified answer."""
    rows = []
    for label, art in evals.items():
        if not is_long_horizon(art):
            continue
        for dataset in datasets(art):
            counts = revision_counts(art, dataset)
            verified, others = verified_rates(trajectory_rows(art, dataset))
            rows.append([label, dataset, *(counts[key] for key in COLUMNS), verified.cell(), others.cell()])
    if not rows:
        return []
    lines = [
        "## Self-correction and execution errors",
        "",
        "Over every trajectory of each long-horizon evaluation (`measures.revisions`): a *revision* is a "
        "query the agent proposed after judging a tool result no_pass that differs from the judged query; "
        "it is classed by the EX of the judged query and of the revision against the gold (*unscored*: "
        "either cannot be scored). A *failed exec_sql* is an execution error; *a later query ran*: a later "
        "`exec_sql` of the turn gave a result; *answer right all the same*: the turn's final answer has EX "
        "1. The last two columns give EX of the turns whose answer the agent had run and judged pass "
        "(*verified*) and of the others (%, [95 % interval], k/n).",
        "",
    ]
    return lines + table(
        ["evaluation", "dataset", *COLUMNS.values(), "EX, verified answer", "EX, other answers"],
        rows,
        numeric_from=2,
    )
