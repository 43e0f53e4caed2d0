"""BIRD (issue 48): its folder layout, the evidence in the prompt, and its official execution accuracy,
quirk by quirk (docs/EVAL_SEMANTICS's BIRD section), on the packaged BIRD-format fixture (built by
``tools/make_bird_fixture.py`` from three Spider databases)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from mtsql.base.paths import FIXTURE_DATA, database_path
from mtsql.core.agent.env import SqlAgentEnv
from mtsql.core.agent.settings import EnvConfig, SqlConfig
from mtsql.core.bird_evaluation import NO_EXACT_MATCH, evaluate_bird, score_bird_pairs
from mtsql.core.data import load_turns
from mtsql.core.data.bird import bird_split, check_bird, load_bird, read_predictions
from mtsql.core.sql import gold_cache
from mtsql.core.sql.bird_exec import SEPARATOR, BirdOptions, bird_exec_match, prediction_sql

from .test_bad_input import Case, assert_refused

BIRD = FIXTURE_DATA / "bird" / "dev"
DB = BIRD / "dev_databases" / "concert_singer" / "concert_singer.sqlite"
SLOW = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT count(*) FROM r"


@pytest.fixture(autouse=True)
def _fresh_gold_memo():
    gold_cache.clear()  # gold results memoised by another test's time budget must not decide one here
    yield
    gold_cache.clear()


def ex(gold: str, pred: str, db: Path = DB, **kwargs) -> int:
    return bird_exec_match(gold, pred, db, **kwargs)[0]


# --- the loader -------------------------------------------------------------------------------------


def test_the_fixture_is_read_as_bird_lays_it_out():
    turns = load_turns("bird", "dev", root=FIXTURE_DATA)
    records = json.loads((BIRD / "dev.json").read_text())
    assert len(turns) == len(records) == 12
    assert {t.extra["difficulty"] for t in turns} == {"simple", "moderate", "challenging"}
    assert [t.extra["question_id"] for t in turns] == [r["question_id"] for r in records]
    assert turns[0].evidence == records[0]["evidence"] != "" and turns[3].evidence == ""
    assert all(t.dataset == "bird" and t.turn_index == 0 and t.hardness is None for t in turns)


def test_a_bird_database_is_found_in_birds_own_folder(tmp_path):
    shutil.copytree(BIRD, tmp_path / "bird" / "dev")
    path = database_path("pets_1", tmp_path)
    assert path == tmp_path / "bird" / "dev" / "dev_databases" / "pets_1" / "pets_1.sqlite"


def test_bird_is_found_where_mtsql_bird_points(tmp_path, monkeypatch):
    shutil.copytree(BIRD, tmp_path / "elsewhere" / "dev")
    monkeypatch.setenv("MTSQL_BIRD", str(tmp_path / "elsewhere"))
    assert bird_split("dev", tmp_path / "data").folder == (tmp_path / "elsewhere" / "dev").resolve()


def test_the_data_check_counts_difficulties_and_lists_failing_empty_and_slow_golds(tmp_path):
    folder = tmp_path / "bird" / "dev"
    shutil.copytree(BIRD, folder)
    records = json.loads((folder / "dev.json").read_text())
    records[0]["SQL"] = "SELECT * FROM no_such_table"
    records[1]["SQL"] = "SELECT name FROM singer WHERE 1 = 0"
    records[2]["SQL"] = SLOW
    (folder / "dev.json").write_text(json.dumps(records))
    (folder / "dev.sql").unlink()  # the golds come from dev.json
    report = check_bird("dev", tmp_path, timeout_s=0.3, slow_s=0.2)
    assert report["questions"] == 12 and report["difficulty"] == {
        "simple": 6,
        "moderate": 4,
        "challenging": 2,
    }
    assert [f["question_id"] for f in report["gold_fail"]] == [0, 2], "a gold past the limit fails too"
    assert [e["question_id"] for e in report["gold_empty"]] == [1]
    assert [s["question_id"] for s in report["gold_slow"]] == [2]
    assert report["with_evidence"] == 9 and report["missing_databases"] == {}


# --- the evidence in the prompt ---------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["long", "short"])
def test_the_prompt_shows_the_evidence_with_the_question_and_none_without(mode):
    turns = load_turns("bird", "dev", root=FIXTURE_DATA)
    env = SqlAgentEnv(EnvConfig(mode=mode), SqlConfig(), data_root=FIXTURE_DATA)
    with_it = env.reset(turns[0])[1]["content"]
    assert f"Current question: {turns[0].question}\nEvidence: {turns[0].evidence}" in with_it
    without = env.reset(turns[3])[1]["content"]
    assert "Evidence" not in without and without.rstrip().endswith(turns[3].question)
    assert "Table singer" in with_it or "singer" in with_it.split("Current question")[0], (
        "the schema is BIRD's db"
    )


def test_a_bird_only_data_folder_gives_the_schema_from_birds_tables_and_databases(tmp_path):
    shutil.copytree(BIRD, tmp_path / "bird" / "dev")  # no Spider tables.json, no database/ folder
    turn = load_turns("bird", "dev", root=tmp_path)[0]
    prompt = SqlAgentEnv(EnvConfig(mode="short"), SqlConfig(), data_root=tmp_path).reset(turn)[1]["content"]
    assert 'CREATE TABLE "singer"' in prompt or "CREATE TABLE singer" in prompt
    assert "-- e.g." in prompt, "sample values come from BIRD's database file"


def test_the_exec_sql_observation_repeats_the_evidence():
    turn = load_turns("bird", "dev", root=FIXTURE_DATA)[0]
    env = SqlAgentEnv(EnvConfig(mode="long"), SqlConfig(), data_root=FIXTURE_DATA)
    env.reset(turn)
    observation, _, _ = env.step(
        '<think>t</think><tool_call>{"name": "exec_sql", "arguments": {"sql": "SELECT 1"}}</tool_call>'
    )
    assert f"Evidence: {turn.evidence}" in observation["content"]


# --- reading predictions ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "sql"),
    [
        (f" SELECT 1 {SEPARATOR}concert_singer", " SELECT 1 "),  # one separator: the text before it, as is
        ("  SELECT 1  ", "SELECT 1"),  # no separator: the whole string, stripped
        (
            f"SELECT 1{SEPARATOR}a{SEPARATOR}b",
            f"SELECT 1{SEPARATOR}a{SEPARATOR}b",
        ),  # two: the whole string, stripped
        (5, " "),
        (None, " "),
        (["SELECT 1"], " "),
        ({"sql": "SELECT 1"}, " "),
        (True, " "),  # not a string: " "
    ],
)
def test_a_prediction_value_becomes_the_sql_the_official_evaluator_runs(value, sql):
    assert prediction_sql(value) == sql


def test_predictions_are_taken_in_the_objects_key_order(tmp_path):
    path = tmp_path / "p.json"
    path.write_text('{"1": "SELECT 2", "0": "SELECT 1", "2": 7}')
    assert read_predictions(path) == ["SELECT 2", "SELECT 1", " "]
    path.write_text("SELECT 1\nSELECT 2\n")  # mtsql's own format: one SQL a line
    assert read_predictions(path) == ["SELECT 1", "SELECT 2"]


# --- BIRD's execution accuracy, quirk by quirk ------------------------------------------------------

GOLD = "SELECT name, age FROM singer"


@pytest.mark.parametrize(
    ("pred", "expected"),
    [
        (GOLD, 1),
        (f"SELECT * FROM ({GOLD}) ORDER BY age DESC", 1),  # row order does not matter
        (f"{GOLD} UNION ALL {GOLD}", 1),  # nor duplicate rows
        ("SELECT age, name FROM singer", 0),  # column order does
        (f"{GOLD} LIMIT 2", 0),
        (f"  {GOLD} ;  ", 1),  # blanks and one trailing ';' run as they are
        (f"{GOLD};  ;", 0),  # a second ';' is a second statement
        (f"{GOLD}; SELECT 1", 0),  # two statements fail
        ("SELECT * FROM no_such_table", 0),  # an error of the prediction
        (f"{GOLD}\x00", 0),  # a NUL character fails in sqlite3
        ("", 0),
        (" ", 0),  # no rows, where the gold has some
    ],
)
def test_set_of_rows_and_failures(pred, expected):
    assert ex(GOLD, pred) == expected


def test_values_compare_with_python_equality():
    assert ex("SELECT count(*) FROM singer", "SELECT count(*) * 1.0 FROM singer") == 1, "1 == 1.0"
    assert ex("SELECT name FROM singer", "SELECT upper(name) FROM singer") == 0, "'a' != 'A'"
    assert ex("SELECT NULL", "SELECT NULL") == 1


def test_a_gold_with_no_rows_matches_an_empty_prediction_and_limit_0():
    empty = "SELECT name FROM singer WHERE age > 1000"
    for pred in ("", " ", f"SELECT * FROM ({GOLD}) LIMIT 0", "SELECT 1 WHERE 0"):
        assert ex(empty, pred) == 1, pred
    assert ex(empty, "SELECT 1") == 0


def test_an_error_of_the_gold_gives_0_not_unscorable():
    assert bird_exec_match("SELECT * FROM no_such_table", "SELECT 1", DB) == (
        0,
        "gold: no_such_table (no such table: no_such_table)",
    )
    assert ex("SELECT 1; SELECT 2", "SELECT 1; SELECT 2") == 0, (
        "even a prediction identical to a failing gold"
    )


def test_past_the_time_limit_either_query_gives_0():
    score, error = bird_exec_match(GOLD, SLOW, DB, timeout_s=0.3)
    assert (score, error.split(" ")[:2]) == (0, ["prediction:", "timeout"])
    score, error = bird_exec_match(SLOW, SLOW, DB, timeout_s=0.3)
    assert (score, error.split(" ")[:2]) == (0, ["gold:", "timeout"])


def test_text_that_is_not_utf8_fails_as_in_sqlite3(tmp_path):
    db = tmp_path / "latin.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (x TEXT)")
        conn.execute("INSERT INTO t VALUES (CAST(x'e9' AS TEXT))")
    assert bird_exec_match("SELECT x FROM t", "SELECT x FROM t", db)[0] == 0
    assert bird_exec_match("SELECT 1", "SELECT x FROM t", db)[1].startswith(
        "prediction: other (Could not decode"
    )


def test_a_prediction_that_writes_scores_0_and_changes_nothing(tmp_path):
    db = tmp_path / "c.sqlite"
    shutil.copy(DB, db)
    before = db.read_bytes()
    assert bird_exec_match("SELECT count(*) FROM singer", "DELETE FROM singer", db)[1].startswith(
        "prediction: write_refused"
    )
    assert db.read_bytes() == before


def test_the_gold_lines_database_decides_not_the_predictions(tmp_path):
    pred = tmp_path / "p.json"
    records = json.loads((BIRD / "dev.json").read_text())
    pred.write_text(
        json.dumps({str(i): f"{r['SQL']}{SEPARATOR}some_other_db" for i, r in enumerate(records)})
    )
    result = evaluate_bird(pred, data_root=FIXTURE_DATA)
    assert all(item["exec_match"] == 1 for item in result.items)


# --- files and tables -------------------------------------------------------------------------------


def test_items_and_the_official_table(tmp_path):
    records = json.loads((BIRD / "dev.json").read_text())
    values = {str(i): f"{r['SQL']}{SEPARATOR}{r['db_id']}" for i, r in enumerate(records)}
    wrong = [i for i, r in enumerate(records) if r["difficulty"] == "moderate"][:1]
    for i in wrong:
        values[str(i)] = 3  # runs as " ": no rows
    pred = tmp_path / "p.json"
    pred.write_text(json.dumps(values))
    result = evaluate_bird(pred, data_root=FIXTURE_DATA, workers=2)
    assert [item["question_id"] for item in result.items] == [r["question_id"] for r in records]
    assert [item["difficulty"] for item in result.items] == [r["difficulty"] for r in records]
    assert [item["exec_match"] for item in result.items] == [
        0 if i in wrong else 1 for i in range(len(records))
    ]
    table = result.summary["execution"]["by_difficulty"]
    assert {level: (cell["count"], cell["correct"]) for level, cell in table.items()} == {
        "simple": (6, 6),
        "moderate": (4, 3),
        "challenging": (2, 2),
        "total": (12, 11),
    }
    assert result.summary["exact"] is None and result.summary["exact_match"] == NO_EXACT_MATCH


def test_the_command_writes_items_and_prints_percentages_and_no_exact_match(tmp_path):
    from .test_bad_input import mtsql

    records = json.loads((BIRD / "dev.json").read_text())
    (tmp_path / "p.json").write_text(
        json.dumps({str(i): r["SQL"] for i, r in enumerate(records)} | {"0": ""})
    )
    result = mtsql(["evaluate", "--dataset", "bird", "--pred", "p.json", "--out", "out"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    items = [json.loads(line) for line in (tmp_path / "out" / "items.jsonl").read_text().splitlines()]
    assert {"question_id", "difficulty", "exec_match"} <= set(items[0]) and items[0]["exec_match"] == 0
    assert "91.67" in result.stdout  # 11 of 12 in total, in percent with two decimals
    assert "exact match: not defined for BIRD" in result.stdout


def test_a_slow_item_does_not_hold_up_the_items_of_other_tasks():
    turns = load_turns("bird", "dev", root=FIXTURE_DATA)
    pairs = [(t, SLOW if i == 0 else t.gold_sql) for i, t in enumerate(turns)]
    result = score_bird_pairs(pairs, BIRD / "dev_databases", options=BirdOptions(timeout_s=0.5, workers=2))
    assert [item["exec_match"] for item in result.items] == [0] + [1] * (len(turns) - 1)
    assert "timeout" in result.items[0]["error"]


def test_gold_results_come_from_the_cache_on_a_second_run(tmp_path, monkeypatch):
    monkeypatch.setenv("MTSQL_HOME", str(tmp_path / "home"))
    turns = load_turns("bird", "dev", root=FIXTURE_DATA)
    pairs = [(t, "SELECT 1") for t in turns]
    options = BirdOptions(gold_cache=True)
    first = score_bird_pairs(pairs, BIRD / "dev_databases", options=options).items
    assert list((tmp_path / "home" / "cache" / "gold").glob("*.pickle")), "the gold results were saved"
    gold_cache.clear()
    calls = []
    monkeypatch.setattr(
        gold_cache, "execute", lambda *a, **k: calls.append(a) or pytest.fail("gold run again")
    )
    assert score_bird_pairs(pairs, BIRD / "dev_databases", options=options).items == first and not calls


def test_load_bird_reads_a_train_folder_without_question_ids(tmp_path):
    folder = tmp_path / "bird" / "train"
    folder.mkdir(parents=True)
    (folder / "train.json").write_text(
        json.dumps([{"db_id": "pets_1", "question": "q?", "evidence": "e", "SQL": "SELECT 1"}])
    )
    turns = load_bird(bird_split("train", tmp_path))
    assert (turns[0].extra, turns[0].evidence, turns[0].split) == (
        {"question_id": 0, "difficulty": None},
        "e",
        "train",
    )


# --- bad input: one line, exit 2, nothing written ---------------------------------------------------


def _bird_copy(tmp: Path) -> Path:
    shutil.copytree(BIRD, tmp / "bird" / "dev", dirs_exist_ok=True)
    return tmp / "bird" / "dev"


def _predictions(count: int):
    def setup(tmp: Path) -> None:
        _bird_copy(tmp)
        records = (
            json.loads((BIRD / "dev.json").read_text())[:count]
            if count <= 12
            else json.loads((BIRD / "dev.json").read_text()) + [{"SQL": "SELECT 1"}] * (count - 12)
        )
        (tmp / "p.json").write_text(json.dumps({str(i): r["SQL"] for i, r in enumerate(records)}))

    return setup


def _without_database(tmp: Path) -> None:
    _predictions(12)(tmp)
    shutil.rmtree(tmp / "bird" / "dev" / "dev_databases" / "pets_1")


def _not_utf8(tmp: Path) -> None:
    _bird_copy(tmp)
    (tmp / "p.json").write_bytes(b'{"0": "SELECT \xe9"}')


BAD = [
    Case(
        "no BIRD folder",
        ("evaluate", "--dataset", "bird", "--pred", "p.json", "--out", "out"),
        ("no BIRD dev set at", "put BIRD's dev folder there", "dev.json", "dev_databases"),
        setup=lambda tmp: (tmp / "p.json").write_text("{}"),
        env={"MTSQL_DATA": "{tmp}"},
    ),
    Case(
        "a database missing",
        ("evaluate", "--dataset", "bird", "--pred", "p.json", "--out", "out"),
        ("BIRD database pets_1", "is missing: put it at", "dev_databases/pets_1/pets_1.sqlite"),
        setup=_without_database,
        env={"MTSQL_DATA": "{tmp}"},
    ),
    Case(
        "too few predictions",
        ("evaluate", "--dataset", "bird", "--pred", "p.json", "--out", "out"),
        ("has 11 predictions for the 12 questions", "fewer"),
        setup=_predictions(11),
        env={"MTSQL_DATA": "{tmp}"},
    ),
    Case(
        "too many predictions",
        ("evaluate", "--dataset", "bird", "--pred", "p.json", "--out", "out"),
        ("has 13 predictions for the 12 questions", "more"),
        setup=_predictions(13),
        env={"MTSQL_DATA": "{tmp}"},
    ),
    Case(
        "not UTF-8",
        ("evaluate", "--dataset", "bird", "--pred", "p.json", "--out", "out"),
        ("p.json line 1: not UTF-8",),
        setup=_not_utf8,
        env={"MTSQL_DATA": "{tmp}"},
    ),
    Case(
        "a JSON list",
        ("evaluate", "--dataset", "bird", "--pred", "p.json", "--out", "out"),
        ("holds a JSON list", "one JSON object"),
        setup=lambda tmp: (_bird_copy(tmp), (tmp / "p.json").write_text("[]")),
        env={"MTSQL_DATA": "{tmp}"},
    ),
]


@pytest.mark.parametrize("case", BAD, ids=lambda case: case.id)
def test_bad_bird_input_is_one_line_and_writes_nothing(case, tmp_path):
    assert_refused(case, tmp_path)


# --- the evaluate stage ------------------------------------------------------------------------------


def test_the_evaluate_stage_on_bird_gives_birds_table_by_difficulty(tmp_path, models_home, tiny_qwen3):
    """On the packaged fixture's BIRD folder, whatever MTSQL_DATA names (CI's data folder holds no BIRD)."""
    from mtsql.app import pipeline
    from mtsql.base.files import read_jsonl

    from .test_pipeline import cfg_for

    cfg = cfg_for(
        tmp_path,
        "model.name=tiny-qwen3",
        "sample.max_new_tokens=8",
        "data.eval_datasets=[bird]",
        "data.eval_limit=3",
        "data.eval_pick=spread",
        f"data.root={FIXTURE_DATA}",
    )
    art = pipeline.evaluate(cfg, label="eval-base")
    block = art.metrics["datasets"]["bird"]
    items = read_jsonl(art.path / "bird" / "items.jsonl")
    assert len(items) == 3 and {"question_id", "difficulty", "exec_match"} <= set(items[0])
    assert {item["db_id"] for item in items} == {"concert_singer", "pets_1", "poker_player"}
    assert block["em"] is None and block["scored_em"] == 0
    assert set(block["by_difficulty"]) == {"simple", "moderate", "challenging", "total"}
    assert block["by_difficulty"]["total"]["count"] == 3
    assert block["ex"] == block["by_difficulty"]["total"]["ex"] == sum(i["exec_match"] for i in items) / 3
    from mtsql.app.report.evaluation import evaluation_table

    row = next(line for line in evaluation_table({"eval-base": art}) if "| bird |" in line)
    assert row.count("| – |") >= 2, "no EM and no interaction EX for BIRD"
    from mtsql.app.report.build import build_report

    report = build_report(art.path.parents[1], tmp_path / "report")
    assert "| bird |" in Path(report).read_text()


def test_two_tasks_of_one_database_keep_each_others_saved_golds(tmp_path, monkeypatch):
    """BIRD's items of one database are scored in several tasks, maybe at once: the one that saves last
    keeps what the other saved meanwhile."""
    import pickle

    monkeypatch.setenv("MTSQL_HOME", str(tmp_path / "home"))
    folder = BIRD / "dev_databases"
    with gold_cache.persisted("concert_singer", (folder,)):
        gold_cache.executed(DB, "SELECT 1", timeout_s=5, max_rows=10)
        other = gold_cache.cache_file("concert_singer", (folder,))  # another task saves meanwhile
        other.parent.mkdir(parents=True)
        key = ("exec", str(DB), "SELECT 2", 5.0, 10)
        other.write_bytes(pickle.dumps({key: "saved by the other task"}))
    saved = pickle.loads(other.read_bytes())
    assert saved[key] == "saved by the other task" and ("exec", str(DB), "SELECT 1", 5.0, 10) in saved


def test_a_bird_episode_is_rewarded_with_birds_ex_and_no_em(tmp_path):
    from mtsql.core.rewards import outcome_terms

    turn = load_turns("bird", "dev", root=FIXTURE_DATA)[0]
    env = SqlAgentEnv(EnvConfig(mode="short"), SqlConfig(), data_root=FIXTURE_DATA)
    env.reset(turn)
    env.step(
        f"<think>t</think><answer_sql>SELECT * FROM ({turn.gold_sql}) UNION ALL {turn.gold_sql}</answer_sql>"
    )
    assert outcome_terms(env.trajectory, turn.gold_sql, data_root=FIXTURE_DATA) == (1.0, 0.0, 1.0, 0.0)
    shutil.copytree(BIRD, tmp_path / "bird" / "dev")
    shutil.rmtree(tmp_path / "bird" / "dev" / "dev_databases" / turn.db_id)
    assert outcome_terms(env.trajectory, turn.gold_sql, data_root=tmp_path) == (0.0, 0.0, 0.0, 0.0), (
        "no database"
    )


def test_a_bird_folder_outside_the_data_folder_counts_in_the_fingerprint(tmp_path, monkeypatch):
    from mtsql.app.config import load_config
    from mtsql.stages.curriculum import CurriculumView

    monkeypatch.setenv("MTSQL_HOME", str(tmp_path / "home"))
    shutil.copytree(BIRD, tmp_path / "elsewhere" / "dev")
    cfg = load_config(None, [f"runs_dir={tmp_path / 'runs'}"])
    view = CurriculumView.of(cfg, data_root=FIXTURE_DATA)
    assert "bird_digest" not in view.hashed(), "the packaged fixture's bird/ is inside the data folder"
    monkeypatch.setenv("MTSQL_BIRD", str(tmp_path / "elsewhere"))
    before = view.hashed()["bird_digest"]
    with sqlite3.connect(
        tmp_path / "elsewhere" / "dev" / "dev_databases" / "pets_1" / "pets_1.sqlite"
    ) as conn:
        conn.execute("CREATE TABLE added (x)")
    assert view.hashed()["bird_digest"] != before


def test_gold_may_name_a_train_folder(tmp_path):
    train = tmp_path / "train"
    train.mkdir()
    records = json.loads((BIRD / "dev.json").read_text())[:2]
    (train / "train.json").write_text(
        json.dumps([{k: r[k] for k in ("db_id", "question", "evidence", "SQL")} for r in records])
    )
    shutil.copytree(BIRD / "dev_databases", train / "train_databases")
    (tmp_path / "p.json").write_text(json.dumps({"0": records[0]["SQL"], "1": "SELECT 1"}))
    result = evaluate_bird(tmp_path / "p.json", gold_path=train)
    assert [(i["question_id"], i["difficulty"], i["exec_match"]) for i in result.items] == [
        (0, None, 1),
        (1, None, 0),
    ]
    assert result.summary["execution"]["by_difficulty"]["total"]["count"] == 2


def test_the_gold_and_the_prediction_share_one_time_budget(monkeypatch):
    """The official limit covers the whole item: what the gold took is not left to the prediction."""
    from dataclasses import replace

    real = gold_cache.executed

    def slow_gold(*args, **kwargs):
        return replace(real(*args, **kwargs), elapsed_s=kwargs["timeout_s"])

    monkeypatch.setattr(gold_cache, "executed", slow_gold)
    assert bird_exec_match(GOLD, f"{GOLD} ", DB, timeout_s=5.0) == (
        0,
        "timeout: the gold used the item's whole time budget",
    )
    assert bird_exec_match(GOLD, GOLD, DB, timeout_s=5.0)[0] == 0, "twice the gold's time passes the budget"


def test_data_check_prints_birds_table(tmp_path):
    from .test_bad_input import mtsql

    result = mtsql(["data", "check", "--dataset", "bird"], tmp_path)
    assert result.returncode == 0, result.stderr
    for words in (
        "questions",
        "12",
        "simple: 6, moderate: 4, challenging: 2",
        "gold fail",
        "gold return nothing",
        "gold slower than 5 s",
    ):
        assert words in result.stdout, words
