"""The environment: prompts, the protocol's flow, budgets, flow errors, memory sources, records."""

from __future__ import annotations

import hashlib
import json

import pytest

from mtsql.base.errors import UsageError
from mtsql.base.paths import FIXTURE_DATA, database_path
from mtsql.core.agent import prompts
from mtsql.core.agent.env import Trajectory
from mtsql.core.agent.policies import GoldPolicy, GoldWithCorrectionPolicy
from mtsql.core.agent.settings import SqlConfig
from mtsql.core.agent.tools import MemoryEntry

from ..episodes import ReplayPolicy, run_episode
from .conftest import find

FIRST, LATER = "sparc-dev-0000/0", "sparc-dev-0000/2"  # pets_1: "What information is there on pets?", ...
EXEC = '<think>t</think><tool_call>{{"name": "exec_sql", "arguments": {{"sql": "{}"}}}}</tool_call>'
MEMORY = '<think>t</think>{}<tool_call>{{"name": "memory_retrieve", "arguments": {{}}}}</tool_call>'
ANSWER = "<think>t</think>{}<answer_sql>{}</answer_sql>"


def _result_block(observation: str) -> str:
    return observation.split("\nResult:\n")[1].split("\n\n")[0]


def test_reset_gives_system_rules_and_the_question_with_schema_and_history(make_env, sparc_turns):
    turn = find(sparc_turns, LATER)
    messages = make_env().reset(turn)
    assert [m["role"] for m in messages] == ["system", "user"]
    system, user = messages[0]["content"], messages[1]["content"]
    for tag in ("<think>", "<exec_verify>", "<memory_verify>", "<answer_sql>", "exec_sql", "memory_retrieve"):
        assert tag in system
    assert "at most 4 messages" in system
    assert "CREATE TABLE Pets (" in user and "PRIMARY KEY (PetID)" in user
    assert "1. What information is there on pets?\n2. Which pets weigh more than 10?" in user
    assert user.endswith("Current question: How many are there?")
    assert "SELECT" not in user.split("Earlier questions")[1]  # long mode: earlier SQL only via the tool


def test_short_mode_answers_at_once_with_earlier_sql_in_the_prompt(make_env, sparc_turns):
    turn = find(sparc_turns, LATER)
    env = make_env(mode="short")
    user = env.reset(turn)[1]["content"]
    assert "   SQL: SELECT * FROM pets WHERE weight  >  10" in user
    assert "exec_sql" not in env.trajectory.messages[0]["content"]
    traj = run_episode(env, GoldPolicy(mode="short"), turn)
    assert (traj.finish_reason, traj.final_sql, traj.protocol_valid, traj.num_messages) == (
        "answer",
        turn.gold_sql,
        True,
        1,
    )
    env.reset(turn)
    observation, done, info = env.step(EXEC.format("SELECT 1"))
    assert (observation, done, info["finish_reason"], env.trajectory.final_sql) == (
        None,
        True,
        "invalid",
        None,
    )
    assert "no tools" in env.trajectory.steps[0].invalid_reason


def test_gold_first_turn_executes_verifies_and_answers(make_env, sparc_turns):
    turn = find(sparc_turns, FIRST)
    traj = run_episode(make_env(), GoldPolicy(), turn)
    assert [(s.action, s.tool) for s in traj.steps] == [("tool_call", "exec_sql"), ("answer", None)]
    exec_step = traj.steps[0]
    assert (exec_step.result_kind, exec_step.verdict, exec_step.error_class) == ("ok", "pass", None)
    assert exec_step.row_count == 3 and exec_step.observation.startswith(f"Question: {turn.question}\nSQL: ")
    assert prompts.NEXT_ANSWER in exec_step.observation
    assert (traj.final_sql, traj.finish_reason, traj.protocol_valid) == (turn.gold_sql, "answer", True)
    assert [m["role"] for m in traj.messages] == ["system", "user", "assistant", "tool", "assistant"]


