"""Grounded warm-start data (gold_grounded), the model's own mistakes (own_mistakes) and env.error_hint:
a verdict in the data follows what its observation shows."""

from __future__ import annotations

import json
import random

import pytest

from mtsql.base.paths import FIXTURE_DATA, database_path
from mtsql.core.agent import prompts
from mtsql.core.agent.mutations import misnamed_columns
from mtsql.core.agent.policies import (
    MEASURED_FAILURE_SHARE,
    GroundedPolicy,
    OwnMistakesPolicy,
    make_policy,
    observed_failure,
    runnable,
)
from mtsql.core.agent.schema_prompt import load_tables
from mtsql.core.agent.settings import EnvConfig, SqlConfig
from mtsql.core.agent.tools import run_sql, schema_hint
from mtsql.core.data import load_turns
from mtsql.core.sql.clauses import render_breakdown
from mtsql.core.sql.executor import execute_cached
from mtsql.engines.backends.settings import SampleConfig

from ..episodes import run_episode
from .conftest import find

ENV = EnvConfig(thinking=True)


@pytest.fixture(scope="module")
def train_turns():
    return load_turns("cosql", "train", root=FIXTURE_DATA, with_hardness=False)[:40]


def grounded(share: float = 1.0, **env) -> GroundedPolicy:
    return make_policy(
        "gold_grounded",
        env_cfg=EnvConfig(**{"thinking": True, **env}),
        data_root=FIXTURE_DATA,
        failure_share=share,
    )


def exec_steps(traj):
    return [s for s in traj.steps if s.action == "tool_call" and s.tool == "exec_sql"]


def shown_failure(traj, step) -> bool:
    """Does the observation of ``step`` show a failure (an error, or no rows where the gold has some)?"""
    db = database_path(traj.db_id, FIXTURE_DATA)
    gold = run_sql(db, runnable(next(s.sql for s in reversed(exec_steps(traj)))), SqlConfig(), 1)
    return observed_failure(run_sql(db, step.sql, SqlConfig(), 1), gold)


def test_every_verdict_follows_what_its_observation_shows(make_env, train_turns):
    """no_pass exactly after an observed failure, pass after every other result; the reasoning of a
    no_pass quotes the result it judges and ends on the query it runs next, clause by clause; every episode
    ends with the gold and follows the protocol."""
    policy = grounded(1.0)
    corrected = 0
    for turn in train_turns:
        traj = run_episode(make_env(thinking=True), policy, turn)
        assert traj.protocol_valid and traj.final_sql == runnable(turn.gold_sql)
        executed = exec_steps(traj)
        for step in executed:
            assert step.verdict == ("no_pass" if shown_failure(traj, step) else "pass"), (turn.uid, step.sql)
        if executed[0].verdict == "no_pass":
            corrected += 1
            judged = traj.steps[executed[0].index + 1].text
            result_line = step_result(executed[0].observation)
            assert f"The result was: {result_line}" in judged
            fixed = traj.steps[executed[0].index + 1].sql
            assert judged.split("</think>")[0].rstrip().endswith(f"run it again: {render_breakdown(fixed)}")
    assert corrected >= 0.8 * len(train_turns), (
        corrected
    )  # a table name guessed wrong applies almost everywhere


def step_result(observation: str) -> str:
    lines = observation.splitlines()
    return lines[lines.index("Result:") + 1]


def test_no_correction_after_a_result_that_runs_and_has_rows(make_env, train_turns):
    """Unlike gold_with_correction, no first query that runs and returns rows is ever judged no_pass."""
    for turn in train_turns[:20]:
        first = exec_steps(run_episode(make_env(thinking=True), grounded(1.0), turn))[0]
        assert first.result_kind == "error" or first.verdict == "pass" or first.result_kind == "empty"


