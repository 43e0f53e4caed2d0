from dataclasses import replace
from pathlib import Path

import pytest

from mtsql.app.config import load_config
from mtsql.base.errors import UsageError
from mtsql.core.data.records import Turn
from mtsql.core.trajectories import ScoredRow, read_rows
from mtsql.stages.curriculum import CurriculumConfig, partition, pass_rates, size_table


def scored(**fields) -> ScoredRow:
    """A real scored row (the scripted episode of tests/fixtures/scored_rows.jsonl), ``fields`` changed."""
    return replace(
        read_rows(Path(__file__).resolve().parents[1] / "fixtures" / "scored_rows.jsonl")[0], **fields
    )


def turn(i, hardness, turn_index=0):
    return Turn("cosql", "train", f"d{i}", i, turn_index, "db", "q", "SELECT 1", hardness=hardness)


POOL = [turn(0, "easy"), turn(1, "medium", 1), turn(2, "hard", 2), turn(3, "extra", 5), turn(4, "hard")]


def test_default_stages_by_hardness():
    stages, dropped = partition(POOL, CurriculumConfig())
    assert [[t.interaction_index for t in s] for s in stages] == [[0, 1], [2, 4], [3]]
    assert dropped == {"solved": 0, "unlabelled": 0, "not_in_any_stage": 0}
    table = size_table(stages)
    assert (
        table["stage 2"]["hard"] == 2 and table["stage 3"]["turn >4"] == 1 and table["stage 1"]["total"] == 2
    )


def test_by_turn_and_unknown_labels():
    stages, dropped = partition(POOL, CurriculumConfig(by="turn", stages=(("1",), ("2", "3"))))
    assert [len(s) for s in stages] == [2, 2] and dropped["not_in_any_stage"] == 1
    with pytest.raises(UsageError, match=r"override 'curriculum.stages=\[\[easy\]\]'.*not turn labels"):
        load_config(None, ["curriculum.by=turn", "curriculum.stages=[[easy]]"])


def test_pass_rate_and_drop_solved():
    rows = [
        scored(uid=t.uid, protocol_valid=True, execution=ok, exact=ok)
        for t, oks in zip(POOL, [(1, 1), (1, 0), (0, 0), (0, 0), (1, 1)], strict=True)
        for ok in oks
    ]
    rates = pass_rates(rows)
    assert rates[POOL[1].uid] == 0.5
    cfg = CurriculumConfig(by="pass_rate", stages=(("high",), ("low", "zero")))
    stages, dropped = partition(POOL, cfg, rates)
    assert dropped["solved"] == 2
    assert [t.interaction_index for t in stages[0]] == [1] and [t.interaction_index for t in stages[1]] == [
        2,
        3,
    ]
    with pytest.raises(UsageError, match="needs a sample artifact"):
        partition(POOL, cfg)
