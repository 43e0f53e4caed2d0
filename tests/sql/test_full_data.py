"""Gold as predictions on the full SParC / CoSQL dev sets (needs $MTSQL_DATA): the official numbers."""

from __future__ import annotations

import re

import pytest

from mtsql.core.evaluation_files import evaluate_files
from mtsql.core.sql.evaluation import EvaluateOptions
from mtsql.core.sql.official_format import read_interactions

from ..caches import clear_caches

pytestmark = pytest.mark.data


@pytest.fixture(autouse=True)
def own_home(tmp_path, monkeypatch):
    """A gold cache of this test's own: what other runs saved under the user's MTSQL_HOME is not read."""
    monkeypatch.setenv("MTSQL_HOME", str(tmp_path / "home"))


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
    nulls = [
        (i["interaction_index"], i["turn_index"], i["db_id"]) for i in result.items if i["exec_match"] is None
    ]
    assert [n for n in nulls if n[2] != "wta_1"] == [broken]
    assert len(nulls) == 59 + 1  # the 59 wta_1 turns have no database, only a schema for exact match
    assert execution["interaction"]["scored"] == {"sparc": 403, "cosql": 275}[dataset]
    # official counting: the interactions the official program can run, whole, and nothing else
    runnable = [
        i
        for i, turns_ in enumerate(read_interactions(gold, gold=True))
        if turns_[0].db_id != "wta_1" and i != broken[0]
    ]
    assert [e["interaction_index"] for e in execution["left_out"]] == sorted(
        set(range(interactions)) - set(runnable)
    )
    kept = [i for i in result.items if i["interaction_index"] in set(runnable)]
    assert (execution["question"]["scored"], execution["question"]["correct"]) == (len(kept), len(kept))
    assert execution["scorable_turns"]["scored"] == turns - len(nulls)


def test_sparc_script_execution_counts(full_data):
    """The SParC script runs the prediction first: the four golds SQLite rejects as written (three
    '! =', one undefined alias) fail as predictions and score 0 (3 interactions) before their gold
    could crash; only the wta_1 interactions are left out."""
    result = evaluate_files(
        "sparc",
        full_data / "sparc" / "dev_gold.txt",
        options=EvaluateOptions(etype="exec", exec_semantics="sparc"),
    )
    execution = result.summary["execution"]
    assert (execution["scorable_turns"]["correct"], execution["scorable_turns"]["scored"]) == (1140, 1144)
    assert (execution["interaction"]["correct"], execution["interaction"]["scored"]) == (401, 404)
    assert {e["db_id"] for e in execution["left_out"]} == {"wta_1"}
    assert execution["question"]["scored"] == 1203 - sum(e["turns"] for e in execution["left_out"]) == 1144


@pytest.mark.parametrize("dataset", ["sparc", "cosql"])
def test_exact_match_is_the_same_under_both_execution_algorithms(dataset, full_data, tmp_path):
    """Predictions with the `value` placeholder for every number, and no blank line at the end."""
    gold = full_data / dataset / "dev_gold.txt"
    lines = [re.sub(r"\b\d+\b", "value", line.split("\t")[0]) for line in gold.read_text().splitlines()]
    pred = tmp_path / "pred.txt"
    pred.write_text("\n".join(lines).rstrip("\n"))
    items = {
        semantics: evaluate_files(
            dataset, pred, options=EvaluateOptions(etype="match", exec_semantics=semantics)
        ).items
        for semantics in ("testsuite", "sparc")
    }
    assert items["testsuite"] == items["sparc"] and len(items["sparc"]) == EXPECTED[dataset][0]
    assert sum(i["exact_match"] for i in items["sparc"]) > 0.95 * len(items["sparc"])


@pytest.mark.parametrize("dataset", ["sparc", "cosql"])
def test_worker_processes_and_gold_cache_give_the_single_process_items(dataset, full_data, tmp_path):
    """A model-like prediction file: right, another turn's gold, `value` placeholders, cut queries."""
    gold = full_data / dataset / "dev_gold.txt"
    sqls = [line.split("\t")[0] for line in gold.read_text().splitlines() if line.strip()]
    lines, position = [], 0
    for line in gold.read_text().splitlines():
        if line.strip():
            sql = sqls[position]
            lines.append(
                [sql, sqls[position - 1], re.sub(r"\b\d+\b", "value", sql), sql[: len(sql) // 2]][
                    position % 4
                ]
            )
            position += 1
        else:
            lines.append("")
    pred = tmp_path / "pred.txt"
    pred.write_text("\n".join(lines) + "\n")
    single = evaluate_files(dataset, pred, options=EvaluateOptions(workers=1))
    for _ in range(2):  # gold cache empty, then full
        clear_caches()
        parallel = evaluate_files(dataset, pred, options=EvaluateOptions(workers=2, gold_cache=True))
        assert parallel.items == single.items
    assert 0.2 < single.summary["execution"]["question"]["accuracy"] < 0.8


def test_spider_gold_as_predictions(full_data):
    """EM on all 1,034 questions; EX on the 972 whose database exists (wta_1's 62 are left out)."""
    result = evaluate_files("spider", full_data / "spider" / "dev_gold.txt")
    exact, execution = result.summary["exact"], result.summary["execution"]
    assert (exact["question"]["correct"], exact["question"]["scored"]) == (1034, 1034)
    assert (execution["question"]["correct"], execution["question"]["scored"]) == (972, 972)
    assert {i["db_id"] for i in result.items if i["exec_match"] is None} == {"wta_1"}
    assert len(execution["left_out"]) == 62 and "interaction" not in exact
    # the official program's hardness counts on this dev.json
    assert {
        level: exact["by_hardness"][level]["scored"] for level in ("easy", "medium", "hard", "extra")
    } == {"easy": 250, "medium": 440, "hard": 174, "extra": 170}
