import json
from collections import Counter

import pytest

from mtsql.base.errors import UsageError
from mtsql.core.data import dataset_file, eval_turns, load_turns
from mtsql.core.data.check import check_split
from mtsql.core.data.settings import DataConfig


def test_official_dev_fixture_in_gold_order(fixture_root):
    turns = load_turns("sparc", "dev", root=fixture_root)
    gold_lines = [
        line for line in (fixture_root / "sparc" / "dev_gold.txt").read_text().splitlines() if line.strip()
    ]
    assert len(turns) == len(gold_lines)
    assert [t.gold_sql for t in turns] == [line.split("\t")[0] for line in gold_lines]
    first, second = turns[0], turns[1]
    assert (first.turn_index, second.turn_index) == (0, 1) and first.interaction_id == second.interaction_id
    assert second.previous_questions == (first.question,) and second.previous_sql == (first.gold_sql,)
    assert all(t.hardness in {"easy", "medium", "hard", "extra"} for t in turns if t.db_id != "wta_1")


def test_cosql_raw_train_flattening(fixture_root):
    turns = load_turns("cosql", "train", root=fixture_root, with_hardness=False)
    assert dataset_file("cosql", "train", fixture_root).name.startswith("cosql_train_full_dialogues")
    assert turns and all("\t" not in t.gold_sql and t.question for t in turns)
    dev_dbs = set((fixture_root / "cosql" / "dev_db_ids.txt").read_text().split())
    assert not {t.db_id for t in turns} & dev_dbs, "train split must be DB-disjoint from dev"
    by_dialogue = {}
    for t in turns:
        by_dialogue.setdefault(t.interaction_id, []).append(t)
    for dialogue in by_dialogue.values():
        assert [t.turn_index for t in dialogue] == list(range(len(dialogue)))
        assert dialogue[-1].previous_sql == tuple(t.gold_sql for t in dialogue[:-1])


def test_raw_flattening_joins_clarifications(tmp_path):
    (tmp_path / "extras").mkdir()
    dialogue = {
        "db_name": "x",
        "turns": [
            {"isUser": True, "text": "hi there", "type": "IMPROPER"},
            {"isUser": True, "text": "list the singers", "type": "AMBIGUOUS"},
            {"isUser": False, "text": "did you mean names?", "query": "", "label": "CLARIFY"},
            {"isUser": True, "text": "yes", "type": "INFORM_SQL"},
            {"isUser": False, "text": "here", "query": "SELECT\tname FROM singer", "label": "CONFIRM_SQL"},
            {"isUser": True, "text": "thanks", "type": "IMPROPER"},
            {"isUser": False, "text": "bye", "query": "", "label": "GOOD_BYE"},
        ],
    }
    (tmp_path / "extras" / "cosql_train_full_dialogues_from_QDA-SQL.json").write_text(json.dumps([dialogue]))
    (turn,) = load_turns("cosql", "train", root=tmp_path, with_hardness=False)
    assert turn.question == "list the singers | did you mean names? | yes"
    assert turn.gold_sql == "SELECT name FROM singer"


def test_limit_keeps_whole_interactions(fixture_root):
    turns = load_turns("cosql", "dev", root=fixture_root, limit=3, with_hardness=False)
    assert {t.interaction_index for t in turns} == {0, 1, 2}


def test_spread_pick_covers_databases_with_a_file_in_turn(fixture_root):
    """SParC's dev file starts with 16+ pets_1 dialogues: "first 16" would be one database."""
    first = eval_turns(DataConfig(eval_limit=16), "sparc", fixture_root)
    assert {t.db_id for t in first} == {"pets_1"}
    spread = eval_turns(DataConfig(eval_limit=16, eval_pick="spread"), "sparc", fixture_root)
    per_db = Counter(t.db_id for t in {t.interaction_index: t for t in spread}.values())
    with_file = {t.db_id for t in load_turns("sparc", "dev", root=fixture_root, with_hardness=False)} - {
        "wta_1"
    }
    assert set(per_db) == with_file and max(per_db.values()) - min(per_db.values()) <= 1
    assert len({t.interaction_index for t in spread}) == 16
    for interaction in {t.interaction_index for t in spread}:  # whole interactions, each db's first ones
        whole = [
            t for t in load_turns("sparc", "dev", root=fixture_root) if t.interaction_index == interaction
        ]
        assert [t for t in spread if t.interaction_index == interaction] == whole
    assert eval_turns(DataConfig(eval_pick="spread"), "sparc", fixture_root) == load_turns(
        "sparc", "dev", root=fixture_root
    )