def test_correction_share_comes_from_failure_share(make_env, train_turns):
    """The share of corrected trajectories follows sample.failure_share (default: the measured 126/215)."""
    assert SampleConfig().failure_share == MEASURED_FAILURE_SHARE == 0.586

    def corrected(share: float) -> int:
        return sum(
            exec_steps(run_episode(make_env(thinking=True), grounded(share), turn, rng=random.Random(seed)))[
                0
            ].verdict
            == "no_pass"
            for seed, turn in enumerate(train_turns)
        )

    assert corrected(0.0) == 0
    assert corrected(1.0) >= 0.8 * len(train_turns)
    assert 0.3 * len(train_turns) <= corrected(0.5) <= 0.7 * len(train_turns)


def test_with_the_items_known_the_share_is_exact(make_env, train_turns):
    """Given every uid of the run, round(failure_share x items) items are corrected, whatever the draws."""
    uids = [t.uid for t in train_turns]
    policy = make_policy(
        "gold_grounded", env_cfg=ENV, data_root=FIXTURE_DATA, failure_share=0.586, items=uids
    )
    assert len(policy.chosen) == round(0.586 * len(uids)) == 23
    corrected = {
        turn.uid
        for seed, turn in enumerate(train_turns)
        if exec_steps(run_episode(make_env(thinking=True), policy, turn, rng=random.Random(seed)))[0].verdict
        == "no_pass"
    }
    assert corrected == policy.chosen


def test_an_empty_result_where_the_gold_has_rows_is_a_failure():
    db = database_path("concert_singer", FIXTURE_DATA)
    rows, empty = (
        run_sql(db, sql, SqlConfig(), 1)
        for sql in ("SELECT name FROM singer", "SELECT name FROM singer WHERE age > 1000")
    )
    nulls = run_sql(db, "SELECT NULL FROM singer", SqlConfig(), 1)
    error = run_sql(db, "SELECT nam FROM singer", SqlConfig(), 1)
    assert observed_failure(empty, rows) and observed_failure(nulls, rows) and observed_failure(error, rows)
    assert not observed_failure(rows, rows) and not observed_failure(empty, empty)


def test_misnamed_columns_are_guessed_as_a_small_model_guesses_and_fail_to_run():
    tables = load_tables("concert_singer", FIXTURE_DATA)
    variants = misnamed_columns(
        "SELECT T1.Name FROM singer AS T1 WHERE T1.Age > 20 AND Country = 'France'", tables
    )
    assert [v.sql for v in variants] == [
        "SELECT T1.singer_name FROM singer AS T1 WHERE T1.Age > 20 AND Country = 'France'",
        "SELECT T1.Name FROM singer AS T1 WHERE T1.singer_age > 20 AND Country = 'France'",
        "SELECT T1.Name FROM singer AS T1 WHERE T1.Age > 20 AND singer_country = 'France'",
    ]
    assert "there is no column singer_name; the column is Name" in variants[0].why
    db = database_path("concert_singer", FIXTURE_DATA)
    assert {run_sql(db, v.sql, SqlConfig(), 200).error_class for v in variants} == {"no_such_column"}
    assert misnamed_columns("SELECT count(*) FROM singer", tables) == []
    snake = misnamed_columns("SELECT PetType FROM pets", load_tables("pets_1", FIXTURE_DATA))
    assert [v.sql for v in snake] == ["SELECT pet_type FROM pets"]


def test_most_corrections_misname_a_column_as_the_model_does(train_turns):
    """The failing first queries follow the measured mix of the SFT model's failures: mostly a missing
    column."""
    policy = grounded()
    kinds = []
    for turn in train_turns:
        failing = {v.sql: v.kind for v in policy.variants(turn)}
        first = policy([{"role": "user", "content": ""}], turn, random.Random(turn.uid))
        sql = json.loads(first.split("<tool_call>")[1].split("</tool_call>")[0])["arguments"]["sql"]
        if sql in failing:
            kinds.append(failing[sql])
    assert len(kinds) >= 30 and kinds.count("misnamed_column") / len(kinds) >= 0.8


# ---------------------------------------------------------------------------------------------
# own_mistakes on canned model attempts


