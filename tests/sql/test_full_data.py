"""Gold as predictions on the full SParC / CoSQL dev sets (needs $MTSQL_DATA): the official numbers."""

from __future__ import annotations

import pytest

from mtsql.sql.evaluation import EvaluateOptions, evaluate_files

pytestmark = pytest.mark.data

# dataset -> (turns, interactions, the one gold SQLite rejects: (interaction, turn, db))
EXPECTED = {"sparc": (1203, 422, (161, 1, "battle_death")), "cosql": (1007, 293, (100, 1, "car_1"))}


@pytest.mark.parametrize("dataset", ["sparc", "cosql"])
def test_gold_as_predictions(dataset, full_data):
    turns, interactions, broken = EXPECTED[dataset]
    gold = full_data / dataset / "dev_gold.txt"
    result = evaluate_files(dataset, gold)
    exact, execution = result.summary["exact"], result.summary["execution"]
    assert (exact["question"]["correct"], exact["question"]["scored"]) == (turns, turns)
    assert (exact["interaction"]["correct"], exact["interaction"]["scored"]) == (interactions, interactions)
    assert execution["question"]["accuracy"] == 1.0 and execution["interaction"]["accuracy"] == 1.0
    nulls = [(i["interaction_index"], i["turn_index"], i["db_id"]) for i in result.items if i["exec_match"] is None]
    assert [n for n in nulls if n[2] != "wta_1"] == [broken]
    assert len(nulls) == 59 + 1  # the 59 wta_1 turns have no database, only a schema for exact match
    assert execution["interaction"]["scored"] == {"sparc": 403, "cosql": 275}[dataset]


def test_sparc_script_execution_counts(full_data):
    """The SParC script runs golds as written: the three '! =' golds fail as predictions (0) first."""
    result = evaluate_files("sparc", full_data / "sparc" / "dev_gold.txt",
                            options=EvaluateOptions(etype="exec", exec_semantics="sparc"))
    question, interaction = result.summary["execution"]["question"], result.summary["execution"]["interaction"]
    assert (question["correct"], question["scored"]) == (1140, 1144)
    assert (interaction["correct"], interaction["scored"]) == (401, 404)
