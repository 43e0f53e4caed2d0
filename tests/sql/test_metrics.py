from __future__ import annotations

from mtsql.sql.metrics import summarize, turn_bucket


def item(interaction, turn, exact, execution, hardness="easy"):
    return {"interaction_index": interaction, "turn_index": turn, "db_id": "d", "hardness": hardness,
            "exact_match": exact, "exec_match": execution, "error": None}


def test_turn_buckets():
    assert [turn_bucket(i) for i in range(6)] == ["1", "2", "3", "4", ">4", ">4"]


def test_unscorable_items_are_counted_but_never_folded_into_accuracies():
    items = [item(0, 0, 1, 1), item(0, 1, 1, None, "hard"), item(1, 0, 1, 0), item(2, 0, 0, 1)]
    summary = summarize(items)
    assert summary["execution"]["question"] == {"count": 4, "scored": 3, "correct": 2, "unscorable": 1,
                                                "accuracy": 2 / 3}
    # interaction 0 has a null turn: unscorable; 1 scores 0; 2 scores 1
    assert summary["execution"]["interaction"]["unscorable"] == 1
    assert summary["execution"]["interaction"]["accuracy"] == 0.5
    assert summary["exact"]["interaction"]["accuracy"] == 2 / 3
    assert summary["execution"]["by_hardness"]["hard"]["accuracy"] is None
    assert summary["exact"]["by_turn"]["2"] == {"count": 1, "scored": 1, "correct": 1, "unscorable": 0,
                                                     "accuracy": 1.0}
    assert [u["metrics"] for u in summary["unscorable"]] == [["execution"]]


def test_only_computed_metrics_are_summarised():
    summary = summarize([item(0, 0, 1, None)], metrics=("exact",))
    assert "execution" not in summary and summary["unscorable"] == []