def call(sql: str, *, verdict: str | None = None) -> str:
    body = json.dumps({"name": "exec_sql", "arguments": {"sql": sql}})
    return (
        f"<exec_verify>{verdict}</exec_verify>\n" if verdict else ""
    ) + f"<tool_call>\n{body}\n</tool_call>"


def own(attempts: dict[str, str]) -> OwnMistakesPolicy:
    return make_policy(
        "own_mistakes", env_cfg=EnvConfig(thinking=False), data_root=FIXTURE_DATA, attempts=attempts
    )


@pytest.fixture
def first_turn(cosql_turns):
    """A first turn on concert_singer whose gold returns rows."""
    return next(
        t
        for t in cosql_turns
        if t.db_id == "concert_singer"
        and not t.previous_questions
        and run_sql(database_path(t.db_id, FIXTURE_DATA), runnable(t.gold_sql), SqlConfig(), 1).kind == "ok"
    )


def test_own_failed_attempt_is_kept_with_its_real_observation_then_corrected(make_env, first_turn):
    attempt = call("SELECT nam FROM singers")
    traj = run_episode(make_env(thinking=False), own({first_turn.uid: attempt}), first_turn)
    assert traj.messages[2]["content"] == attempt, "the model's own message, verbatim"
    first, second = exec_steps(traj)
    assert first.result_kind == "error" and first.verdict == "no_pass"
    assert second.sql == runnable(first_turn.gold_sql) and second.verdict == "pass"
    assert traj.protocol_valid and traj.final_sql == runnable(first_turn.gold_sql)


def test_own_right_attempt_gets_pass_and_is_the_answer(make_env, first_turn):
    gold = runnable(first_turn.gold_sql)
    same_result = gold.replace("SELECT", "select", 1) + " "
    traj = run_episode(make_env(thinking=False), own({first_turn.uid: call(same_result)}), first_turn)
    (only,) = exec_steps(traj)
    assert only.sql == same_result.strip() and only.verdict == "pass" and traj.final_sql == only.sql


def test_own_plausible_wrong_attempt_is_replaced_by_the_gold(make_env, first_turn):
    """A result that runs and has rows but differs from the gold's: nothing in it marks it wrong, so the
    episode runs the gold at once rather than teach a verdict the observation cannot support."""
    policy = own({first_turn.uid: call("SELECT 1 FROM singer")})
    assert policy.judge(first_turn, "SELECT 1 FROM singer") == "plausible"
    traj = run_episode(make_env(thinking=False), policy, first_turn)
    (only,) = exec_steps(traj)
    assert only.sql == runnable(first_turn.gold_sql) and only.verdict == "pass"


@pytest.mark.parametrize(
    "attempt",
    [
        None,
        "<answer_sql>SELECT 1</answer_sql>",
        "not a protocol message",
        call("SELECT nam FROM singer", verdict="pass"),
    ],
)
def test_without_a_usable_attempt_the_gold_runs(make_env, first_turn, attempt):
    attempts = {} if attempt is None else {first_turn.uid: attempt}
    traj = run_episode(make_env(thinking=False), own(attempts), first_turn)
    assert [s.sql for s in exec_steps(traj)] == [runnable(first_turn.gold_sql)] and traj.protocol_valid


def test_own_mistakes_needs_attempts():
    with pytest.raises(ValueError, match="own_mistakes needs the model's first attempts"):
        make_policy("own_mistakes", data_root=FIXTURE_DATA)


def test_own_right_attempt_on_a_later_turn_checks_memory(make_env, sparc_turns):
    turn = find(sparc_turns, "sparc-dev-0001/2")
    traj = run_episode(make_env(thinking=False), own({turn.uid: call(runnable(turn.gold_sql))}), turn)
    assert [s.tool or s.action for s in traj.steps] == ["exec_sql", "memory_retrieve", "answer"]
    assert traj.protocol_valid and traj.final_sql == runnable(turn.gold_sql)


# ---------------------------------------------------------------------------------------------
# env.error_hint