def test_gold_later_turn_checks_memory(make_env, sparc_turns):
    turn = find(sparc_turns, LATER)
    traj = run_episode(make_env(), GoldPolicy(), turn)
    assert [s.tool for s in traj.steps] == ["exec_sql", "memory_retrieve", None]
    memory_step = traj.steps[1]
    assert memory_step.checked_sql == turn.gold_sql and memory_step.verdict == "pass"
    text = memory_step.observation
    assert "Turn 1\n  Question: What information is there on pets?\n  SQL: SELECT * FROM pets" in text
    assert "  Clauses: SELECT * | FROM pets | WHERE weight  >  10\n  Result:\n    PetID | PetType" in text
    assert f"Candidate query: {turn.gold_sql}" in text and "<memory_verify>pass</memory_verify>" in text
    assert traj.protocol_valid and prompts.NEXT_MEMORY in traj.steps[0].observation


def test_gold_with_correction_reads_the_real_result(make_env, sparc_turns):
    turn = find(sparc_turns, LATER)
    policy = GoldWithCorrectionPolicy(data_root=FIXTURE_DATA)
    traj = run_episode(make_env(), policy, turn)
    first, second = traj.steps[0], traj.steps[1]
    assert first.sql != turn.gold_sql and first.verdict == "no_pass" and second.exec_verdict == "no_pass"
    assert second.sql == turn.gold_sql and second.verdict == "pass"
    assert "; ".join(_result_block(first.observation).splitlines()) in second.text  # it read the result
    assert [s.tool for s in traj.steps] == ["exec_sql", "exec_sql", "memory_retrieve", None]
    assert traj.final_sql == turn.gold_sql and traj.protocol_valid


def test_budget_runs_out_without_an_answer(make_env, sparc_turns):
    env = make_env(max_messages=3)
    env.reset(find(sparc_turns, FIRST))
    observations = [env.step("no tags at all") for _ in range(3)]
    assert [done for _, done, _ in observations] == [False, False, True]
    assert observations[-1][0] is None
    assert observations[1][0]["content"].endswith(prompts.LAST_MESSAGE)
    assert "no action" in observations[0][0]["content"]
    traj = env.trajectory
    assert (traj.finish_reason, traj.final_sql, traj.protocol_valid) == ("max_messages", None, False)
    with pytest.raises(RuntimeError):
        env.step("<answer_sql>SELECT 1</answer_sql>")


def test_max_invalid_messages_in_a_row_end_the_episode(make_env, sparc_turns):
    env = make_env(max_messages=6, max_invalid=2)
    env.reset(find(sparc_turns, FIRST))
    steps = [env.step(text) for text in ("no tags", EXEC.format("SELECT 1"), "no tags", "still none")]
    assert [done for _, done, _ in steps] == [False, False, False, True]  # the valid call reset the count
    assert steps[-1][0] is None and steps[-1][2]["finish_reason"] == "invalid"
    traj = env.trajectory
    assert (traj.finish_reason, traj.final_sql, traj.protocol_valid, len(traj.steps)) == (
        "invalid",
        None,
        False,
        4,
    )


def test_without_max_invalid_only_the_budget_ends_unparseable_messages(make_env, sparc_turns):
    env = make_env(max_messages=3)
    env.reset(find(sparc_turns, FIRST))
    assert [env.step("no tags")[1] for _ in range(3)] == [False, False, True]
    assert env.trajectory.finish_reason == "max_messages"
    with pytest.raises(ValueError, match="env.max_invalid must be at least 1"):
        make_env(max_invalid=0)


def test_a_tool_call_as_last_message_is_not_run(make_env, sparc_turns):
    env = make_env(max_messages=1)
    env.reset(find(sparc_turns, FIRST))
    observation, done, info = env.step(EXEC.format("SELECT 1"))
    assert (observation, done, info["finish_reason"]) == (None, True, "max_messages")
    assert env.trajectory.steps[0].result_kind is None


