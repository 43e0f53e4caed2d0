"""Spider-DK, Spider-Syn and Spider-Realistic (SQL-R1's robustness sets): loading, their own schemas,
EX by Spider-DK's type, a missing Spider-Realistic, and gold as predictions on the full sets."""

from __future__ import annotations

import json
import shutil

import pytest

from mtsql.base.errors import UsageError
from mtsql.core.agent.env import SqlAgentEnv
from mtsql.core.agent.schema_prompt import render_schema
from mtsql.core.agent.settings import EnvConfig
from mtsql.core.data import SINGLE_TURN_DATASETS, eval_dataset_names, load_turns, tables_file
from mtsql.core.data.check import check_split
from mtsql.core.data.robustness import ex_by_type
from mtsql.core.data.settings import DataConfig
from mtsql.core.evaluation_files import evaluate_files, score_pairs

from ..inprocess import mtsql_in_process


def test_the_robustness_sets_are_single_turn_and_ask_their_own_question(fixture_root):
    syn = load_turns("spider_syn", "dev", root=fixture_root, with_hardness=False)
    raw = json.loads((fixture_root / "spider_syn" / "dev.json").read_text())
    assert [t.question for t in syn] == [item["SpiderSynQuestion"].strip() for item in raw]
    assert any(item["SpiderSynQuestion"] != item["SpiderQuestion"] for item in raw)
    dk = load_turns("spider_dk", "dev", root=fixture_root, with_hardness=False)
    assert [t.extra["type"] for t in dk] == [
        item["type"] for item in json.loads((fixture_root / "spider_dk" / "dev.json").read_text())
    ]
    assert {"spider_dk", "spider_syn", "spider_realistic"} <= set(SINGLE_TURN_DATASETS)
    assert {t.dataset for t in dk} == {"spider_dk"} and all(t.turn_index == 0 for t in dk + syn)
    assert not {t.uid for t in dk} & {t.uid for t in syn}, "one rollout holds every dataset's turns"


def test_spider_dk_reads_its_own_tables_and_syn_reads_spiders(fixture_root):
    assert tables_file("spider_dk", fixture_root) == fixture_root / "spider_dk" / "tables.json"
    assert tables_file("spider_syn", fixture_root) == fixture_root / "spider" / "tables.json"
    assert "CREATE TABLE singer" in render_schema("new_concert_singer", fixture_root, 0, dataset="spider_dk")


def _edited_copy(fixture_root, tmp_path, dataset: str, db_id: str):
    """The fixture with ``dataset``'s entry for ``db_id`` showing a renamed first table."""
    root = tmp_path / "data"
    shutil.copytree(fixture_root, root)
    path = root / dataset / "tables.json"
    entries = json.loads(path.read_text())
    entry = next(e for e in entries if e["db_id"] == db_id)
    entry["table_names_original"][0] = "renamed_in_" + dataset
    path.write_text(json.dumps(entries))
    return root


def test_a_prompt_shows_its_own_datasets_tables_json(fixture_root, tmp_path):
    """An edited cosql/tables.json shows in CoSQL's prompts although sparc/tables.json lists the database
    first; SParC's prompts keep SParC's."""
    root = _edited_copy(fixture_root, tmp_path, "cosql", "concert_singer")
    cosql = next(
        t for t in load_turns("cosql", "dev", root=root, with_hardness=False) if t.db_id == "concert_singer"
    )
    sparc = next(
        t for t in load_turns("sparc", "dev", root=root, with_hardness=False) if t.db_id == "concert_singer"
    )
    env = SqlAgentEnv(EnvConfig(sample_values=0), data_root=root)
    assert "renamed_in_cosql" in env.reset(cosql)[-1]["content"]
    assert "renamed_in_cosql" not in env.reset(sparc)[-1]["content"]


def test_data_check_names_a_tables_json_that_differs_from_its_database(fixture_root, tmp_path):
    assert check_split("spider_dk", "dev", fixture_root)["schema_differences"] == {}
    root = _edited_copy(fixture_root, tmp_path, "spider_dk", "new_concert_singer")
    differences = check_split("spider_dk", "dev", root)["schema_differences"]
    assert list(differences) == ["new_concert_singer"]
    assert (
        "table renamed_in_spider_dk is in tables.json, not in the database"
        in differences["new_concert_singer"]
    )
    result = mtsql_in_process(
        ["data", "check", "--dataset", "spider_dk", "--root", str(root)], env={"COLUMNS": "300"}
    )
    assert result.returncode == 0 and "renamed_in_spider_dk is in tables.json" in result.stdout, result.stderr


