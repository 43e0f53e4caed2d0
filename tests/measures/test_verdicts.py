"""Verdict calibration on a crafted trajectory set whose 2x2 tables were counted by hand."""

from dataclasses import replace
from pathlib import Path

import pytest

from mtsql.core.agent.env import Step
from mtsql.core.measures.verdicts import verdict_calibration
from mtsql.core.trajectories import ScoredRow, read_rows


def scored(**fields) -> ScoredRow:
    """A real scored row (the scripted episode of tests/fixtures/scored_rows.jsonl) with ``fields``
    changed."""
    return replace(
        read_rows(Path(__file__).resolve().parents[1] / "fixtures" / "scored_rows.jsonl")[0], **fields
    )


G, W, W2, X = "SELECT a FROM t", "SELECT b FROM t", "SELECT c FROM t", "SELECT broken"


def exec_step(i, sql, verdict):
    return Step(index=i, text="", action="tool_call", tool="exec_sql", sql=sql, verdict=verdict)


def memory_step(i, checked, verdict):
    return Step(
        index=i, text="", action="tool_call", tool="memory_retrieve", checked_sql=checked, verdict=verdict
    )


def answer(i, sql):
    return Step(index=i, text="", action="answer", sql=sql)


def taking(*steps: Step) -> ScoredRow:
    """The real row with its trajectory's steps replaced."""
    row = scored()
    return replace(row, trajectory=replace(row.trajectory, steps=list(steps)))


ROWS = [
    taking(*steps)
    for steps in (
        [
            exec_step(0, W, "no_pass"),
            exec_step(1, G, "pass"),
            memory_step(2, G, "pass"),
            answer(3, "select A from t;"),
        ],
        [exec_step(0, W, "pass"), answer(1, W)],  # a wrong pass, acted on
        [exec_step(0, G, "no_pass"), exec_step(1, G, None)],  # a right no_pass, not acted on
        [exec_step(0, W2, "pass"), exec_step(1, G, "pass"), answer(2, G)],  # pass, but the query changed
        [memory_step(0, W, "no_pass")],  # no_pass, then nothing
        [exec_step(0, X, "pass"), answer(1, X)],  # the evaluator cannot score X
    )
]


def judge(row, sql):
    return None if sql == X else int(sql == G)


def test_exec_verify_table_rates_and_following():
    cell = verdict_calibration(ROWS, judge)["exec_verify"]
    assert cell["table"] == {"pass": {"right": 2, "wrong": 2}, "no_pass": {"right": 1, "wrong": 1}}
    assert cell["unscored"] == 1
    assert cell["precision_pass"] == pytest.approx(2 / 4) and cell["recall_pass"] == pytest.approx(2 / 3)
    assert cell["precision_no_pass"] == pytest.approx(1 / 2) and cell["recall_no_pass"] == pytest.approx(
        1 / 3
    )
    assert cell["accuracy"] == pytest.approx(3 / 6)
    assert cell["followed"] == {"pass": {"followed": 4, "count": 5}, "no_pass": {"followed": 1, "count": 2}}


def test_memory_verify_table_and_following():
    cell = verdict_calibration(ROWS, judge)["memory_verify"]
    assert cell["table"] == {"pass": {"right": 1, "wrong": 0}, "no_pass": {"right": 0, "wrong": 1}}
    assert (
        cell["precision_pass"],
        cell["recall_pass"],
        cell["precision_no_pass"],
        cell["recall_no_pass"],
        cell["accuracy"],
    ) == (1.0, 1.0, 1.0, 1.0, 1.0)
    assert cell["followed"] == {"pass": {"followed": 1, "count": 1}, "no_pass": {"followed": 0, "count": 1}}


def test_nothing_to_divide_is_none():
    cell = verdict_calibration([taking(answer(0, G))], judge)["exec_verify"]
    assert cell["accuracy"] is None and cell["precision_pass"] is None and cell["unscored"] == 0


def test_scripted_self_corrections_are_calibrated_and_followed():
    """gold_with_correction runs a wrong variant (a different result or an error), says no_pass, runs the
    gold, says pass and, on later turns, checks the memory (pass) before answering: every verdict is right and
    acted on."""
    from mtsql.app.config import Config
    from mtsql.base.paths import FIXTURE_DATA
    from mtsql.core.agent.env import SqlAgentEnv
    from mtsql.core.agent.policies import GoldWithCorrectionPolicy
    from mtsql.core.agent.settings import EnvConfig
    from mtsql.core.data import load_turns
    from mtsql.stages.evaluate import EvaluateView, judge

    from ..episodes import run_episode

    turns = [t for t in load_turns("sparc", "dev", root=FIXTURE_DATA) if t.db_id == "pets_1"][:8]
    policy = GoldWithCorrectionPolicy(data_root=FIXTURE_DATA)
    rows = [
        scored(turn=t, trajectory=run_episode(SqlAgentEnv(EnvConfig(), data_root=FIXTURE_DATA), policy, t))
        for t in turns
    ]
    corrected = sum(len(r.trajectory.tool_steps("exec_sql")) == 2 for r in rows)
    later = sum(bool(t.previous_questions) for t in turns)
    assert corrected >= 4 and later >= 4, "the slice holds both kinds"
    out = verdict_calibration(rows, judge(EvaluateView.of(Config(), data_root=FIXTURE_DATA)))
    exec_cell, memory_cell = out["exec_verify"], out["memory_verify"]
    assert exec_cell["table"] == {
        "pass": {"right": len(turns), "wrong": 0},
        "no_pass": {"right": 0, "wrong": corrected},
    }
    assert memory_cell["table"] == {"pass": {"right": later, "wrong": 0}, "no_pass": {"right": 0, "wrong": 0}}
    assert exec_cell["accuracy"] == 1.0 and exec_cell["unscored"] == 0
    assert exec_cell["followed"] == {
        "pass": {"followed": len(turns), "count": len(turns)},
        "no_pass": {"followed": corrected, "count": corrected},
    }