def test_scripted_policies_answer_when_told_it_is_the_last_message(make_env, sparc_turns):
    turn = find(sparc_turns, LATER)
    traj = run_episode(make_env(max_messages=2), GoldWithCorrectionPolicy(data_root=FIXTURE_DATA), turn)
    assert traj.finish_reason == "answer" and traj.final_sql == turn.gold_sql
    assert traj.steps[0].verdict == "pass"  # no room left to correct
    assert "answered without checking the dialogue memory" in traj.steps[1].flow_errors


@pytest.mark.parametrize(
    ("texts", "errors"),
    [
        ([ANSWER.format("", "SELECT 1")], ["answered without running a query"]),
        (
            [EXEC.format("SELECT 1"), ANSWER.format("", "SELECT 1")],
            ["no <exec_verify> verdict on the exec_sql result"],
        ),
        (
            [EXEC.format("SELECT 1"), ANSWER.format("<exec_verify>no_pass</exec_verify>", "SELECT 2")],
            ["answered right after a no_pass verdict without running the corrected query"],
        ),
        (
            [
                EXEC.format("SELECT 1"),
                MEMORY.format("<memory_verify>pass</memory_verify>"),
                ANSWER.format("<memory_verify>pass</memory_verify>", "SELECT 1"),
            ],
            ["no <exec_verify> verdict on the exec_sql result"]
            + ["<memory_verify> without a fresh tool result to judge"] * 2,
        ),
        (
            [
                '<tool_call>{"name": "exec_sql", "arguments": {"sql": "SELECT 1"}}</tool_call>',
                "<exec_verify>pass</exec_verify><answer_sql>SELECT 1</answer_sql>",
            ],
            ["missing <think> reasoning"] * 2,
        ),
    ],
)
def test_flow_errors_are_recorded_without_stopping(make_env, sparc_turns, texts, errors):
    traj = run_episode(make_env(), ReplayPolicy(texts), find(sparc_turns, FIRST))
    assert [e for s in traj.steps for e in s.flow_errors] == errors
    assert traj.finish_reason == "answer" and not traj.protocol_valid


def test_later_turn_answer_without_memory_check_is_a_flow_error(make_env, sparc_turns):
    texts = [EXEC.format("SELECT 1"), ANSWER.format("<exec_verify>pass</exec_verify>", "SELECT 1")]
    traj = run_episode(make_env(), ReplayPolicy(texts), find(sparc_turns, LATER))
    assert traj.steps[-1].flow_errors == ["answered without checking the dialogue memory"]


def test_an_invalid_message_keeps_the_verdict_due(make_env, sparc_turns):
    texts = [
        EXEC.format("SELECT 1"),
        "<answer_sql>oops",
        ANSWER.format("<exec_verify>pass</exec_verify>", "SELECT 1"),
    ]
    traj = run_episode(make_env(), ReplayPolicy(texts), find(sparc_turns, FIRST))
    assert traj.steps[0].verdict == "pass" and traj.steps[1].action == "invalid"
    assert "never closed" in traj.messages[5]["content"] and traj.final_sql == "SELECT 1"


def test_no_thinking_mode_needs_no_think_block(make_env, sparc_turns):
    env = make_env(thinking=False)
    traj = run_episode(env, GoldPolicy(thinking=False), find(sparc_turns, FIRST))
    assert traj.protocol_valid and "<think>" not in traj.messages[0]["content"] + traj.steps[0].text


def test_predicted_memory_replaces_the_gold(make_env, sparc_turns):
    turn = find(sparc_turns, LATER)
    memory = [
        MemoryEntry(turn.previous_questions[0], "SELECT count(*) FROM pets"),
        MemoryEntry(turn.previous_questions[1], None),
    ]
    env = make_env(memory="predicted")
    traj = run_episode(env, GoldPolicy(), turn, memory=memory)
    text = traj.steps[1].observation
    assert "SQL: SELECT count(*) FROM pets" in text and "SELECT * FROM pets WHERE" not in text
    assert "Turn 2\n  Question: Which pets weigh more than 10?\n  SQL: (no query was given)" in text
    assert traj.memory == memory and traj.memory_source == "predicted"
    with pytest.raises(ValueError, match="predicted memory"):
        env.reset(turn)
    with pytest.raises(ValueError, match="memory has 1 entries"):
        env.reset(turn, memory[:1])
    short = make_env(mode="short", memory="predicted")
    assert "   SQL: (no query was given)" in short.reset(turn, memory)[1]["content"]


