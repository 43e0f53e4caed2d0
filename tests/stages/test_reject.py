from dataclasses import replace
from pathlib import Path

import pytest

from mtsql.app.config import load_config
from mtsql.base.errors import UsageError
from mtsql.core.agent.env import Step
from mtsql.core.trajectories import ScoredRow, is_correct, read_rows
from mtsql.stages.reject import RejectConfig, diverse, recovery, select


def scored(**fields) -> ScoredRow:
    """A real scored row (the scripted episode of tests/fixtures/scored_rows.jsonl), ``fields`` changed."""
    return replace(
        read_rows(Path(__file__).resolve().parents[1] / "fixtures" / "scored_rows.jsonl")[0], **fields
    )


def row(
    uid,
    sample,
    *,
    ok=True,
    valid=True,
    hardness="hard",
    tokens=100,
    actions=("exec_sql", "answer"),
    sqls=("SELECT a FROM t",),
    turn_index=0,
):
    real = scored()
    return replace(
        real,
        uid=uid,
        sample=sample,
        hardness=hardness,
        protocol_valid=valid,
        execution=int(ok),
        exact=int(ok),
        response_tokens=tokens,
        actions=list(actions),
        proposed_sql=list(sqls),
        turn=replace(real.turn, interaction_id=uid, turn_index=turn_index),
    )


def test_correctness_needs_protocol_and_required_metrics():
    assert is_correct(row("a", 0), ("ex", "em"))
    assert not is_correct(row("a", 0, valid=False), ("ex", "em"))
    r = row("a", 0)
    r.exact = 0
    assert not is_correct(r, ("ex", "em")) and is_correct(r, ("ex",))


def test_easy_or_all_correct_keeps_two_shortest():
    rows = [row("e", i, hardness="easy", tokens=t) for i, t in enumerate([50, 20, 30, 10])]
    rows[3].execution = 0  # wrong: never kept
    kept, unsolved, _ = select(rows, RejectConfig())
    assert [r.sample for r in kept] == [1, 2] and unsolved == []
    all_ok = [row("h", i, hardness="extra", tokens=t) for i, t in enumerate([90, 70, 80])]
    kept, _, _ = select(all_ok, RejectConfig())
    assert [r.sample for r in kept] == [1, 2]


def test_hard_items_keep_diverse_long_ones():
    same = dict(actions=("exec_sql", "answer"), sqls=("SELECT a FROM t",))
    rows = [
        row("h", 0, tokens=300, **same),
        row("h", 1, tokens=290, **same),  # a near copy of sample 0
        row(
            "h",
            2,
            tokens=200,
            actions=("exec_sql", "exec_sql", "answer"),
            sqls=("SELECT b FROM t", "SELECT a FROM t"),
        ),
        row(
            "h",
            3,
            tokens=150,
            actions=("exec_sql", "memory_retrieve", "answer"),
            sqls=("SELECT a FROM t WHERE x",),
        ),
        row("h", 4, ok=False, tokens=999),
    ]
    kept, unsolved, table = select(rows, RejectConfig(keep_hard=3))
    assert sorted(r.sample for r in kept) == [0, 2, 3], "the copy of sample 0 is passed over"
    assert kept[0].sample == 0, "the longest comes first"
    assert table["all"] == {"sampled": 5, "correct": 4, "kept": 3, "unsolved": 0}
    assert diverse(rows[:4], 1) == [rows[0]]


def test_unsolved_items_go_to_the_pool_and_table_buckets():
    rows = [
        row("u", 0, ok=False, turn_index=5),
        row("u", 1, ok=False, turn_index=5),
        row("s", 0, turn_index=0),
    ]
    kept, unsolved, table = select(rows, RejectConfig())
    assert [(t.interaction_id, t.turn_index) for t in unsolved] == [("u", 5)] and len(kept) == 1
    assert table["turn=>4"]["unsolved"] == 1 and table["turn=1"]["kept"] == 1


def test_unknown_requirement_is_refused_when_the_config_loads():
    with pytest.raises(UsageError, match="'reject.require' must be one of ex, em; got 'bleu'"):
        load_config(None, ["reject.require=[ex, bleu]"])


def recovered_row(uid, sample, *, tokens, by_model=True):
    """A right trajectory whose first exec_sql failed and whose second ran (a recovery when the model wrote
    it)."""
    steps = [
        Step(
            index=0,
            text="",
            action="tool_call",
            tool="exec_sql",
            sql="SELECT x",
            result_kind="error",
            verdict="no_pass",
        ),
        Step(
            index=1,
            text="",
            action="tool_call",
            tool="exec_sql",
            sql="SELECT a FROM t",
            result_kind="ok",
            verdict="pass",
        ),
        Step(index=2, text="", action="answer", sql="SELECT a FROM t"),
    ]
    base = row(uid, sample, hardness="easy", tokens=tokens, actions=("exec_sql", "exec_sql", "answer"))
    return replace(
        base, trajectory=replace(base.trajectory, steps=steps), response_ids=[1, 2] if by_model else None
    )


def test_the_models_own_recovery_is_kept_where_the_shortest_choice_left_it_out():
    """keep_easy keeps the shortest; the model's recovery, longer, is kept as well (keep_recoveries)."""
    rows = [
        replace(row("e", 0, hardness="easy", tokens=10), response_ids=[1]),
        recovered_row("e", 1, tokens=50),
        recovered_row("e", 2, tokens=40),
    ]
    assert recovery(rows[1]) and not recovery(rows[0])
    kept, _, table = select(rows, RejectConfig(keep_easy=1))
    assert [r.sample for r in kept] == [0, 2] and table["all"]["kept"] == 2
    kept, _, _ = select(rows, RejectConfig(keep_easy=1, keep_recoveries=False))
    assert [r.sample for r in kept] == [0]


def test_scripted_corrections_are_not_recoveries():
    rows = [row("e", 0, hardness="easy", tokens=10), recovered_row("e", 1, tokens=50, by_model=False)]
    kept, _, _ = select(rows, RejectConfig(keep_easy=1))
    assert [r.sample for r in kept] == [0]
