"""The evaluate stage on the packaged fixture: files in, items.jsonl + summary.json out."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from mtsql.app import evaluate_command as command
from mtsql.base.errors import UsageError
from mtsql.base.paths import FIXTURE_DATA
from mtsql.core.data import load_turns
from mtsql.core.evaluation_files import evaluate_files, render, score_pairs, write_outputs
from mtsql.core.sql import evaluation
from mtsql.core.sql.evaluation import EvaluateOptions

from ..caches import clear_caches
from ..inprocess import mtsql_in_process

GOLD_LINES = (FIXTURE_DATA / "sparc" / "dev_gold.txt").read_text().splitlines(keepends=True)


@pytest.fixture(autouse=True)
def fixture_data(monkeypatch):
    monkeypatch.setenv("MTSQL_DATA", str(FIXTURE_DATA))


@pytest.fixture()
def gold(tmp_path) -> Path:
    """The first three interactions of the fixture's SParC gold (8 turns on pets_1)."""
    path = tmp_path / "gold.txt"
    path.write_text("".join(GOLD_LINES[:11]))
    return path


def predictions(tmp_path, lines: list[str]) -> Path:
    path = tmp_path / "pred.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def gold_as_predictions(gold: Path) -> list[str]:
    return [line.split("\t")[0].rstrip("\n") for line in gold.read_text().splitlines()]


def test_gold_as_predictions_scores_everything(gold, tmp_path):
    result = evaluate_files("sparc", predictions(tmp_path, gold_as_predictions(gold)), gold_path=gold)
    assert len(result.items) == 8 and result.summary["interactions"] == 3
    for metric in ("exact", "execution"):
        assert result.summary[metric]["question"]["accuracy"] == 1.0
        assert result.summary[metric]["interaction"]["accuracy"] == 1.0
    first = result.items[0]
    assert first == {
        "interaction_index": 0,
        "turn_index": 0,
        "db_id": "pets_1",
        "gold": "SELECT * FROM pets",
        "pred": "SELECT * FROM pets",
        "hardness": "easy",
        "exact_match": 1,
        "exec_match": 1,
        "error": None,
    }
    assert result.items[-1]["interaction_index"] == 2 and result.items[-1]["turn_index"] == 1