def test_schema_hint_names_what_exists_as_the_schema_spells_it():
    db = database_path("concert_singer", FIXTURE_DATA)
    assert schema_hint(db, "SELECT name FROM singers", "no_such_table") == (
        "Hint: the tables of this database are stadium, singer, concert, singer_in_concert."
    )
    assert schema_hint(db, "SELECT nam FROM singer", "no_such_column") == (
        "Hint: the columns are singer(Singer_ID, Name, Country, Song_Name, Song_release_year, Age, Is_male)."
    )
    assert schema_hint(db, "SELECT nam", "no_such_column").count("(") == 4, (
        "no table named: every table's columns"
    )
    assert schema_hint(db, "SELECT", "syntax") is None


@pytest.mark.parametrize(
    ("db_id", "sql", "error_class", "missing", "meant", "fixed"),
    [
        (
            "concert_singer",
            "SELECT singer_name FROM singer",
            "no_such_column",
            "singer_name",
            "Name",
            "SELECT Name FROM singer",
        ),
        (
            "concert_singer",
            "SELECT T1.Names FROM singer AS T1 WHERE T1.Names = 'Names'",
            "no_such_column",
            "T1.Names",
            "Name",
            "SELECT T1.Name FROM singer AS T1 WHERE T1.Name = 'Names'",
        ),
        (
            "concert_singer",
            "SELECT stadium_name FROM stadium",
            "no_such_column",
            "stadium_name",
            "Name",
            "SELECT Name FROM stadium",
        ),
        (
            "pets_1",
            "SELECT pet_type FROM Pets",
            "no_such_column",
            "pet_type",
            "PetType",
            "SELECT PetType FROM Pets",
        ),
        (
            "concert_singer",
            "SELECT name FROM singers",
            "no_such_table",
            "singers",
            "singer",
            "SELECT name FROM singer",
        ),
    ],
)
def test_schema_hint_says_which_name_was_meant_and_the_query_with_it(
    db_id, sql, error_class, missing, meant, fixed
):
    """The suggestion replaces the missing name only, never inside a quoted string."""
    hint = schema_hint(database_path(db_id, FIXTURE_DATA), sql, error_class, missing)
    assert hint.endswith(f" Did you mean {meant}?\n{prompts.SUGGESTION_PREFIX}{fixed}")


def test_schema_hint_suggests_no_query_that_would_not_change():
    """``model_list.Model`` where model_list is not in FROM: the name exists, so no query is suggested."""
    db = database_path("car_1", FIXTURE_DATA)
    hint = schema_hint(
        db,
        "SELECT Horsepower FROM cars_data WHERE model_list.Model = 'a'",
        "no_such_column",
        "model_list.Model",
    )
    assert hint.endswith("Did you mean Model?") and prompts.SUGGESTION_PREFIX not in hint


def test_schema_hint_guesses_nothing_far_from_every_name():
    db = database_path("concert_singer", FIXTURE_DATA)
    assert "Did you mean" not in schema_hint(db, "SELECT tonnage FROM singer", "no_such_column", "tonnage")
    assert "Did you mean" not in schema_hint(db, "SELECT x FROM cars", "no_such_table", "cars")


def test_every_misnamed_column_of_the_grounded_data_gets_its_column_back(train_turns):
    """The hint undoes each of gold_grounded's column mistakes: the suggestion is the gold's column, and the
    query it suggests is the gold (up to case)."""
    checked = 0
    for turn in train_turns:
        tables = load_tables(turn.db_id, FIXTURE_DATA)
        for variant in misnamed_columns(runnable(turn.gold_sql), tables):
            guess, column = variant.why.removeprefix("there is no column ").split("; the column is ")
            db = database_path(turn.db_id, FIXTURE_DATA)
            hint = schema_hint(db, variant.sql, "no_such_column", guess)
            meant, _, suggested = hint.partition("\n")
            assert meant.lower().endswith(f" did you mean {column.lower()}?"), (variant.sql, hint)

            def words(sql: str) -> list[str]:
                return sql.removeprefix(prompts.SUGGESTION_PREFIX).lower().split()

            assert words(suggested) == words(runnable(turn.gold_sql)), (variant.sql, suggested)
            checked += 1
    assert checked >= 30


