"""The release-compatible protocol (env.protocol: release): MTSQL-R1's released tool format, parsed,
executed and scored; refused under mtsql's own protocol."""

from __future__ import annotations

import ast
import json

import pytest

from mtsql.base.paths import FIXTURE_DATA
from mtsql.core.agent import prompts
from mtsql.core.agent.env import SqlAgentEnv
from mtsql.core.agent.policies import GoldPolicy
from mtsql.core.agent.protocol import parse_action
from mtsql.core.agent.settings import EnvConfig
from mtsql.core.agent.tools import RELEASE_MEMORY_ROWS, RELEASE_TOOL_SCHEMAS, env_tools
from mtsql.core.rewards import RewardConfig, compute_rewards
from mtsql.engines.verl.dataset import episode_tools

from ..episodes import ReplayPolicy, run_episode
from .conftest import find

GOLD = "SELECT count(*) FROM pets WHERE weight  >  10"  # sparc-dev-0000/2, a later turn on pets_1


def call(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


# A dialogue turn as a released checkpoint writes it: exec_sql(code), then a correction, then the memory
# check with the query it checks as `code` and a second call in the same message, then the answer.
RELEASE_TEXTS = [
    "<think>Count the heavy pets.</think>\n" + call("exec_sql", code="SELECT count(*) FROM pets"),
    "<think>The weight filter is missing.</think>\n<exec_verify>no_pass</exec_verify>\n"
    + call("exec_sql", code="SELECT count(*) FROM pets WHERE weight > 10"),
    "<think>Runs fine; check it against the dialogue.</think>\n<exec_verify>pass</exec_verify>\n"
    + call("memory_retrieve", code="SELECT PetID FROM pets WHERE weight > 10 ORDER BY PetID")
    + call("exec_sql", code="SELECT nope FROM pets"),
    "<think>Coherent.</think>\n<memory_verify>pass</memory_verify>\n"
    "<answer_sql>SELECT count(*) FROM pets WHERE weight > 10</answer_sql>",
]


def test_release_calls_parse_under_release_and_are_refused_under_mtsql():
    text = RELEASE_TEXTS[0]
    release = parse_action(text, "release")
    assert (release.kind, release.tool, release.arguments, release.sql) == (
        "tool_call",
        "exec_sql",
        {"code": "SELECT count(*) FROM pets"},
        "SELECT count(*) FROM pets",
    )
    mtsql = parse_action(text)
    assert mtsql.kind == "invalid" and "exec_sql takes sql; got ['code']" in mtsql.reason
    assert parse_action(call("memory_retrieve"), "release").reason == "memory_retrieve takes code; got none"
    assert parse_action(call("exec_sql", sql="SELECT 1"), "release").kind == "invalid"


def test_release_runs_the_first_call_that_parses_and_ignores_the_rest():
    text = (
        '<tool_call>{"name": oops}</tool_call>'
        + call("exec_sql", code="SELECT 1")
        + call("memory_retrieve", code="SELECT 2")
        + "<answer_sql>SELECT 3</answer_sql>"
    )
    action = parse_action(text, "release")
    assert (action.kind, action.tool, action.sql, action.ignored) == ("tool_call", "exec_sql", "SELECT 1", 2)
    assert parse_action(text).kind == "invalid"
    assert parse_action('<tool_call>{"name": oops}</tool_call>', "release").reason.startswith(
        "the <tool_call> is not"
    )


def test_release_tool_schemas_and_system_prompt_use_code():
    env_cfg = EnvConfig(protocol="release")
    assert (
        env_tools(env_cfg) is RELEASE_TOOL_SCHEMAS
        and env_tools(EnvConfig(protocol="release", mode="short")) == []
    )
    assert episode_tools(env_cfg) is RELEASE_TOOL_SCHEMAS  # what verl's agent loop shows the model
    system = prompts.system_prompt(
        mode="long", max_messages=4, result_chars=200, thinking=True, protocol="release"
    )
    assert '"arguments": {"code": "SELECT ..."}}' in system and '"sql"' not in system


def test_hand_made_release_trajectory_is_executed_and_scored(sparc_turns):
    turn = find(sparc_turns, "sparc-dev-0000/2")
    assert turn.gold_sql == GOLD and turn.previous_questions
    env = SqlAgentEnv(EnvConfig(protocol="release"), data_root=FIXTURE_DATA)
    traj = run_episode(env, ReplayPolicy(RELEASE_TEXTS), turn)
    assert (traj.finish_reason, traj.final_sql, traj.protocol_valid) == (
        "answer",
        "SELECT count(*) FROM pets WHERE weight > 10",
        True,
    )
    first, second, memory = traj.steps[:3]
    assert first.observation.startswith("Recap:\n- Current question: ")
    assert (first.result_kind, first.verdict, second.verdict) == ("ok", "no_pass", "pass")
    assert memory.checked_sql == "SELECT PetID FROM pets WHERE weight > 10 ORDER BY PetID"  # the call's own
    assert memory.ignored_actions == 1 and memory.verdict == "pass"
    assert "Candidate query: SELECT PetID FROM pets WHERE weight > 10 ORDER BY PetID" in memory.observation
    assert "Parsed: {" in memory.observation and "[Turn 1] Question:" in memory.observation

    out = compute_rewards(traj, GOLD, RewardConfig(clause_score="release"), data_root=FIXTURE_DATA)
    # per-clause 0/1 of the Spider parse: 2/3 (no WHERE), 1, 2/4 (SELECT and ORDER BY differ); the
    # ignored exec_sql never ran and the answer is left out
    assert out["clause_exact"] == pytest.approx((2 / 3 + 1 + 1 / 2) / 3)
    assert out["coherence"] == pytest.approx(1 / 2)  # pass on the memory call's query, which scores 2/4
    assert out["exec_verify"] == pytest.approx((0 + 1) / 2)  # ok/no_pass 0, ok/pass 1
    assert (out["ex"], out["em"]) == (1.0, 1.0)
    assert out["score"] == pytest.approx(2 + 0.1 * 0.5 + 0.1 * 0.5 + 0.8 * (2 / 3 + 1 + 1 / 2) / 3)

    mtsql = run_episode(SqlAgentEnv(EnvConfig(), data_root=FIXTURE_DATA), ReplayPolicy(RELEASE_TEXTS), turn)
    assert [step.action for step in mtsql.steps] == ["invalid"] * 3 + ["answer"] and not mtsql.protocol_valid
    refused = compute_rewards(mtsql, GOLD, data_root=FIXTURE_DATA)
    assert (refused["exec_verify"], refused["coherence"], refused["format"]) == (0.0, 0.0, 0.0)


def test_results_are_cut_to_200_characters_prefix_included_and_memory_to_50_rows(sparc_turns):
    turn = find(sparc_turns, "sparc-dev-0054/1")  # its earlier turn lists 406 cars
    texts = [
        call("exec_sql", code="SELECT Make, Model FROM car_names"),
        "<exec_verify>pass</exec_verify>" + call("memory_retrieve", code="SELECT Make FROM car_names"),
    ]
    env = SqlAgentEnv(EnvConfig(protocol="release", thinking=False), data_root=FIXTURE_DATA)
    traj = run_episode(env, ReplayPolicy(texts + [""] * 2), turn)
    result_line = next(
        line
        for line in traj.steps[0].observation.splitlines()
        if line.startswith(prompts.RELEASE_RESULT_LINE)
    )
    shown = result_line[len(prompts.RELEASE_RESULT_LINE) :]
    assert len(shown) == 200 and shown.startswith("Rows: [(")
    rows_line = next(
        line for line in traj.steps[1].observation.splitlines() if line.startswith("  First rows: ")
    )
    rows = ast.literal_eval(rows_line[len("  First rows: ") :])
    assert len(rows) == RELEASE_MEMORY_ROWS and all(isinstance(row, tuple) for row in rows)


def test_observation_cap_cuts_the_middle(sparc_turns):
    turn = find(sparc_turns, "sparc-dev-0054/1")
    texts = [
        call("exec_sql", code="SELECT 1"),
        "<exec_verify>pass</exec_verify>" + call("memory_retrieve", code="SELECT 1"),
    ]
    capped = SqlAgentEnv(
        EnvConfig(protocol="release", thinking=False, observation_chars=600), data_root=FIXTURE_DATA
    )
    full = SqlAgentEnv(EnvConfig(protocol="release", thinking=False), data_root=FIXTURE_DATA)
    short, long_ = (
        run_episode(e, ReplayPolicy(texts + [""] * 2), turn).steps[1].observation for e in (capped, full)
    )
    assert len(long_) > 600 and len(short) == 600 and "...(cut)..." in short
    assert short.startswith(long_[:250]) and short.endswith(long_[-250:])
    with pytest.raises(ValueError, match="observation_chars"):
        SqlAgentEnv(EnvConfig(observation_chars=10))


@pytest.mark.parametrize("uid", ["sparc-dev-0000/0", "sparc-dev-0000/2"])
def test_gold_policy_follows_the_release_protocol(sparc_turns, uid):
    turn = find(sparc_turns, uid)
    env = SqlAgentEnv(EnvConfig(protocol="release"), data_root=FIXTURE_DATA)
    traj = run_episode(env, GoldPolicy(protocol="release"), turn)
    assert traj.protocol_valid and traj.finish_reason == "answer"
    assert all("code" in step.arguments for step in traj.steps if step.action == "tool_call")
