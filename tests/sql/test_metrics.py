from __future__ import annotations

from mtsql.core.sql.metrics import summarize, turn_bucket


def item(interaction, turn, exact, execution, hardness="easy", error=None):
    return {
        "interaction_index": interaction,
        "turn_index": turn,
        "db_id": f"db{interaction}",
        "hardness": hardness,
        "exact_match": exact,
        "exec_match": execution,
        "error": error,
    }


def test_turn_buckets():
    assert [turn_bucket(i) for i in range(6)] == ["1", "2", "3", "4", ">4", ">4"]


def test_an_interaction_with_an_unscorable_turn_is_left_out_whole():
    """The official program only runs on interactions it can score: interaction 0's scorable
    turns 0 and 2 count nowhere for execution, and everywhere for exact match."""
    items = [
        item(0, 0, 1, 1),
        item(0, 1, 1, None, "hard", "gold fails"),
        item(0, 2, 0, 0, "medium"),
        item(1, 0, 1, 0),
        item(2, 0, 0, 1),
        item(2, 1, 1, 1, "hard"),
    ]
    summary = summarize(items)
    execution, exact = summary["execution"], summary["exact"]
    assert execution["question"] == {
        "count": 6,
        "scored": 3,
        "correct": 2,
        "unscorable": 1,
        "left_out": 3,
        "accuracy": 2 / 3,
    }
    assert execution["interaction"] == {
        "count": 3,
        "scored": 2,
        "correct": 1,
        "unscorable": 1,
        "left_out": 1,
        "accuracy": 0.5,
    }
    assert execution["by_hardness"]["easy"] == {
        "count": 3,
        "scored": 2,
        "correct": 1,
        "unscorable": 0,
        "left_out": 1,
        "accuracy": 0.5,
    }
    assert execution["by_hardness"]["medium"]["accuracy"] is None
    assert execution["by_turn"]["2"] == {
        "count": 2,
        "scored": 1,
        "correct": 1,
        "unscorable": 1,
        "left_out": 1,
        "accuracy": 1.0,
    }
    assert (
        execution["scorable_turns"]["accuracy"] == 3 / 5
    )  # every scorable turn, as no official program counts
    assert execution["left_out"] == [
        {
            "interaction_index": 0,
            "db_id": "db0",
            "turns": 3,
            "unscorable": [{"turn_index": 1, "error": "gold fails"}],
        }
    ]
    assert (
        exact["question"]["scored"] == 6
        and exact["question"]["accuracy"] == 4 / 6
        and exact["left_out"] == []
    )
    assert exact["interaction"]["accuracy"] == 1 / 3
    assert [u["metrics"] for u in summary["unscorable"]] == [["execution"]]


def test_single_turn_summary_has_no_interaction_or_turn_tables():
    items = [
        item(0, 0, 1, 1, "easy"),
        item(1, 0, 1, None, "hard", "no database file for wta_1"),
        item(2, 0, 0, 0),
    ]
    summary = summarize(items, single_turn=True)
    assert "interactions" not in summary and summary["single_turn"]
    assert "interaction" not in summary["execution"] and "by_turn" not in summary["exact"]
    assert (
        summary["execution"]["question"]["scored"] == 2
        and summary["execution"]["question"]["accuracy"] == 0.5
    )
    assert [e["interaction_index"] for e in summary["execution"]["left_out"]] == [1]


def test_only_computed_metrics_are_summarised():
    summary = summarize([item(0, 0, 1, None)], metrics=("exact",))
    assert "execution" not in summary and summary["unscorable"] == []