@pytest.mark.parametrize("protocol", ["mtsql", "release"])
def test_error_hint_is_off_by_default_and_shown_when_on(make_env, cosql_turns, protocol):
    turn = next(t for t in cosql_turns if t.db_id == "concert_singer")
    argument = "code" if protocol == "release" else "sql"
    message = json.dumps({"name": "exec_sql", "arguments": {argument: "SELECT name FROM singers"}})
    seen = {}
    for hint in (False, True):
        env = make_env(thinking=False, protocol=protocol, error_hint=hint)
        env.reset(turn)
        observation, _, _ = env.step(f"<tool_call>{message}</tool_call>")
        seen[hint] = observation["content"]
    assert "Hint:" not in seen[False]
    assert "Hint: the tables of this database are stadium, singer, concert, singer_in_concert." in seen[True]
    assert seen[True].replace(" Hint:", "\nHint:").count("no such table") == 1


def test_grounded_reasoning_quotes_the_hint(make_env, train_turns):
    """With the hint on, the no_pass reasoning quotes the result block, hint line included."""
    turn = train_turns[0]
    traj = run_episode(make_env(thinking=True, error_hint=True), grounded(1.0), turn, rng=random.Random(0))
    first = exec_steps(traj)[0]
    assert first.result_kind == "error" and "Hint:" in first.observation
    assert "Hint:" in traj.steps[first.index + 1].text


@pytest.mark.parametrize(
    "sql", ["SELECT name FROM singers", "SELECT name FROM singer WHERE", "SELECT name FROM singer"]
)
def test_error_hint_names_only_a_corrected_query_after_an_error(make_env, cosql_turns, sql):
    """With the hint on, a refused query's observation ends on exec_sql alone (the small models copy the tool
    named last); a query that ran, and every observation with the hint off, keep the full checklist."""
    turn = next(t for t in cosql_turns if t.db_id == "concert_singer" and t.previous_questions)
    message = json.dumps({"name": "exec_sql", "arguments": {"sql": sql}})
    seen = {}
    for hint in (False, True):
        env = make_env(thinking=False, error_hint=hint)
        env.reset(turn)
        observation, _, _ = env.step(f"<tool_call>{message}</tool_call>")
        seen[hint] = observation["content"]
    refused = sql != "SELECT name FROM singer"
    assert seen[True].endswith(prompts.FAILED_CHECKLIST) is refused
    assert ("memory_retrieve" in seen[True]) is not refused
    assert "memory_retrieve" in seen[False] and not seen[False].endswith(prompts.FAILED_CHECKLIST)


def test_grounded_correction_copies_the_suggested_query_when_it_gives_the_gold_result(make_env, train_turns):
    """With the hint on, a misnamed column's correction is the query the hint suggests (what the model can
    copy from its observation); with the hint off it is the gold."""
    copied = 0
    for turn in train_turns[:40]:
        for hint in (False, True):
            traj = run_episode(
                make_env(thinking=False, error_hint=hint), grounded(1.0), turn, rng=random.Random(0)
            )
            runs = exec_steps(traj)
            if runs[0].result_kind != "error":
                continue
            suggested = [
                line.removeprefix(prompts.SUGGESTION_PREFIX)
                for line in runs[0].observation.splitlines()
                if line.startswith(prompts.SUGGESTION_PREFIX)
            ]
            gold = runnable(turn.gold_sql)
            if hint and suggested and same_rows(turn, suggested[0], gold):
                assert runs[1].sql == suggested[0]
                copied += 1
            else:
                assert runs[1].sql == gold
            assert traj.protocol_valid and runs[1].result_kind != "error"
    assert copied >= 10


def same_rows(turn, sql: str, gold: str) -> bool:
    db = database_path(turn.db_id, FIXTURE_DATA)
    ours, theirs = (execute_cached(db, query, timeout_s=5.0, max_rows=10_000) for query in (sql, gold))
    return ours.ok and sorted(map(tuple, ours.rows)) == sorted(map(tuple, theirs.rows))
