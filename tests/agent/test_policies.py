"""Scripted policies, wrong-variant generation and the shared episode loop."""

from __future__ import annotations

import random

import pytest

from mtsql.base.paths import FIXTURE_DATA
from mtsql.core.agent.env import SqlAgentEnv
from mtsql.core.agent.mutations import mutations
from mtsql.core.agent.policies import GoldPolicy, GoldWithCorrectionPolicy, make_policy, runnable
from mtsql.core.agent.schema_prompt import load_tables
from mtsql.core.agent.settings import EnvConfig

from ..episodes import ReplayPolicy, run_episode
from .conftest import find

SINGER = load_tables("concert_singer", FIXTURE_DATA)


@pytest.mark.parametrize(
    ("sql", "kind", "variant"),
    [
        (
            "SELECT name FROM singer WHERE age > 20 AND country = 'France'",
            "drop_where_condition",
            "SELECT name FROM singer WHERE age > 20",
        ),
        ("SELECT name FROM singer WHERE age > 20", "drop_where", "SELECT name FROM singer"),
        ("SELECT DISTINCT country FROM singer", "drop_distinct", "SELECT country FROM singer"),
        (
            "SELECT name FROM singer ORDER BY age DESC LIMIT 1",
            "drop_order_by",
            "SELECT name FROM singer LIMIT 1",
        ),
        (
            "SELECT name FROM singer ORDER BY age DESC LIMIT 1",
            "flip_order",
            "SELECT name FROM singer ORDER BY age ASC LIMIT 1",
        ),
        ("SELECT name FROM singer ORDER BY age", "flip_order", "SELECT name FROM singer ORDER BY age DESC"),
        (
            "SELECT name FROM singer ORDER BY age DESC LIMIT 1",
            "drop_limit",
            "SELECT name FROM singer ORDER BY age DESC",
        ),
        (
            "SELECT country, count(*) FROM singer GROUP BY country",
            "drop_group_by",
            "SELECT country, count(*) FROM singer",
        ),
        ("SELECT name FROM singer WHERE age >= 20", "off_by_one", "SELECT name FROM singer WHERE age > 20"),
        ("SELECT max(age), avg(age) FROM singer", "swap_aggregate", "SELECT MIN(age), avg(age) FROM singer"),
        ("SELECT Name FROM singer", "neighbour_column", "SELECT Country FROM singer"),
        ("SELECT name FROM singer", "wrong_table_name", "SELECT name FROM singers"),
    ],
)
def test_each_mutation(sql, kind, variant):
    found = {v.kind: v for v in mutations(sql, SINGER)}
    assert found[kind].sql == variant and found[kind].why


def test_mutations_never_return_the_query_itself():
    for sql in ("SELECT * FROM singer", "SELECT count(*) FROM singer WHERE age BETWEEN 1 AND 2", ""):
        assert all(" ".join(v.sql.split()) != " ".join(sql.split()) for v in mutations(sql, SINGER))


def test_runnable_joins_spaced_operators():
    assert runnable(" SELECT a FROM t WHERE b > = 1 AND c ! = 2 AND d <  = 3 ") == (
        "SELECT a FROM t WHERE b >= 1 AND c != 2 AND d <= 3"
    )


def test_every_chosen_variant_really_changes_the_result(cosql_turns):
    policy = GoldWithCorrectionPolicy(data_root=FIXTURE_DATA)
    checked = 0
    for turn in [t for t in cosql_turns if t.db_id == "concert_singer"][:15]:
        for variant in policy.variants(turn):
            assert variant.sql != runnable(turn.gold_sql)
            checked += 1
    assert checked > 30


def test_correction_is_reproducible_per_turn(make_env, sparc_turns):
    turn = find(sparc_turns, "sparc-dev-0001/2")
    policy = GoldWithCorrectionPolicy(data_root=FIXTURE_DATA)
    first = run_episode(make_env(), policy, turn)
    again = run_episode(make_env(), policy, turn)
    assert first.to_dict()["steps"][0]["sql"] == again.to_dict()["steps"][0]["sql"]
    other = run_episode(make_env(), policy, turn, rng=random.Random(123))
    assert other.final_sql == turn.gold_sql


def test_correction_share_mixes_direct_and_corrected_episodes(make_env, sparc_turns):
    """sample.correction_share: the share of episodes that first run a wrong variant; the rest run the gold
    at once and judge it pass. At 1.0 (the default) the episodes are those of before, draw for draw."""
    turn = find(sparc_turns, "sparc-dev-0001/2")
    gold = runnable(turn.gold_sql)

    def first_sqls(share: float) -> list[str]:
        policy = make_policy("gold_with_correction", data_root=FIXTURE_DATA, correction_share=share)
        return [
            run_episode(make_env(), policy, turn, rng=random.Random(seed)).to_dict()["steps"][0]["sql"]
            for seed in range(40)
        ]

    every, half, none = first_sqls(1.0), first_sqls(0.5), first_sqls(0.0)
    assert gold not in every and set(none) == {gold}
    assert 10 <= half.count(gold) <= 30, half.count(gold)
    plain = GoldWithCorrectionPolicy(data_root=FIXTURE_DATA)
    assert every == [
        run_episode(make_env(), plain, turn, rng=random.Random(seed)).to_dict()["steps"][0]["sql"]
        for seed in range(40)
    ]
    direct = run_episode(
        make_env(), make_policy("gold_with_correction", data_root=FIXTURE_DATA, correction_share=0.0), turn
    )
    verdicts = [step["exec_verdict"] for step in direct.to_dict()["steps"] if step["exec_verdict"]]
    assert direct.final_sql == turn.gold_sql and verdicts == ["pass"]


def test_replay_reproduces_a_recorded_episode(make_env, sparc_turns):
    turn = find(sparc_turns, "sparc-dev-0001/1")
    recorded = run_episode(make_env(), GoldWithCorrectionPolicy(data_root=FIXTURE_DATA), turn)
    replayed = run_episode(make_env(), ReplayPolicy.from_trajectory(recorded), turn)
    strip = [{k: v for k, v in s.items() if k != "tool_s"} for s in replayed.to_dict()["steps"]]
    assert strip == [{k: v for k, v in s.items() if k != "tool_s"} for s in recorded.to_dict()["steps"]]
    assert replayed.messages == recorded.messages


def test_replay_runs_dry_with_empty_messages(make_env, sparc_turns):
    traj = run_episode(make_env(), ReplayPolicy([]), find(sparc_turns, "sparc-dev-0000/0"))
    assert traj.finish_reason == "max_messages" and all(
        s.invalid_reason == "the message is empty" for s in traj.steps
    )


def test_make_policy():
    assert isinstance(make_policy("gold", env_cfg=EnvConfig(mode="short")), GoldPolicy)
    assert isinstance(make_policy("gold_with_correction", data_root=FIXTURE_DATA), GoldWithCorrectionPolicy)
    with pytest.raises(ValueError, match="unknown scripted policy"):
        make_policy("oracle")


def test_gold_policy_over_the_fixture_dialogues(cosql_turns, sparc_turns):
    env = SqlAgentEnv(data_root=FIXTURE_DATA)
    for turn in cosql_turns[:40] + sparc_turns[:40]:
        traj = run_episode(env, GoldPolicy(), turn)
        assert traj.protocol_valid and traj.final_sql == runnable(turn.gold_sql)
        assert traj.num_messages == (3 if turn.previous_questions else 2)