def test_spider_questions_are_interactions_of_one_turn(fixture_root):
    turns = load_turns("spider", "dev", root=fixture_root)
    gold_lines = (fixture_root / "spider" / "dev_gold.txt").read_text().splitlines()
    assert [t.gold_sql for t in turns] == [line.split("\t")[0] for line in gold_lines]
    assert [t.db_id for t in turns] == [line.split("\t")[1] for line in gold_lines]
    assert [t.interaction_index for t in turns] == list(range(len(turns))) and {
        t.turn_index for t in turns
    } == {0}
    assert len({t.interaction_id for t in turns}) == len(turns) and all(not t.previous_sql for t in turns)
    assert {t.hardness for t in turns if t.db_id != "wta_1"} == {"easy", "medium", "hard", "extra"}
    with pytest.raises(UsageError, match="no official spider train.json"):
        load_turns("spider", "train", root=fixture_root)


def test_check_split_counts_spider_in_questions(fixture_root):
    report = check_split("spider", "dev", fixture_root)
    assert report["unit"] == "questions" and report["questions"] == 90 and "interactions" not in report
    assert report["missing_databases"] == {"wta_1": 15} and report["questions_without_database"] == 15
    assert "turns_per_interaction" not in report


def test_bad_inputs_name_the_file(tmp_path):
    with pytest.raises(UsageError, match="unknown dataset 'atis'"):
        load_turns("atis", "dev", root=tmp_path)
    (tmp_path / "spider").mkdir()
    (tmp_path / "spider" / "dev.json").write_text('[{"db_id": "x", "question": "q"}]')
    with pytest.raises(UsageError, match="question 0 lacks"):
        load_turns("spider", "dev", root=tmp_path)
    (tmp_path / "sparc").mkdir()
    bad = tmp_path / "sparc" / "dev.json"
    bad.write_text('[{"database_id": "x",\n "interaction": [}]')
    with pytest.raises(UsageError, match=r"dev.json line 2 column \d+: malformed JSON"):
        load_turns("sparc", "dev", root=tmp_path)
    bad.write_text('[{"database_id": "x"}]')
    with pytest.raises(UsageError, match="interaction 0 lacks"):
        load_turns("sparc", "dev", root=tmp_path)
    with pytest.raises(UsageError, match="no official sparc train.json"):
        load_turns("sparc", "train", root=tmp_path)


def test_check_split_on_fixture(fixture_root):
    report = check_split("sparc", "dev", fixture_root)
    assert report["missing_databases"] and "wta_1" in report["missing_databases"]
    failing = report["gold_fail_after_joining_operators"]
    assert [(f["db_id"], f["turn"]) for f in failing] == [("battle_death", 1)]
    # e.g. sparc-dev-0003/0, students over 20 with a pet: none in pets_1 (six such golds in the fixture)
    assert report["gold_vacuous"] == 6


@pytest.mark.data
@pytest.mark.parametrize("dataset,interactions,turns", [("sparc", 422, 1203), ("cosql", 293, 1007)])
def test_full_dev_counts(full_data, dataset, interactions, turns):
    report = check_split(dataset, "dev", full_data)
    assert (report["interactions"], report["turns"]) == (interactions, turns)
    assert list(report["missing_databases"]) == ["wta_1"] and report["turns_without_database"] == 59
    assert len(report["gold_fail_after_joining_operators"]) == 1


@pytest.mark.data
def test_full_spider_dev_counts(full_data):
    report = check_split("spider", "dev", full_data)
    assert (report["questions"], report["databases"]) == (1034, 20)
    assert report["missing_databases"] == {"wta_1": 62} and report["gold_fail_as_written"] == 0


def test_flattened_training_turns_are_questions_of_their_own():
    from mtsql.app.config import load_config
    from mtsql.base.paths import FIXTURE_DATA
    from mtsql.core.data import train_pool

    cfg = load_config(None, ["data.train_limit=3"])
    dialogues = train_pool(cfg.data, FIXTURE_DATA)
    flat = train_pool(load_config(None, ["data.train_limit=3", "data.train_flatten=true"]).data, FIXTURE_DATA)
    assert len(flat) == len(dialogues) and any(t.turn_index > 0 for t in dialogues)
    assert all(t.turn_index == 0 and not t.previous_questions and not t.previous_sql for t in flat)
    assert len({t.uid for t in flat}) == len(flat) and [t.gold_sql for t in flat] == [
        t.gold_sql for t in dialogues
    ]
