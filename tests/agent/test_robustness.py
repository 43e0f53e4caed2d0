"""Bad model output of every kind ends in a defined observation or episode end and a reward, never an
exception."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mtsql.base.paths import FIXTURE_DATA
from mtsql.core.agent.env import SqlAgentEnv, Trajectory
from mtsql.core.agent.policies import GoldWithCorrectionPolicy
from mtsql.core.agent.settings import EnvConfig, SqlConfig
from mtsql.core.data import load_turns
from mtsql.core.rewards import FAMILIES, RewardConfig, compute_rewards, reward_keys

from ..episodes import ReplayPolicy, run_episode

SQL_CFG = SqlConfig(timeout_s=0.3, max_rows=200)
TURNS = {t.uid: t for t in load_turns("sparc", "dev", root=FIXTURE_DATA, with_hardness=False)}
LATER = TURNS["sparc-dev-0001/2"]  # third turn of a dialogue on pets_1
ENVS = {
    mode: SqlAgentEnv(EnvConfig(mode=mode), SQL_CFG, data_root=FIXTURE_DATA) for mode in ("long", "short")
}
GOOD = [
    m["content"]
    for m in run_episode(ENVS["long"], GoldWithCorrectionPolicy(data_root=FIXTURE_DATA), LATER).messages
    if m["role"] == "assistant"
]
ATTACKS = [
    "DROP TABLE Pets",
    "DELETE FROM Pets",
    "ATTACH DATABASE 'x.db' AS x",
    "PRAGMA writable_schema=1",
    "SELECT load_extension('x')",
    "SELECT * FROM Pets, Pets, Pets, Pets, Pets, Pets",
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT x FROM c",
    "SELECT randomblob(1000000000)",
    "SELECT 1;",
    "\x00",
    "SELECT '" + "a" * 5000 + "'",
]
PIECES = [
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<answer_sql>",
    "</answer_sql>",
    "<exec_verify>",
    "</exec_verify>",
    "<memory_verify>",
    "</memory_verify>",
    "pass",
    "no_pass",
    "{",
    "}",
    '"',
    "\\",
    "\n",
]


def check_episode(texts: list[str], mode: str = "long") -> Trajectory:
    env = ENVS[mode]
    env.reset(LATER)
    for text in texts:
        observation, done, info = env.step(text)
        assert done == (observation is None)
        if observation is not None:
            assert observation["role"] == "tool" and observation["content"]
        if done:
            break
    else:
        while not env.trajectory.done:  # the budget ends every episode
            env.step("")
    traj = env.trajectory
    assert traj.finish_reason in ("answer", "max_messages", "invalid")
    assert traj.num_messages <= env.max_messages
    assert Trajectory.from_dict(json.loads(json.dumps(traj.to_dict()))) == traj
    for family in FAMILIES:
        cfg = RewardConfig(family=family)
        out = compute_rewards(traj, LATER.gold_sql, cfg, data_root=FIXTURE_DATA, sql_cfg=SQL_CFG)
        assert tuple(out) == reward_keys(cfg) and all(math.isfinite(v) for v in out.values())
    return traj


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.text(max_size=300), min_size=1, max_size=5), st.sampled_from(["long", "short"]))
def test_random_messages(texts, mode):
    check_episode(texts, mode)


def _mutate(text: str, data) -> str:
    kind = data.draw(st.sampled_from(["truncate", "insert", "double", "attack", "json", "drop"]))
    at = data.draw(st.integers(0, len(text)))
    if kind == "truncate":
        return text[:at]
    if kind == "insert":
        return (
            text[:at]
            + "".join(data.draw(st.lists(st.sampled_from(PIECES), min_size=1, max_size=3)))
            + text[at:]
        )
    if kind == "double":
        return text + text
    if kind == "attack":
        sql = json.dumps(data.draw(st.sampled_from(ATTACKS)))
        return (
            '<think>x</think><tool_call>{"name": "exec_sql", "arguments": {"sql": ' + sql + "}}</tool_call>"
        )
    if kind == "json":
        return text.replace(
            '"arguments"', data.draw(st.sampled_from(['"args"', "arguments", '"arguments": 1,']))
        )
    return text.replace(data.draw(st.sampled_from(PIECES)), "", 1)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_valid_messages(data):
    texts = [_mutate(t, data) if data.draw(st.booleans()) else t for t in GOOD]
    check_episode(texts, data.draw(st.sampled_from(["long", "short"])))


@pytest.mark.parametrize(
    "text",
    [
        "",
        GOOD[0][: len(GOOD[0]) // 2],
        GOOD[0] + GOOD[0],
        '<tool_call>{"name": "exec_sql", "arguments": {"sql": "SELECT 1"}</tool_call>',
        '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>',
        '<tool_call>{"name": "exec_sql", "arguments": {"sql": "SELECT 1"}}'
        "<answer_sql>SELECT 1</answer_sql></tool_call>",
        ("\x00\ufffd<" * 40_000)[:100_000],
        "<think>" + "a" * 100_000 + "</think><answer_sql>" + "SELECT " * 10_000 + "</answer_sql>",
    ],
)
def test_named_bad_messages(text):
    traj = check_episode([text] * 4)
    assert traj.steps[0].action in ("invalid", "answer")
    if traj.steps[0].action == "invalid":
        assert traj.steps[0].invalid_reason and traj.messages[3]["content"].startswith(
            "Your message could not be used"
        )


@pytest.mark.parametrize("attack", ATTACKS)
def test_attacks_through_the_tool(attack):
    call = (
        '<think>x</think><tool_call>{"name": "exec_sql", "arguments": {"sql": '
        + json.dumps(attack)
        + "}}</tool_call>"
    )
    traj = check_episode(
        [call, "<think>x</think><exec_verify>no_pass</exec_verify><answer_sql>" + attack + "</answer_sql>"]
    )
    assert traj.steps[0].result_kind in ("error", "ok", "empty")
    assert traj.steps[0].observation.startswith("Question: ")


def test_replayed_garbage_policy():
    traj = run_episode(ENVS["long"], ReplayPolicy(["garbage"] * 10), LATER)
    assert traj.finish_reason == "max_messages" and traj.num_messages == 4
