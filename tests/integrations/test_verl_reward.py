"""verl's custom reward function: mtsql's rewards of the recorded trajectory, the same keys always."""

from __future__ import annotations

import json
import logging
import statistics

import pytest
from omegaconf import OmegaConf

from mtsql.base.errors import UsageError
from mtsql.base.paths import FIXTURE_DATA
from mtsql.core.agent.env import SqlAgentEnv
from mtsql.core.agent.policies import GoldPolicy
from mtsql.core.agent.settings import EnvConfig
from mtsql.core.data import load_turns
from mtsql.core.rewards import RewardConfig
from mtsql.engines.verl.reward import (
    OK_KEY,
    RESPONSE_TOKENS_KEY,
    TRAJECTORY_KEY,
    compute_score,
    score_keys,
)

from ..episodes import run_episode

SCORE_KEYS = score_keys(RewardConfig())  # the default family, process


@pytest.fixture(scope="module")
def gold_rows():
    """(turn, extra_info) for a first turn and a later turn, each answered by the scripted gold policy."""
    turns = load_turns("sparc", "dev", root=FIXTURE_DATA)
    rows = []
    for turn in (turns[0], next(t for t in turns if t.previous_questions)):
        trajectory = run_episode(SqlAgentEnv(EnvConfig(), data_root=FIXTURE_DATA), GoldPolicy(), turn)
        rows.append(
            (turn, {"index": 0, TRAJECTORY_KEY: json.dumps(trajectory.to_dict()), RESPONSE_TOKENS_KEY: 300})
        )
    return rows


def score(turn, extra_info, **kwargs):
    return compute_score(
        f"mtsql-{turn.dataset}", "ignored", turn.gold_sql, extra_info, data_root=str(FIXTURE_DATA), **kwargs
    )


def test_gold_trajectories_get_the_full_process_reward(gold_rows):
    (first, first_info), (later, later_info) = gold_rows
    a, b = score(first, first_info), score(later, later_info)
    assert tuple(a) == tuple(b) == SCORE_KEYS
    assert (a["ex"], a["em"], a["exec_verify"], a["clause_f1"], a["coherence"], a[OK_KEY]) == (
        1,
        1,
        1,
        1,
        0,
        1,
    )
    assert a["score"] == pytest.approx(2.9) and b["score"] == pytest.approx(3.0) and b["coherence"] == 1


def test_family_and_weights_come_from_reward_kwargs_even_as_hydra_dictconfig(gold_rows):
    turn, info = gold_rows[0]
    outcome = score(turn, info, reward={"family": "outcome"})
    assert outcome["score"] == 2.0 and tuple(outcome) == score_keys(RewardConfig(family="outcome"))
    assert tuple(score(turn, None, reward={"family": "outcome"})) == tuple(outcome)  # same keys unscored
    assert score(turn, info, reward=OmegaConf.create({"family": "outcome", "em": 0.5}))["score"] == 1.5
    sqlr1 = score(turn, info, reward={"family": "sqlr1"})
    assert (sqlr1["sqlr1_format"], sqlr1["sqlr1_execution"], sqlr1["sqlr1_result"]) == (1, 2, 3)
    assert (
        sqlr1["score"] == pytest.approx(6 + sqlr1["sqlr1_length"])
        and sqlr1["sqlr1_length"] > 0.5 * 300 / 2048
    )


@pytest.mark.parametrize(
    "extra_info",
    [
        None,
        "text",
        {},
        {TRAJECTORY_KEY: "not json"},
        {TRAJECTORY_KEY: "{}"},
        {TRAJECTORY_KEY: json.dumps([1])},
    ],
)
def test_no_readable_trajectory_scores_zero_with_the_same_keys_and_a_warning(extra_info, gold_rows, caplog):
    turn, _ = gold_rows[0]
    with caplog.at_level(logging.WARNING, logger="mtsql.engines.verl.reward"):
        out = score(turn, extra_info)
    assert tuple(out) == SCORE_KEYS and set(out.values()) == {0.0}
    assert "scoring 0" in caplog.text


def test_a_typo_in_reward_kwargs_is_an_error_not_a_silent_default(gold_rows):
    turn, info = gold_rows[0]
    with pytest.raises(TypeError, match="rewrd"):
        score(turn, info, rewrd={"family": "outcome"})
    with pytest.raises(UsageError, match="reward.famly"):
        score(turn, info, reward={"famly": "outcome"})
    assert tuple(score(turn, info, reward_router_address=None)) == SCORE_KEYS  # what verl itself may pass


def test_the_episode_behaviour_rides_along_for_the_step_dump(gold_rows, tmp_path):
    from mtsql.engines.verl.main_ppo import ROLLOUTS_DIR, step_samples_of

    (first, first_info), (later, later_info) = gold_rows
    a, b = score(first, first_info), score(later, later_info)
    # the gold policy: exec_sql then answer on a first turn; exec_sql, memory_retrieve, answer on a later one
    assert (
        a["tool_calls"],
        a["memory_calls"],
        a["messages"],
        a["invalid_messages"],
        a["self_corrected"],
    ) == (1, 0, 2, 0, 0)
    assert (b["tool_calls"], b["memory_calls"], b["messages"], b["response_tokens"]) == (2, 1, 3, 300)
    broken = score(first, {"index": 0})
    dump = tmp_path / ROLLOUTS_DIR
    dump.mkdir()
    # what verl writes per step: its own fields, then every key compute_score returned
    lines = [{"input": "...", "output": "...", "score": s["score"], "step": 7, **s} for s in (a, b, broken)]
    (dump / "7.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    spread = statistics.pstdev([a["score"], b["score"], broken["score"]])
    assert spread > 0 and step_samples_of(tmp_path, 7) == pytest.approx(
        {  # the unreadable episode: its score only
            "reward_std": spread,
            "groups_with_signal": 1.0,
            "tool_calls_per_turn": 1.5,
            "memory_calls_per_turn": 0.5,
            "self_correction_rate": 0.0,
            "invalid_message_rate": 0.0,
            "messages_per_turn": 2.5,
            "response_length": 300.0,
        }
    )
    assert step_samples_of(tmp_path, 8) == {}, "a step without a dump adds nothing"
