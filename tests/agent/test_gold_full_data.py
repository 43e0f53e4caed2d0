"""Acceptance on the full dev sets: the gold-guided policies, scored through the rewards, equal the
evaluator run on the gold file, turn by turn."""

from __future__ import annotations

from collections import Counter

import pytest

from mtsql.core.agent.env import SqlAgentEnv
from mtsql.core.agent.policies import make_policy
from mtsql.core.data import load_turns
from mtsql.core.rewards import compute_rewards
from mtsql.core.sql import score_turn

from ..episodes import run_episode


@pytest.mark.data
@pytest.mark.parametrize("policy_name", ["gold", "gold_with_correction"])
@pytest.mark.parametrize(("dataset", "turns_expected"), [("sparc", 1203), ("cosql", 1007)])
def test_gold_policy_outcome_equals_the_evaluator(full_data, dataset, turns_expected, policy_name):
    turns = load_turns(dataset, "dev", root=full_data, with_hardness=False)
    assert len(turns) == turns_expected
    env = SqlAgentEnv(data_root=full_data)
    policy = make_policy(policy_name, data_root=full_data)
    totals: Counter = Counter()
    for turn in turns:
        traj = run_episode(env, policy, turn)
        assert traj.finish_reason == "answer" and traj.protocol_valid, turn.uid
        if policy_name == "gold_with_correction":
            assert traj.steps[0].sql != traj.final_sql and traj.steps[0].verdict == "no_pass", turn.uid
        got = compute_rewards(traj, turn.gold_sql, data_root=full_data)
        ref = score_turn(turn.gold_sql, turn.gold_sql, turn.db_id, data_root=full_data)
        assert (got["ex"], got["ex_scored"]) == (
            float(ref.execution or 0),
            float(ref.execution is not None),
        ), turn.uid
        assert (got["em"], got["em_scored"]) == (float(ref.exact or 0), float(ref.exact is not None)), (
            turn.uid
        )
        totals.update(
            turns=1, ex=got["ex"], em=got["em"], ex_scored=got["ex_scored"], em_scored=got["em_scored"]
        )
    print(f"\n{dataset} dev, {policy_name} policy: {dict(totals)}")
    assert (
        totals["em"] == totals["em_scored"] == turns_expected
    )  # the official programs give exact match 100 %
    assert totals["ex"] == totals["ex_scored"]  # execution 100 % wherever the gold is scorable