def test_outputs_are_written_atomically(gold, tmp_path):
    result = evaluate_files(
        "sparc",
        predictions(tmp_path, gold_as_predictions(gold)),
        gold_path=gold,
        options=EvaluateOptions(etype="match"),
    )
    out = tmp_path / "out"
    write_outputs(out, result)
    assert sorted(p.name for p in out.iterdir()) == ["items.jsonl", "summary.json"]
    rows = [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and all(r["exec_match"] is None for r in rows)
    assert "execution" not in json.loads((out / "summary.json").read_text())


def test_a_short_prediction_file_names_the_first_diverging_interaction(gold, tmp_path):
    lines = gold_as_predictions(gold)
    del lines[5]  # the last turn of interaction 1
    with pytest.raises(UsageError, match=r"interaction 1 .*3 turn\(s\) from line 5.*2 turn\(s\) from line 5"):
        evaluate_files("sparc", predictions(tmp_path, lines), gold_path=gold)


def test_allow_mismatch_scores_missing_turns_zero_and_lists_them(gold, tmp_path):
    lines = gold_as_predictions(gold)[:9]  # interaction 2 loses its second turn
    result = evaluate_files("sparc", predictions(tmp_path, lines), gold_path=gold, allow_mismatch=True)
    missing = [i for i in result.items if i.get("missing")]
    assert [
        (i["interaction_index"], i["turn_index"], i["exact_match"], i["exec_match"]) for i in missing
    ] == [(2, 1, 0, 0)]
    assert result.summary["missing"] == [{"interaction_index": 2, "turn_index": 1}]
    assert result.summary["exact"]["interaction"]["accuracy"] == 2 / 3


def test_allow_mismatch_says_how_many_extra_predictions_it_did_not_score(gold, tmp_path):
    from rich.console import Console

    lines = gold_as_predictions(gold) + ["SELECT 1", "SELECT 2"]  # two turns more in the last interaction
    result = evaluate_files("sparc", predictions(tmp_path, lines), gold_path=gold, allow_mismatch=True)
    console = Console(record=True, width=200)
    render(result.summary, console)
    assert result.summary["extra_predictions"] == 2 and len(result.items) == 8
    assert "2 prediction line(s) had no gold turn and were not scored" in console.export_text()


def test_the_config_data_root_gives_the_gold_of_evaluate_pred(tmp_path):
    """`evaluate --pred ... data.root=X` scores against X's gold, not the fixture's (nor $MTSQL_DATA's)."""
    root = tmp_path / "data"
    (root / "sparc").mkdir(parents=True)
    (root / "sparc" / "dev_gold.txt").write_text("".join(GOLD_LINES[:4]))  # the first interaction, 3 turns
    (root / "sparc" / "tables.json").symlink_to(FIXTURE_DATA / "sparc" / "tables.json")
    (root / "database").symlink_to(FIXTURE_DATA / "database", target_is_directory=True)
    pred = predictions(tmp_path, gold_as_predictions(root / "sparc" / "dev_gold.txt"))
    env = {
        "COLUMNS": "200",
        "PATH": "/usr/bin:/bin",
        "MTSQL_DATA": str(FIXTURE_DATA),
        "MTSQL_HOME": str(tmp_path),
    }
    done = mtsql_in_process(
        [
            "evaluate",
            "--dataset",
            "sparc",
            "--pred",
            str(pred),
            "--out",
            str(tmp_path / "out"),
            f"data.root={root}",
        ],
        env=env,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["gold_file"] == str(root / "sparc" / "dev_gold.txt") and summary["turns"] == 3


def test_hostile_predictions_score_zero_and_leave_the_database_alone(gold, tmp_path):
    db = FIXTURE_DATA / "database" / "pets_1" / "pets_1.sqlite"
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    hostile = [
        "DROP TABLE pets",
        "SELECT * FROM pets; DELETE FROM pets",
        "ATTACH 'x.sqlite' AS x",
        "SELECT 1\x00",
        "SELECT '" + "x" * 10_000_000 + "'",
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
        "SELECT count(*) FROM " + ", ".join(f"pets p{i}" for i in range(25)),
    ]
    path = tmp_path / "pred.txt"
    body = "\n".join(hostile[:3]) + "\n\n" + "\n".join(hostile[3:6]) + "\n\n"
    # odd characters, but UTF-8: a file that is not UTF-8 is refused whole (tests/test_bad_input_store.py)
    path.write_bytes(body.encode() + "SELECT '\ufffe\u202e'\n".encode() + hostile[6].encode() + b"\n")
    result = evaluate_files("sparc", path, gold_path=gold, options=EvaluateOptions(timeout_s=0.5))
    assert [i["exec_match"] for i in result.items] == [0] * 8
    assert [i["exact_match"] for i in result.items] == [0] * 8
    errors = [i["error"] for i in result.items]
    assert "write_refused" in errors[0] and "longer than" in errors[4]
    assert "timeout" in errors[5] and "timeout" in errors[7]
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


def test_score_pairs_equals_scoring_the_written_file(tmp_path):
    turns = [t for t in load_turns("sparc", "dev", limit=3, with_hardness=False)]
    sqls = [t.gold_sql if i % 2 else t.gold_sql.replace("*", "count(*)") + "\n" for i, t in enumerate(turns)]
    from_pairs = score_pairs(list(zip(turns, sqls, strict=True)))
    lines, previous = [], 0
    for turn, sql in zip(turns, sqls, strict=True):
        if turn.interaction_index != previous:
            lines.append("")
            previous = turn.interaction_index
        lines.append(sql.strip())
    gold = tmp_path / "gold.txt"
    gold.write_text("".join(GOLD_LINES[:11]))
    from_file = evaluate_files("sparc", predictions(tmp_path, lines), gold_path=gold)
    assert from_pairs.items == from_file.items


def test_cli_writes_outputs_and_rejects_bad_options(gold, tmp_path):
    pred = predictions(tmp_path, gold_as_predictions(gold))
    env = {
        "COLUMNS": "200",
        "PATH": "/usr/bin:/bin",
        "MTSQL_DATA": str(FIXTURE_DATA),
        "MTSQL_HOME": str(tmp_path),
    }
    ok = mtsql_in_process(
        [
            "evaluate",
            "--dataset",
            "sparc",
            "--pred",
            str(pred),
            "--gold",
            str(gold),
            "--out",
            str(tmp_path / "cli"),
        ],
        env=env,
    )
    assert ok.returncode == 0, ok.stderr
    assert "joint_all" in ok.stdout and (tmp_path / "cli" / "summary.json").exists()
    bad = mtsql_in_process(
        [
            "evaluate",
            "--dataset",
            "sparc",
            "--pred",
            str(pred),
            "--out",
            str(tmp_path / "x"),
            "--exec-semantics",
            "nope",
        ],
        env=env,
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "testsuite" in bad.stderr


# (gold on concert_singer, prediction with the `value` placeholder, expected (exact, execution))
VALUE_CASES = [
    (
        "SELECT name FROM singer ORDER BY age LIMIT 1",
        "SELECT name FROM singer ORDER BY age LIMIT value",
        (1, 1),
    ),
    (
        "SELECT name FROM singer WHERE singer_id IN "
        "(SELECT singer_id FROM singer_in_concert WHERE concert_id = 1)",
        "SELECT name FROM singer WHERE singer_id IN "
        "(SELECT singer_id FROM singer_in_concert WHERE concert_id = value)",
        (1, 1),
    ),
    (
        "SELECT count(*) FROM concert WHERE concert_id = 1",
        "SELECT count(*) FROM concert WHERE concert_id = value;",
        (1, 1),
    ),
    (
        "SELECT count(*) FROM concert WHERE concert_id = 1",
        "SELECT count(*) FROM concert WHERE concert_id = value",
        (1, 1),
    ),
    (
        "SELECT count(*) FROM concert WHERE concert_id = 1",
        "SELECT count(*) FROM concert WHERE concert_id = VALUE",
        (0, 0),
    ),
]


@pytest.mark.parametrize("exec_semantics", ["testsuite", "sparc"])
def test_value_placeholder_verdicts_match_the_official_programs(tmp_path, exec_semantics):
    gold = tmp_path / "gold.txt"
    gold.write_text("".join(f"{g}\tconcert_singer\n\n" for g, _, _ in VALUE_CASES))
    pred = predictions(tmp_path, [line for _, p, _ in VALUE_CASES for line in (p, "")])
    result = evaluate_files(
        "sparc", pred, gold_path=gold, options=EvaluateOptions(exec_semantics=exec_semantics)
    )
    assert [(i["exact_match"], i["exec_match"]) for i in result.items] == [case[2] for case in VALUE_CASES]


def test_exact_match_does_not_depend_on_the_execution_algorithm(gold, tmp_path):
    """Both programs parse alike: the same file gives the same EM items whatever --exec-semantics,
    also when neither file ends its last interaction with a blank line."""
    lines = gold_as_predictions(gold)
    lines[0] = lines[0].replace("*", "count(*)")
    lines[1] = lines[1].replace("10", "value")  # at the end of the line: replaced by both programs
    gold.write_text(gold.read_text().rstrip("\n") + "\n")  # no blank line after the last interaction
    path = tmp_path / "pred.txt"
    path.write_text("\n".join(lines).rstrip("\n"))
    exact = {
        semantics: evaluate_files(
            "sparc", path, gold_path=gold, options=EvaluateOptions(etype="match", exec_semantics=semantics)
        ).items
        for semantics in ("testsuite", "sparc")
    }
    assert exact["testsuite"] == exact["sparc"]
    assert len(exact["sparc"]) == 8 and exact["sparc"][1]["pred"].endswith(">  1")
    assert [i["exact_match"] for i in exact["sparc"]] == [0, 1, 1, 1, 1, 1, 1, 1]


def wrong_and_right(gold: Path) -> list[str]:
    """Prediction lines for a gold file: as written, a neighbour turn's gold, values, a cut query."""
    lines = gold_as_predictions(gold)
    sqls = [line for line in lines if line]
    out = []
    for i, line in enumerate(lines):
        if line and i % 4 == 1:
            line = sqls[(sqls.index(line) + 1) % len(sqls)]
        elif line and i % 4 == 2:
            line = re.sub(r"\b\d+\b", "value", line)
        elif line and i % 8 == 3:
            line = line[: len(line) // 2]
        out.append(line)
    return out


def test_worker_processes_give_the_single_process_items(tmp_path, monkeypatch):
    """Databases spread over processes, gold cache on (empty, then full): the same items."""
    gold = FIXTURE_DATA / "sparc" / "dev_gold.txt"
    pred = predictions(tmp_path, wrong_and_right(gold))
    monkeypatch.setattr(evaluation, "MIN_ROWS_PER_PROCESS", 1)
    single = evaluate_files("sparc", pred, options=EvaluateOptions(workers=1))
    assert {i["exec_match"] for i in single.items} == {0, 1, None} and {i["db_id"] for i in single.items} > {
        "car_1"
    }
    for _ in range(2):
        clear_caches()
        parallel = evaluate_files("sparc", pred, options=EvaluateOptions(workers=2, gold_cache=True))
        assert parallel.items == single.items and parallel.summary == single.summary


SPIDER_GOLD = FIXTURE_DATA / "spider" / "dev_gold.txt"


def spider_predictions(tmp_path, lines: list[str]) -> Path:
    path = tmp_path / "spider_pred.txt"
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_spider_gold_as_predictions_scores_every_scorable_question(tmp_path):
    """One prediction per line; wta_1 has no database: its questions are left out of execution."""
    from rich.console import Console

    lines = [line.split("\t")[0] for line in SPIDER_GOLD.read_text().splitlines()]
    console = Console(record=True, width=200)
    result = command.run_evaluate(
        "spider", spider_predictions(tmp_path, lines), tmp_path / "out", console=console
    )
    summary = result.summary
    assert len(result.items) == 90 and {i["turn_index"] for i in result.items} == {0}
    assert [i["interaction_index"] for i in result.items] == list(range(90))
    assert (summary["exact"]["question"]["correct"], summary["exact"]["question"]["scored"]) == (90, 90)
    assert (summary["execution"]["question"]["correct"], summary["execution"]["question"]["scored"]) == (
        75,
        75,
    )
    assert {i["db_id"] for i in result.items if i["exec_match"] is None} == {"wta_1"}
    assert [e["turns"] for e in summary["execution"]["left_out"]] == [1] * 15
    assert (
        sum(summary["exact"]["by_hardness"][level]["scored"] for level in ("easy", "medium", "hard", "extra"))
        == 90
    )
    assert (
        "interaction" not in summary["exact"]
        and "by_turn" not in summary["exact"]
        and "interactions" not in summary
    )
    text = console.export_text()
    assert "90 questions" in text and "joint_all" not in text and "turn 1" not in text
    assert "15 question(s) left out" in text and "no database file for wta_1" in text


def test_spider_line_up_errors_name_the_line(tmp_path):
    lines = [line.split("\t")[0] for line in SPIDER_GOLD.read_text().splitlines()]
    with pytest.raises(UsageError, match=r"spider_pred.txt line 4 is blank"):
        evaluate_files("spider", spider_predictions(tmp_path, [*lines[:3], "", *lines[3:]]))
    with pytest.raises(
        UsageError, match=r"89 predictions for the 90 questions.*line 90 of .*dev_gold.txt has no prediction"
    ):
        evaluate_files("spider", spider_predictions(tmp_path, lines[:-1]))
    with pytest.raises(UsageError, match=r"line 91 of .*spider_pred.txt has no gold question"):
        evaluate_files("spider", spider_predictions(tmp_path, [*lines, "SELECT 1"]))
    ended = evaluate_files(
        "spider", spider_predictions(tmp_path, [*lines, "", ""]), options=EvaluateOptions(etype="match")
    )
    assert ended.summary["exact"]["question"]["accuracy"] == 1.0  # blank lines at the very end are ignored
    short = evaluate_files(
        "spider",
        spider_predictions(tmp_path, lines[:-2]),
        allow_mismatch=True,
        options=EvaluateOptions(etype="match"),
    )
    assert [(i["interaction_index"], i["exact_match"]) for i in short.items if i.get("missing")] == [
        (88, 0),
        (89, 0),
    ]


def test_score_pairs_of_spider_turns_are_summarised_as_questions():
    turns = load_turns("spider", "dev", with_hardness=False)[:5]
    result = score_pairs([(t, t.gold_sql) for t in turns], options=EvaluateOptions(etype="match"))
    assert result.summary["single_turn"] and result.summary["exact"]["question"]["accuracy"] == 1.0


def test_rendered_tables_fit_100_columns_and_explain_joint_all(tmp_path):
    """The whole fixture SParC dev (interactions left out, both metrics): no line wider than 100
    columns, each left-out reason on one line, and joint_all explained under its table."""
    from rich.console import Console

    lines = [line.split("\t")[0].rstrip("\n") for line in GOLD_LINES]
    result = evaluate_files("sparc", predictions(tmp_path, lines))
    console = Console(width=100, record=True, color_system=None)
    render(result.summary, console)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "joint_all: interactions with every turn right" in text
    head = next(line for line in text.splitlines() if line.startswith("execution: "))
    assert head.endswith("left out, each with a turn the official program skips:")