def test_first_turn_memory_says_there_is_none_and_needs_no_verdict(make_env, sparc_turns):
    texts = [
        EXEC.format("SELECT 1"),
        MEMORY.format("<exec_verify>pass</exec_verify>"),
        ANSWER.format("", "SELECT 1"),
    ]
    traj = run_episode(make_env(), ReplayPolicy(texts), find(sparc_turns, FIRST))
    assert traj.steps[1].observation.endswith(prompts.NO_EARLIER_TURNS)
    assert traj.protocol_valid and traj.steps[1].verdict is None


def test_results_are_cut_and_errors_classified(make_env, sparc_turns):
    env = make_env(result_chars=60)
    env.reset(find(sparc_turns, FIRST))
    observation, _, _ = env.step(EXEC.format("SELECT * FROM pets"))
    assert len(_result_block(observation["content"])) == 60
    env.step(EXEC.format("SELECT nope FROM pets"))
    assert env.trajectory.steps[1].result_kind == "error"
    assert env.trajectory.steps[1].error_class == "no_such_column"
    env.step(EXEC.format("SELECT * FROM pets WHERE 1 = 0"))
    assert env.trajectory.steps[2].result_kind == "empty"


@pytest.mark.parametrize(
    "attack",
    [
        "DROP TABLE Pets",
        "DELETE FROM Pets",
        "UPDATE Pets SET weight = 0",
        "INSERT INTO Pets VALUES (1, 2, 3, 4)",
        "CREATE TABLE x (a)",
        "ATTACH DATABASE '/tmp/mtsql_attack.db' AS evil",
        "PRAGMA writable_schema = 1",
        "SELECT 1; DROP TABLE Pets",
        "VACUUM",
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
    ],
)
def test_attacking_sql_is_an_error_and_leaves_the_database_alone(make_env, sparc_turns, attack):
    db = database_path("pets_1", FIXTURE_DATA)
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    env = make_env(sql_cfg=SqlConfig(timeout_s=0.5))
    env.reset(find(sparc_turns, FIRST))
    observation, done, _ = env.step(EXEC.format(attack))
    assert not done and observation["content"].startswith("Question: ")
    assert env.trajectory.steps[0].result_kind == "error"
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


def test_missing_database_is_a_classified_error(make_env, cosql_turns):
    turn = next(t for t in cosql_turns if t.db_id == "wta_1" and t.turn_index == 0)
    traj = run_episode(make_env(), GoldPolicy(), turn)
    assert traj.steps[0].result_kind == "error" and traj.steps[0].error_class == "no_database"
    assert "CREATE TABLE" in traj.messages[1]["content"]


def test_trajectory_round_trips_through_json(make_env, sparc_turns):
    traj = run_episode(make_env(), GoldWithCorrectionPolicy(data_root=FIXTURE_DATA), find(sparc_turns, LATER))
    row = json.loads(json.dumps(traj.to_dict()))
    assert row["num_messages"] == 4
    again = Trajectory.from_dict(row)
    assert again == traj and again.to_dict() == traj.to_dict()
    row["max_turns"] = row.pop("max_messages")
    with pytest.raises(
        UsageError, match="holds max_turns, which this mtsql does not write: an older mtsql made it"
    ):
        Trajectory.from_dict(row)


def test_bad_configuration_is_refused(make_env):
    for bad in ({"mode": "medium"}, {"memory": "oracle"}, {"max_messages": 0}):
        with pytest.raises(ValueError):
            make_env(**bad)