def test_exact_match_on_spider_dk_uses_its_own_foreign_keys(fixture_root):
    """Spider-DK's modified databases are only in its own tables.json: exact match scores them."""
    turns = [t for t in load_turns("spider_dk", "dev", root=fixture_root) if t.db_id.startswith("new_")]
    result = score_pairs([(t, t.gold_sql) for t in turns], data_root=fixture_root)
    assert result.summary["exact"]["question"]["scored"] == len(turns) > 0
    assert result.summary["exact"]["question"]["accuracy"] == 1.0


def test_ex_by_type_counts_the_scored_items_of_each_type():
    items = [
        {"interaction_index": 0, "exec_match": 1},
        {"interaction_index": 1, "exec_match": 0},
        {"interaction_index": 2, "exec_match": None},
        {"interaction_index": 3, "exec_match": 1},
    ]
    table = ex_by_type(items, {0: 0, 1: 0, 2: 34, 3: 5})
    assert list(table) == ["0", "5", "34"]
    assert table["0"] == {"count": 2, "scored": 2, "correct": 1, "accuracy": 0.5}
    assert table["34"] == {"count": 1, "scored": 0, "correct": 0, "accuracy": None}


def test_spider_dk_by_type_on_the_fixture(fixture_root):
    result = evaluate_files("spider_dk", fixture_root / "spider_dk" / "dev_gold.txt", data_root=fixture_root)
    by_type = result.summary["ex_by_type"]
    assert sum(cell["count"] for cell in by_type.values()) == result.summary["turns"] == 60
    assert (
        sum(cell["scored"] for cell in by_type.values()) == result.summary["execution"]["question"]["scored"]
    )


def test_a_missing_spider_realistic_is_one_line_and_writes_nothing(fixture_root, tmp_path):
    out = tmp_path / "out"
    result = mtsql_in_process(
        [
            "evaluate",
            "--dataset",
            "spider_realistic",
            "--pred",
            str(fixture_root / "spider" / "dev_gold.txt"),
            "--out",
            str(out),
        ],
        env={"COLUMNS": "300", "MTSQL_DATA": str(fixture_root)},
    )
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Spider-Realistic is not shipped" in result.stderr and "spider_realistic/dev.json" in result.stderr
    assert not out.exists()
    with pytest.raises(UsageError, match="not shipped"):
        load_turns("spider_realistic", "dev", root=fixture_root)


def test_a_users_spider_realistic_folder_is_read_and_joins_the_evaluation(fixture_root, tmp_path):
    root = tmp_path / "data"
    shutil.copytree(fixture_root, root)
    cfg = DataConfig(eval_datasets=("spider",), eval_if_present=("spider_realistic", "spider_dk"))
    assert eval_dataset_names(cfg, root) == ("spider", "spider_dk")
    (root / "spider_realistic").mkdir()
    questions = json.loads((root / "spider" / "dev.json").read_text())[:5]
    (root / "spider_realistic" / "dev.json").write_text(
        json.dumps(
            [
                {"db_id": q["db_id"], "question": "realistic " + q["question"], "query": q["query"]}
                for q in questions
            ]
        )
    )
    assert eval_dataset_names(cfg, root) == ("spider", "spider_realistic", "spider_dk")
    turns = load_turns("spider_realistic", "dev", root=root)
    assert len(turns) == 5 and turns[0].question.startswith("realistic ") and turns[0].hardness
    assert tables_file("spider_realistic", root) == root / "spider" / "tables.json"


@pytest.mark.data
@pytest.mark.parametrize(
    ("dataset", "questions", "unscorable"), [("spider_dk", 535, 63), ("spider_syn", 1034, 62)]
)
def test_gold_as_predictions_on_the_full_set(dataset, questions, unscorable, full_data, tmp_path):
    """Every scorable question scores EX 1; the 62 on wta_1 have no database (and one Spider-DK gold,
    question 76, does not run on new_pets_1: the official program cannot score it either)."""
    out = tmp_path / "out"
    result = mtsql_in_process(
        [
            "evaluate",
            "--dataset",
            dataset,
            "--pred",
            str(full_data / dataset / "dev_gold.txt"),
            "--out",
            str(out),
        ],
        env={"COLUMNS": "200", "MTSQL_DATA": str(full_data)},
    )
    assert result.returncode == 0, result.stderr
    items = [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()]
    assert len(items) == questions
    unscored = [i for i in items if i["exec_match"] is None]
    assert len(unscored) == unscorable and sum(i["db_id"] == "wta_1" for i in unscored) == 62
    assert all(i["exec_match"] == 1 for i in items if i["exec_match"] is not None)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["execution"]["question"]["accuracy"] == 1.0
    assert summary["execution"]["question"]["scored"] == questions - unscorable
    if dataset == "spider_dk":
        assert sum(cell["scored"] for cell in summary["ex_by_type"].values()) == questions - unscorable
        assert summary["ex_by_type"]["0"]["count"] == 270 and "execution by question type" in result.stdout
    else:
        assert "ex_by_type" not in summary
