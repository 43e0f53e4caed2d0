"""Vacuous golds on the fixture database, EX without them, and the cost of trajectories."""

from dataclasses import replace
from pathlib import Path

import pytest

from mtsql.base.paths import FIXTURE_DATA, database_path
from mtsql.core.agent.env import Step
from mtsql.core.agent.tools import MemoryEntry
from mtsql.core.measures.cost import cost_per_turn, trajectory_cost
from mtsql.core.measures.vacuous import non_empty_gold_ex
from mtsql.core.sql.vacuous import is_vacuous
from mtsql.core.trajectories import ScoredRow, read_rows

PETS = database_path("pets_1", FIXTURE_DATA)


def scored(**fields) -> ScoredRow:
    """A real scored row (the scripted episode of tests/fixtures/scored_rows.jsonl), ``fields`` changed."""
    return replace(
        read_rows(Path(__file__).resolve().parents[1] / "fixtures" / "scored_rows.jsonl")[0], **fields
    )


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT PetID FROM pets WHERE pet_age > 100", True),  # no rows
        ("SELECT NULL FROM pets", True),  # only NULLs
        ("SELECT count(*) FROM pets WHERE pet_age > 100", False),  # one row: 0
        ("SELECT PetID FROM pets", False),
        ("SELECT nope FROM pets", None),  # does not run: not flagged
    ],
)
def test_vacuous_gold(sql, expected):
    assert is_vacuous(PETS, sql) is expected


def test_ex_on_the_non_empty_gold_subset():
    def item(interaction, turn, ex):
        return {"interaction_index": interaction, "turn_index": turn, "exec_match": ex}

    items = [item(0, 0, 1), item(0, 1, 1), item(1, 0, 0), item(1, 1, 1), item(2, 0, 1), item(2, 1, None)]
    # interaction 2 is left out of the official figure (an unscorable turn); (0, 1) and (1, 1) have empty
    # golds
    out = non_empty_gold_ex(items, vacuous={(0, 1), (1, 1)}, left_out={2})
    assert out == {"correct": 1, "scored": 2, "vacuous": 2}  # official 3/4, without vacuous golds 1/2


def test_cost_of_trajectories():
    def step(i, action, **fields):
        return Step(index=i, text="", action=action, **fields)

    steps = [
        step(0, "tool_call", tool="exec_sql", result_kind="ok"),
        step(1, "tool_call", tool="exec_sql", result_kind="error"),
        step(2, "tool_call", tool="memory_retrieve", observation="..."),
        step(3, "invalid"),
        step(4, "answer"),
    ]
    memory = [MemoryEntry("q1", "SELECT 1"), MemoryEntry("q2", None), MemoryEntry("q3", "SELECT 2")]
    real = scored().trajectory
    row = scored(
        trajectory=replace(real, steps=steps, memory=memory),
        generated_tokens=50,
        elapsed_s=2.0,
        generations=[{"tokens": 10, "prompt_tokens": 100}, {"tokens": 20, "prompt_tokens": 130}],
    )
    # 2 exec_sql calls ran + one memory_retrieve running the 2 remembered queries; 5 assistant messages
    assert trajectory_cost(row) == {
        "generated_tokens": 50,
        "prompt_tokens": 230,
        "sql_executions": 4,
        "messages": 5,
    }
    other = scored(
        trajectory=replace(real, steps=[step(0, "answer")], memory=[]),
        generated_tokens=10,
        elapsed_s=1.0,
        generations=[{"tokens": 10, "prompt_tokens": 90}],
    )
    assert cost_per_turn([row, other], turns=2, wall_s=3.0) == {
        "generated_tokens": 30.0,
        "prompt_tokens": 160.0,
        "sql_executions": 2.0,
        "messages": 3.0,
        "wall_s": 1.5,
    }
    assert cost_per_turn([row, other], turns=1)["wall_s"] is None, "two samples of one turn: vote@2's cost"
